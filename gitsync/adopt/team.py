"""``gitsync init DIR --source NAME``: the repo of one team of a ``[[sources]]`` agent, whose CI validates it
alone (docs/sources.md, "A team's own CI").

The platform's settings name every source, what it owns and what it shares; a team's CI has its own
repo only. So the scaffold writes the part of the settings a team's render needs and no secret:
``ci/gitsync-sources.toml``, every ``[[sources]]`` table's name, repo, paths, ``owns`` and
``shares`` (and the ``[render]`` vars and secret fields, ``unmanaged``), which `gitsync validate
--dir . --config ci/gitsync-sources.toml --source NAME` reads: a reference into what another source
shares with the team is taken as that source's, anything else of another source's is refused at the
team's own file:line. Its examples are items the team owns (its id prefix, its labels). Its CI has no
diff step: the gateway's payload is the composition of every source, which is the platform's to
diff (`gitsync diff` with the agent's settings).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from gitsync.ownership import Claim, Ownership, Share
from gitsync.settings import Settings, SettingsError, source_settings
from gitsync.urls import display_url

#: The settings a team's CI reads, in its repo.
SOURCES_FILE = "ci/gitsync-sources.toml"


def _toml(value: Any) -> str:
    """A TOML value of text, a list of them, or a table of text (inline)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return "[" + ", ".join(_toml(v) for v in value) + "]"


def _claim(claim: Claim) -> str:
    if claim.whole and len(claim.kinds) == 1:
        return _toml(claim.kinds[0])
    fields = {"kinds": list(claim.kinds)}
    text = f"{{ kinds = {_toml(fields['kinds'])}"
    if claim.prefix is not None:
        text += f", prefix = {_toml(claim.prefix)}"
    if claim.labels:
        text += f", labels = {_toml(dict(claim.labels))}"
    return text + " }"


def _share(share: Share) -> str:
    text = f"{{ kinds = {_toml(list(share.kinds))}"
    if share.prefix is not None:
        text += f", prefix = {_toml(share.prefix)}"
    if share.ids:
        text += f", ids = {_toml(list(share.ids))}"
    return text + f", with = {_toml(list(share.readers))} }}"


def _array(name: str, entries: Iterable[str]) -> str:
    listed = list(entries)
    return f"{name} = [" + ",\n        ".join(listed) + "]\n"


def sources_file(settings: Settings, team: str) -> str:
    """``ci/gitsync-sources.toml`` for source `team` of the agent's `settings` (no secret in it)."""
    names = [spec.name for spec in settings.sources]
    if team not in names:
        raise SettingsError(f"--source {team}: " + (
            f"no [[sources]] table is named so (they are {', '.join(names)})" if names else
            "the settings have no [[sources]] tables (give the agent's settings file with --config)"))
    lines = [f"# The agent's [[sources]] as the CI of source {team} reads them; `gitsync init --source "
             f"{team} --sources-only .`",
             "# writes it again from the agent's settings. No secret is in it (docs/sources.md).",
             ""]
    render = {key: value for key, value in (("vars", dict(settings.vars)),
                                            ("secret_fields", list(settings.secret_fields))) if value}
    if render:
        lines += ["[render]", *(f"{key} = {_toml(value)}" for key, value in render.items()), ""]
    if settings.unmanaged:
        lines += ["[gateways]", f"unmanaged = {_toml(list(settings.unmanaged))}", ""]
    for spec in settings.sources:
        own = source_settings(settings, spec)
        table = (f"[[sources]]\nname = {_toml(spec.name)}\nrepo = {_toml(display_url(own.repo or ''))}\n"
                 f"paths = {_toml(list(own.paths))}\n" + _array("owns", map(_claim, spec.owns.claims)))
        if spec.owns.shares:
            table += _array("shares", map(_share, spec.owns.shares))
        lines.append(table)
    return "\n".join(lines)


def examples(team: str, owns: Ownership) -> dict[str, str]:
    """An upstream and a route the team owns (its prefix and labels), when it may declare both."""
    def claim_of(kind: str) -> Claim | None:
        return next((c for c in owns.claims if kind in c.kinds), None)

    upstream, route = claim_of("upstreams"), claim_of("routes")
    if upstream is None or route is None:
        return {}

    def head(claim: Claim, name: str) -> str:
        pairs = ", ".join(f"{key}: {value}" for key, value in claim.labels)
        labels = f"\n    labels: {{{pairs}}}" if claim.labels else ""
        return f"  - id: {claim.prefix or ''}{name}{labels}"

    up_id = f"{upstream.prefix or ''}web"
    return {
        "upstreams/web.yaml": f"# {team}'s own items: ids start with its prefix (the agent's settings).\n"
                              f"upstreams:\n{head(upstream, 'web')}\n    type: roundrobin\n"
                              "    nodes:\n      - {host: 10.0.1.10, port: 8080, weight: 1}\n",
        "routes/api.yaml": f"routes:\n{head(route, 'api')}\n    uri: /{team}/*\n"
                           f"    hosts: [api.example.com]\n    upstream_id: {up_id}\n",
    }


__all__ = ["SOURCES_FILE", "examples", "sources_file"]
