"""The pages, as pure functions of plain data: the agent's snapshot, the answers of the gateways and
of the status branch, and a catalog of items. Everything shown is escaped (gitsync.web.html)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from gitsync.agent.decision import GatewayView, Holding, Probe, holding
from gitsync.agent.state import GatewayState
from gitsync.agent.view import AgentView, GatewayPush, GatewayRow, SyncRecord
from gitsync.display import format_age
from gitsync.kinds import KINDS
from gitsync.push.plan import changed_fields, content_bytes
from gitsync.render.sourcemap import field_text
from gitsync.web.catalog import ItemDetail, Page, Row
from gitsync.web.html import Markup, esc, join, link, table, tag
from gitsync.web.links import Links
from gitsync.web.live import Fleet, Head, LiveItems
from gitsync.writeback.statusfile import FleetEntry

#: ``file:line[:col]: `` at the start of a problem (not a gateway URL's ``http://host:port: ``).
_LOCATION = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>[0-9]{1,9})(?::(?P<col>[0-9]{1,9}))?(?=: )")
GOOD = ("applied", "healed", "noop", "canary", "soaking", "in sync", "equal", "unchanged")
BAD = ("failed", "refused", "drifted", "no answer", "fetch_failed", "drift_reported", "differs", "missing",
       "behind", "unreadable")


def short(sha: str | None) -> str:
    return sha[:7] if sha else "—"


def badge(text: str) -> Markup:
    """A result as a word in a coloured box (the word carries the meaning, the colour repeats it)."""
    tone = "good" if text in GOOD else "bad" if text in BAD else "warn"
    return tag("span", text, class_=f"badge {tone}")


def when(moment: float | None, now: float) -> Markup:
    """``12s ago``, with the UTC time in a `<time>` element."""
    if not moment:
        return esc("—")
    stamp = datetime.fromtimestamp(moment, UTC)
    return tag("time", f"{format_age(now - moment)} ago", datetime=stamp.isoformat(timespec="seconds"),
               title=stamp.strftime("%Y-%m-%d %H:%M:%S UTC"))


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def commit(sha: str | None, links: Links) -> Markup:
    return link(links.commit(sha), tag("code", short(sha)), title=sha) if sha else esc("—")


def problem(text: str, sha: str | None, links: Links) -> Markup:
    """A problem line, its leading ``file:line:col`` linked to the forge."""
    match = _LOCATION.match(text)
    if match is None or "://" in match["file"]:
        return esc(text)
    place = link(links.file(sha, match["file"], int(match["line"])), tag("code", match[0]))
    return Markup(place + esc(text[match.end():]))


def problems(items: Sequence[str], sha: str | None, links: Links, more: int = 0) -> Markup:
    if not items:
        return Markup("")
    lines = [tag("li", problem(p, sha, links)) for p in items]
    if more > len(items):
        lines.append(tag("li", f"… and {more - len(items)} more (in the logs and the commit's git note)"))
    return tag("ul", join(lines), class_="problems")


def facts(pairs: Sequence[tuple[str, Any]]) -> Markup:
    return tag("dl", join(Markup(tag("dt", k) + tag("dd", v)) for k, v in pairs), class_="facts")


def section(title: str, ident: str, *body: Any) -> Markup:
    return tag("section", tag("h2", title, id=ident), *body, aria_labelledby=ident)


# ---------------------------------------------------------------------------------------------------------
# Overview


def tip_verdict(view: AgentView, links: Links) -> Markup:
    tip, good = view.tip, view.last_good
    history = view.history
    if tip is None:
        failed = next((r for r in history if r.result == "fetch_failed"), None)
        why = failed.problems[0] if failed and failed.problems else "the remote has not been read yet"
        return tag("p", badge("unknown"), " ", why, class_="verdict")
    head = Markup(badge("applied") if tip == good else "")
    if tip == good:
        return tag("p", head, " ", commit(tip, links), " is live: the tip is the last good commit.",
                   class_="verdict")
    records = [r for r in history if r.commit == tip]
    if view.tip_refused:
        refusal = next((r for r in records if r.result == "failed" and r.stage), None)
        stage = refusal.stage if refusal else view.tip_refused.split(":", 1)[0]
        listed = list(refusal.problems) if refusal else [view.tip_refused.split(": ", 1)[-1]]
        more = refusal.problem_count if refusal else 0
        return Markup(tag("p", badge("refused"), " ", commit(tip, links), f" was refused at stage {stage}; "
                          "the gateways stay on ", commit(good, links), ".", class_="verdict")
                      + problems(listed, tip, links, more))
    last = records[0] if records else None
    if last is None:
        return tag("p", badge("pending"), " ", commit(tip, links), " is not applied yet.", class_="verdict")
    return Markup(tag("p", badge(last.result), " ", commit(tip, links), f": {last.result} "
                      f"({last.reason}).", class_="verdict")
                  + problems(list(last.problems), tip, links, last.problem_count))


def drift_state(gateway: GatewayRow, head: Head | None, good: str | None,
                unmanaged: Sequence[str]) -> str:
    """in sync, drifted, behind, unknown or no answer: `gitsync.agent.decision.holding` on this HEAD."""
    if head is not None and not head.answered:
        return "no answer"
    if not good:
        return "unknown"
    pushed = None
    if gateway.commit:
        pushed = GatewayState(gateway.commit, gateway.digest or "", dict(gateway.versions),
                              list(gateway.unmanaged), gateway.since)
    probe = Probe.NOT_ASKED if head is None else Probe.NO_HEAD if head.no_head else Probe.ANSWERED
    view = GatewayView(gateway.url, pushed, probe, head.digest if head else None)
    state = holding(view, good, unmanaged)
    return {Holding.HOLDS: "in sync", Holding.DRIFTED: "drifted", Holding.BEHIND: "behind",
            Holding.UNKNOWN: "unknown"}[state]


def digest_cell(gateway: GatewayRow, head: Head | None) -> Markup:
    ours = gateway.digest
    if head is None or not head.answered:
        return esc("—")
    if head.no_head:
        return esc("not told (APISIX 3.13)")
    if not ours:
        return esc("nothing pushed yet")
    word = "match" if head.digest == ours else "differs"
    return Markup(esc(word) + " " + tag("code", (head.digest or "none")[:12], title=head.digest or "none"))


def checks_cell(last: GatewayPush | None) -> Markup:
    checks = last.checks if last is not None else None
    if not checks:
        return esc("—")
    failed = checks.get("failed") or []
    text = f"{checks.get('passed', 0)} passed" + (f", {len(failed)} failed" if failed else "")
    if last is not None and last.rolled_back:
        text += "; rolled back"
    listed = tag("ul", join(tag("li", f) for f in failed), class_="problems") if failed else Markup("")
    return esc(text) + listed


def overview(view: AgentView, heads: Mapping[str, Head], links: Links, now: float,
             live_counts: Mapping[str, int] | None = None) -> Markup:
    """`live_counts`: items per kind of the last good commit, when its catalog is at hand."""
    good = view.last_good
    gateways = view.gateways
    unmanaged = list(view.unmanaged)
    source = facts([("Agent", view.agent), ("Repo", tag("code", view.repo)),
                    ("Ref", tag("code", view.ref)),
                    ("Paths", join((tag("code", p) for p in view.paths), ", ")),
                    ("Unmanaged kinds", ", ".join(unmanaged) or "none")])
    holding_good = sum(1 for g in gateways if g.commit == good and good)
    last_good = Markup(tag("p", commit(good, links), " ", tag("span", view.last_good_subject,
                                                                class_="subject"))
                       + tag("p", f"Live on {holding_good} of {len(gateways)} gateway(s)."))
    rows = []
    for g in gateways:
        head, last = heads.get(g.url), g.last_sync
        state = drift_state(g, head, good, unmanaged)
        error = head.error if head is not None and head.error else last.error if last is not None else None
        rows.append([tag("code", g.url), commit(g.commit, links), digest_cell(g, head),
                     badge(state) + (tag("div", error, class_="error") if error else ""),
                     checks_cell(last),
                     badge(last.status) + " " + seconds(last.duration) + ", " + when(last.time, now)
                     if last else "not pushed since the agent started"])
    gateway_table = table(["Gateway", "Commit live", "Digest", "State", "Health checks", "Last push"], rows,
                          class_="wide")
    kinds_table = kinds(gateways, good, live_counts or {})
    return Markup(tag("h1", "Overview") + section("Source", "source", source)
                  + section("Tip of the ref", "tip", tip_verdict(view, links))
                  + section("Last good commit", "last-good", last_good)
                  + section("Gateways", "gateways", gateway_table)
                  + section("Versions and items per kind", "kinds", kinds_table)
                  + section("Recent syncs (since the agent started)", "history",
                            history(view.history, links, now)))


def kinds(gateways: Sequence[GatewayRow], good: str | None, live_counts: Mapping[str, int]) -> Markup:
    """Kind × gateway: the conf_version last sent, and the items after the last push (or, for a gateway
    that holds the last good commit, that commit's); kinds never sent are left out."""
    rows = []
    for kind in KINDS:
        cells, used = [], False
        for g in gateways:
            version = g.versions.get(f"{kind}_conf_version")
            count = g.last_sync.counts.get(kind) if g.last_sync is not None else None
            if count is None and good and g.commit == good:
                count = live_counts.get(kind)
            used = used or bool(version) or bool(count)
            text = "—" if version is None else f"v{version:.14g}"
            cells.append(text + ("" if count is None else f" · {count:,} items"))
        if used:
            rows.append([kind, *cells])
    if not rows:
        return tag("p", "Nothing pushed yet.")
    return table(["Kind", *(g.url for g in gateways)], rows)


def history(records: Sequence[SyncRecord], links: Links, now: float) -> Markup:
    if not records:
        return tag("p", "No sync yet.")
    rows = []
    for r in records:
        result = badge(r.result) + (f" ×{r.count}" if r.count > 1 else "")
        result += f" at {r.stage}" if r.stage else ""
        listed = problems(list(r.problems), r.commit, links, r.problem_count)
        rows.append([when(r.time, now), r.reason, result, commit(r.commit, links), seconds(r.duration),
                     listed])
    return table(["When", "Reason", "Result", "Commit", "Duration", "Problems"], rows, class_="wide")


# ---------------------------------------------------------------------------------------------------------
# Items


def item_href(kind: str, ident: str) -> str:
    return f"/items/{quote(kind, safe='')}/{quote(ident, safe='')}"


def source_cell(row: Row, sha: str, links: Links) -> Markup:
    if not row.file:
        return esc("—")
    return link(links.file(sha, row.file, row.line), tag("code", f"{row.file}:{row.line}"))


def items(sha: str | None, counts: Mapping[str, int], page: Page | None, query: str, kind: str | None,
          links: Links, error: str | None = None) -> Markup:
    head = tag("h1", "Items")
    if page is None or sha is None:
        return Markup(head + tag("p", error or "No commit is live yet.", class_="error"))
    total = sum(counts.values())
    options = [tag("option", f"all kinds ({total:,})", value="")]
    options += [tag("option", f"{k} ({n:,})", value=k, selected=k == kind) for k, n in counts.items() if n]
    form = tag("form", tag("label", "Search", for_="q"),
               tag("input", id="q", name="q", type="search", value=query,
                   placeholder="id, uri, host, plugin, file"),
               tag("label", "Kind", for_="kind"), tag("select", join(options), id="kind", name="kind"),
               tag("button", "Search", type="submit"),
               method="get", action="/items", role="search", class_="search")
    intro = tag("p", "The items of the last good commit ", commit(sha, links),
                f", {total:,} in all, each with the file and line it was written at.")
    if not page.rows:
        return Markup(head + intro + form + tag("p", "No item matches.", class_="count"))
    count = tag("p", f"Items {page.start + 1:,}–{page.start + len(page.rows):,} of {page.total:,}"
                + (" matching" if query or kind else ""), class_="count", id="count")
    rows = [[r.kind, link(item_href(r.kind, r.id), tag("code", r.id)), r.title, r.match,
             ", ".join(r.plugins), source_cell(r, sha, links)] for r in page.rows]
    listing = table(["Kind", "ID", "Name", "Matches", "Plugins", "Source"], rows, id="items-table",
                    class_="wide filterable", aria_describedby="count")
    return Markup(head + intro + form + count + listing + pager(page, query, kind))


def pager(page: Page, query: str, kind: str | None) -> Markup:
    if page.pages <= 1:
        return Markup("")

    def href(number: int) -> str:
        params = {k: v for k, v in (("q", query), ("kind", kind or ""), ("page", str(number))) if v}
        return "/items?" + urlencode(params)

    prev = link(href(page.number - 1), "← Previous", rel="prev") if page.number > 1 else esc("")
    nxt = link(href(page.number + 1), "Next →", rel="next") if page.number < page.pages else esc("")
    return tag("nav", prev, " ", tag("span", f"Page {page.number} of {page.pages}"), " ", nxt,
               aria_label="Pages", class_="pager")


def twin_state(detail: ItemDetail, live: LiveItems, unmanaged: Sequence[str]) -> Markup:
    """Whether a gateway's live item equals the one pushed: equal, differs (which fields), missing."""
    kind, ident = detail.row.kind, detail.row.id
    if live.items is None:
        return Markup(badge("no answer") + tag("div", live.error or "", class_="error"))
    twin = live.items.get(kind, {}).get(ident)
    note = " (an unmanaged kind: gitsync leaves it as it is)" if kind in unmanaged else ""
    if twin is None:
        return Markup(badge("missing") + esc(note))
    if content_bytes(twin) == content_bytes(detail.item):
        return Markup(badge("equal") + esc(note))
    fields = [field_text(f) or "(the whole item)" for f in changed_fields(twin, detail.item)]
    more = f" and {len(fields) - 20} more" if len(fields) > 20 else ""
    listed = join((tag("code", f) for f in fields[:20]), ", ")
    return badge("differs") + note + tag("div", "in: ", listed, more)


def item(detail: ItemDetail, sha: str, lives: Mapping[str, LiveItems], unmanaged: Sequence[str],
         links: Links, now: float) -> Markup:
    row = detail.row
    crumbs = tag("p", link("/items", "Items"), " › ", link(f"/items?kind={quote(row.kind)}", row.kind),
                 class_="crumbs")
    about = facts([("Kind", row.kind), ("ID", tag("code", row.id)), ("Name", row.title or "—"),
                   ("Source", source_cell(row, sha, links)), ("Commit", commit(sha, links))])
    twin_rows = [[tag("code", url), twin_state(detail, live, unmanaged), when(live.at, now)]
                 for url, live in lives.items()]
    twins = table(["Gateway", "Live twin", "Read"], twin_rows)
    if detail.reformatted is not None:
        note = tag("p", "Several items share these lines in the file; the item is shown re-formatted.",
                   class_="note")
        written = note + tag("pre", tag("code", detail.reformatted), class_="code", tabindex="0")
    else:
        lines = join(Markup(tag("span", n, class_="ln", aria_hidden="true") + esc(text) + "\n")
                     for n, text in detail.written)
        written = tag("pre", tag("code", lines), class_="code numbered", tabindex="0",
                      aria_label=f"{row.file} from line {row.line}")
    pushed = tag("pre", tag("code", detail.pushed), class_="code", tabindex="0", aria_label="JSON pushed")
    return Markup(crumbs + tag("h1", f"{row.kind} / ", tag("code", row.id)) + about
                  + section("On the gateways", "twins", twins)
                  + section(f"As written in {row.file or 'the repo'}", "written", written)
                  + section("As pushed (JSON)", "pushed", pushed))


# ---------------------------------------------------------------------------------------------------------
# Fleet


def fleet(results: Sequence[Fleet], tips: Mapping[str | None, str | None], branch: str, links: Links,
          now: float) -> Markup:
    """Every agent's last status on each repo's status refs (a ``[[sources]]`` repo's under its name).
    `tips`: this agent's commit of each repo (None: of the repo of ``[source]``)."""
    head = tag("h1", "Fleet")
    at = min((result.at for result in results), default=now)
    intro = tag("p", "Every agent's last status, from the status refs under ", tag("code", branch),
                f", read {format_age(now - at)} ago (as ", tag("code", "gitsync status --fleet"),
                " reads it). Agents on another commit than this agent's tip ", commit(tips.get(None), links),
                " are marked behind; a status that cannot be read, or whose signature is not allowed, "
                "says why and counts toward no gate.")
    return Markup(head + intro + join(_fleet_of(result, tips.get(result.source), links, now)
                                      for result in results))


def _fleet_of(result: Fleet, tip: str | None, links: Links, now: float) -> Markup:
    """One repo's fleet (headed by its name, for a ``[[sources]]`` repo)."""
    title = tag("h2", f"Source {result.source}") if result.source is not None else Markup("")
    if result.error:
        return Markup(title + tag("p", result.error, class_="error"))
    if not result.agents:
        return Markup(title + tag("p", "No agent has written its status yet."))
    rows = [_fleet_row(entry, tip, links, now) for entry in result.agents]
    listing = table(["Agent", "Commit", "Result", "Age", "Gateways", "gitsync", "Trust"], rows, class_="wide")
    behind = sum(1 for e in result.agents if tip is not None and (e.status is None or e.status.commit != tip))
    summary = tag("p", f"{len(result.agents)} agent(s); {behind} behind the tip.", class_="count")
    return Markup(title + summary + listing)


def _fleet_row(entry: FleetEntry, tip: str | None, links: Links, now: float) -> list[Any]:
    status = entry.status
    age = when(entry.written.timestamp(), now) if entry.written else esc("?")
    trust = entry.trouble or ("verified" if entry.signature is not None else "—")
    if status is None:
        return [esc(entry.agent), esc("—"), badge("unreadable"), age, "—", "—", trust]
    behind = tip is not None and status.commit != tip
    states = ", ".join(g.status for g in status.gateways)
    return [Markup(esc(entry.agent) + (" " + badge("behind") if behind else "")),
            commit(status.commit or None, links), badge(status.result), age,
            f"{len(status.gateways)}: {states}" if status.gateways else "—", status.version or "—", trust]


# ---------------------------------------------------------------------------------------------------------
# Login and errors


def login(next_path: str, failed: bool) -> Markup:
    error = tag("p", "That token is not right.", class_="error", role="alert") if failed else Markup("")
    form = tag("form", tag("label", "Token", for_="token"),
               tag("input", id="token", name="token", type="password", autocomplete="current-password",
                   required=True, autofocus=True),
               tag("input", type="hidden", name="next", value=next_path),
               tag("button", "Log in", type="submit"), method="post", action="/login", class_="login")
    intro = tag("p", "This view shows configuration: it needs the token from ui_token_file.")
    return tag("h1", "Log in") + intro + error + form


def not_found(what: str) -> Markup:
    return Markup(tag("h1", "Not found") + tag("p", what) + tag("p", link("/items", "All items")))


__all__ = ["fleet", "item", "items", "login", "not_found", "overview"]
