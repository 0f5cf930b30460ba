"""The golden corpus: real APISIX 3.18 answers, and how a replayed answer is compared with them.

The corpus (tests/data/golden/, its README says how it was recorded) holds one
request and the real gateway's answer per line. `replay` sends the requests in
file order to the APISIX double; `differences` says how an answer differs from
the recorded one (an empty list: matched exactly, placeholders aside).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from ruamel.yaml import YAML, YAMLError

from gitsync.schema.checks import APISIX_HOME
from gitsync.testing.apisix import ApisixDouble

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "golden" / "apisix-3.18-validate.jsonl"
RECORDED_PROXY = "http://127.0.0.1:9080"
ADMIN_KEY = "golden-admin-key"
VIEWER_KEY = "golden-viewer-key"
COMPARED_HEADERS = ("Content-Type", "X-Digest", "X-Last-Modified")
TIME = "<time>"
BUILD_ARTEFACT = "BUILD ARTEFACT"


@dataclass(frozen=True)
class Case:
    """One corpus line: a request and the real gateway's answer."""

    line: int  # 1-based
    name: str
    about: str
    request: dict[str, Any]
    status: int
    body: Any
    headers: dict[str, str]
    fresh: bool = False
    wait_s: float = 0.0
    body_text: str | None = None
    note: str | None = None

    @property
    def excluded(self) -> str | None:
        """Why this case is not compared, or None."""
        if self.about.startswith(BUILD_ARTEFACT):
            return self.about.split(":", 1)[0]
        return None

    @property
    def is_data_plane(self) -> bool:
        return self.request["path"].startswith("http")

    def body_bytes(self) -> bytes | None:
        """The request body exactly as recorded (JSON written compactly, as the recorder did)."""
        request = self.request
        if "body_generator" in request:
            value = eval(request["body_generator"], {"__builtins__": {"range": range}})  # recorded data
            data = json.dumps(value, separators=(",", ":")).encode()
            assert len(data) == request["body_bytes"], "the generator no longer gives the recorded size"
            return data
        if "body" not in request:
            return None
        body = request["body"]
        if isinstance(body, str):
            return body.encode()
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    def json_body(self) -> Any:
        """The body as the gateway's decoder sees it (YAML for ``application/yaml``), or `UNPARSED`."""
        data = self.body_bytes()
        if not data:
            return UNPARSED
        try:
            if self.request["headers"].get("Content-Type", "").startswith("application/yaml"):
                return _yaml(data.decode())
            return json.loads(data)
        except (ValueError, YAMLError):
            return UNPARSED


UNPARSED = object()


def load_cases(path: Path = CORPUS) -> list[Case]:
    cases = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            raw = json.loads(line)
            cases.append(Case(number, raw["name"], raw["about"], raw["request"], raw["status"], raw["body"],
                              raw["headers"], raw.get("fresh", False), raw.get("wait_s", 0.0),
                              raw.get("body_text"), raw.get("note")))
    return cases


@dataclass
class Answer:
    status: int
    headers: httpx.Headers
    content: bytes


@dataclass
class Replay:
    """Every case's answer from the double, by case name."""

    answers: dict[str, Answer] = field(default_factory=dict)


def _send(client: httpx.Client, double: ApisixDouble, case: Case) -> Answer:
    request = case.request
    headers = {}
    for name, value in request["headers"].items():
        headers[name] = {"<admin>": ADMIN_KEY, "<viewer>": VIEWER_KEY}.get(value, value)
    path = request["path"]
    url = double.proxy_url + path.removeprefix(RECORDED_PROXY) if case.is_data_plane else double.url + path
    response = client.request(request["method"], url, content=case.body_bytes(), headers=headers)
    return Answer(response.status_code, response.headers, response.content)


def replay(double: ApisixDouble, cases: list[Case]) -> Iterator[tuple[Case, Answer]]:
    """Send every case in file order: a restart before each ``fresh`` one, ``wait_s`` slept first."""
    with httpx.Client(timeout=60) as client:
        for case in cases:
            if case.fresh:
                double.restart()
            if case.wait_s:
                time.sleep(case.wait_s)
            yield case, _send(client, double, case)


# ---------------------------------------------------------------------------------------------------------
# Comparison


class _Number(str):
    """A JSON number kept as the text it was written with (``1e+17`` is not ``100000000000000000``)."""


def _keep_number_text(text: str) -> _Number:
    return _Number(text)


def with_placeholders(expected: Any) -> Any:
    """The recorded value with ``<apisix-home>`` replaced by the double's install prefix."""
    if isinstance(expected, str):
        return expected.replace("<apisix-home>", APISIX_HOME)
    if isinstance(expected, list):
        return [with_placeholders(v) for v in expected]
    if isinstance(expected, dict):
        return {k: with_placeholders(v) for k, v in expected.items()}
    return expected


def _is_time(value: Any) -> bool:
    """What ``<time>`` stands for: epoch seconds (an integer, or its text in a header or YAML)."""
    text = str(value)
    return not isinstance(value, bool) and text.isdigit() and abs(int(text) - time.time()) < 3600


def _diff(expected: Any, actual: Any, where: str = "body") -> list[str]:
    """Where `actual` differs from `expected` (key order ignored, strings byte for byte)."""
    if expected == TIME:
        return [] if _is_time(actual) else [f"{where}: expected a time, got {actual!r}"]
    if isinstance(expected, dict) and isinstance(actual, dict):
        problems = [f"{where}: missing key {k!r}" for k in expected if k not in actual]
        problems += [f"{where}: unexpected key {k!r}" for k in actual if k not in expected]
        for key in expected.keys() & actual.keys():
            problems += _diff(expected[key], actual[key], f"{where}.{key}")
        return problems
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: expected {len(expected)} items, got {len(actual)}: {actual!r}"]
        pairs = enumerate(zip(expected, actual, strict=True))
        return [p for i, (e, a) in pairs for p in _diff(e, a, f"{where}[{i}]")]
    if type(expected) is not type(actual) or expected != actual:
        return [f"{where}: expected {expected!r}, got {actual!r}"]
    return []


