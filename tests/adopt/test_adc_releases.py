"""``gitsync import adc`` against what each ADC release really wrote.

The gateways here are recordings of real ``adc sync`` runs (tests/data/adc/README.md says
which ADC build, command and files made each): the PUT bodies ADC sent, replayed to the
APISIX double as ADC sent them. The import of the same files, for that release or
following the gateway, must then take it over with no change at all: ``gitsync diff``
says no changes and ``gitsync sync --once`` sends no PUT.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gitsync.adopt import adc_gateway
from gitsync.adopt.adc_releases import (
    LATEST,
    RELEASES,
    Behaviour,
    UnknownRelease,
    behaviour_for,
    diff_hint,
)
from gitsync.adopt.import_adc import convert
from gitsync.kinds import item_id
from gitsync.push.plan import ItemChange
from gitsync.push.summary import ABSENT, ChangeGroup, summarise
from gitsync.testing.apisix import ApisixDouble
from testkit.processes import run_gitsync

DATA = Path(__file__).resolve().parents[1] / "data" / "adc"
KEY = "test-admin-key"
#: The values ADC read from its environment when the recordings were made.
SECRETS = {"GITSYNC_SECRET_ADC_SSL_KEY": (DATA / "ssl.key").read_text().strip(),
           "GITSYNC_SECRET_ALICE_KEY": "alice-env-key"}

#: recording → (its release range, the import flags that name it, what the import for those flags says,
#: what the import following the gateway says). ADC 0.21.1 and 0.21.2 – 0.25.x write alike whatever
#: APISIX accepts (0.21.1's only difference, nodes: [] with service discovery, is refused): following
#: its gateway takes the newest of them.
CASES = {
    "v0.20.0": (RELEASES[0], ["--adc-version", "0.20"], "ADC 0.20.0", "ADC 0.20.0"),
    "v0.21.0": (RELEASES[1], ["--adc-version", "0.21.0"], "ADC 0.21.0", "ADC 0.21.0"),
    "v0.21.1": (RELEASES[2], ["--adc-version", "0.21.1"], "ADC 0.21.1", "ADC 0.21.2 – 0.25.x"),
    "v0.25.0": (RELEASES[3], ["--adc-version", "v0.25.0"], "ADC 0.21.2 – 0.25.x", "ADC 0.21.2 – 0.25.x"),
    "v0.28.0": (RELEASES[4], [], "ADC 0.26.0 – 0.28.0", "ADC 0.26.0 – 0.28.0"),
    "v0.28.0-no-lint": (RELEASES[4], ["--no-lint"], "ADC 0.26.0 – 0.28.0 with --no-lint",
                        "ADC 0.26.0 – 0.28.0 with --no-lint"),
    "main": (RELEASES[4], ["--adc-version", "main"], "ADC main (after 0.28.0)", "ADC main (after 0.28.0)"),
}


def recording(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text())


def adc_files(record: dict[str, Any]) -> list[str]:
    """The files of the recording's last ``adc sync`` (its ``-f`` arguments)."""
    words = record["commands"][-1].split()
    return [str(DATA / words[i + 1]) for i, word in enumerate(words) if word == "-f"]


def replay(double: ApisixDouble, record: dict[str, Any]) -> None:
    """Each PUT as ADC sent it: its body, with its X-Digest when it sent one (ADC 0.21.0 on)."""
    for put in record["puts"]:
        headers = {"X-API-KEY": KEY, "Content-Type": "application/json"}
        if put["x-digest"]:
            headers["X-Digest"] = put["x-digest"]
        response = httpx.put(double.url + "/apisix/admin/configs", content=json.dumps(put["body"]),
                             headers=headers)
        assert response.status_code in (200, 202), response.text


def live(double: ApisixDouble) -> dict[str, Any]:
    body = httpx.get(double.url + "/apisix/admin/configs", headers={"X-API-KEY": KEY}).json()
    return {k: v for k, v in body.items() if k not in ("X-Digest", "X-Last-Modified")}


def behaviour_of(name: str) -> Behaviour:
    release = CASES[name][0]
    return Behaviour(release, managed_by=name == "main", lint=not name.endswith("no-lint"))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------------------
