"""Push: make each gateway hold a rendered commit, and say what happened.

`plan` (pure) chooses every version and index from the live config; `moves` (pure) plans the
two-step pushes the live state needs; `guard` (pure) refuses large deletions; `apply` runs GET →
plan → PUT → read-back for one gateway; `health` runs the repo's health checks; `release` is
the per-gateway job (guard, push, checks, rollback); `admin_api` is the client of the Admin API;
`workers` keeps one client and one worker per gateway.
"""