def _parse_json(content: bytes, *, number_text: bool = False) -> Any:
    hooks: dict[str, Any] = {"parse_int": _keep_number_text, "parse_float": _keep_number_text} \
        if number_text else {}
    return json.loads(content, **hooks)


def _yaml(text: str) -> Any:
    return YAML(typ="safe").load(text)


def _as_multiset(errors: list[Any]) -> Counter[str]:
    return Counter(json.dumps(e, sort_keys=True) for e in errors)


#: Cases whose note says the real gateway may answer one of several messages (random Lua table order):
#: case name → every message it may give. The alternatives come from the note or from the corpus line
#: that sends the same faulty part alone (named in the comment).
ALTERNATIVE_MESSAGES: dict[str, tuple[str, ...]] = {
    # limit-count (recorded) or proxy-rewrite, whose message plugin_proxy_rewrite_uri_number records
    "plugin_two_errors_same_route": (
        "failed to check the configuration of plugin limit-count err: value should match only one schema, "
        "but matches none",
        "failed to check the configuration of plugin proxy-rewrite err: property \"uri\" validation failed: "
        "wrong type: expected string, got number",
    ),
    # the note gives both texts
    "ssl_two_short_refs": (
        'invalid configuration: property "key" validation failed: string too short, expected at least 64, '
        "got 14",
        'invalid configuration: property "cert" validation failed: string too short, expected at least 128, '
        "got 26",
    ),
}


def first_error_per_kind(errors: list[dict[str, Any]], *, put_wording: bool) -> set[str]:
    """What a PUT may answer for a body validate answered with `errors` (any kind may come first)."""
    first: dict[str, str] = {}
    for entry in errors:
        message = entry["error"]
        if put_wording and "index" not in entry:
            message = message.split(", got ")[0]  # PUT: "K_conf_version must be a number"
        first.setdefault(entry["resource_type"], message)
    return set(first.values())


def differences(case: Case, answer: Answer, cases_by_name: dict[str, Case]) -> list[str]:
    """How the double's answer differs from the recorded one; empty when it matches."""
    problems: list[str] = []
    if answer.status != case.status:
        problems.append(f"status: expected {case.status}, got {answer.status}")
    for name in COMPARED_HEADERS:
        expected = case.headers.get(name)
        actual = answer.headers.get(name)
        if expected == TIME:
            if not _is_time(actual):
                problems.append(f"header {name}: expected a time, got {actual!r}")
        elif expected != actual:
            problems.append(f"header {name}: expected {expected!r}, got {actual!r}")
    return problems + _body_differences(case, answer, cases_by_name)


def _body_differences(case: Case, answer: Answer, cases_by_name: dict[str, Case]) -> list[str]:
    expected = with_placeholders(case.body)
    if case.request["method"] == "HEAD" or case.status == 204:
        return [] if answer.content == b"" else [f"body: expected none, got {answer.content[:200]!r}"]
    if isinstance(expected, str) and case.note and "YAML" in case.note:
        return _diff(_yaml(expected), _yaml(answer.content.decode()))
    if isinstance(expected, str):
        actual = answer.content.decode("utf-8", "replace")
        return [] if actual == expected else [f"body: expected {expected[:300]!r}, got {actual[:300]!r}"]
    try:
        actual = _parse_json(answer.content)
    except ValueError:
        return [f"body: expected JSON, got {answer.content[:300]!r}"]
    if case.name in ALTERNATIVE_MESSAGES:
        errors = actual.get("errors") if isinstance(actual, dict) else None
        if not (isinstance(errors, list) and len(errors) == 1 and isinstance(errors[0], dict)):
            return [f"body: expected one error, got {actual!r}"]
        if errors[0].get("error") not in ALTERNATIVE_MESSAGES[case.name]:
            return [f"body: {errors[0].get('error')!r} is none of the possible messages"]
        expected["errors"][0]["error"] = errors[0]["error"]
        return _diff(expected, actual)
    if case.note and "multiset" in case.note:
        if _as_multiset(expected.get("errors", [])) != _as_multiset(actual.get("errors", [])):
            return [f"errors: expected (as a multiset) {expected['errors']!r}, got {actual.get('errors')!r}"]
        expected, actual = dict(expected, errors=None), dict(actual, errors=None)
    elif case.note and case.request["method"] == "PUT" and "kind" in case.note:
        possible = possible_put_errors(case, cases_by_name)
        if actual.get("error_msg") not in possible:
            return [f"error_msg {actual.get('error_msg')!r} is none of {sorted(possible)}"]
        return []
    problems = _diff(expected, actual)
    if case.body_text is not None and not problems:
        problems += _diff(_parse_json(case.body_text.encode(), number_text=True),
                          _parse_json(answer.content, number_text=True), "body_text")
    return problems


def possible_put_errors(case: Case, cases_by_name: dict[str, Case]) -> set[str]:
    """What the gateway may answer a PUT of the all-kinds-invalid body: any kind's first error.

    The validate endpoint's answer to the same items (``multi_kind_all_invalid``) gives each
    kind's errors; version errors count only when `case`'s body has that version key.
    """
    errors = cases_by_name["multi_kind_all_invalid"].body["errors"]
    body = case.json_body()
    sent = [e for e in errors if "index" in e or f"{e['resource_type']}_conf_version" in body]
    return first_error_per_kind(sent, put_wording=True)
