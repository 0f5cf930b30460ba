"""Fidelity to a real APISIX 3.18: the double and the validator against its recorded answers.

tests/data/golden/ holds 354 requests and the answers a real gateway gave them
(its README says how they were recorded). Three tests read it:

- the double replays every case in file order and must answer exactly as recorded;
- gitsync's checker (`gitsync.schema.check_payload`, the one the double also uses)
  must give the recorded messages for every body the gateway validated;
- ``gitsync validate``'s whole check may refuse more than the gateway, but only
  where this file says why (`DELIBERATE`).

The figures are printed at the end of the run ("golden fidelity").
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import astuple, dataclass, field
from typing import Any

import pytest

from gitsync.kinds import KINDS, item_id
from gitsync.push.admin_api import ItemError, parse_item_error
from gitsync.render.options import RenderOptions
from gitsync.render.sourcemap import ItemSource, SourceMap
from gitsync.render.validate import validate
from gitsync.schema import check_payload
from gitsync.testing.apisix import ApisixDouble
from testkit.golden import (
    ADMIN_KEY,
    ALTERNATIVE_MESSAGES,
    UNPARSED,
    VIEWER_KEY,
    Answer,
    Case,
    differences,
    load_cases,
    possible_put_errors,
    replay,
    with_placeholders,
)

CASES = load_cases()
BY_NAME = {case.name: case for case in CASES}
#: The double's workers apply a config this long after its PUT: the data-plane cases pass only
#: because the corpus waits (``wait_s``) before them, as it waited for the real gateway.
WORKER_DELAY = 0.3

#: What a complete APISIX 3.18 answers where the recording install lacked an optional library.
ARTEFACT_ANSWERS: dict[str, tuple[int, str | None]] = {
    "route_plugin_request_id_unavailable": (200, None),
    "secret_aws_valid": (200, None),
    "secret_aws_missing_secret_key": (400, 'invalid configuration: property "secret_access_key" is required'),
}


@dataclass(eq=False)  # registered as a pytest plugin: hashed by identity
class Fidelity:
    """The figures printed at the end of the run."""

    double: dict[str, str] = field(default_factory=dict)  # case → "" (matched) or why not
    validator: dict[str, str] = field(default_factory=dict)
    validator_not_applicable: Counter[str] = field(default_factory=Counter)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """In a pytest-xdist worker: hand the figures to the controller, which prints them."""
        output = getattr(session.config, "workeroutput", None)
        if output is not None:
            output["golden-fidelity"] = {"double": self.double, "validator": self.validator,
                                         "validator_not_applicable": dict(self.validator_not_applicable)}

    def merge(self, figures: dict[str, Any]) -> None:
        """Add a worker's figures (see `pytest_sessionfinish`)."""
        self.double.update(figures["double"])
        self.validator.update(figures["validator"])
        self.validator_not_applicable.update(figures["validator_not_applicable"])

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.double and not self.validator:
            return
        write = terminalreporter.write_line
        terminalreporter.section("golden fidelity (real APISIX 3.18 answers)")
        compared = {k: v for k, v in self.double.items() if not v.startswith("excluded")}
        write(f"double: {sum(not v for v in compared.values())}/{len(compared)} cases answered exactly "
              f"as recorded; {len(self.double) - len(compared)} excluded (build artefacts of the recording)")
        for name, why in sorted(self.double.items()):
            if why:
                write(f"  {name}: {why}")
        matched = sum(not v for v in self.validator.values())
        write(f"validator: {matched}/{len(self.validator)} validated bodies give the recorded messages; "
              f"{sum(self.validator_not_applicable.values())} cases are not validation answers "
              f"({', '.join(f'{n} {why}' for why, n in sorted(self.validator_not_applicable.items()))})")
        for name, why in sorted(self.validator.items()):
            if why:
                write(f"  {name}: {why}")
        write(f"gitsync validate refuses more than APISIX (or words it its own way), deliberately, in "
              f"{len(DELIBERATE)} cases; {len(LIVE_STATE)} refusals come from the gateway's live config "
              "(DELIBERATE and LIVE_STATE in tests/testing/test_golden.py)")


