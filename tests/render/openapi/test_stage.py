"""Specs in a render: declared in the repo, rendered at every render like any file, every problem at the
spec's file:line, the commit refused as a whole; layers, overlays and the source map."""

from __future__ import annotations

import time

import pytest

from gitsync.ownership import Claim, Ownership
from gitsync.problems import ProblemsError
from gitsync.render import Rendered, RenderOptions, render
from gitsync.render.compose import Part, facts_of
from gitsync.render.memo import ParseCache
from gitsync.render.openapi.refs import MAX_NODES

DECLARATION = """\
openapi:
  - name: pets
    spec: specs/pets.yaml
    upstream_defaults:
      nodes: [{host: 10.0.0.5, port: 8080, weight: 1}]
      scheme: http
"""
PETS = """\
openapi: 3.0.3
info: {title: Pets, description: Pets for all}
servers: [{url: "https://pets.example.com/v1"}]
paths:
  /pets:
    get: {operationId: listPets, summary: List pets}
    post: {operationId: createPet}
  /pets/{petId}:
    get:
      operationId: showPet
      x-adc-plugins:
        limit-count: {count: 10, time_window: 60}
"""


def problems_of(files: dict[str, str], **options: object) -> list[str]:
    with pytest.raises(ProblemsError) as raised:
        render({k: v.encode() for k, v in files.items()}, RenderOptions(**options))  # type: ignore[arg-type]
    return [str(p) for p in raised.value.problems]


def rendered(files: dict[str, str], **options: object) -> Rendered:
    return render({k: v.encode() for k, v in files.items()}, RenderOptions(**options))  # type: ignore[arg-type]


def test_a_declared_spec_renders_its_routes_with_their_operations_place() -> None:
    out = rendered({"openapi.yaml": DECLARATION, "specs/pets.yaml": PETS,
                    "routes.yaml": "routes:\n  - {id: plain, uri: /plain, upstream_id: u}\n",
                    "upstreams.yaml": "upstreams:\n  - {id: u, nodes: [{host: a, port: 1, weight: 1}]}\n"})
    names = [route.get("name") for route in out.payload["routes"]]
    assert names[:3] == ["listPets", "createPet", "showPet"] and names[3] is None  # after the declaration
    assert [s["name"] for s in out.payload["services"]] == ["Pets"]
    index = names.index("showPet")
    assert str(out.source_map.location("routes", index)) == "specs/pets.yaml:9:5"
    assert out.source_map.describe("routes", index) == ("generated from GET /pets/{petId} (operationId "
                                                        "showPet) of the OpenAPI spec specs/pets.yaml "
                                                        "(openapi pets at openapi.yaml:2:5)")
    fields = {str(path): str(where) for path, where in out.source_map.explain("routes", index,
                                                                             out.payload["routes"][index])}
    assert fields["('plugins', 'limit-count', 'count')"] == "specs/pets.yaml:12:9"
    assert fields["('uris', 0)"] == "specs/pets.yaml:8:3"
    assert fields["('name',)"] == "specs/pets.yaml:10:7"
    [upstream] = out.payload["upstreams"][:1]
    assert upstream["nodes"] == [{"host": "10.0.0.5", "port": 8080, "weight": 1, "priority": 0}]


def test_a_problem_in_a_generated_item_is_at_the_specs_line_and_names_the_operation() -> None:
    bad = PETS.replace("count: 10", "count: -1")
    found = problems_of({"openapi.yaml": DECLARATION, "specs/pets.yaml": bad})
    [problem] = found
    assert problem.startswith("specs/pets.yaml:12:9: routes[") and ".plugins.limit-count: " in problem
    assert "(generated from GET /pets/{petId} (operationId showPet) of the OpenAPI spec" in problem


