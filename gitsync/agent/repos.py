"""An agent's config repos, one payload: each repo (`gitsync.agent.repo.Repo`) its own transaction, and
the compositions their commits make.

The settings name the repos (`gitsync.settings.repos_of`): the one repo of ``[source]``, or one per
``[[sources]]`` table; everything here is the same for one as for several. `Repos` does the I/O the
agent asks of them:

* `check`: every repo's tip (their remotes asked at once), and the composition the repos make
  (`gitsync.agent.choice.choose`): the agent decides on it as on a commit (for the repo of
  ``[source]``, it is the commit);
* `render`: a composition's payload: each repo's commit rendered alone and checked against what it
  owns (kept per commit: an unchanged repo costs nothing), composed, its references across repos
  checked; a repo whose commit fails any of it is blamed (`CompositionRefused`);
* `refuse`: a refused composition marks the new commits it blames bad in their own repo, with a note
  on each in its repo; `advanced`: a composition that became the last good one makes each of its
  commits its repo's last good commit;
* `publish`: each repo's status, on its own repo: the commit of that repo the gateways hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime

from gitsync.agent.choice import SourceTip, blamed, choose, company
from gitsync.agent.decision import RemoteView
from gitsync.agent.memory import AgentMemory, RepoMemory
from gitsync.agent.outcomes import Stage
from gitsync.agent.record import WriteBackQueue
from gitsync.agent.repo import IN_BACKOFF, Repo
from gitsync.agent.run import SyncRun
from gitsync.agent.state import AgentState
from gitsync.agent.view import RenderedCommit, SourceCommit
from gitsync.display import short
from gitsync.log import logger, redact
from gitsync.problems import Problem, ProblemsError
from gitsync.push.apply import guard_policy_from_settings
from gitsync.push.guard import GuardPolicy, KindChange, deletion_verdict, dropped, drops_own, remedy_in
from gitsync.push.plan import Desired, Policy
from gitsync.push.results import GatewayResult
from gitsync.render import LastGood, LeftOut, Rendered
from gitsync.render.compose import Part, compose, compose_files, dangling, label, relabel
from gitsync.settings import RepoSettings, Settings, is_artifact_source, repos_of
from gitsync.source.transport import SourceError
from gitsync.timing import Clock, Phases
from gitsync.urls import display_url
from gitsync.writeback.wire import StatusReport

#: Remotes asked for their tip at once. A burst of connections beyond a server's listen backlog (git
#: daemon's is 5) loses SYNs, each then costing a second's retransmit: a few at a time is as quick.
CHECKS_AT_ONCE = 4

#: A refusal's verdict per repo: the stage, and its problems as its own repo's note states them.
Blame = dict[str | None, tuple[Stage, list[str]]]


class CompositionRefused(ProblemsError):
    """A composition some of whose repos' commits cannot go live: each blamed repo, why."""

    def __init__(self, stage: Stage, problems: list[Problem], blame: Blame,
                 held: frozenset[str | None] = frozenset()) -> None:
        super().__init__(str(stage), problems)
        self.blame = blame
        self.held = held  # the blamed repos refused only for the composition (see `Repos.refuse`)


def _kind_of(spec: RepoSettings) -> type[Repo]:
    """A git repo's `Repo`, or an artifact source's (imported only when one is configured: the small setup
    never loads the registry client)."""
    if is_artifact_source(spec.settings.repo):
        from gitsync.agent.artifact_repo import ArtifactRepo

        return ArtifactRepo
    return Repo