# The mapping, against each recording (pure)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_import_for_a_release_is_what_that_release_wrote(name: str) -> None:
    record = recording(name)
    files = {path: Path(path).read_bytes() for path in adc_files(record)}
    converted = convert(files, behaviour=behaviour_of(name))
    assert not converted.problems
    body = record["puts"][-1]["body"]
    kinds = {k for k, v in body.items() if isinstance(v, list)}
    assert set(converted.payload) == kinds
    for kind in kinds:
        wrote = [{k: v for k, v in item.items() if k != "modifiedIndex"} for item in body[kind]]
        ours = [adc_gateway.resolved(item, there) for item, there in zip(converted.payload[kind], wrote,
                                                                            strict=False)]
        assert [item_id(kind, i) for i in ours] == [item_id(kind, i) for i in wrote], kind
        assert ours == wrote, kind


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_gateway_tells_which_release_wrote_it(name: str) -> None:
    record = recording(name)
    files = {path: Path(path).read_bytes() for path in adc_files(record)}
    probe = convert(files).payload
    followed = adc_gateway.follow(record["puts"][-1]["body"], probe, adc_gateway.Given())
    assert followed.behaviour.name == CASES[name][3]
    assert convert(files, behaviour=followed.behaviour).payload == \
        convert(files, behaviour=behaviour_of(name)).payload
    assert not followed.warnings
    subjects = [c.subject for c in followed.choices]
    assert subjects == ["ADC release", "defaults", "managed-by label"]


def test_flags_win_over_the_gateway_with_a_warning_where_they_disagree() -> None:
    record = recording("main")
    files = {path: Path(path).read_bytes() for path in adc_files(record)}
    given = adc_gateway.Given.of(behaviour_for("0.25"), False, no_lint=False)
    followed = adc_gateway.follow(record["puts"][-1]["body"], convert(files).payload, given)
    assert followed.behaviour == Behaviour(RELEASES[3], managed_by=False)
    assert any("--adc-version says ADC 0.21.2 – 0.25.x, but the gateway looks written by ADC 0.26.0 – 0.28.0"
               in w and "https_verify_certificate" in w for w in followed.warnings), followed.warnings
    assert any("the managed-by label is left out, but 10 of the 10" in w for w in followed.warnings)


def test_the_latest_release_is_the_default_and_main_adds_the_label() -> None:
    files = {str(DATA / name): (DATA / name).read_bytes() for name in ("adc.yaml", "stream.yaml")}
    plain, main = convert(files), convert(files, behaviour=behaviour_for("main"))
    assert behaviour_for("0.28").release is LATEST
    assert all("labels" not in item or "managed-by" not in item["labels"] for item in plain.payload["routes"])
    assert all(item["labels"]["managed-by"] == "adc"
               for kind in ("services", "routes", "stream_routes", "ssls") for item in main.payload[kind])
    assert convert(files, managed_by=True).payload == main.payload  # the older keyword still works


@pytest.mark.parametrize("text, message", [
    ("0.19.1", "has no standalone backend"),
    ("0.29", "newer than the releases this gitsync knows"),
    ("latest", "expected an ADC release"),
])
def test_an_unknown_adc_version_is_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(UnknownRelease, match=message):
        behaviour_for(text)


def test_services_ssls_and_consumers_keep_the_order_adc_keys_them_in() -> None:
    text = b"".join(b"  - name: '%s'\n    upstream: {nodes: [{host: a.b, port: 80, weight: 1}]}\n" % n
                    for n in (b"b", b"10", b"a", b"2", b"01"))
    converted = convert({"order.yaml": b"services:\n" + text})
    assert [s["name"] for s in converted.payload["services"]] == ["2", "10", "b", "a", "01"]


def test_a_child_id_equal_to_the_hash_of_its_own_name_is_derived_again_as_adc_does() -> None:
    own = hashlib.sha1(b"r").hexdigest()
    converted = convert({"a.yaml": f"""services:
  - name: s
    upstream: {{nodes: [{{host: a.b, port: 80, weight: 1}}]}}
    routes:
      - {{name: r, id: {own}, uris: [/r]}}
      - {{name: q, id: explicit, uris: [/q]}}
""".encode()})
    assert [r["id"] for r in converted.payload["routes"]] == [hashlib.sha1(b"s.r").hexdigest(), "explicit"]


