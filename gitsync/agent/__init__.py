"""The agent: one sync of the whole pipeline (observe, decide, act, record), and what it remembers.

`sync` holds `Agent` (its dependencies only) and runs a sync, one sync's own values in a `run.SyncRun`;
`repos` composes the agent's config repos (`repo`: one repo's mirror, render, notes and status; the
repo of ``[source]`` is a composition of one) with `choice` (pure: each repo's commit, whom a refusal
blames); `gateways` is what pushing to the gateways needs; `decide` (pure) chooses the target commit
and the gateways to push, in `decision`'s words, with `canary` (the canary phase); `gate` (pure) and
`fleet_gate` say whether the fleet lets a commit through; `outcomes` is the vocabulary of results;
`memory` is what one sync leaves to the next, `state` what is saved and `statedir` where, atomically;
`record` the metrics, log line and background write-backs of a sync; `view` what readers on other
threads see (`AgentView`, through `AgentReader`); `observer` who is told (`gitsync.feedback`);
`metrics` what the agent counts.
"""