@pytest.mark.parametrize(("spec", "expected"), [
    ("openapi: 3.0.0\ninfo: {title: T}\npaths:\n  /a:\n    $ref: '#/components/x'\n",
     "specs/pets.yaml:5:5: $ref '#/components/x' does not resolve: 'specs/pets.yaml' has no #/components"),
    ("openapi: 3.0.0\ninfo: {title: T}\npaths:\n  /a:\n    $ref: 'other.yaml#/a'\n",
     "specs/pets.yaml:5:5: $ref 'other.yaml#/a': the file 'specs/other.yaml' is not a file of the repo"),
    ("openapi: 3.0.0\ninfo: {title: T}\npaths:\n  /a:\n    $ref: 'https://example.com/a.yaml'\n",
     "names another server: gitsync reads only the repo's files, never the network"),
    ("openapi: 3.0.0\ninfo: {title: T}\npaths:\n  /a:\n    $ref: '#/paths/~1b'\n"
     "  /b:\n    $ref: '#/paths/~1a'\n",
     "specs/pets.yaml:5:5: the chain of $ref from here is a cycle"),
    ("openapi: 3.0.0\ninfo: {title: T}\npaths:\n  /a/{:\n    get: {}\n",
     "specs/pets.yaml:4:3: the path '/a/{' has a '{' or '}' that does not open or close a template"),
    ("openapi: 3.0.0\ninfo: {title: T}\npaths:\n  /a/{x}:\n    get: {}\n  /a/{y}:\n    get: {}\n",
     "specs/pets.yaml:7:5: routes["),
    ("openapi: 2.0.1\ninfo: {title: T}\npaths: {}\n",
     "specs/pets.yaml:1:1: not an OpenAPI document gitsync reads"),
    ("openapi: 3.0.0\ninfo: {title: T}\npaths: [\n", "specs/pets.yaml:4:1: YAML syntax error"),
    ("openapi: 3.0.0\ninfo: {title: T}\ncomponents: {a: {$ref: '#/nope'}}\npaths: {}\n",
     "specs/pets.yaml:3:18: $ref '#/nope' does not resolve"),
])
def test_a_spec_that_cannot_be_rendered_refuses_the_commit_at_its_line(spec: str, expected: str) -> None:
    found = "\n".join(problems_of({"openapi.yaml": DECLARATION, "specs/pets.yaml": spec}))
    assert expected in found


def test_two_specs_that_would_make_one_route_are_refused_at_the_second() -> None:
    declaration = DECLARATION + "  - name: more\n    spec: specs/more.yaml\n" \
        "    upstream_defaults: {nodes: [{host: 10.0.0.6, port: 80, weight: 1}]}\n"
    more = "openapi: 3.0.0\ninfo: {title: More}\npaths:\n  /v1/pets/{id}:\n    get: {operationId: other}\n"
    found = problems_of({"openapi.yaml": declaration, "specs/pets.yaml": PETS, "specs/more.yaml": more})
    assert any(p.startswith("specs/more.yaml:5:5: routes[") and "GET /v1/pets/{id} and GET /pets/{petId} of "
               "specs/pets.yaml (at specs/pets.yaml:9:5) would make the same route" in p for p in found)


def test_exponential_references_are_refused_quickly_not_expanded() -> None:
    ref = "{{$ref: '#/components/schemas/L{}'}}"
    levels = "\n".join(f"    L{n}: {{type: object, properties: {{a: {ref.format(n + 1)}, "
                       f"b: {ref.format(n + 1)}}}}}" for n in range(15))
    spec = ("openapi: 3.0.0\ninfo: {title: T}\npaths:\n  /a:\n    post:\n      requestBody:\n"
            "        required: true\n        content:\n          application/json:\n"
            "            schema: {$ref: '#/components/schemas/L0'}\ncomponents:\n  schemas:\n"
            f"{levels}\n    L15: {{type: string}}\n")
    declaration = DECLARATION + "    request_validation: true\n"
    started = time.monotonic()
    found = "\n".join(problems_of({"openapi.yaml": declaration, "specs/pets.yaml": spec}))
    assert f"would make more than {MAX_NODES:,} nodes" in found
    assert time.monotonic() - started < 10  # 2^15 × 4 nodes were never built