@pytest.mark.parametrize("version, text, message", [
    ("0.28", "  - name: bare\n    upstream: {type: roundrobin}\n", "ADC's lint refuses it"),
    ("0.21.1", "  - name: dns\n    upstream: {service_name: a, discovery_type: dns}\n",
     "writes 'nodes: []' next to 'service_name', which APISIX refuses"),
    ("0.28", "  - name: lost\n    routes: [{name: r, uris: [/r]}]\n", "adc sync stops on it"),
    ("0.28", "  - name: s\n    upstream: {nodes: [{host: a.b, port: 80, weight: 1}]}\n"
             "    upstreams: [{nodes: []}]\n", "a named upstream needs a name"),
])
def test_what_no_adc_release_could_have_written_is_a_problem_at_its_line(version: str, text: str,
                                                                            message: str) -> None:
    converted = convert({"bad.yaml": ("services:\n" + text).encode()}, behaviour=behaviour_for(version))
    assert any(message in p.message and p.location is not None and p.location.line >= 2
               for p in converted.problems), converted.problems


def test_what_an_older_release_drops_is_left_out_with_a_note() -> None:
    files = {str(DATA / "adc.yaml"): (DATA / "adc.yaml").read_bytes()}
    converted = convert(files, behaviour=behaviour_for("0.21.0"))
    orders = converted.payload["upstreams"][0]
    assert "checks" not in orders
    assert any("does not write checks" in str(n) and ":13:" in str(n) for n in converted.notes), \
        converted.notes


# ---------------------------------------------------------------------------------------------------------
# The diff's summary (pure)


def test_items_changed_alike_fold_into_one_group_with_their_values() -> None:
    label = (("labels",),)
    changes = [ItemChange("routes", f"r{i}", "change", label) for i in range(6)]
    changes += [ItemChange("routes", "odd", "change", (("uris",),)), ItemChange("routes", "new", "add")]
    live = {("routes", f"r{i}"): {"id": f"r{i}"} for i in range(6)}
    wanted = {("routes", f"r{i}"): {"id": f"r{i}", "labels": {"managed-by": "adc"}} for i in range(6)}
    out = summarise(changes, live, wanted)
    assert out[1:] == changes[6:]
    group = out[0]
    assert isinstance(group, ChangeGroup) and group.ids == tuple(f"r{i}" for i in range(6))
    assert group.describe() == '6 routes differ only in labels: (absent) → {"managed-by":"adc"}'
    assert group.examples() == "routes[r0], routes[r1], routes[r2], …"
    assert "--no-managed-by-label" in (diff_hint("routes", group.fields, group.values, ABSENT) or "")
    assert summarise(changes, live, wanted, minimum=7) == changes


def test_a_group_whose_values_vary_says_so_and_the_label_hints_go_both_ways() -> None:
    changes = [ItemChange("routes", f"r{i}", "change", (("uris",),)) for i in range(5)]
    wanted = {("routes", f"r{i}"): {"uris": [f"/{i}"]} for i in range(5)}
    (group,) = summarise(changes, {}, wanted)
    assert isinstance(group, ChangeGroup) and group.describe().endswith("differ only in uris (values vary)")
    assert diff_hint("routes", group.fields, group.values, ABSENT) is None
    back = diff_hint("services", (("labels", "managed-by"),), (("adc", ABSENT),), ABSENT)
    assert back is not None and "--managed-by-label" in back


# ---------------------------------------------------------------------------------------------------------
# The takeover, as real processes against the double


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_gateway_each_adc_release_wrote_is_taken_over_with_no_change(name: str, tmp_path: Path) -> None:
    record = recording(name)
    _, flags, says, follows = CASES[name]
    (tmp_path / "admin_key").write_text(KEY)
    with ApisixDouble(KEY, version=record["apisix"]) as double:
        replay(double, record)
        before = live(double)
        gateway = ["--gateway", double.url, "--admin-key-file", str(tmp_path / "admin_key")]
        given = run_gitsync("import", "adc", *adc_files(record), "--out", str(tmp_path / "given"), *flags,
                            "--secrets-out", str(tmp_path / "given-secrets"))
        assert given.returncode == 0, given.stdout + given.stderr
        assert f"wrote what {says} writes" in given.stdout
        assert "ADC_SSL_KEY, ALICE_KEY" in given.stdout  # ADC's ${NAME}: secrets to set
        consumers = (tmp_path / "given" / "consumers.yaml").read_text()
        assert "${{ secrets.ALICE_KEY }}" in consumers
        # The files' literal credentials are taken out too, named in the notes, their values in --secrets-out.
        assert "alice-primary-key" not in consumers and "NOT_ENV" not in consumers
        assert "2 literal credential(s) became ${{ secrets.NAME }}" in given.stdout
        assert sorted(p.read_text().strip() for p in (tmp_path / "given-secrets").iterdir()) == \
            ["${NOT_ENV}", "alice-primary-key"]
        followed = run_gitsync("import", "adc", *adc_files(record), "--out", str(tmp_path / "followed"),
                               *gateway, "--secrets-out", str(tmp_path / "followed-secrets"))
        assert followed.returncode == 0, followed.stdout + followed.stderr
        assert f"as the ADC that wrote it did ({follows})" in followed.stdout
        assert "the first sync changes no item and no version" in followed.stdout
        assert tree(tmp_path / "given") == tree(tmp_path / "followed")
        assert tree(tmp_path / "given-secrets") == tree(tmp_path / "followed-secrets")
        repo = str(tmp_path / "followed")
        puts = len(double.put_bodies)
        gateway += ["--secrets-dir", str(tmp_path / "followed-secrets")]
        diff = run_gitsync("diff", "--dir", repo, *gateway, env=SECRETS)
        assert diff.returncode == 0 and "no changes" in diff.stdout, diff.stdout + diff.stderr
        sync = run_gitsync("sync", "--once", "--dir", repo, *gateway, env=SECRETS)
        assert sync.returncode == 0 and "unchanged" in sync.stdout, sync.stdout + sync.stderr
        assert len(double.put_bodies) == puts
        assert live(double) == before  # every version, item and modifiedIndex as ADC left them


