"""``gitsync init DIR``: a new config repo that validates, with its README, hooks and CI.

One example of each common kind (an upstream, a service, two routes, a consumer with a
credential, a plugin config, a global rule), a README for the people who will edit it,
a ``.gitignore`` that keeps decrypted files and keys out, a ``.pre-commit-config.yaml``
that runs ``gitsync validate``, and CI for GitHub Actions and GitLab CI that validates
every push and shows ``gitsync diff`` against a gateway given by CI secrets, as a report on the
pull request (``gitsync pr-comment``). Nothing
in the examples needs a variable or a secret, so ``gitsync validate --dir DIR`` passes
on the result as it is.

Every install the scaffold writes is of one wheel named by its sha256 (`gitsync.adopt.pin`, the files
under ``ci/``), never of a bare name; only the steps that need a secret receive it (GitHub: the step's
own ``env``; GitLab: variables scoped to the diff job's environment, and pip run without them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import PurePosixPath

from gitsync import DISTRIBUTION
from gitsync.adopt import pin, repo_writer, team
from gitsync.settings import Settings, SettingsError, source_settings

#: The install commands (`pin.INSTALL`) as each file writes them.
INSTALL_LINES = "\n".join(pin.INSTALL)
INSTALL_STEP = "\n".join(" " * 10 + line for line in pin.INSTALL)
GITLAB_INSTALL = "\n".join(" " * 6 + line.replace("python -m pip", "pip") for line in pin.INSTALL)

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

README = f"""\
# APISIX configuration

This repository is the configuration of our Apache APISIX gateways. gitsync (the project's
distribution `{DISTRIBUTION}`; its command is `gitsync`) applies every commit of the main branch
to the gateways; nothing is changed on a gateway by hand.

## Layout

One directory per kind, one file per topic (any split works: gitsync reads every
`*.yaml`, `*.yml` and `*.json` file; names starting with `.` are skipped):

```
upstreams/  services/  routes/  plugin_configs/  consumers/  global_rules/
```

Every item has an `id` (a consumer: its `username`); the same kind and id twice is an
error. `*_conf_version` keys never belong here: gitsync chooses versions.

## Before you commit

