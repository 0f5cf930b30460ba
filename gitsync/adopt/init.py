"""``gitsync init DIR``: a new config repo that validates, with its README, hooks and CI.

One example of each common kind (an upstream, a service, two routes, a consumer with a
credential, a plugin config, a global rule), a README for the people who will edit it,
a ``.gitignore`` that keeps decrypted files and keys out, a ``.pre-commit-config.yaml``
that runs ``gitsync validate``, and CI for GitHub Actions and GitLab CI that validates
every push and shows ``gitsync diff`` against a gateway given by CI secrets, as a report on the
pull request (``gitsync pr-comment``). Nothing
in the examples needs a variable or a secret, so ``gitsync validate --dir DIR`` passes
on the result as it is.
"""

from __future__ import annotations

import argparse
import sys

from gitsync import __version__
from gitsync.adopt import repo_writer

EXAMPLES: dict[str, str] = {
    "upstreams/web.yaml": """\
# Upstreams are referenced by id (upstream_id) from services and routes.
upstreams:
  - id: web
    type: roundrobin
    nodes:
      - {host: 10.0.1.10, port: 8080, weight: 1}
      - {host: 10.0.1.11, port: 8080, weight: 1}
    timeout: {connect: 2, send: 5, read: 5}
""",
    "services/api.yaml": """\
# A service: its upstream and plugins are shared by the routes that name it (service_id).
services:
  - id: api
    name: public API
    upstream_id: web
    plugins:
      limit-count: {count: 600, time_window: 60, key_type: var, key: remote_addr, rejected_code: 429}
""",
    "routes/api.yaml": """\
routes:
  - id: api-orders
    uri: /api/orders/*
    methods: [GET, POST]
    hosts: [api.example.com]
    service_id: api
    plugin_config_id: api-defaults
    plugins:
      key-auth: {}

  - id: health
    uri: /healthz
    upstream_id: web
    plugins:
      proxy-rewrite: {uri: /status}
""",
    "plugin_configs/api-defaults.yaml": """\
plugin_configs:
  - id: api-defaults
    plugins:
      cors: {allow_origins: "https://app.example.com"}
      request-id: {header_name: X-Request-Id}
""",
    "consumers/partners.yaml": """\
consumers:
  - username: partner-a
    desc: an API partner
  # A credential is a consumers item whose id is <username>/credentials/<name>. Keep key values out
  # of git: an $env:// or $secret:// reference, ${{ secrets.NAME }}, or a SOPS-encrypted file.
  - id: partner-a/credentials/primary
    plugins:
      key-auth:
        key: $env://PARTNER_A_KEY
""",
    "global_rules/observability.yaml": """\
# One global rule per plugin, named after it.
global_rules:
  - id: prometheus
    plugins:
      prometheus: {prefer_name: true}
""",
}

README = """\
# APISIX configuration

This repository is the configuration of our Apache APISIX gateways. [gitsync] applies
every commit of the main branch to the gateways; nothing is changed on a gateway by hand.

## Layout

One directory per kind, one file per topic (any split works: gitsync reads every
`*.yaml`, `*.yml` and `*.json` file; names starting with `.` are skipped):

```
upstreams/  services/  routes/  plugin_configs/  consumers/  global_rules/
```

Every item has an `id` (a consumer: its `username`); the same kind and id twice is an
error. `*_conf_version` keys never belong here: gitsync chooses versions.

## Before you commit

```sh
gitsync validate --dir .        # each problem as file:line:col: kind[id].field: message
pre-commit install              # runs the same check on every commit
gitsync render --dir .          # the payload a gateway receives, secrets masked
```

Editors: `gitsync schema --out .schemas` writes JSON Schemas; put
`# yaml-language-server: $schema=.schemas/config-file.schema.json` on a file's first line
(VS Code's YAML extension, neovim's yamlls) for completion and checks as you type.

## Secrets

Never commit a password, token or private key in clear. Use, in any string:

- `${{ secrets.NAME }}` — read by gitsync from its host (a file `NAME` in its secrets
  directory, or `GITSYNC_SECRET_NAME`);
- `$secret://vault/<manager>/<path>/<key>` or `$env://NAME` — resolved by APISIX itself;
- a SOPS file (`*.sops.yaml`) encrypted for the gitsync host's age key.

## CI

`.github/workflows/gitsync.yml` and `.gitlab-ci.yml` validate every push and, for a pull
or merge request, show what would change on the gateway (`gitsync diff`): each problem at
its line of the diff, and the report as one comment on the pull request, updated on every
push. The diff needs two CI secrets: `GITSYNC_GATEWAY` (the Admin API URL) and
`GITSYNC_ADMIN_KEY`; a read-only (viewer) admin key is enough. On GitLab, the note needs
`GITSYNC_FORGE_TOKEN`, a project access token (Reporter, scope `api`); GitHub's own token
does it there.

[gitsync]: https://pypi.org/project/gitsync/
"""