@pytest.mark.slow
def test_following_the_gateway_keeps_the_order_adc_left_after_a_later_sync(tmp_path: Path) -> None:
    record = recording("v0.28.0-appended")  # a second sync added a service before the first one
    (tmp_path / "admin_key").write_text(KEY)
    with ApisixDouble(KEY) as double:
        replay(double, record)
        gateway = ["--gateway", double.url, "--admin-key-file", str(tmp_path / "admin_key")]
        followed = run_gitsync("import", "adc", *adc_files(record), "--out", str(tmp_path / "followed"),
                               *gateway)
        assert followed.returncode == 0, followed.stderr
        assert "differs from the files' for services, routes, upstreams" in followed.stdout
        in_file_order = run_gitsync("import", "adc", *adc_files(record), "--out", str(tmp_path / "files"))
        assert in_file_order.returncode == 0, in_file_order.stderr
        puts = len(double.put_bodies)
        diff = run_gitsync("diff", "--dir", str(tmp_path / "followed"), *gateway)
        assert diff.returncode == 0 and "no changes" in diff.stdout, diff.stdout + diff.stderr
        reordered = run_gitsync("diff", "--dir", str(tmp_path / "files"), *gateway)
        assert reordered.returncode == 1 and "(order of items changed)" in reordered.stdout
        sync = run_gitsync("sync", "--once", "--dir", str(tmp_path / "followed"), *gateway)
        assert sync.returncode == 0, sync.stderr
        assert len(double.put_bodies) == puts


ROUTES = "".join(f"      - {{name: r{i}, uris: [/r{i}]}}\n" for i in range(12))
MANY = f"""services:
  - name: shop
    upstream: {{nodes: [{{host: 10.0.0.1, port: 80, weight: 1}}]}}
    routes:
{ROUTES}"""


@pytest.mark.slow
def test_diff_after_an_import_for_the_wrong_adc_says_why_in_one_line_per_kind(apisix: ApisixDouble,
                                                                              tmp_path: Path) -> None:
    (tmp_path / "adc.yaml").write_text(MANY)
    (tmp_path / "admin_key").write_text(KEY)
    gateway = ["--gateway", apisix.url, "--admin-key-file", str(tmp_path / "admin_key")]
    was = run_gitsync("import", "adc", str(tmp_path / "adc.yaml"), "--out", str(tmp_path / "was"))
    assert was.returncode == 0, was.stderr
    assert run_gitsync("sync", "--once", "--dir", str(tmp_path / "was"), *gateway).returncode == 0
    wrong = run_gitsync("import", "adc", str(tmp_path / "adc.yaml"), "--out", str(tmp_path / "wrong"),
                        "--managed-by-label")
    assert wrong.returncode == 0, wrong.stderr
    diff = run_gitsync("diff", "--dir", str(tmp_path / "wrong"), *gateway)
    assert diff.returncode == 1, diff.stderr
    lines = diff.stdout.splitlines()
    assert '    ~ 12 routes differ only in labels: (absent) → {"managed-by":"adc"}' in lines
    assert any("re-run the import with --no-managed-by-label" in line for line in lines)
    assert not any(line.startswith("    ~ routes[") for line in lines)
    assert any(line.startswith("    ~ services[") for line in lines)  # one service: told item by item
    every = run_gitsync("diff", "-v", "--dir", str(tmp_path / "wrong"), *gateway)
    assert sum(line.startswith("    ~ routes[") for line in every.stdout.splitlines()) == 12


