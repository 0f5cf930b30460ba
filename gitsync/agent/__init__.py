"""The agent: one sync of the whole pipeline (observe, decide, act, record), and what it remembers.

`sync` runs a sync; `decide` (pure) chooses the target commit and the gateways to push; `gate`
(pure) says whether the fleet lets a commit through; `outcomes` is the vocabulary of results;
`state` is the state directory; `metrics` what the agent counts.
"""