def test_a_recursive_schema_cannot_be_validated_and_says_where() -> None:
    spec = ("openapi: 3.0.0\ninfo: {title: T}\npaths:\n  /a:\n    post:\n      requestBody:\n"
            "        required: true\n        content:\n          application/json:\n"
            "            schema: {$ref: '#/components/schemas/Node'}\ncomponents:\n  schemas:\n"
            "    Node: {type: object, properties: {children: {type: array, items: {$ref: "
            "'#/components/schemas/Node'}}}}\n")
    found = "\n".join(problems_of({"openapi.yaml": DECLARATION + "    request_validation: true\n",
                                   "specs/pets.yaml": spec}))
    assert "specs/pets.yaml:13:" in found and "this $ref is recursive" in found
    # without validation the schema is never written out: the spec renders
    assert rendered({"openapi.yaml": DECLARATION, "specs/pets.yaml": spec}).payload["routes"]


def test_spec_files_and_the_files_they_refer_to_are_not_config_files() -> None:
    spec = PETS[:PETS.index("  /pets/{petId}:")] + "  /pets/{petId}:\n    $ref: 'paths/pet.yaml'\n"
    pet = "get:\n  operationId: showPet\n  parameters: [{$ref: '../common.yaml#/Id'}]\n"
    out = rendered({"openapi.yaml": DECLARATION, "specs/pets.yaml": spec, "specs/paths/pet.yaml": pet,
                    "specs/common.yaml": "Id: {name: petId, in: path, required: true}\n"})
    index = [r["name"] for r in out.payload["routes"]].index("showPet")
    assert str(out.source_map.location("routes", index)) == "specs/paths/pet.yaml:1:1"


def test_an_undeclared_spec_is_a_config_file_with_a_hint() -> None:
    found = problems_of({"specs/pets.yaml": PETS})
    assert any("specs/pets.yaml:1:1" in p and "an OpenAPI document, not a config file: declare it" in p
               for p in found)


def test_an_overlay_patches_a_generated_route_and_the_declaration() -> None:
    declared = DECLARATION.replace("specs/", "../specs/")
    base = rendered({"base/openapi.yaml": declared, "specs/pets.yaml": PETS}, paths=("base", "specs"))
    route_id = next(r["id"] for r in base.payload["routes"] if r["name"] == "listPets")
    overlay = (f"routes:\n  - id: {route_id}\n    $patch: merge\n    plugins: {{key-auth: {{}}}}\n"
               "openapi:\n  - name: pets\n    $patch: merge\n    upstream_defaults:\n"
               "      nodes: [{host: 10.9.9.9, port: 80, weight: 1}]\n")
    out = rendered({"base/openapi.yaml": declared, "specs/pets.yaml": PETS, "prod/overlay.yaml": overlay},
                   paths=("base", "specs", "prod"))
    patched = next(r for r in out.payload["routes"] if r["id"] == route_id)
    assert patched["plugins"] == {"key-auth": {}} and patched["name"] == "listPets"
    assert out.payload["upstreams"][0]["nodes"][0]["host"] == "10.9.9.9"
    index = [r["id"] for r in out.payload["routes"]].index(route_id)
    described = out.source_map.describe("routes", index) or ""
    assert described.startswith("patched by prod/overlay.yaml:2:5 onto its base item at specs/pets.yaml:6:5; "
                                "generated from GET")


def test_a_declaration_names_a_spec_in_the_repo_and_says_what_is_wrong_with_itself() -> None:
    found = problems_of({"openapi.yaml": "openapi:\n  - name: x\n    spec: ../../etc/passwd\n    extra: 1\n"})
    assert "openapi.yaml:3:5: openapi[x].spec: the spec '../../etc/passwd' is outside the repo" in found
    assert any(p.startswith("openapi.yaml:4:5: ") and "unknown field 'extra'" in p for p in found)
    found = problems_of({"openapi.yaml": "openapi:\n  - name: x\n    spec: nope.yaml\n"})
    assert found == ["openapi.yaml:3:5: openapi[x].spec: the spec 'nope.yaml' is not a file of the repo "
                     "under the configured paths"]


