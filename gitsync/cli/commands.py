"""The commands: ``gitsync render``, ``validate``, ``diff``, ``sync``, ``run`` and ``status``.

Each takes the resolved settings and the parsed arguments and returns the exit status: 0 fine,
1 the config repo has problems (each on stderr as ``file:line:col: kind[id].field: message``, the
file relative to the repo root, as in git notes), 2 a usage or settings error, 3 (``sync --once``)
the gateways were synced but the status or a note could not be written back. The table is in
docs/operations.md ("Exit status").
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitsync.adopt.adc_releases import diff_hint
from gitsync.agent.fleet_gate import own_heartbeat
from gitsync.agent.gate import fleet_table
from gitsync.agent.outcomes import Trigger
from gitsync.cli.parser import leave_to_exit
from gitsync.feedback.review import Findings, findings
from gitsync.httpclient import HttpClient
from gitsync.kinds import item_id
from gitsync.log import logger, redact, register_secrets
from gitsync.problems import Problem, ProblemsError
from gitsync.push.admin_api import endpoints_from_settings
from gitsync.push.apply import (
    GatewayDiff,
    RetryPolicy,
    diff_gateway,
    guard_policy_from_settings,
    policy_from_settings,
)
from gitsync.push.guard import KindChange, allowed_kinds, check_deletions, dropped, drops_own
from gitsync.push.plan import Desired, ItemChange, KindStatus
from gitsync.push.release import Release, release
from gitsync.push.summary import ABSENT, GROUP_MIN, ChangeGroup, summarise, value_at, value_text
from gitsync.push.workers import GatewayPool, wait_for
from gitsync.render import (
    Rendered,
    mask_secrets,
    options_from_settings,
    payload_json,
    unmanaged_warnings,
)
from gitsync.render import (
    render as render_files,
)
from gitsync.render.compose import (
    Part,
    PartFacts,
    compose,
    dangling,
    external,
    facts_of,
    label,
    relabel,
    shared_kinds,
)
from gitsync.render.memo import render_memo
from gitsync.render.secrets import secret_values
from gitsync.render.sourcemap import field_text
from gitsync.settings import (
    RepoSettings,
    Settings,
    SettingsError,
    default_agent_name,
    repos_of,
    status_settings,
)
from gitsync.source.directory import read_directory
from gitsync.source.inputs import read_input, writable_dir
from gitsync.source.transport import Remote, SourceError
from gitsync.urls import display_url
from gitsync.writeback.fleet import read_fleet, signers_from_settings
from gitsync.writeback.remote import fleet_remotes, status_remote
from gitsync.writeback.statusfile import FleetEntry
from gitsync.writeback.wire import summary_text

EXIT_WRITEBACK_FAILED = 3  # sync --once: the sync was fine, its write-back was not
#: diff: the commit renders and the gateways answer, but the deletion guard would hold it (2 stays the
#: code of a check that could not be made: a CI can tell "allow the deletion" from "fix the pipeline").
EXIT_GUARD_WOULD_HOLD = 4
#: Tries of each git contact by ``sync --once`` (it has no next poll): 1 + 3 retries, at most 1, 2 and
#: 4 s apart (half of each wait is random: agents started together do not retry together).
ONCE_GIT_ATTEMPTS = 4


def _whose(repo: RepoSettings) -> str:
    """``source 'a': `` before an error of a ``[[sources]]`` repo; nothing for the repo of ``[source]``."""
    return "" if repo.name is None else f"source {repo.name!r}: "


def _read_files(repo: RepoSettings, command: str, out: Findings) -> tuple[str, dict[str, bytes], str] | int:
    """The config files of ``--dir`` or of the repo's commit, with the commit and its message (none for a
    directory); or say why not and return 2."""
    settings = repo.settings
    if settings.dir is not None:
        try:
            return "", read_directory(settings.dir, settings.max_file_size), ""
        except OSError as exc:
            out.error(f"gitsync {command}: error: {redact(str(exc))}")
            return 2
    if not settings.repo:
        out.error(f"gitsync {command}: no source: give --dir PATH or --repo URL")
        return 2
    try:
        commit = read_input(settings)
    except SourceError as exc:
        out.error(f"gitsync {command}: {_whose(repo)}error: {redact(str(exc))}")
        return 2
    logger.info("{}read {} file(s) of {} {}", label(repo.name), len(commit.files), commit.sha[:7],
                commit.subject)
    return commit.sha, commit.files, commit.message


def _render_source(settings: Settings, command: str, out: Findings | None = None) -> Rendered | int:
    """Render the configured source, or say why not and return the exit status."""
    rendered = _render_commit(settings, command, out)
    return rendered if isinstance(rendered, int) else rendered[0]


def _render_commit(settings: Settings, command: str, out: Findings | None = None,
                   ) -> tuple[Rendered, str] | int:
    """The payload an agent would push, and the commits' messages one after another (none for a
    directory); or say why not and return the exit status. Each repo's commit (its ``ref``), or the
    directory, is read and rendered alone, its ownership and the references across repos checked, and
    composed (`gitsync.render.compose`: the repo of ``[source]`` is the whole payload), every problem at
    its ``file:line`` (``source:file:line`` with ``[[sources]]``)."""
    out = out or Findings()
    repos = repos_of(settings)
    # every source's ownership (with --source, the others are not read, but what they own and share is known)
    others = tuple((spec.name, spec.owns) for spec in settings.sources) or \
        tuple((repo.name, repo.owns) for repo in repos)
    parts: list[Part] = []
    facts: list[PartFacts] = []
    problems: list[Problem] = []
    messages: list[str] = []
    # a source alone (--source) is its own repo: its places are its own files, as its CI reads them
    own = (lambda _name, problem: problem) if settings.only_source is not None else relabel
    for repo in repos:
        read = _read_files(repo, command, out)
        if isinstance(read, int):
            return read
        sha, files, message = read
        try:
            options = options_from_settings(repo.settings, os.environ)
        except SettingsError as exc:
            out.error(f"gitsync {command}: {_whose(repo)}error: {redact(str(exc))}")
            return 2
        # a reference into a kind other repos declare items of too is checked on the composed payload
        options = dataclasses.replace(options, unmanaged=options.unmanaged | shared_kinds(repo.owns))
        try:
            rendered = render_files(files, options, memo=render_memo(repo.settings))
        except ProblemsError as exc:
            problems += [own(repo.name, problem) for problem in exc.problems]
            continue
        part = Part(repo.name, sha, rendered, repo.owns)
        parts.append(part)
        facts.append(facts_of(part, others))
        problems += [own(repo.name, problem) for problem in facts[-1].problems]
        messages.append(message)
    if not problems and settings.only_source is not None:  # one source alone: the others' items unread
        problems = [own(part.name, problem) for part, known in zip(parts, facts, strict=True)
                    for problem in external(part.name, known, part.rendered.source_map, others,
                                            frozenset(settings.unmanaged))]
    elif not problems:
        problems = [miss.problem for miss in dangling(parts, facts, frozenset(settings.unmanaged))]
    if problems:
        for problem in problems:
            out.problem(redact(str(problem)))
        return 1
    composed = compose(parts)
    leave_to_exit(composed, *(part.rendered for part in parts if part.rendered is not composed))
    for left_out in composed.left_out:  # partial apply, from a directory: there is no last good version
        out.warning(redact(left_out.describe()))
    _warn_scalars(composed, out)
    return composed, "\n".join(messages)


def _warn_scalars(rendered: Rendered, out: Findings) -> None:
    """Each plain scalar YAML 1.1 tools read otherwise, at its place (``ambiguous_scalars = "warn"``)."""
    for warning in rendered.warnings:
        out.warning(redact(str(warning)))


def render(settings: Settings, args: argparse.Namespace) -> int:
    """Print the payload as deterministic JSON; secret values masked unless ``--show-secrets``."""
    rendered = _render_source(settings, "render")
    if isinstance(rendered, int):
        return rendered
    if getattr(args, "explain", None):
        return _explain(rendered, *args.explain)
    payload = rendered.payload
    if not getattr(args, "show_secrets", False):
        payload = mask_secrets(payload, rendered.secret_values, rendered.secret_rules)
    sys.stdout.buffer.write(payload_json(payload) + b"\n")
    sys.stdout.flush()
    return 0


def _explain(rendered: Rendered, kind: str, ident: str) -> int:
    """Each field of one item and where it came from: ``field  file:line:col``, one per line, after a
    line naming the item's place (and, for a patched item, its patches and base)."""
    index = rendered.source_map.index_of(kind, ident)
    if index is None:
        print(f"gitsync render: no item {kind}[{ident}] in the rendered payload", file=sys.stderr)
        return 1
    item = rendered.payload[kind][index]
    origin = rendered.source_map.describe(kind, index)  # patched by overlays, generated from a spec
    head = f"{kind}[{ident}]: {origin or f'at {rendered.source_map.location(kind, index)}'}"
    fields = [(field_text(path) or "(the item)", str(where))
              for path, where in rendered.source_map.explain(kind, index, item)]
    width = max((len(name) for name, _ in fields), default=0)
    lines = [redact(head), *(redact(f"{name:<{width}}  {where}") for name, where in fields)]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    return 0