def fidelity_of(config: pytest.Config) -> Fidelity:
    """The run's figures, registered as a plugin the first time they are asked for."""
    manager = config.pluginmanager
    found = manager.get_plugin("golden-fidelity")
    if found is None:
        found = Fidelity()
        manager.register(found, "golden-fidelity")
    return found


@pytest.fixture(scope="module")
def fidelity(request: pytest.FixtureRequest) -> Fidelity:
    return fidelity_of(request.config)


@pytest.fixture(scope="module")
def replayed() -> dict[str, Answer]:
    """Every case sent to one double, in file order (a restart before each ``fresh`` case)."""
    with ApisixDouble(ADMIN_KEY, viewer_key=VIEWER_KEY) as double:
        double.set_worker_delay(WORKER_DELAY)
        return {case.name: answer for case, answer in replay(double, CASES)}


def test_the_corpus_is_the_recorded_one() -> None:
    assert len(CASES) == 354 and len(BY_NAME) == 354
    assert [c.name for c in CASES if c.excluded] == [
        "route_plugin_request_id_unavailable", "secret_aws_valid", "secret_aws_missing_secret_key"]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_double_answers_as_the_real_gateway(case: Case, replayed: dict[str, Answer],
                                                fidelity: Fidelity) -> None:
    answer = replayed[case.name]
    if case.excluded:
        # the double answers as a complete APISIX does, not as the incomplete recording install
        status, error = ARTEFACT_ANSWERS[case.name]
        fidelity.double[case.name] = f"excluded: {case.excluded}"
        assert answer.status == status
        if error is not None:
            assert [e["error"] for e in json.loads(answer.content)["errors"]] == [error]
        return
    problems = differences(case, answer, BY_NAME)
    fidelity.double[case.name] = "; ".join(problems)
    assert not problems


# ---------------------------------------------------------------------------------------------------------
# The validator


def _live_before(case: Case) -> dict[str, Any] | None:
    """The gateway's live config when `case` was sent: the lists of the last accepted PUT since a restart.

    Enough for the checks APISIX makes against live state (consumer keys, global-rule plugins):
    every accepted PUT of the corpus sends whole lists.
    """
    live = None
    for earlier in CASES[:CASES.index(case)]:
        if earlier.fresh:
            live = None
        body = earlier.json_body()
        if earlier.request["method"] == "PUT" and earlier.status == 202 and isinstance(body, dict):
            live = body
    return live


def _not_a_validation_answer(case: Case) -> str | None:
    """Why the recorded answer says nothing about the validator (None: it does)."""
    method, status, body = case.request["method"], case.status, case.body
    if case.is_data_plane or method not in ("PUT", "POST") or status in (401, 404):
        return "not a validation request"
    if status == 204:
        return "digest short-cut (no validation)"
    if status == 500 and not body.startswith("<html>"):
        return "shared-dict limit"
    parsed = case.json_body()
    if parsed is UNPARSED or not isinstance(parsed, dict | list | str):
        return "body parsing"
    message = body.get("error_msg", "") if isinstance(body, dict) else ""
    if message.startswith(("invalid request body", "missing digest")):
        return "body parsing"
    if "must be greater than or equal to" in message:
        return "version order"
    return None


def _as_items(entries: list[dict[str, Any]]) -> list[ItemError]:
    """``errors[]`` entries as gitsync maps them to items (gateway.py)."""
    items = []
    for entry in with_placeholders(entries):
        resource_id = entry.get("resource_id")
        items.append(parse_item_error(entry["error"], entry.get("resource_type"), entry.get("index"),
                                      str(resource_id) if resource_id not in (None, "") else None))
    return items


def _validator_items(body: dict[str, Any], live: dict[str, Any] | None, *,
                     collect_all: bool) -> list[ItemError]:
    """The checker's issues listed as the gateway lists them, then mapped as gitsync maps them."""
    entries = []
    for issue in check_payload(body, collect_all=collect_all, live=live):
        entry: dict[str, Any] = {"error": issue.lua_error, "resource_type": issue.kind, "index": issue.index}
        if issue.index is not None:
            entry["resource_id"] = ApisixDouble._raw_resource_id(body, issue.kind, issue.index)
        entries.append(entry)
    return _as_items(entries)