Install the gitsync your agents run, as CI does: the wheel pinned by its sha256 in `ci/`
(never the bare name `gitsync` from a package index: that one is another project's):

```sh
{INSTALL_LINES}
```

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

- `${{{{ secrets.NAME }}}}` — read by gitsync from its host (a file `NAME` in its secrets
  directory, or `GITSYNC_SECRET_NAME`);
- `$secret://vault/<manager>/<path>/<key>` or `$env://NAME` — resolved by APISIX itself;
- a SOPS file (`*.sops.yaml`) encrypted for the gitsync host's age key.

## CI

`.github/workflows/gitsync.yml` and `.gitlab-ci.yml` validate every push and, for a pull
or merge request, show what would change on the gateway (`gitsync diff`): each problem at
its line of the diff, and the report as one comment on the pull request, updated on every
push. The diff needs two CI secrets: `GITSYNC_GATEWAYS` (the Admin API URL) and
`GITSYNC_ADMIN_KEY`; a read-only (viewer) admin key is enough. Without them the diff says
it was skipped. Only the diff sees them: on GitHub they are set on its step alone; on
GitLab, give both masked variables the environment scope `gitsync-diff`, which only the
diff job declares, and pip runs without them in its environment. On GitLab, the note
needs `GITSYNC_FORGE_TOKEN`, a project access token (Reporter, scope `api`); GitHub's own
token does it there.

Both install gitsync from `ci/`: `{pin.REQUIREMENTS}` names one wheel by its sha256, and
`{pin.LIBRARIES}` the libraries it needs. To move CI to another gitsync version:
`gitsync init --pin-only --wheel apisix_gitsync-<version>-py3-none-any.whl .`
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
# Uses the gitsync installed on your machine: the wheel pinned in ci/ (see README.md), never a bare
# install of the bare name `gitsync` (that name on the package index is another project's).
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
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - name: install gitsync
        # The wheel pinned by its sha256 in ci/ (never a bare name), then the libraries it needs.
        # No secret is set for this step.
        run: |
{INSTALL_STEP}
      - name: gitsync validate
        # Each problem as an annotation on its line of the diff, and in the job summary.
        run: gitsync validate --dir . --format github --output gitsync-review.md
      - name: gitsync diff
        # What merging would change on the gateway, in the job summary (a change is no failure).
        if: github.event_name == 'pull_request'
        env:
          # The gateway and a read-only admin key (CI secrets), for this step alone.
          GITSYNC_GATEWAYS: ${{{{ secrets.GITSYNC_GATEWAYS || secrets.GITSYNC_GATEWAY }}}}
          GITSYNC_ADMIN_KEY: ${{{{ secrets.GITSYNC_ADMIN_KEY }}}}
        run: |
          if [ -z "$GITSYNC_GATEWAYS" ]; then
            echo "::notice::gitsync diff skipped: set the CI secrets GITSYNC_GATEWAYS and GITSYNC_ADMIN_KEY"
            exit 0
          fi
          gitsync diff --dir . --format github --output gitsync-review.md
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
    - |
      # gitsync: the wheel pinned by its sha256 in ci/ (never a bare name), then the libraries it
      # needs. pip runs without the gateway's and the forge's secrets in its environment.
      pip() {{ env -u GITSYNC_ADMIN_KEY -u GITSYNC_GATEWAYS -u GITSYNC_FORGE_TOKEN python -m pip "$@"; }}
{GITLAB_INSTALL}

validate:
  stage: validate
  script:
    - gitsync validate --dir . --format markdown --output gitsync-review.md
  artifacts:
    when: always
    paths: [gitsync-review.md]

diff:
  # What merging would change on the gateway (a change is no failure). GITSYNC_GATEWAYS and
  # GITSYNC_ADMIN_KEY: masked CI/CD variables with the environment scope gitsync-diff, so that
  # this job alone receives them (a read-only admin key is enough).
  stage: diff
  environment:
    name: gitsync-diff
    action: access
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
  script:
    - |
      if [ -z "$GITSYNC_GATEWAYS" ]; then
        echo "gitsync diff skipped: set GITSYNC_GATEWAYS and GITSYNC_ADMIN_KEY (scope gitsync-diff)"
        exit 0
      fi
      gitsync diff --dir . --format markdown --output gitsync-review.md
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


TEAM_README = """
## CI: a team's repo of a shared gateway

This repository is source `{name}` of an agent that composes several teams' repos into one
gateway payload (docs/sources.md of gitsync). It may declare only what the agent's settings say
it owns; an item of another team's, or a reference into one the owner does not share with us, is
refused at its line, here and in the composition. `{sources}` holds the part of the agent's
settings that says so (no secret): CI, the pre-commit hook and you validate with it:

```sh
{command}
```

When the platform changes what sources own or share: `gitsync init --config <the agent's settings>
--source {name} --sources-only .` writes `{sources}` again. The gateway's whole payload is every
team's repos together: its diff is the platform's (`gitsync diff` with the agent's settings), so
this CI has no diff step.
"""


def team_command(name: str) -> str:
    """The validate command of a team's repo (its CI, its pre-commit hook)."""
    return f"gitsync validate --dir . --config {team.SOURCES_FILE} --source {name}"


def _for_team(text: str, name: str) -> str:
    """A CI file or hook of the one-repo scaffold, made a team's: its validate reads the sources file,
    and the diff (of the composition: the platform's) is left out."""
    text = text.replace("gitsync validate --dir .", team_command(name))
    if "jobs:" in text:  # GitHub: the diff step goes
        start = text.index("      - name: gitsync diff\n")
        return text[:start] + text[text.index("      - name: gitsync review comment\n"):]
    if "stages:" in text:  # GitLab: the diff job goes
        text = text.replace("stages: [validate, diff, review]", "stages: [validate, review]")
        return text[:text.index("\ndiff:\n")] + text[text.index("\nreview:\n"):]
    return text


def scaffold_files(wheel: pin.WheelPin, settings: Settings | None = None, name: str | None = None
                   ) -> dict[str, bytes]:
    """The new repo's files; with `name`, source `name`'s of the agent's `settings`."""
    files = {path: text for path, text in EXAMPLES.items()}
    files |= {"README.md": README, ".gitignore": GITIGNORE, ".pre-commit-config.yaml": PRE_COMMIT,
              ".github/workflows/gitsync.yml": GITHUB, ".gitlab-ci.yml": GITLAB, **wheel.files()}
    if settings is not None and name is not None:
        spec = next(spec for spec in settings.sources if spec.name == name)
        files = {path: _for_team(text, name) for path, text in files.items() if path not in EXAMPLES}
        under = source_settings(settings, spec).paths[0]  # the examples are in what its render reads
        files |= {str(PurePosixPath(under) / path): text
                  for path, text in team.examples(name, spec.owns).items()}
        # its CI section is a team's: no diff, no gateway secret; the pin's paragraph stays
        files["README.md"] = _for_team(README[:README.index("## CI")], name) + TEAM_README.format(
            name=name, sources=team.SOURCES_FILE, command=team_command(name)).lstrip("\n") + "\n" + \
            README[README.index("Both install gitsync"):]
        files[team.SOURCES_FILE] = team.sources_file(settings, name)
    return {path: text.encode("utf-8") for path, text in files.items()}


def init_command(settings: Settings, args: argparse.Namespace) -> int:
    name = args.only_source
    try:
        if args.sources_only:
            if name is None:
                raise pin.PinError("--sources-only needs --source NAME (and --config: the agent's settings)")
            if not args.directory.is_dir():
                raise repo_writer.WriteError(f"{args.directory}: no such directory")
            (args.directory / team.SOURCES_FILE).parent.mkdir(parents=True, exist_ok=True)
            written = team.sources_file(settings, name)
            (args.directory / team.SOURCES_FILE).write_text(written, encoding="utf-8")
            print(f"{args.directory / team.SOURCES_FILE} written from the agent's [[sources]]: commit it")
            return 0
        wheel = pin.choose(args.wheel, args.wheel_url)
        if args.pin_only and wheel.sha256 is None:
            raise pin.PinError(f"{wheel.why}: --pin-only needs the wheel your agents run, --wheel "
                               f"{pin.wheel_name(wheel.version)}")
        if args.pin_only:
            if not args.directory.is_dir():
                raise repo_writer.WriteError(f"{args.directory}: no such directory (--pin-only rewrites the "
                                             "CI pin of an existing repo)")
            for path, text in wheel.files().items():
                (args.directory / path).parent.mkdir(parents=True, exist_ok=True)
                (args.directory / path).write_text(text, encoding="utf-8")
        else:
            repo_writer.check_target(args.directory)
            repo_writer.write_tree(args.directory, scaffold_files(wheel, settings, name))
    except (pin.PinError, repo_writer.WriteError, OSError, SettingsError) as exc:
        print(f"gitsync init: {exc}", file=sys.stderr)
        return 2
    if wheel.sha256 is None:
        print(f"gitsync init: {args.directory / pin.REQUIREMENTS} is not pinned yet ({wheel.why}): "
              f"CI installs nothing until you run: gitsync init --pin-only --wheel "
              f"{pin.wheel_name(wheel.version)} {args.directory} (`pip download "
              f"{DISTRIBUTION}=={wheel.version} --no-deps` fetches the wheel)", file=sys.stderr)
    if args.pin_only:
        print(f"CI in {args.directory} now installs gitsync {wheel.version} (sha256 {wheel.sha256[:12]}…): "
              f"commit {pin.REQUIREMENTS} and {pin.LIBRARIES}")
        return 0
    pinned = "its CI pinned to" if wheel.sha256 else "its CI to be pinned to"
    check = team_command(name) if name is not None else "gitsync validate --dir ."
    print(f"a new config repo in {args.directory}, {pinned} gitsync {wheel.version}; next: cd "
          f"{args.directory} && git init && {check}")
    return 0