def validate(settings: Settings, args: argparse.Namespace) -> int:
    """Exit 0 when the config is valid; 1 with every problem on stderr (or in the report asked for)."""
    out = findings(args, "validate", settings)
    rendered = _render_source(settings, "validate", out)
    if isinstance(rendered, int):
        return out.finish(rendered)
    _warn_unmanaged(rendered, settings, out)
    counts = ", ".join(f"{len(items)} {kind}" for kind, items in rendered.payload.items())
    out.summary(f"valid: {counts or 'no items'}")
    return out.finish(0)


def _warn_unmanaged(rendered: Rendered, settings: Settings, out: Findings | None = None) -> None:
    for warning in unmanaged_warnings(rendered.payload, settings.unmanaged):
        (out or Findings()).warning(warning)


# ---------------------------------------------------------------------------------------------------------
# diff and sync: the rendered payload against each gateway's live config


def _by_id(payload: dict[str, Any]) -> dict[tuple[str, str | None], Any]:
    return {(kind, item_id(kind, item)): item for kind, items in payload.items() if isinstance(items, list)
            for item in items}


def _print_diff(diff: GatewayDiff, desired_shown: dict[str, Any], rendered: Rendered, show_secrets: bool,
                out: Findings, every_item: bool) -> None:
    """Per kind and item what a sync would do, as lines of `out`; values masked unless asked (the live
    side's secrets are registered with the log redactor too: they are the gateway's, which render never
    saw). Many items of a kind changed alike are one line, unless `every_item`."""
    assert diff.plan is not None
    live_lists = {k: v for k, v in diff.live.items() if isinstance(v, list)}
    register_secrets(secret_values(live_lists, rendered.secret_rules))
    wanted = _by_id(desired_shown)
    live = _by_id(live_lists if show_secrets
                  else mask_secrets(live_lists, rendered.secret_values, rendered.secret_rules))
    changed_kinds = [k for k in diff.plan.kinds if k.status is KindStatus.CHANGED]
    out.line(f"{diff.url}: {len(diff.changes)} item change(s) in {len(changed_kinds)} kind(s)")
    if diff.first_step is not None:
        out.line(f"  two-step apply: {'; '.join(map(str, diff.first_step.moves))}")
    folded = False
    for kp in diff.plan.kinds:
        if kp.status is KindStatus.UNMANAGED and kp.count:
            out.line(f"  {kp.key}: unmanaged, {kp.count} live item(s) kept")
        if kp.status is not KindStatus.CHANGED:
            continue
        out.line(f"  {kp.key}: {kp.version_key} {kp.live_version} → {kp.version}")
        changes = [c for c in diff.changes if c.kind == kp.key]
        for entry in summarise(changes, live, wanted, minimum=len(changes) + 1 if every_item else GROUP_MIN):
            if isinstance(entry, ChangeGroup):
                folded = True
                _print_group(entry, out)
            else:
                _print_change(entry, live, wanted, out)
        if not changes:
            out.line("    (order of items changed)")
    if folded:
        out.line("  (gitsync diff -v lists every item)")


