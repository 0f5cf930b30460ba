"""The items of a spec are what ``adc sync`` writes for ADC's converted file: the same ids, fields and
lint defaults as ``gitsync import adc`` of ADC's own output for the same spec (two implementations
that share only the id rules), but for the matching of templated paths."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gitsync.adopt import import_adc
from gitsync.render.openapi.uris import matcher
from testkit.openapi import adc_case, adc_expected, conversion

EXPECTED = adc_expected()
#: ADC's cases whose defaults hold no field APISIX lacks (the others test the merging with test1…).
REAL_FIELDS = [case for case in sorted(EXPECTED) if case.startswith("basic")
               or case in ("extension-1.yaml", "extension-3.yaml", "extension-5.yaml", "extension-6.yaml")]


def _payload(case: str) -> dict[str, list[dict[str, Any]]]:
    converted = conversion({case: adc_case(case)}, case)
    assert converted.problems == []
    out: dict[str, list[dict[str, Any]]] = {}
    for item in converted.items:
        out.setdefault(item.kind, []).append(item.item)
    return out


@pytest.mark.parametrize("case", REAL_FIELDS)
def test_a_specs_items_are_what_import_adc_makes_of_adcs_output(case: str) -> None:
    adc_file = json.dumps({"services": EXPECTED[case]}).encode()
    imported = import_adc.convert({"adc.yaml": adc_file})
    assert imported.problems == []
    ours = _payload(case)
    for kind in ("services", "upstreams"):
        by_id = {item["id"]: item for item in imported.payload[kind]}
        assert {item["id"]: item for item in ours[kind]} == by_id
    theirs = {route["id"]: route for route in imported.payload["routes"]}
    assert sorted(r["id"] for r in ours["routes"]) == sorted(theirs)
    for route in ours["routes"]:
        adc = theirs[route["id"]]
        if ":" not in adc["uris"][0]:
            assert route == adc
            continue
        # ADC writes /absolute-redirect/:n, which APISIX's default router reads as literal text
        rest = {k: v for k, v in route.items() if k not in ("uris", "vars", "priority")}
        assert rest == {k: v for k, v in adc.items() if k != "uris"}
        path = adc["uris"][0].replace(":n", "{n}")
        found = matcher(path)
        assert not isinstance(found, str)
        assert route["uris"] == [found.uri] and route["vars"] == [found.vars_condition()]
        assert route["priority"] == found.priority


def test_a_templated_path_matches_exactly_and_user_vars_still_apply() -> None:
    spec = """\
openapi: 3.1.0
info: {title: T}
servers: [{url: "http://b.example.com:8080"}]
paths:
  /users/{id}/files/{name}.json:
    get:
      operationId: getFile
      x-adc-route-defaults: {vars: [["http_x_tenant", "==", "a"]]}
    put:
      operationId: putFile
      x-adc-route-defaults: {vars: ["OR", ["arg_a", "==", "1"], ["arg_b", "==", "1"]]}
    delete:
      operationId: deleteFile
      x-adc-route-defaults: {uris: [/files/*]}
"""
    routes = {i.item["name"]: i.item for i in conversion({"spec.yaml": spec}).items if i.kind == "routes"}
    condition = ["uri", "~~", "^/users/[^/]+/files/[^/]+\\.json$"]
    assert routes["getFile"]["uris"] == ["/users/*"]
    assert routes["getFile"]["vars"] == [condition, ["http_x_tenant", "==", "a"]]
    assert routes["putFile"]["vars"] == [condition, ["OR", ["arg_a", "==", "1"], ["arg_b", "==", "1"]]]
    assert routes["getFile"]["priority"] == len("/users//files/.json")
    assert routes["deleteFile"]["uris"] == ["/files/*"] and "vars" not in routes["deleteFile"]


def test_two_operations_that_make_one_route_are_a_problem_not_two_routes() -> None:
    spec = """\
openapi: 3.0.0
info: {title: T}
servers: [{url: "http://b.example.com"}]
paths:
  /a:
    get: {operationId: same}
  /b:
    get: {operationId: same}
"""
    converted = conversion({"spec.yaml": spec})
    [problem] = [p for p in converted.problems if "same route id" in p.message]
    assert str(problem).startswith("spec.yaml:8:5: ")
    assert "GET /b and GET /a" in problem.message and "spec.yaml:6:5" in problem.message


def test_a_name_or_description_too_long_for_apisix_is_cut_its_id_from_the_whole_name() -> None:
    long_name = "n" * 300
    spec = f"""\
openapi: 3.0.0
info: {{title: T}}
servers: [{{url: "http://b.example.com"}}]
paths:
  /a:
    get: {{operationId: {long_name}, description: {"d" * 400}}}
"""
    [route] = [i.item for i in conversion({"spec.yaml": spec}).items if i.kind == "routes"]
    assert len(route["name"]) == 256 and route["name"].endswith("…")
    assert len(route["desc"]) == 256
    assert route["id"] == import_adc.sha1(f"T.{long_name}")


def test_a_spec_without_a_host_needs_the_declarations_nodes() -> None:
    spec = "openapi: 3.0.0\ninfo: {title: T}\nservers: [{url: /api}]\npaths:\n  /a:\n    get: {}\n"
    converted = conversion({"spec.yaml": spec})
    assert any("no server of the spec names a host" in p.message for p in converted.problems)
    declared = conversion({"spec.yaml": spec}, upstream_defaults={"nodes": [{"host": "10.0.0.1", "port": 80,
                                                                             "weight": 1}]})
    assert declared.problems == []
    [route] = [i.item for i in declared.items if i.kind == "routes"]
    assert route["uris"] == ["/api/a"]