GITIGNORE = """\
# Decrypted or clear secret material never belongs in this repository.
*.agekey
*.dec.yaml
*.decrypted.*
secrets/
.schemas/
"""

PRE_COMMIT = """\
# pre-commit (https://pre-commit.com): `pre-commit install` once, then every commit is checked.
# Uses the gitsync installed on your machine (pip install gitsync).
repos:
  - repo: local
    hooks:
      - id: gitsync-validate
        name: gitsync validate
        entry: gitsync validate --dir .
        language: system
        pass_filenames: false
        files: \\.(ya?ml|json)$
"""

GITHUB = f"""\
name: gitsync
on:
  push:
  pull_request:

permissions:
  contents: read
  pull-requests: write  # the review comment on a pull request

jobs:
  gitsync:
    runs-on: ubuntu-latest
    env:
      # The gateway that diff compares with: CI secrets (a read-only admin key is enough).
      GITSYNC_GATEWAYS: ${{{{ secrets.GITSYNC_GATEWAY }}}}
      GITSYNC_ADMIN_KEY: ${{{{ secrets.GITSYNC_ADMIN_KEY }}}}
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - run: pip install "gitsync=={__version__}"
      - name: gitsync validate
        # Each problem as an annotation on its line of the diff, and in the job summary.
        run: gitsync validate --dir . --format github --output gitsync-review.md
      - name: gitsync diff
        # What merging would change on the gateway, in the job summary (a change is no failure).
        if: github.event_name == 'pull_request' && env.GITSYNC_GATEWAYS != ''
        run: gitsync diff --dir . --format github --output gitsync-review.md
      - name: gitsync review comment
        # The report as one comment on the pull request, updated on every push, never repeated.
        if: always() && github.event_name == 'pull_request'
        env:
          GITSYNC_FORGE_TOKEN: ${{{{ secrets.GITHUB_TOKEN }}}}
        run: gitsync pr-comment gitsync-review.md
"""

GITLAB = f"""\
stages: [validate, diff, review]

# Merge request pipelines for merge requests, branch pipelines otherwise (never both).
workflow:
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
    - if: $CI_COMMIT_BRANCH && $CI_OPEN_MERGE_REQUESTS
      when: never
    - if: $CI_COMMIT_BRANCH

default:
  image: python:3.12-slim
  before_script:
    - pip install "gitsync=={__version__}"

validate:
  stage: validate
  script:
    - gitsync validate --dir . --format markdown --output gitsync-review.md
  artifacts:
    when: always
    paths: [gitsync-review.md]

diff:
  # What merging would change on the gateway (a change is no failure).
  # Set GITSYNC_GATEWAYS and GITSYNC_ADMIN_KEY as masked CI/CD variables.
  stage: diff
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event" && $GITSYNC_GATEWAYS
  script:
    - gitsync diff --dir . --format markdown --output gitsync-review.md
  artifacts:
    when: always
    paths: [gitsync-review.md]

review:
  # The report as one note on the merge request, updated on every push, never repeated.
  # GITSYNC_FORGE_TOKEN: a project access token (Reporter, scope api), as a masked CI/CD variable.
  stage: review
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event" && $GITSYNC_FORGE_TOKEN
      when: always
  script:
    - gitsync pr-comment gitsync-review.md
"""


def scaffold_files() -> dict[str, bytes]:
    files = {path: text for path, text in EXAMPLES.items()}
    files |= {"README.md": README, ".gitignore": GITIGNORE, ".pre-commit-config.yaml": PRE_COMMIT,
              ".github/workflows/gitsync.yml": GITHUB, ".gitlab-ci.yml": GITLAB}
    return {path: text.encode("utf-8") for path, text in files.items()}


def init_command(_settings: object, args: argparse.Namespace) -> int:
    try:
        repo_writer.check_target(args.directory)
        repo_writer.write_tree(args.directory, scaffold_files())
    except (repo_writer.WriteError, OSError) as exc:
        print(f"gitsync init: {exc}", file=sys.stderr)
        return 2
    print(f"a new config repo in {args.directory}; next: cd {args.directory} && git init && "
          "gitsync validate --dir .")
    return 0