def _print_group(group: ChangeGroup, out: Findings) -> None:
    mark = {"add": "+", "remove": "-", "prune": "!", "change": "~"}[group.action]
    out.line(f"    {mark} {group.describe()}")
    hint = diff_hint(group.kind, group.fields, group.values, ABSENT)
    if hint:
        out.line(f"      {hint}")
    out.line(f"      e.g. {group.examples()}")


def _print_change(change: ItemChange, live: dict[tuple[str, str | None], Any],
                  wanted: dict[tuple[str, str | None], Any], out: Findings) -> None:
    subject = f"{change.kind}[{change.id}]"
    if change.action != "change":
        mark, note = {"add": ("+", ""), "remove": ("-", ""),
                      "prune": ("!", "  (written out of band; pruned)")}[change.action]
        out.line(f"    {mark} {subject}{note}")
        return
    out.line(f"    ~ {subject}")
    key = (change.kind, change.id)
    for path in change.fields:
        before, after = value_at(live.get(key), path), value_at(wanted.get(key), path)
        out.line(f"        {field_text(path) or '(whole item)'}: {value_text(before)} → {value_text(after)}")


def _gateways(settings: Settings, command: str, out: Findings | None = None) -> GatewayPool | int:
    """A client for each gateway, or say why not (a TLS file that cannot be used) and return 2."""
    try:
        return GatewayPool(endpoints_from_settings(settings), settings.max_backoff, one_shot=True)
    except SettingsError as exc:
        (out or Findings()).error(f"gitsync {command}: error: {redact(str(exc))}")
        return 2


