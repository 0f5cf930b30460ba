"""``gitsync import openapi SPEC… --out DIR``, as a real process: the items a repo declaring the specs
renders, written as plain files; the round trip proved (the written repo renders the same payload, and
syncing it after the declaring repo changes nothing on the gateway); problems at the spec's lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.openapi import spec_repo
from testkit.processes import run_gitsync

SPEC = """\
openapi: 3.0.3
info: {title: Books}
servers: [{url: "https://books.example.com/{version}", variables: {version: {default: v1}}}]
paths:
  /books:
    get: {operationId: listBooks}
    post:
      operationId: addBook
      requestBody:
        required: true
        content: {application/json: {schema: {$ref: 'schemas/book.yaml'}}}
  /books/{isbn}:
    parameters: [{$ref: '#/components/parameters/Isbn'}]
    get: {operationId: getBook}
components:
  parameters:
    Isbn: {name: isbn, in: path, required: true, schema: {type: string}}
"""
BOOK = "type: object\nrequired: [title]\nproperties:\n  title: {type: string, minLength: 1}\n"


@pytest.mark.slow
def test_import_writes_what_the_declaring_repo_renders_and_syncs_to_no_change(apisix: ApisixDouble,
                                                                              tmp_path: Path) -> None:
    specs = spec_repo(tmp_path / "specs", {"books.yaml": SPEC, "schemas/book.yaml": BOOK}, "{}\n")
    out = tmp_path / "repo"
    result = run_gitsync("import", "openapi", str(specs / "books.yaml"), "--out", str(out),
                         "--server-variable", "version=v2", "--upstream-node", "127.0.0.1:1980",
                         "--request-validation", "--layout", "per-service")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "round trip: render of the written repo equals the specs' render" in result.stdout
    imported = json.loads(run_gitsync("render", "--dir", str(out)).stdout)
    declared = spec_repo(tmp_path / "declared", {"specs/books.yaml": SPEC, "specs/schemas/book.yaml": BOOK},
                         "openapi:\n  - name: books\n    spec: specs/books.yaml\n"
                         "    server_variables: {version: v2}\n    request_validation: true\n"
                         "    upstream_defaults: {nodes: [{host: 127.0.0.1, port: 1980, weight: 1}]}\n")
    assert json.loads(run_gitsync("render", "--dir", str(declared)).stdout) == imported
    add = next(r for r in imported["routes"] if r["name"] == "addBook")
    assert add["uris"] == ["/v2/books"]
    assert add["plugins"]["request-validation"]["body_schema"]["properties"]["title"] == {"type": "string",
                                                                                          "minLength": 1}
    key = tmp_path / "key"
    key.write_text("test-admin-key")
    gateway = ["--gateway", apisix.url, "--admin-key-file", str(key)]
    assert run_gitsync("sync", "--once", "--dir", str(declared), *gateway).returncode == 0
    diff = run_gitsync("diff", "--dir", str(out), *gateway)
    assert diff.returncode == 0 and "no changes" in diff.stdout, diff.stdout + diff.stderr


def test_import_of_a_broken_spec_names_its_lines_and_writes_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "api.yaml"
    spec.write_text(SPEC.replace("'schemas/book.yaml'", "'../elsewhere.yaml'")
                    .replace("operationId: getBook", "operationId: listBooks"))
    out = tmp_path / "repo"
    result = run_gitsync("import", "openapi", str(spec), "--out", str(out))
    assert result.returncode == 1
    assert f"{spec}:11:47: $ref '../elsewhere.yaml' leaves the repo" in result.stderr
    assert f"{spec}:14:5: " in result.stderr and "would make the same route id" in result.stderr
    assert not out.exists()
