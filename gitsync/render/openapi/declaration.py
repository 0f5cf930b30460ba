"""The ``openapi:`` section of a config file: which specs the repo renders, and how.

::

    openapi:
      - name: petstore                 # unique; an overlay replaces or patches it by name
        spec: specs/petstore.yaml      # relative to this file ("/specs/…": to the repo's root)
        service_defaults: {hosts: [petstore.example.com]}   # as x-adc-service-defaults at the root
        upstream_defaults:                                  # as x-adc-upstream-defaults at the root
          nodes: [{host: 10.0.0.5, port: 8080, weight: 1}]
          scheme: http
        route_defaults: {plugins: {limit-count: {count: 100, time_window: 60}}}   # as x-adc-route-defaults
        server_variables: {environment: prod}                   # values for the servers' {variables}
        request_validation: true           # request-validation from each operation's parameters and body
        id_prefix: pets-                   # before every generated id (ownership by id prefix)

The three ``*_defaults`` are ADC's extensions as if written at the spec's root, over what the spec
itself says there (key by key): the same fields, in ADC's words (``description``, not ``desc``). The
section is gitsync's own, never pushed; like health checks it is layered (`gitsync.render.build`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsync.problems import Location, Problem
from gitsync.render.sourcemap import FieldPath, describe

OPENAPI = "openapi"
DEFAULTS = ("service_defaults", "upstream_defaults", "route_defaults")
FIELDS = ("name", "spec", *DEFAULTS, "server_variables", "request_validation", "id_prefix")
#: The longest id prefix a declaration may give: the ids it prefixes are 40 characters (sha1), and
#: APISIX's are at most 64.
MAX_PREFIX = 24
_PREFIX = re.compile(r"^[a-zA-Z0-9_.-]*$")
#: The options of request validation a declaration (or ``x-gitsync-request-validation``) may give.
VALIDATION_OPTIONS = ("rejected_code", "rejected_msg", "max_req_body_size")


@dataclass(frozen=True)
class Declaration:
    """One spec the repo renders, and how (see the module)."""

    name: str
    spec: str  # the spec's repo path
    locate: Callable[[FieldPath], Location]  # where a field of the declaration is written
    service_defaults: Mapping[str, Any] = field(default_factory=dict)
    upstream_defaults: Mapping[str, Any] = field(default_factory=dict)
    route_defaults: Mapping[str, Any] = field(default_factory=dict)
    server_variables: Mapping[str, str] = field(default_factory=dict)
    request_validation: bool | Mapping[str, Any] = False
    id_prefix: str = ""  # put before every generated id (a team's ownership by id prefix)

    @property
    def at(self) -> Location:
        return self.locate(())


def spec_path(declared_in: str, written: str) -> str | None:
    """The repo path a declaration's ``spec`` names: relative to the declaring file, or to the repo's root
    when it starts with ``/``; None when it leaves the repo."""
    base = "" if written.startswith("/") else posixpath.dirname(declared_in)
    joined = posixpath.normpath(posixpath.join(base, written.lstrip("/")))
    if joined in ("..", ".") or joined.startswith("../"):
        return None
    return joined


def declaration(entry: Any, locate: Callable[[FieldPath], Location]) -> Declaration | list[Problem]:
    """One entry of an ``openapi:`` list, or its problems (each at its field)."""
    def problem(message: str, *path: str | int) -> Problem:
        return Problem(message, locate(path), OPENAPI, name if isinstance(name, str) else None,
                       ".".join(map(str, path)) or None)

    name = entry.get("name") if isinstance(entry, Mapping) else None
    if not isinstance(entry, Mapping):
        return [problem(f"an openapi entry is a mapping (name, spec, …), not {describe(entry)}")]
    problems = [problem(f"unknown field {key!r} (expected one of: {', '.join(FIELDS)})", key)
                for key in entry if key not in FIELDS]
    if not isinstance(name, str) or not name:
        problems.append(problem("an openapi entry needs a name (text)", "name"))
    written = entry.get("spec")
    spec = None
    if not isinstance(written, str) or not written:
        problems.append(problem("an openapi entry needs a spec: the path of the OpenAPI document", "spec"))
    else:
        spec = spec_path(locate(("spec",)).file, written)
        if spec is None:
            problems.append(problem(f"the spec {written!r} is outside the repo", "spec"))
    for key in DEFAULTS:
        if entry.get(key) is not None and not isinstance(entry[key], Mapping):
            problems.append(problem(f"{key} must be a mapping of fields, not {describe(entry[key])}", key))
    variables = entry.get("server_variables") or {}
    if not isinstance(variables, Mapping):
        problems.append(problem("server_variables must map variable names to values", "server_variables"))
        variables = {}
    for key, value in variables.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            problems.append(problem(f"server variable {key!r} must be text or a number, not "
                                    f"{describe(value)}", "server_variables", key))
    validation = entry.get("request_validation", False)
    why = validation_problem(validation)
    if why is not None:
        problems.append(problem(why, "request_validation"))
    prefix = entry.get("id_prefix", "")
    if not isinstance(prefix, str) or not _PREFIX.match(prefix) or len(prefix) > MAX_PREFIX:
        problems.append(problem(f"id_prefix must be at most {MAX_PREFIX} of the characters of an APISIX id "
                                "(letters, digits, '-', '_', '.')", "id_prefix"))
    if problems:
        return problems
    assert isinstance(name, str) and spec is not None
    return Declaration(name, spec, locate, *(entry.get(key) or {} for key in DEFAULTS),
                       {str(k): str(v) for k, v in variables.items()}, validation, prefix)


def validation_problem(value: Any) -> str | None:
    """Why `value` is not a request-validation switch: true, false, or a mapping of its options."""
    if isinstance(value, bool) or value is None:
        return None
    if not isinstance(value, Mapping):
        return f"expected true, false or a mapping of {', '.join(VALIDATION_OPTIONS)}, not {describe(value)}"
    unknown = [key for key in value if key not in VALIDATION_OPTIONS]
    if unknown:
        return f"unknown option {unknown[0]!r} (expected: {', '.join(VALIDATION_OPTIONS)})"
    return None


__all__ = ["DEFAULTS", "FIELDS", "OPENAPI", "VALIDATION_OPTIONS", "Declaration", "declaration", "spec_path",
           "validation_problem"]