def diff(settings: Settings, args: argparse.Namespace) -> int:
    """What a sync would add, change, remove or prune; exit 0 nothing, 1 something, 2 an error, 4 a commit
    the deletion guard would hold (`EXIT_GUARD_WOULD_HOLD`; an error wins). A report format has its own
    codes (`gitsync.feedback.review`)."""
    from gitsync.agent.statedir import StateDir

    out = findings(args, "diff", settings)
    read = _render_commit(settings, "diff", out)
    if isinstance(read, int):
        return out.finish(2)
    rendered, message = read
    guard = guard_policy_from_settings(settings, allowed_kinds(message), by_flag=settings.dir is not None)
    gateways = _gateways(settings, "diff", out)
    if isinstance(gateways, int):
        return out.finish(gateways)
    _warn_unmanaged(rendered, settings, out)
    policy = policy_from_settings(settings)
    pushed = StateDir(settings.state_dir).load_pushed()  # the agent's memory, when this host runs one
    with gateways:
        diffs, _ = wait_for(gateways.each(gateways.urls, lambda g: diff_gateway(
            g, rendered.payload, policy, pushed.get(g.url))))
    show = bool(getattr(args, "show_secrets", False))
    desired_shown = rendered.payload if show else mask_secrets(rendered.payload, rendered.secret_values,
                                                               rendered.secret_rules)
    status, held = 0, False
    for url in gateways.urls:
        one = diffs[url]
        if one.error is not None or one.plan is None:
            out.error(f"gitsync diff: {one.url}: {one.error}")
            status = 2
            continue
        if one.plan.problems:
            for problem in one.plan.problems:
                out.error(f"gitsync diff: {one.url}: {redact(str(problem))}")
            status = 2
        if one.plan.changes:
            _print_diff(one, desired_shown, rendered, show, out, every_item=settings.verbose > 0)
            status = max(status, 1)
        else:
            out.line(f"{one.url}: no changes")
        verdict = check_deletions(rendered.payload, one.live, policy.managed, guard)
        for change in verdict.kinds:
            if change.deleted:
                out.line(f"  guard: {change.describe()}")
        if verdict.refused:
            for line in _whose_deletions(settings, verdict.refused):
                out.line(f"  guard: {line}")
            out.refused(f"gitsync diff: {one.url}: the deletion guard would hold this commit")
            held = True
    return out.finish(EXIT_GUARD_WOULD_HOLD if held and status != 2 else status)