def _validator_differences(case: Case) -> list[str]:
    body = case.json_body()
    if not isinstance(body, dict):
        body = {}  # a top-level array or string: Lua indexes it to nothing
    live = _live_before(case)
    method, recorded = case.request["method"], case.body
    if method == "POST":
        expected = _as_items(recorded.get("errors", [])) if case.status == 400 else []
        actual = _validator_items(body, live, collect_all=True)
        if case.name in ALTERNATIVE_MESSAGES and len(actual) == 1 and \
                actual[0].message in ALTERNATIVE_MESSAGES[case.name]:
            expected[0] = ItemError(actual[0].message, *astuple(expected[0])[1:])
        if case.note and "multiset" in case.note:
            expected, actual = sorted(map(repr, expected)), sorted(map(repr, actual))
        return [] if actual == expected else [f"expected {expected}, got {actual}"]
    first = _validator_items(body, live, collect_all=False)[:1]
    if case.status == 500:  # a Lua error outside the per-item guard
        crashed = first and "config_validate.lua:" in first[0].message
        return [] if crashed else [f"expected a Lua error, got {first}"]
    if case.status == 202:
        return [] if not first else [f"expected no refusal, got {first}"]
    message = recorded["error_msg"]
    if case.note and "kind" in case.note:
        possible = possible_put_errors(case, BY_NAME)
        return [] if first and first[0].message in possible else [f"{first} is none of {sorted(possible)}"]
    return [] if first and first[0].message == parse_item_error(message).message else [
        f"expected {message!r}, got {first}"]


VALIDATED = [case for case in CASES if not case.excluded and _not_a_validation_answer(case) is None]


@pytest.mark.parametrize("case", VALIDATED, ids=[c.name for c in VALIDATED])
def test_the_validator_gives_the_recorded_messages(case: Case, fidelity: Fidelity) -> None:
    problems = _validator_differences(case)
    fidelity.validator[case.name] = "; ".join(problems)
    assert not problems


def test_the_validation_answers_left_aside_are_counted(fidelity: Fidelity) -> None:
    reasons = Counter(why for case in CASES if not case.excluded
                      if (why := _not_a_validation_answer(case)) is not None)
    fidelity.validator_not_applicable = reasons
    assert sum(reasons.values()) + len(VALIDATED) + 3 == len(CASES)
    assert set(reasons) == {"not a validation request", "digest short-cut (no validation)",
                            "shared-dict limit", "body parsing", "version order"}


# ---------------------------------------------------------------------------------------------------------
# gitsync validate: stricter than APISIX, only on purpose

#: case → what ``gitsync validate`` refuses that the gateway accepts (or words otherwise), and why.
DELIBERATE: dict[str, str] = {
    "route_id_int_and_string_same": "ids 1 and \"1\" are one id at run time (only the later route is served)",
    "route_no_id": "every item needs an id (APISIX before 3.17 fails on items without)",
    "route_upstream_id_dangling": "references must name declared items (the data plane answers 404/502/503)",
    "route_id_space": "gitsync's own id wording replaces the schema's",
    "route_id_too_long": "gitsync's own id wording replaces the schema's",
    "route_id_zero": "gitsync's own id wording replaces the schema's",
    "route_id_float": "gitsync's own id wording replaces the schema's",
    "route_id_bool": "gitsync's own id wording replaces the schema's",
    "route_id_empty_string": "gitsync's own id wording replaces the schema's",
    "service_id_space": "gitsync's own id wording replaces the schema's",
    "upstream_no_id": "every item needs an id",
    "consumer_group_id_dangling": "references must name declared items",
    "credential_orphan_valid": "a credential must belong to a declared consumer",
    "ssl_mismatched_key": "a private key must match its certificate (APISIX serves a broken handshake)",
    "ssl_no_id": "every item needs an id",
    "proto_no_id": "every item needs an id",
    "secret_vault_nested_id": "a secret id with two slashes can never be referenced by $secret://",
    "secret_no_id": "gitsync's own id wording (<manager>/<name>) replaces APISIX's",
    "plugin_metadata_no_id": "gitsync's own id wording (the plugin's name) replaces APISIX's",
    "route_several_invalid": "gitsync's own id wording replaces the schema's",
    "service_empty_item": "every item needs an id",
    "credential_duplicate": "a credential must belong to a declared consumer",
    "con_live_validate_credential": "a credential must belong to a declared consumer",
    "ssl_certs_keys_mismatched_pair": "a private key must match its certificate",
    "ssl_long_secret_ref": "a $secret:// reference must name a declared secret manager",
    "upstream_tls_client_cert_id": "gitsync says what is wrong: an id naming no ssl, or an ssl a standalone "
                                   "gateway cannot look up (it asks etcd)",
}