def test_server_variables_come_from_the_declaration_within_their_enum() -> None:
    spec = ("openapi: 3.0.0\ninfo: {title: T}\nservers:\n  - url: 'https://{env}.example.com:{port}/api'\n"
            "    variables:\n      env: {default: prod, enum: [prod, staging]}\n"
            "      port: {default: '443'}\npaths:\n  /a:\n    get: {}\n")
    declared = "openapi:\n  - name: t\n    spec: s.yaml\n    server_variables: {env: staging, port: 8443}\n"
    out = rendered({"openapi.yaml": declared, "s.yaml": spec})
    assert out.payload["upstreams"][0]["nodes"][0] == {"host": "staging.example.com", "port": 8443,
                                                       "weight": 100, "priority": 0}
    assert out.payload["routes"][0]["uris"] == ["/api/a"]
    found = problems_of({"openapi.yaml": declared.replace("staging", "dev").replace("port", "prot"),
                         "s.yaml": spec})
    assert any("'env' the value 'dev', which is not one of its enum: prod, staging" in p for p in found)
    assert any(p.startswith("openapi.yaml:4:") and "no server of the spec has a variable 'prot'" in p
               for p in found)
    assert not any("no server of the spec names a host" in p for p in found)  # one cause, told once


def test_swagger_2_servers_and_body_validation() -> None:
    spec = ("swagger: '2.0'\ninfo: {title: S}\nhost: api.example.com\nbasePath: /v2\nschemes: [https]\n"
            "paths:\n  /things:\n    post:\n      operationId: addThing\n      parameters:\n"
            "        - {name: body, in: body, required: true, schema: {type: object, required: [n], "
            "properties: {n: {type: integer, maximum: 5, exclusiveMaximum: true}}}}\n")
    out = rendered({"openapi.yaml": "openapi:\n  - {name: s, spec: s.yaml, request_validation: true}\n",
                    "s.yaml": spec})
    route = out.payload["routes"][0]
    assert route["uris"] == ["/v2/things"]
    assert out.payload["upstreams"][0]["nodes"][0] == {"host": "api.example.com", "port": 443, "weight": 100,
                                                       "priority": 0}
    assert route["plugins"]["request-validation"] == {"body_schema": {
        "type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "exclusiveMaximum": 5}}}}


def test_the_max_items_and_file_size_limits_bound_a_spec() -> None:
    found = problems_of({"openapi.yaml": DECLARATION, "specs/pets.yaml": PETS}, max_items=2)
    assert any("the spec has 3 operations, more routes than max_items = 2" in p for p in found)
    found = problems_of({"openapi.yaml": DECLARATION, "specs/pets.yaml": PETS}, max_file_size=200)
    assert any(p.startswith("specs/pets.yaml: the file is") and "more than max_file_size = 200" in p
               for p in found)


def test_a_render_with_specs_is_the_same_with_the_parse_cache_and_again() -> None:
    files = {"openapi.yaml": DECLARATION.encode(), "specs/pets.yaml": PETS.encode()}
    memo = ParseCache()
    first = render(files, RenderOptions(), memo=memo)
    again = render(files, RenderOptions(), memo=memo)
    assert first.payload == again.payload == render(files, RenderOptions()).payload
    changed = dict(files, **{"specs/pets.yaml": PETS.replace("count: 10", "count: 20").encode()})
    again = render(changed, RenderOptions(), memo=memo)
    assert again.payload["routes"][2]["plugins"]["limit-count"]["count"] == 20


def test_a_sources_ownership_applies_to_the_generated_items() -> None:
    declared = DECLARATION + "    id_prefix: pets-\n"
    out = rendered({"openapi.yaml": declared, "specs/pets.yaml": PETS})
    assert all(item["id"].startswith("pets-") for kind in ("routes", "services", "upstreams")
               for item in out.payload[kind])
    assert {r["service_id"] for r in out.payload["routes"]} == {out.payload["services"][0]["id"]}
    kinds = ("routes", "services", "upstreams")
    pets = Ownership((Claim(kinds, prefix="pets-"),))
    others = [("pets", pets), ("orders", Ownership((Claim(kinds, prefix="orders-"),)))]
    assert facts_of(Part("pets", "c1", out, pets), others).problems == ()
    orders = others[1][1]
    refused = facts_of(Part("orders", "c1", out, orders), others).problems
    assert len(refused) == 5
    assert all("source 'orders' may not declare this item" in p.message for p in refused)
    assert str(refused[0].location) == "specs/pets.yaml:6:5"  # at the operation, in its spec