def _whose_deletions(settings: Settings, refused: tuple[KindChange, ...]) -> list[str]:
    """With ``[[sources]]``: for each source whose items the held deletions are, where its allowance goes
    (as the agent's notes say it, `gitsync.push.guard.drops_own`)."""
    lines = []
    for repo in repos_of(settings):
        own = dropped(refused, repo.owns.may_own) if repo.name is not None else []
        if own:
            where = f"source {repo.name} ({display_url(repo.settings.repo or '')})"
            lines.append(f"source {repo.name}: {drops_own(own, where)}")
    return lines


def _follows_git(settings: Settings) -> bool:
    """Whether the settings name git repos to follow (`repos_of`), not a directory (or nothing)."""
    return all(repo.settings.dir is None and repo.settings.repo for repo in repos_of(settings))


def sync(settings: Settings, args: argparse.Namespace) -> int:
    """One sync of every gateway to the source: exit 0 applied or already live, 1 failed, 3 synced but
    the status or a note could not be written back (``writeback = "on"``, or a remote that answers
    but fails; ``auto`` turns itself off without failing when the remote refuses pushes).

    With ``--repo`` this is the daemon's own pipeline, once: the mirror, last good commit and
    write-back live in the state dir (a temporary one when it is not writable). With ``--dir``
    there is no commit: the directory is rendered and pushed.
    """
    if _follows_git(settings):
        # A one-shot from a laptop or a CI runner is no agent of the fleet: its status ref, named after
        # the host, would show as one, and as "down" for good once it exits. It writes one when asked, or
        # when it is given a name of its own (its notes on refused commits are written either way).
        status = bool(getattr(args, "status", False)) or settings.agent_name != default_agent_name()
        return _sync_repo(settings, status=status)
    rendered = _render_source(settings, "sync")
    if isinstance(rendered, int):
        return rendered
    gateways = _gateways(settings, "sync")
    if isinstance(gateways, int):
        return gateways
    _warn_unmanaged(rendered, settings)
    policy, retry = policy_from_settings(settings), RetryPolicy.from_settings(settings)
    what = Release(rendered.payload, rendered.source_map, rendered.checks, rollback=False,
                   guard=guard_policy_from_settings(settings, by_flag=True), managed=policy.managed,
                   desired=Desired.of(rendered.payload, policy, rendered.contents,
                                                  rendered.ids, rendered.splits))
    proxies = dict(zip(gateways.urls, settings.proxy_urls, strict=False))

    with gateways, contextlib.closing(HttpClient(None, settings.gateway_timeout)) as proxy:
        results, _ = wait_for(gateways.push({url: lambda client, url=url: release(
            client, what, policy, retry, proxy=proxy, proxy_url=proxies.get(url)) for url in gateways.urls}))
    for url in gateways.urls:
        print(results[url].summary())
        for problem in results[url].problems:
            print(redact(str(problem)), file=sys.stderr)
    # A failed health check fails the sync as with --repo (a directory has no last good to go back to:
    # the config stays live); "report" only reports it, as with --repo.
    failed_checks = settings.on_check_failure == "rollback" and any(r.unhealthy for r in results.values())
    return 0 if all(r.ok for r in results.values()) and not failed_checks else 1