#: case → the gateway's refusal comes from its live config, which ``gitsync validate`` (a repo alone)
#: does not see; gitsync applies such moves in two pushes instead.
LIVE_STATE = {
    "gr_live_validate_g2": "a plugin in another live global rule",
    "con_live_validate_rose": "a key-auth key of another live consumer",
}


def _repo_shaped(body: Any) -> bool:
    """A body a config repo could render to: kinds → lists of mappings (no versions: gitsync sets those)."""
    return isinstance(body, dict) and bool(body) and all(
        key in KINDS and isinstance(items, list) and all(isinstance(i, dict) for i in items)
        for key, items in body.items())


Refusals = dict[tuple[str, int], set[str]]


def _gitsync_refusals(body: dict[str, Any]) -> Refusals:
    """What ``gitsync validate`` refuses per item: render's validation and the build stage's duplicate ids."""
    sources = SourceMap({}, {kind: [ItemSource("body", 0, i, (i + 1, 1), str(i)) for i in range(len(items))]
                             for kind, items in body.items()})
    refused: Refusals = {}
    for problem in validate(body, sources, RenderOptions()):
        refused.setdefault((problem.kind or "", int(problem.id or -1)), set()).add(problem.message)
    for kind, items in body.items():
        seen: set[str] = set()
        for index, item in enumerate(items):
            ident = item_id(kind, item)
            if ident is not None and ident in seen:
                refused.setdefault((kind, index), set()).add("duplicate id (build stage)")
            seen.add(ident or "")
    return refused


def _apisix_refusals(case: Case) -> dict[tuple[str, int], set[str]]:
    """Each item the gateway refused, with the message(s) it may give (several for a random choice)."""
    if case.status != 400:
        return {}
    refused: dict[tuple[str, int], set[str]] = {}
    for error in _as_items(case.body["errors"]):
        if error.kind is not None and error.index is not None:
            messages = set(ALTERNATIVE_MESSAGES.get(case.name, ())) or {error.message}
            refused.setdefault((error.kind, error.index), messages)
    return refused


SHAPED = [case for case in CASES if not case.excluded and case.request["method"] == "POST"
          and case.status in (200, 400) and _repo_shaped(case.json_body())]


@pytest.mark.parametrize("case", SHAPED, ids=[c.name for c in SHAPED])
def test_gitsync_validate_is_stricter_only_where_deliberate(case: Case) -> None:
    gitsync, apisix = _gitsync_refusals(case.json_body()), _apisix_refusals(case)
    if case.name in LIVE_STATE:
        assert apisix and not gitsync
        return
    assert set(apisix) <= set(gitsync), "gitsync validate accepts an item the gateway refuses"
    reworded = [item for item, messages in apisix.items() if not messages & gitsync[item]
                and not any(m.startswith("found duplicate") for m in messages)]
    stricter = [item for item in gitsync if item not in apisix]
    if case.name in DELIBERATE:
        assert reworded or stricter, f"no longer different: drop {case.name} from DELIBERATE"
    else:
        assert not reworded and not stricter, (reworded, stricter, gitsync)


def test_every_deliberate_difference_names_a_compared_case() -> None:
    compared = {case.name for case in SHAPED}
    assert set(DELIBERATE) | set(LIVE_STATE) <= compared