@pytest.mark.slow
def test_import_flags_name_the_release_and_a_bad_one_or_gateway_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "adc.yaml").write_text(MANY)
    unlabelled = run_gitsync("import", "adc", str(tmp_path / "adc.yaml"), "--out", str(tmp_path / "main"),
                             "--adc-version", "main", "--no-managed-by-label")
    assert unlabelled.returncode == 0, unlabelled.stderr
    assert "wrote what ADC 0.26.0 – 0.28.0 writes (--adc-version main)" in unlabelled.stdout
    assert "managed-by" not in (tmp_path / "main" / "routes.yaml").read_text()
    old = run_gitsync("import", "adc", str(tmp_path / "adc.yaml"), "--out", str(tmp_path / "a"),
                      "--adc-version", "0.19")
    assert old.returncode == 2 and "it came in 0.20.0" in old.stderr
    unreachable = run_gitsync("import", "adc", str(tmp_path / "adc.yaml"), "--out", str(tmp_path / "b"),
                              "--gateway", "http://127.0.0.1:9")
    assert unreachable.returncode == 2 and "cannot read the gateway" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# ---------------------------------------------------------------------------------------------------------
# ADC's reading of its files: the shapes of shapes.yaml, as ADC 0.28.0 wrote them to a real APISIX 3.18

SHAPES = "v0.28.0-shapes"
#: The values ADC read from its environment for shapes.yaml (tests/data/adc/README.md).
SHAPES_VARS = {"GITSYNC_VAR_PORT": "18391", "GITSYNC_VAR_RETRIES": "2"}


def test_the_import_reads_the_files_as_adc_did_empty_labels_plain_scalars_and_numbers_as_text() -> None:
    record = recording(SHAPES)
    files = {path: Path(path).read_bytes() for path in adc_files(record)}
    converted = convert(files)
    assert not converted.problems and converted.variables == {"PORT", "RETRIES"}
    body = record["puts"][-1]["body"]
    for kind in (k for k, v in body.items() if isinstance(v, list)):
        wrote = [{k: v for k, v in item.items() if k != "modifiedIndex"} for item in body[kind]]
        ours = [adc_gateway.resolved(item, there) for item, there in zip(converted.payload[kind], wrote,
                                                                            strict=True)]
        assert ours == wrote, kind
    assert {kind: sum(item.get("labels") == {} for item in body[kind]) for kind in
            ("services", "upstreams", "routes", "consumers")} == {"services": 1, "upstreams": 1, "routes": 1,
                                                                   "consumers": 2}
    assert body["routes"][0]["vars"] == [["arg_b", "==", "1_000"]]


@pytest.mark.slow
def test_a_gateway_adc_wrote_from_those_shapes_is_taken_over_with_no_change(tmp_path: Path) -> None:
    record = recording(SHAPES)
    (tmp_path / "admin_key").write_text(KEY)
    with ApisixDouble(KEY, version=record["apisix"]) as double:
        replay(double, record)
        before = live(double)
        gateway = ["--gateway", double.url, "--admin-key-file", str(tmp_path / "admin_key")]
        repo, secrets = tmp_path / "repo", tmp_path / "secrets"
        followed = run_gitsync("import", "adc", *adc_files(record), "--out", str(repo), *gateway,
                               "--secrets-out", str(secrets))
        assert followed.returncode == 0, followed.stdout + followed.stderr
        assert "the first sync changes no item and no version" in followed.stdout
        assert "for PORT, RETRIES" in followed.stdout
        gateway += ["--secrets-dir", str(secrets)]
        puts = len(double.put_bodies)
        diff = run_gitsync("diff", "--dir", str(repo), *gateway, env=SHAPES_VARS)
        assert diff.returncode == 0 and "no changes" in diff.stdout, diff.stdout + diff.stderr
        assert "warning:" not in diff.stderr  # the repo's own text is read alike by every YAML tool
        sync = run_gitsync("sync", "--once", "--dir", str(repo), *gateway, env=SHAPES_VARS)
        assert sync.returncode == 0 and "unchanged" in sync.stdout, sync.stdout + sync.stderr
        assert len(double.put_bodies) == puts
        assert live(double) == before