def _sync_repo(settings: Settings, *, status: bool) -> int:
    from gitsync.agent.metrics import Metrics
    from gitsync.agent.state import StateError
    from gitsync.agent.statedir import StateDir
    from gitsync.agent.sync import Agent
    from gitsync.feedback.outbox import Feedback

    with contextlib.ExitStack() as stack:
        if not writable_dir(settings.state_dir):
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="gitsync-sync-"))
            logger.warning("state dir {} is not writable: using a temporary one (nothing is remembered)",
                           settings.state_dir)
            settings = dataclasses.replace(settings, state_dir=Path(tmp))
        state_dir = StateDir(settings.state_dir)
        try:
            stack.enter_context(state_dir.locked())
            metrics = Metrics(recorded=False)  # none exported
            feedback = stack.enter_context(contextlib.closing(
                Feedback.from_settings(settings, metrics, state_dir.path)))
            agent = Agent(settings, state_dir=state_dir, metrics=metrics, observer=feedback,
                          remote_attempts=ONCE_GIT_ATTEMPTS, one_shot=True, status=status)
        except SettingsError as exc:
            print(f"gitsync sync: error: {redact(str(exc))}", file=sys.stderr)
            return 2
        except (StateError, SourceError) as exc:
            print(f"gitsync sync: error: {redact(str(exc))}", file=sys.stderr)
            return 1
        stack.callback(agent.close)  # waits for the write-backs of this sync
        outcome = agent.sync_once({Trigger.CLI})
        leave_to_exit(agent)
    for result in outcome.gateways:
        print(result.summary())
    unwritten, last_error = agent.repos.unwritten()
    if unwritten:
        print(f"gitsync sync: write-back failed: {unwritten} status/note(s) not written: "
              f"{last_error or 'see the log'}", file=sys.stderr)
    if outcome.ok:
        print(f"{outcome.result}: {outcome.commit[:7] if outcome.commit else '-'} {outcome.subject}".rstrip())
        for problem in outcome.problems:  # e.g. what partial apply left out
            print(f"warning: {redact(problem)}", file=sys.stderr)
        return EXIT_WRITEBACK_FAILED if unwritten else 0
    # The verdict comes last, with its first reason: the line a person (or CI) reads first.
    for problem in outcome.problems[1:]:
        print(redact(problem), file=sys.stderr)
    commit = outcome.commit[:12] if outcome.commit else "no commit read"
    reason = f": {redact(outcome.problems[0])}" if outcome.problems else ""
    if outcome.refused_repos:  # several sources: what went live beside the refusal, and what was refused
        print(f"gitsync sync: {outcome.verdict()}{reason}", file=sys.stderr)
        return 1
    verdict = str(outcome.result).replace("_", " ")
    print(f"gitsync sync: {verdict} at {outcome.stage or '?'} ({commit}){reason}", file=sys.stderr)
    return 1


# ---------------------------------------------------------------------------------------------------------
# run and status


