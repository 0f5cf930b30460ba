"""ADC's converter semantics: gitsync's reading of a spec, as ADC's services, against what ADC 0.28.0
writes for the specs of its own tests (api7/adc ``libs/converter-openapi/test``), field by field; and
where gitsync corrects ADC on purpose, ADC's output next to gitsync's."""

from __future__ import annotations

import pytest

from testkit.openapi import adc_case, adc_expected, conversion

EXPECTED = adc_expected()


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_adcs_published_cases_give_the_services_adc_writes(case: str) -> None:
    # basic.spec.ts and extension.spec.ts assert these outputs (tests/data/openapi/adc/expected.yaml):
    # names from info.title/x-adc-name/operationId or slugs, uris with ADC's :name, servers as nodes,
    # variables, split services in ADC's order, labels, plugins and each level's defaults.
    converted = conversion({case: adc_case(case)}, case)
    services = [service.document() for service in converted.services]
    expected = EXPECTED[case]
    assert [s["name"] for s in services] == [s["name"] for s in expected]
    for ours, adcs in zip(services, expected, strict=True):
        assert set(ours) == set(adcs), ours["name"]
        for key in adcs:
            assert ours[key] == adcs[key], (ours["name"], key)


@pytest.mark.parametrize(("case", "line", "text"), [
    # extension.spec.ts "case 2 (override resource name by empty string)": rejects.toThrow()
    ("extension-2.yaml", 5, "x-adc-name must be non-empty text"),
    # "case 4 (incorrect labels format)": rejects.toThrow()
    ("extension-4.yaml", 6, "x-adc-labels: label 'test1' must be text or a list of text, not a mapping"),
])
def test_what_adc_refuses_is_a_problem_at_its_line(case: str, line: int, text: str) -> None:
    converted = conversion({case: adc_case(case)}, case)
    assert f"{case}:{line}:" in "\n".join(str(p) for p in converted.problems)
    assert any(text in p.message for p in converted.problems)


QUIRKS = """\
openapi: 3.0.0
info: {title: Quirks}
servers:
  - url: https://api.example.com/v1/
x-adc-upstream-defaults: {retries: 3}
paths:
  /users:
    servers:
      - url: https://users.example.com
    get: {operationId: listUsers}
    post:
      operationId: createUser
      x-adc-upstream-defaults: {retries: 2}
"""


def test_where_adc_contradicts_openapi_gitsync_follows_the_document() -> None:
    services = {s.shape.fields["name"]: s for s in conversion({"spec.yaml": QUIRKS}).services}
    # adc convert openapi (0.28.0) writes for this spec: listUsers on /v1//users (the server's path and
    # the operation's joined with two slashes; nginx merges a request's slashes, so it never matches),
    # upstream users.example.com without the document's retries; createUser on api.example.com (the
    # document's servers: the path's are forgotten once the operation has defaults of its own).
    path = services["Quirks_users"]
    assert path.routes[0].shape.fields["uris"] == ["/users"]  # the path's own server has no path
    nodes = path.shape.fields["upstream"]["nodes"]
    assert nodes == [{"host": "users.example.com", "port": 443, "weight": 100}]
    assert path.shape.fields["upstream"]["retries"] == 3
    alone = services["Quirks_users_post"]
    assert alone.shape.fields["upstream"]["nodes"][0]["host"] == "users.example.com"
    assert alone.shape.fields["upstream"]["retries"] == 2
    assert alone.routes[0].path == "/users"


def test_a_server_path_is_a_prefix_joined_with_one_slash() -> None:
    spec = QUIRKS.replace("    servers:\n      - url: https://users.example.com\n", "")
    services = conversion({"spec.yaml": spec}).services
    main = next(s for s in services if s.shape.fields["name"] == "Quirks")
    assert main.routes[0].shape.fields["uris"] == ["/v1/users"]
    assert main.routes[0].path == "/v1/users"


def test_the_declaration_is_the_roots_defaults_over_the_specs() -> None:
    converted = conversion({"spec.yaml": adc_case("basic-1.yaml")}, "spec.yaml",
                           upstream_defaults={"nodes": [{"host": "10.0.0.5", "port": 8080, "weight": 1}],
                                              "scheme": "http"},
                           service_defaults={"name": "httpbin", "hosts": ["httpbin.example.com"]},
                           route_defaults={"plugins": {"limit-count": {"count": 1, "time_window": 60}}})
    [service] = converted.services
    assert service.shape.fields["name"] == "httpbin"
    assert service.shape.fields["hosts"] == ["httpbin.example.com"]
    assert service.shape.fields["upstream"]["nodes"] == [{"host": "10.0.0.5", "port": 8080, "weight": 1}]
    assert service.shape.fields["upstream"]["scheme"] == "http"
    assert all(r.shape.fields["plugins"] == {"limit-count": {"count": 1, "time_window": 60}}
               for r in service.routes)
    # the names ADC derives for routes keep the title, whatever the service is called (ADC does so)
    assert service.routes[0].shape.fields["name"] == "httpbin.org_anything_get"