class Repos:
    """The config repos of one agent (see the module)."""

    def __init__(self, specs: Sequence[RepoSettings], *, env: Mapping[str, str], memory: AgentMemory,
                 queue: WriteBackQueue, guard: GuardPolicy, unmanaged: frozenset[str], attempts: int = 1,
                 clock: Clock, status: bool = True) -> None:
        self.memory = memory
        self.status = status  # each repo's status ref is written (a one-shot's only when asked)
        self.attempts = attempts  # tries of each git contact within one sync
        self.guard = guard
        self.unmanaged = unmanaged
        others = tuple((spec.name, spec.owns) for spec in specs)
        self.all = tuple(
            _kind_of(spec)(spec, env=env, state=memory.state.repo(spec.name),
                           memory=memory.repos.setdefault(spec.name, RepoMemory(SourceTip(spec.name))),
                           queue=queue, others=others, attempts=attempts, clock=clock) for spec in specs)
        self._by_name = {repo.name: repo for repo in self.all}
        self._queue = queue
        # the first repo is asked on the sync's own thread, the others beside it
        self._pool = ThreadPoolExecutor(max_workers=min(CHECKS_AT_ONCE, max(1, len(self.all) - 1)),
                                        thread_name_prefix="repos")

    @classmethod
    def from_settings(cls, settings: Settings, *, env: Mapping[str, str], memory: AgentMemory,
                      queue: WriteBackQueue, attempts: int = 1, clock: Clock, status: bool = True) -> Repos:
        """The repos the settings name (`gitsync.settings.repos_of`)."""
        return cls(repos_of(settings), env=env, memory=memory, queue=queue,
                   guard=guard_policy_from_settings(settings), unmanaged=frozenset(settings.unmanaged),
                   attempts=attempts, clock=clock, status=status)

    @property
    def state(self) -> AgentState:
        return self.memory.state

    def __len__(self) -> int:
        return len(self.all)

    # -- observe ---------------------------------------------------------------------------------------

    def check(self, run: SyncRun) -> tuple[RemoteView, int]:
        """Every repo's tip, then the composition they make (see `view`); and how many remotes could not
        be asked."""
        run.before = {repo.name: repo.state.last_good for repo in self.all}
        first, *others = self.all
        # the others' time overlaps the first's, on the sync's thread: what the sync waits for them beyond
        # it is its `check` phase
        asked = [self._pool.submit(repo.look, run, Phases()) for repo in others]
        tips = [first.look(run, run.phases)]
        for future in asked:
            with run.phases.timed("check"):
                tips.append(future.result())
        for tip in tips:
            self.memory.repos[tip.name].tip = tip
        return self.view(), sum(1 for tip in tips if tip.error not in (None, IN_BACKOFF))

    def view(self) -> RemoteView:
        """The composition of the repos' tips as last checked, each refused one at its last good commit
        (`gitsync.agent.choice.choose`); the tips themselves when every one of them is refused (the sync
        skips them: nothing can go live)."""
        choice = choose([self.memory.repos[repo.name].tip for repo in self.all],
                        {repo.name: repo.state for repo in self.all})
        for candidate in choice.candidates:
            if candidate.why:
                logger.debug("{}{}", label(candidate.name), candidate.why)
        if choice.composition is None:
            return RemoteView(error=choice.error)
        commits = choice.commits
        if choice.composition not in commits.values():  # a composition that is a commit needs no record
            self.state.remember_composition(choice.composition, {str(n): c for n, c in commits.items()})
        if choice.refused is not None and choice.composition not in self.state.bad:
            self.state.mark_bad(choice.composition, choice.refused)
        if choice.retried:
            logger.info("source(s) {}: the tip held with other commits of the other sources is tried again",
                        ", ".join(repr(name) for name in choice.retried))
            self.state.bad.pop(choice.composition, None)  # tried again on purpose
        return RemoteView(sha=choice.composition)

    def tip_refused(self) -> bool:
        """Some repo's tip, at the last check that answered, is a commit this agent refused."""
        return any(repo.tip_refused is not None for repo in self.all)

    def refused_tips(self) -> list[str]:
        """``source a: the tip abc1234 is refused (why)``, for each repo whose tip is."""
        return [f"{repo.label}the tip {short(repo.memory.known_tip)} is refused ({repo.tip_refused})"
                for repo in self.all if repo.tip_refused is not None]

    def summary(self) -> dict[str, dict[str, str]]:
        """Each ``[[sources]]`` repo's last good commit, and its tip when refused (for `gitsync status`);
        the repo of ``[source]`` keeps its own in the agent's state, which the status says already."""
        found = {}
        for repo in self.all:
            if repo.state is self.state:
                continue
            found[str(repo.name)] = {"last_good": repo.state.last_good or ""}
            if repo.tip_refused is not None:
                found[str(repo.name)] |= {"refused": repo.memory.known_tip or "", "why": repo.tip_refused}
        return found

    def title(self) -> str:
        """Where the commits come from, for people: each repo's URL (a ``[[sources]]`` one's named)."""
        return ", ".join(repo.label + display_url(repo.settings.repo or str(repo.settings.dir or ""))
                         for repo in self.all)

    def commits(self, composition: str | None) -> dict[str | None, str]:
        """Repo → commit of a composition this agent made (empty when it does not know it); a composition
        of the repo of ``[source]`` is its commit."""
        recorded = self.state.compositions.get(composition or "")
        if recorded is not None:
            return dict(recorded)  # type: ignore[arg-type]  # the names of [[sources]] repos
        return {None: composition} if composition and None in self._by_name else {}

    def named_commits(self, composition: str | None) -> dict[str, str]:
        """Each ``[[sources]]`` repo's commit in `composition` (the web view's links go to each one's)."""
        return {name: sha for name, sha in self.commits(composition).items() if name is not None}

    def refused_in(self, run: SyncRun) -> tuple[str, ...]:
        """``source b 504ae51 at validate`` for each ``[[sources]]`` commit `run` refused, in order."""
        found: dict[str, None] = {}
        for names in run.refused.values():
            for name, sha in names.items():
                if name is not None:
                    stage = self._by_name[name].state.bad.get(sha, "refused").split(":", 1)[0]
                    found[f"source {name} {short(sha)} at {stage}"] = None
        return tuple(found)

    def noun(self, composition: str) -> str:
        """What the log calls `composition`: ``commit`` when it is one (a composition of ``[source]``)."""
        return "commit" if composition in self.commits(composition).values() else "composition"

    def subject(self, composition: str) -> str:
        """What a composition brings, read from the mirrors when the agent has not rendered it (a commit
        refused before its render, at verify): each new commit and its subject, as a render names it."""
        return "; ".join(repo.describe(sha, repo.subject(sha) or repo.remote_subject(sha))
                         for name, sha in self._new(composition).items()
                         if (repo := self._by_name.get(name)) is not None)

    def changes(self, composition: str) -> int:
        """How many repos `composition` moves from their last good commit."""
        return len(self._new(composition))

    def _new(self, composition: str) -> dict[str | None, str]:
        """The commits of `composition` that are not their repo's last good one."""
        return {name: sha for name, sha in self.commits(composition).items()
                if sha != self._by_name[name].state.last_good}

    def commit_time(self, composition: str) -> datetime:
        """When the newest of the composition's new commits was committed (for the group gate)."""
        commits = self._new(composition) or self.commits(composition)
        if not commits:
            raise SourceError("read", f"composition {short(composition)} is not known to this agent")
        return max(self._by_name[name].commit_time(sha) for name, sha in commits.items())

    # -- act -------------------------------------------------------------------------------------------

    def render(self, composition: str, policy: Policy, *, fetch: bool, run: SyncRun,
               fallback: LastGood | None = None) -> RenderedCommit:
        """The composition's payload (see the module); `CompositionRefused` blames the repos that fail.
        `fetch`: the sync moves to it (each repo whose commit is new fetches it, unless it did at once);
        `fallback`: partial apply's last good items."""
        commits = self.commits(composition)
        if not commits:
            raise SourceError("read", f"composition {short(composition)} is not known to this agent")
        parts: list[Part] = []
        commit_of: dict[str | None, SourceCommit] = {}
        blame: Blame = {}
        problems: list[Problem] = []
        for repo in self.all:
            sha = commits.get(repo.name)
            if sha is None:
                continue
            try:
                commit = repo.commit(sha, fetch=fetch and sha != repo.state.last_good, run=run,
                                     fallback=fallback)
            except ProblemsError as exc:
                blame[repo.name] = (Stage(exc.stage), [str(p) for p in exc.problems])
                problems += [relabel(repo.name, p) for p in exc.problems]
                continue
            except SourceError as exc:
                if exc.stage != "verify":
                    raise
                blame[repo.name] = (Stage.VERIFY, [exc.reason])
                problems.append(relabel(repo.name, Problem(exc.reason)))
                continue
            if commit.facts.problems:
                blame[repo.name] = (Stage.OWNERSHIP, [str(p) for p in commit.facts.problems])
                problems += [relabel(repo.name, p) for p in commit.facts.problems]
            elif held := self._guard(repo, sha, commit, policy, run):
                blame[repo.name] = (Stage.GUARD, held)
                problems += [relabel(repo.name, Problem(f"deletion guard: {line}")) for line in held]
            parts.append(Part(repo.name, sha, commit.rendered, repo.owns))
            commit_of[repo.name] = commit
        if blame:
            raise CompositionRefused(next(iter(blame.values()))[0], problems, blame)
        self._check_references(composition, parts, [commit_of[p.name] for p in parts])
        composed = compose(parts)
        new = self._new(composition)
        # described by its new commits; a composition with none (the last good one) by every commit
        shown = [name for name in commits if name in new and name in commit_of] or \
            [name for name in commits if name in commit_of]
        subject = "; ".join(self._by_name[name].describe(commits[name], commit_of[name].subject)
                            for name in shown)
        allowed = frozenset().union(*(commit_of[name].allowed_delete for name in shown))
        with run.phases.timed("plan"):  # what every gateway's plan starts from
            desired = Desired.of(composed.payload, policy, composed.contents, composed.ids, composed.splits)
        return RenderedCommit(composed, subject, allowed,
                              compose_files([(p.name, commit_of[p.name].files) for p in parts]), desired)

    def render_again(self, composition: str, *, apart: bool = False) -> tuple[Rendered, Mapping[str, bytes]]:
        """The composition rendered again from the mirrors, as it went live (`Repo.render_again`): for
        partial apply's kept items, and, `apart` from the agent's speed layer, for the web view."""
        commits = self.commits(composition)
        if not commits:
            raise SourceError("read", f"composition {short(composition)} is not known to this agent")
        parts, files = [], []
        for repo in self.all:
            sha = commits.get(repo.name)
            if sha is not None:
                rendered, own = repo.render_again(sha, apart=apart)
                parts.append(Part(repo.name, sha, rendered, repo.owns))
                files.append((repo.name, own))
        return compose(parts), compose_files(files)

    def _guard(self, repo: Repo, sha: str, commit: SourceCommit, policy: Policy, run: SyncRun) -> list[str]:
        """The deletion guard on a repo's new commit, against its own last good commit: what it may delete
        of its own items of a kind it shares with other repos (its own message's allowances counting).
        A kind it owns whole is its own items alone, which the guard on the gateways
        (`gitsync.push.release`) judges already."""
        good = repo.state.last_good
        whole = repo.owns.whole_kinds()
        kinds = [kind for kind in repo.owns.kinds() if policy.manages(kind) and kind not in whole]
        if not self.guard.enabled or good is None or good == sha or not kinds:
            return []
        try:
            before = repo.commit(good, fetch=False, run=run)
        except (ProblemsError, SourceError) as exc:
            logger.warning("{}its last good commit {} cannot be read again for the deletion guard: {}",
                           repo.label, short(good), exc)
            return []
        guard = replace(self.guard, allowed=self.guard.allowed | commit.allowed_delete)
        verdict = deletion_verdict(commit.rendered.ids, before.rendered.ids, kinds, guard)
        return [f"against its last good commit {short(good)}: {line}" for line in verdict.problems]

    def _check_references(self, composition: str, parts: Sequence[Part], commits: Sequence[SourceCommit],
                          ) -> None:
        """The references across repos: each that names nothing blames its own repo's new commit, else
        the new commits that could have declared what it names (they dropped it)."""
        found = dangling(parts, [c.facts for c in commits], self.unmanaged)
        if not found:
            return
        new = self._new(composition)
        blame: Blame = {}
        for miss in found:
            # an item another repo does not share blames the repo that names it, never the owner
            named = {miss.source} if miss.source in new or miss.owner is not None else {
                repo.name for repo in self.all if repo.owns.may_own(*miss.target)}
            for name in blamed(named, new):
                lines = blame.setdefault(name, (Stage.VALIDATE, []))[1]
                repo = self._by_name[name]
                lines.append(repo.own_text(miss.problem) if name == miss.source else str(miss.problem))
        # what a reference names is another repo's to declare: held, tried again when the others change
        raise CompositionRefused(Stage.VALIDATE, [miss.problem for miss in found], blame, frozenset(blame))

    # -- refusals and the last good commits -------------------------------------------------------------

    def refuse(self, composition: str, stage: Stage, problems: Sequence[str], run: SyncRun,
               results: Iterable[GatewayResult] = (), blame: Blame | None = None,
               held: frozenset[str | None] = frozenset()) -> None:
        """Mark the commits a refused composition blames bad in their repos, each with a note: its new
        commits (a composition with none, its last good one that no longer goes live: all of them).

        A commit blamed only for the composition it is in is *held*: blamed by the gateways' deletion
        guard on the composed payload, by a reference into another repo (`held`), or by a refusal that
        names no repo. It is remembered with the other repos' commits, and tried again once they differ
        (`gitsync.agent.choice.retried`)."""
        new = self._new(composition) or self.commits(composition)
        if blame is None:
            blame, held = self._blame(stage, problems, list(results), new)
        refused = run.refused.setdefault(composition, {})
        commits = self.commits(composition)
        several = len(self.all) > 1
        for name, (own_stage, lines) in blame.items():
            sha = new.get(name)
            if sha is not None:
                refused[name] = sha
                company_of = company(name, commits, self._by_name) if several and name in held else None
                self._by_name[name].refuse(sha, own_stage, [redact(line) for line in lines],
                                           composition=composition, held_with=company_of)

    def _blame(self, stage: Stage, problems: Sequence[str], results: list[GatewayResult],
               new: Mapping[str | None, str]) -> tuple[Blame, frozenset[str | None]]:
        """Who a refusal by the gateways blames: the repos it names (`_named`), else every new one, with
        every line of the refusal; and which of them are held (`refuse`): all, for the deletion guard on
        the composed payload, else those it blames without naming them."""
        named, unplaced = self._named(stage, results, new)
        every = [line for lines in named.values() for line in lines] + unplaced or list(problems)
        blame = {name: (stage, named.get(name) or every) for name in blamed(named, new)}
        held = frozenset(blame) if stage is Stage.GUARD else frozenset(blame) - frozenset(named)
        return blame, held

    def _named(self, stage: Stage, results: list[GatewayResult], new: Mapping[str | None, str],
               ) -> tuple[dict[str | None, list[str]], list[str]]:
        """The repos the gateways' answers name, each with its lines as its own repo states them: of the
        items a push refused (push), of the checks that failed (health), that delete items of a kind the
        guard holds (guard: of `new`); and the lines that name no repo."""
        named: dict[str | None, list[str]] = {}
        unplaced: list[str] = []
        if stage is Stage.PUSH:
            for problem in (p for r in results if r.refused for p in r.problems):
                repo = self._owner(problem.location.file if problem.location else None)
                if repo is None:
                    unplaced.append(str(problem))
                else:
                    named.setdefault(repo.name, []).append(repo.own_text(problem))
        elif stage is Stage.HEALTH:
            for result in results:
                for check in result.checks.failed if result.checks is not None else ():
                    repo = self._owner(check.name)
                    line = f"{result.url}: {(repo.own_check(check) if repo else check).describe()}"
                    (named.setdefault(repo.name, []) if repo is not None else unplaced).append(line)
        elif stage is Stage.GUARD:
            refused = [change for r in results if r.guard is not None for change in r.guard.refused]
            kinds = {change.kind for change in refused}
            lines = [f"{r.url}: {line}" for r in results if r.guard is not None for line in r.guard.problems]
            owners = {name for name in new for change in refused
                      if any(self._by_name[name].owns.may_own(change.kind, ident) for ident in change.gone)}
            for name in owners or [n for n in new if self._deletes(self._by_name[n], new[n], kinds)]:
                named[name] = [*lines, self._allow_hint(self._by_name[name], refused)]
        return named, unplaced

    def _allow_hint(self, repo: Repo, refused: Sequence[KindChange]) -> str:
        """Where the trailer that allows a held deletion goes: a new commit of this repo, named with its
        URL; the items of its own the composition would delete, a few of them named."""
        kinds = {change.kind for change in refused}
        own = dropped(refused, repo.owns.may_own)
        where = f"{repo.label.rstrip(': ') or 'the repo'} ({display_url(repo.settings.repo or '')})"
        if own:
            return drops_own(own, where)
        others = sorted({str(other.name) for other in self.all if other is not repo
                         and dropped(refused, other.owns.may_own)})
        allow = remedy_in(kinds, where)
        if others:
            names = ", ".join(f"source {name}" for name in others)
            return (f"the items it would delete are {names}'s, which give(s) no commit of them here: this "
                    f"commit is tried again once that changes (to delete them anyway, {allow})")
        return f"the items it would delete are no source's; to allow it, {allow}"

    def _owner(self, place: str | None) -> Repo | None:
        """The repo a place of the composed payload (a file, a check's name) is in, if any."""
        return next((repo for repo in self.all if repo.claims(place)), None)

    def _deletes(self, repo: Repo, sha: str, kinds: set[str]) -> bool:
        """Whether the repo's commit `sha` drops items of `kinds` its last good commit had."""
        now, good = repo.memory.rendered.get(sha), repo.memory.rendered.get(repo.state.last_good or "")
        if now is None or good is None:
            return True  # cannot tell: it may
        return any(set(good.rendered.ids.get(kind, ())) - set(now.rendered.ids.get(kind, ()))
                   for kind in kinds)

    def advanced(self, composition: str) -> None:
        """`composition` is the last good one: each of its commits is its repo's last good commit."""
        for name, sha in self.commits(composition).items():
            self._by_name[name].advanced(sha)

    # -- write-back ------------------------------------------------------------------------------------

    def report(self, composition: str, stage: Stage, results: list[GatewayResult]) -> None:
        """Notes on the commits of `composition` that the gateways' answers name, each in its own repo,
        without refusing them: health checks that failed with ``on_check_failure = "report"``."""
        commits = self.commits(composition)
        named, _ = self._named(stage, results, commits)
        for name, lines in named.items():
            if name in commits:
                self._by_name[name].note(commits[name], stage, [redact(line) for line in lines])

    def report_left_out(self, composition: str, left_out: Sequence[LeftOut]) -> None:
        """Partial apply: a note on each commit of `composition` that goes live without items of its own,
        naming them and why, in its own repo."""
        commits = self.commits(composition)
        lines: dict[str | None, list[str]] = {}
        for out in left_out:
            repo = self._owner(out.why.location.file if out.why.location else None)
            if repo is not None and repo.name in commits:
                lines.setdefault(repo.name, []).append(redact(replace(out, why=repo.own_problem(out.why))
                                                              .describe()))
        for name, told in lines.items():
            self._by_name[name].note(commits[name], Stage.PARTIAL, told)

    def refresh(self) -> None:
        """After a sync that changed nothing: each repo's heartbeat, and what failed to be written before."""
        if not self.status:
            return
        self._queue.submit_once([(repo.writeback, repo.writeback.refresh) for repo in self.all
                                 if repo.writeback is not None])

    def publish(self, report: StatusReport, run: SyncRun) -> None:
        """Each repo's status, on its own repo: its commit the gateways hold (or that was refused), and its
        own result (`_result`). None without `status`."""
        if not self.status:
            return
        commits = self.commits(report.commit)
        refused = run.refused.get(report.commit, {})
        for repo in self.all:
            sha = refused.get(repo.name) or commits.get(repo.name) or repo.state.last_good or ""
            # a sync that states no subject for its commit (a refused one, one that waits) states none here
            own = replace(report, commit=sha, subject=repo.subject(sha) if report.subject else "",
                          result=self._result(repo, report.result, run, refused),
                          gateways=[replace(g, pruned=self._drift(repo, g.pruned)) for g in report.gateways])
            repo.publish(own)

    def _drift(self, repo: Repo, pruned: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """The items written out of band that a push took off the gateways, those in this repo's slice
        (each repo's status shows the drift in what it owns)."""
        return {kind: own for kind, ids in pruned.items()
                if (own := [ident for ident in ids if repo.owns.may_own(kind, ident)])}

    @staticmethod
    def _result(repo: Repo, result: str, run: SyncRun, refused: Mapping[str | None, str]) -> str:
        """A repo's own result of this sync: refused (failed); when another repo's commit was refused, none
        of its own: applied when its commit moved, else noop; else the sync's."""
        if repo.name in refused:
            return "failed"
        if refused:
            return "applied" if repo.state.last_good != run.before.get(repo.name) else "noop"
        return result

    def unwritten(self) -> tuple[int, str | None]:
        """Statuses and notes not written back yet, over every repo, and the last error of one."""
        return sum(repo.pending for repo in self.all), next(
            (repo.last_error for repo in self.all if repo.pending and repo.last_error), None)

    def tidy(self) -> None:
        """Each repo's mirror tidied (`Source.tidy`), once a sync is over."""
        for repo in self.all:
            repo.tidy()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


__all__ = ["Blame", "CompositionRefused", "Repos"]