def run(settings: Settings, args: argparse.Namespace) -> int:
    """`gitsync run`: the daemon until SIGTERM/SIGINT (exit 0); exit 2 for settings it cannot run with."""
    from gitsync.agent.state import StateError
    from gitsync.daemon.service import Daemon

    if settings.dir is not None:
        print("gitsync run: error: the daemon follows a git repo (--repo); --dir is for validate, render, "
              "diff and sync", file=sys.stderr)
        return 2
    if not _follows_git(settings):
        print("gitsync run: error: repo is required: set --repo, GITSYNC_REPO or source.repo in the "
              "settings file (or list [[sources]])", file=sys.stderr)
        return 2
    try:
        return Daemon(settings, getattr(args, "reload_settings", None)).run_forever()
    except SettingsError as exc:
        print(f"gitsync run: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except (StateError, SourceError) as exc:
        logger.error("{}", exc)
        return 1


def status(settings: Settings, args: argparse.Namespace) -> int:
    """`gitsync status [--fleet]`: this agent's last result, or every agent's from the status refs."""
    from gitsync.agent.statedir import StateDir

    now = datetime.now(UTC)
    if not getattr(args, "fleet", False):
        state_dir = StateDir(settings.state_dir)
        print(summary_text(state_dir.load(repair=False).last_result, now, state_dir.checked_at()), end="")
        return 0
    if not (_follows_git(settings) or settings.status_remote):
        print("gitsync status: error: --fleet needs the repo (--repo or [source] repo) or status_remote",
              file=sys.stderr)
        return 2
    try:
        signers = signers_from_settings(settings)
    except SettingsError as exc:
        print(f"gitsync status: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    worst = 0
    for repo in repos_of(settings):  # each repo's statuses are on its own repo (a source's: under its name)
        if repo.name is not None:
            print(f"source {repo.name} ({display_url(repo.settings.repo or '')}):")
        worst = max(worst, _fleet(status_settings(repo.settings), signers, now, args))
    return worst


def _fleet(settings: Settings, signers: Any, now: datetime, args: argparse.Namespace) -> int:
    """Every agent's status on the repo of `settings` (and with ``--publish``, each group's on the forge)."""
    fleet: list[FleetEntry] = []
    for group in fleet_remotes(settings):  # one status remote, or with {group} the agent's groups' own
        with tempfile.TemporaryDirectory(prefix="gitsync-fleet-") as tmp:
            try:
                fleet += read_fleet(status_remote(settings, group), settings.status_refs, Path(tmp), signers,
                                    settings.max_status_refs)
            except SourceError as exc:
                print(redact(f"gitsync status: error: cannot read {settings.status_refs}: {exc.reason}"),
                      file=sys.stderr)
                return 1
    if not fleet:
        print(f"no agent has written a status under {settings.status_refs} yet")
        return 0
    print(fleet_table(fleet, now, own_heartbeat(settings)), end="")
    return _publish(settings, fleet) if getattr(args, "publish", False) else 0


def _publish(settings: Settings, fleet: list[FleetEntry]) -> int:
    """`status --fleet --publish`: each group's status on the tip, from the statuses that count (readable,
    and verified with `status_signers`), posted on the forge."""
    from gitsync.feedback.forge import ForgeError, forge_from_settings
    from gitsync.feedback.outbox import publish_fleet
    from gitsync.writeback.wire import full_ref

    try:
        forge = forge_from_settings(settings)
    except SettingsError as exc:
        print(f"gitsync status: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    if forge is None:
        print("gitsync status: --publish needs forge_token (GITSYNC_FORGE_TOKEN, forge_token_file)",
              file=sys.stderr)
        return 2
    ref = full_ref(settings.ref, "refs/heads/")
    pinned = settings.ref.encode() if re.fullmatch(r"[0-9a-f]{40}", settings.ref) else None
    try:
        tip = pinned or Remote.from_settings(settings).ls_refs([ref]).get(ref)
        if tip is None:
            print(f"gitsync status: the remote has no {ref.decode()}", file=sys.stderr)
            return 1
        state_dir = settings.state_dir if writable_dir(settings.state_dir) else None
        for status in publish_fleet(settings, fleet, tip.decode(), forge, state_dir):
            print(f"{status.context}: {status.state} on {status.sha[:7]}: {forge.description(status)}")
    except SourceError as exc:
        print(redact(f"gitsync status: error: {exc.reason}"), file=sys.stderr)
        return 1
    except ForgeError as exc:
        print(f"gitsync status: {exc}", file=sys.stderr)
        return 1
    finally:
        forge.close()
    return 0
