"""Feedback where people look: commit statuses on the forge, review comments on pull requests, and
notifications (signed JSON webhooks), from what syncs do.

`forge` holds one client per forge behind one interface; `statuses` decides what a commit's status
says (one agent's, or one group's from the fleet's status refs); `events` the vocabulary of what
people are told; `notify` the signed webhooks; `dispatch` the queue and thread that send them all in
the background; `outbox` holds `Feedback`, the agent's observer (`gitsync.agent.observer`: the agent
never imports this package; the daemon and ``sync --once`` hand it one); `review` the report of
``gitsync validate``/``diff`` for pull requests and its sticky comment.
"""
