"""``gitsync export``: a live gateway's configuration written as a config repo, and proven.

GET ``/apisix/admin/configs`` → drop versions and ``modifiedIndex`` → give id-less items
a stable id → secret strings out to ``${{ secrets.NAME }}`` → write the layout → render
the written files with the extracted values and compare with what was read. The last
step proves the export lossless: it says whether ``render`` of the new repo equals the
live config, and which kinds only differ in order (a layout that groups items
by file may reorder a kind; the first sync then re-sends that kind, rebuilding no item).

API-driven standalone APISIX stores items exactly as sent and fills in no default, so a
field equal to its schema default was sent by whoever wrote the gateway and is kept:
dropping it would make the first sync rewrite the item. ``--strip-defaults`` drops them
anyway, for a shorter repo, and the proof then names the items that will change.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gitsync.adopt import repo_writer
from gitsync.adopt.schema_export import strip_defaults
from gitsync.adopt.secret_fields import extract_secrets
from gitsync.adopt.sops_writer import RecipientError, encrypt_values
from gitsync.kinds import KINDS, item_id
from gitsync.log import logger, redact, register_secret
from gitsync.problems import ProblemsError
from gitsync.push.admin_api import Gateway, GatewayError, endpoints_from_settings
from gitsync.push.plan import content_bytes, item_content
from gitsync.render import RenderOptions, render
from gitsync.render.memo import render_memo
from gitsync.render.references import refers_to
from gitsync.render.secrets import NO_RULES, SecretRules
from gitsync.settings import SOURCE_NAME, Settings

_SINGULAR = {"routes": "route", "services": "service", "upstreams": "upstream", "ssls": "ssl",
             "global_rules": "global-rule", "plugin_configs": "plugin-config", "protos": "proto",
             "stream_routes": "stream-route", "consumer_groups": "consumer-group",
             "plugin_metadata": "plugin-metadata", "secrets": "secret", "consumers": "consumer"}


@dataclass
class Exported:
    """What an export produced, before anything is written."""

    files: dict[str, bytes]
    secrets: dict[str, str]
    live: dict[str, list[Any]]  # the live items (no modifiedIndex; id-less ones with their new id)
    warnings: list[str] = field(default_factory=list)


def _without_index(item: Any) -> Any:
    return {k: v for k, v in item.items() if k != "modifiedIndex"} if isinstance(item, Mapping) else item


def _stable_id(kind: str, item: Any, taken: set[str]) -> str:
    base = f"{_SINGULAR[kind]}-{hashlib.sha1(content_bytes(item)).hexdigest()[:12]}"
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def live_items(body: Mapping[str, Any], warnings: list[str]) -> dict[str, list[Any]]:
    """The kinds of a GET body as lists, without ``modifiedIndex``; id-less items get a stable id."""
    out: dict[str, list[Any]] = {}
    for kind in KINDS:
        value = body.get(kind)
        if not isinstance(value, list) or not value:
            continue
        items = [_without_index(i) for i in value]
        taken = {i for i in (item_id(kind, x) for x in items) if i is not None}
        for index, item in enumerate(items):
            if item_id(kind, item) is None and isinstance(item, dict) and kind != "consumers":
                new = _stable_id(kind, item, taken)
                taken.add(new)
                items[index] = {"id": new, **item}
                warnings.append(f"{kind}[{index}] has no id on the gateway: exported with the stable id "
                                f"{new!r} (the first sync writes it to the gateway)")
        out[kind] = items
    return out


def build(body: Mapping[str, Any], layout: str, strip: bool = False,
          rules: SecretRules = NO_RULES) -> Exported:
    """The repo files for a GET body (pure): layout, escaped text, secrets taken out (`rules`: the
    site's declared secret fields, besides what the classifier knows)."""
    warnings: list[str] = []
    live = live_items(body, warnings)
    desired = live
    if strip:
        desired = {kind: [strip_defaults(kind, i) for i in items] for kind, items in live.items()}
    extracted = extract_secrets(desired, repo_writer.escape_templates, rules)
    files = repo_writer.render_files(repo_writer.plan_files(extracted.payload, layout))
    return Exported(files, extracted.values, live, warnings + extracted.warnings)


def prove(exported: Exported, options: RenderOptions | None = None) -> tuple[list[str], list[str]]:
    """Render the files with the extracted secrets and compare with the live items (no modifiedIndex).

    Returns (problems, notes): problems are differences in content; notes name the kinds whose
    items are equal but in another order. `options`: how to render (kinds whose references are
    another repo's to answer, `--split-by`), the secrets put in.
    """
    live = exported.live
    values = exported.secrets
    try:
        options = replace(options or RenderOptions(), secret_lookup=values.get)
        rendered = render(exported.files, options, memo=render_memo()).payload
    except ProblemsError as exc:
        return [str(p) for p in exc.problems], []
    problems, notes = [], []
    for kind in KINDS:
        want = [item_content(i) for i in live.get(kind) or ()]
        got = [item_content(i) for i in rendered.get(kind) or ()]
        if want == got:
            continue
        key = sorted(content_bytes(i) for i in want) == sorted(content_bytes(i) for i in got)
        if key:
            notes.append(f"{kind}: the files hold every item but in another order than the gateway; the "
                         f"first sync re-sends {kind} in file order (no item is rebuilt)")
            continue
        wanted = {item_id(kind, i): content_bytes(i) for i in want}
        for item in got:
            ident = item_id(kind, item)
            if wanted.get(ident) != content_bytes(item):
                problems.append(f"{kind}[{ident}]: renders differently from the gateway")
        missing = set(wanted) - {item_id(kind, i) for i in got}
        problems += [f"{kind}[{ident}]: missing from the files" for ident in sorted(map(str, missing))]
    return problems, notes


def write_secrets(path: Path, secrets: Mapping[str, str], recipients: Sequence[str] | None) -> None:
    if recipients:
        data = encrypt_values(secrets, recipients)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return
    repo_writer.check_target(path)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    repo_writer.write_tree(path, {name: value.encode("utf-8") + b"\n" for name, value in secrets.items()},
                           mode=0o600)


#: Shorter secret values are not looked for in the written files: they match ordinary text.
MIN_LEAK_LENGTH = 8


def clear_values(files: Mapping[str, bytes], secrets: Mapping[str, str]) -> list[str]:
    """The secrets (by NAME) whose value the written files still hold in clear, each with the file: the
    value also stands in a field nothing names secret. Values shorter than `MIN_LEAK_LENGTH` are not
    looked for."""
    found = []
    for name, value in secrets.items():
        if len(value) < MIN_LEAK_LENGTH:
            continue
        needle = value.encode("utf-8")
        where = [path for path, data in files.items() if needle in data]
        if where:
            found.append(f"the value of the secret {name} also stands in clear in {', '.join(where)}")
    return found


def usage_problem(args: argparse.Namespace, out: Path, secrets: Mapping[str, str],
                  holder: str = "the gateway holds") -> str | None:
    """Why the secret values cannot go where the arguments say (None: they can)."""
    target = args.secrets_out
    if not secrets:
        return None
    if target is None:
        how = ("--secrets-out FILE" if args.age_recipient else
               "--secrets-out DIR (one file per value) or --age-recipient age1… --secrets-out FILE (SOPS)")
        return f"{holder} {len(secrets)} secret value(s); say where they go: {how}"
    if target.resolve().is_relative_to(out.resolve()):
        return f"--secrets-out {target} is inside --out {out}: secret values never go into the repo"
    if args.age_recipient and target.exists():
        return f"--secrets-out {target} already exists; nothing is overwritten"
    return None


def export_command(settings: Settings, args: argparse.Namespace) -> int:
    """Export the first configured gateway; exit 0 proven, 1 written with differences, 2 usage/gateway."""
    endpoints = endpoints_from_settings(settings)
    if len(endpoints) != 1:
        print("gitsync export: give exactly one --gateway", file=sys.stderr)
        return 2
    out: Path = args.out
    try:
        repo_writer.check_target(out)
        with Gateway(endpoints[0]) as gateway:
            live = gateway.get_config()
        rules = SecretRules.of(settings.secret_fields)
        if getattr(args, "split_by", None):
            return export_split(live.body, args, out, rules)
        exported = build(live.body, args.layout, args.strip_defaults, rules)
        for value in exported.secrets.values():
            register_secret(value)
        problem = usage_problem(args, out, exported.secrets)
        leaks = clear_values(exported.files, exported.secrets)
        if problem or leaks:
            for line in [problem] if problem else leaks:
                print(f"gitsync export: {line}", file=sys.stderr)
            if leaks:
                print("gitsync export: nothing written; name the other field in secret_fields "
                      "(--secret-field KIND.PATH or PLUGIN.PATH) to take it out too", file=sys.stderr)
            return 2
        repo_writer.check_tree(out, exported.files)  # a tree that cannot be written stops the secrets too
        if exported.secrets:
            write_secrets(args.secrets_out, exported.secrets, args.age_recipient)
        repo_writer.write_tree(out, exported.files)
    except (GatewayError, repo_writer.WriteError, RecipientError, OSError) as exc:
        print(f"gitsync export: {redact(str(exc))}", file=sys.stderr)
        return 2
    for warning in exported.warnings:
        logger.warning("{}", warning)
    problems, notes = prove(exported)
    if args.strip_defaults:  # expected: those items lost fields equal to their defaults
        notes += [f"{line}: the first sync rewrites it (fields equal to their defaults were left out)"
                  for line in problems]
        problems = []
    count = sum(len(v) for v in exported.live.values())
    print(f"exported {count} item(s) from {endpoints[0].display_url} into {len(exported.files)} file(s) "
          f"under {out}" + (f"; {len(exported.secrets)} secret value(s) in {args.secrets_out}"
                            if exported.secrets else ""))
    for note in notes:
        print(f"note: {note}")
    if problems:
        for line in problems:
            print(f"gitsync export: round trip: {redact(line)}", file=sys.stderr)
        return 1
    print("round trip: render of the written repo equals the live config (modifiedIndex aside)")
    return 0


# ---------------------------------------------------------------------------------------------------------
# --split-by LABEL: one repo per owner, and the [[sources]] that compose them again (docs/sources.md)

Items = dict[str, list[Any]]


class SplitError(Exception):
    """The live items cannot be split by the label: every item would not have one owner."""


def label_of(item: Any, label: str) -> str | None:
    labels = item.get("labels") if isinstance(item, dict) else None
    value = labels.get(label) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else None


def split(live: Mapping[str, list[Any]], label: str, rest: str) -> dict[str, Items]:
    """The live items by owner: by their `label`'s value, kinds without it whole to `rest` (pure)."""
    groups: dict[str, Items] = {}
    for kind in KINDS:
        items = live.get(kind) or []
        values = [label_of(item, label) for item in items]
        if not items:
            continue
        if all(value is None for value in values):
            groups.setdefault(rest, {})[kind] = list(items)
            continue
        unlabelled = [f"{kind}[{item_id(kind, item)}]" for item, value in zip(items, values, strict=True)
                      if value is None]
        if unlabelled:
            more = f" and {len(unlabelled) - 5} more" if len(unlabelled) > 5 else ""
            shown = ", ".join(unlabelled[:5]) + more
            raise SplitError(f"{shown} carr{'y' if len(unlabelled) > 1 else 'ies'} no label {label!r} while "
                             f"other {kind} do: label them (each item needs one owner), or export without "
                             "--split-by")
        for item, value in zip(items, values, strict=True):
            assert value is not None
            if not SOURCE_NAME.match(value) or value in (rest, SOURCES_FILE):
                raise SplitError(f"{kind}[{item_id(kind, item)}]: label {label}={value!r} cannot name a "
                                 f"source and its repo (1 to 64 letters, digits, '.', '_', '-'; not {rest!r} "
                                 f"nor {SOURCES_FILE!r})")
            groups.setdefault(value, {}).setdefault(kind, []).append(item)
    return groups


#: What `export --split-by` writes beside the repos: no label value may name a repo so.
SOURCES_FILE = "sources.toml"


def _common_prefix(ids: Sequence[str]) -> str:
    """The longest text every one of `ids` starts with (characters, not path parts)."""
    first, last = min(ids, default=""), max(ids, default="")
    size = next((at for at, (a, b) in enumerate(zip(first, last, strict=False)) if a != b),
                min(len(first), len(last)))
    return first[:size]


def claims_of(groups: Mapping[str, Items], rest: str) -> dict[str, list[tuple[list[str], str | None]]]:
    """Each group's claims (pure): the kinds of `rest` whole; each labelled group's kinds by the id prefix
    its items of the kind share (a label claim needs one: the owner of an id follows from the settings),
    kinds of one prefix together. A `SplitError` when a group's items share none, or when two groups'
    prefixes start one another (one id could be both's)."""
    claims: dict[str, list[tuple[list[str], str | None]]] = {}
    seen: list[tuple[str, str, str]] = []  # (kind, prefix, group)
    for name, items in sorted(groups.items()):
        if name == rest:
            claims[name] = [([kind for kind in KINDS if kind in items], None)]
            continue
        by_prefix: dict[str, list[str]] = {}
        for kind in (k for k in KINDS if k in items):
            ids = [str(item_id(kind, item) or "") for item in items[kind]]
            prefix = _common_prefix(ids)
            if not prefix:
                shown = ", ".join(ids[:3]) + (", …" if len(ids) > 3 else "")
                raise SplitError(f"the {kind} of {name!r} ({shown}) share no id prefix, which a claim by "
                                 f"label needs: rename them to start alike (e.g. '{name}-…'), or export "
                                 "without --split-by")
            for kind_, other, whose in seen:
                if kind_ == kind and (prefix.startswith(other) or other.startswith(prefix)):
                    raise SplitError(f"the {kind} of {whose!r} (id prefix {other!r}) and of {name!r} "
                                     f"(id prefix {prefix!r}) could hold one id: rename one side's ids, or "
                                     "export without --split-by")
            seen.append((kind, prefix, name))
            by_prefix.setdefault(prefix, []).append(kind)
        claims[name] = [(kinds, prefix) for prefix, kinds in by_prefix.items()]
    return claims


def shares_of(groups: Mapping[str, Items]) -> dict[str, dict[tuple[str, tuple[str, ...]], list[str]]]:
    """What each group must share for the live items to compose again (pure): every item another group's
    item names, by (kind, the groups naming it), with its ids. A credential's consumer is never shared:
    a credential goes with its consumer already."""
    owner = {(kind, str(item_id(kind, item))): name for name, items in groups.items()
             for kind, kind_items in items.items() for item in kind_items}
    readers: dict[tuple[str, str], set[str]] = {}
    for name, items in groups.items():
        for kind, kind_items in items.items():
            for item in kind_items:
                for target in refers_to(kind, item):
                    if owner.get(target) not in (None, name):
                        readers.setdefault(target, set()).add(name)
    shares: dict[str, dict[tuple[str, tuple[str, ...]], list[str]]] = {}
    for (kind, ident), names in sorted(readers.items()):
        shares.setdefault(owner[(kind, ident)], {}).setdefault((kind, tuple(sorted(names))), []).append(ident)
    return shares


def sources_toml(groups: Mapping[str, Items], label: str, rest: str) -> str:
    """The ``[[sources]]`` tables that compose the groups again, each repo's URL to fill in: what each
    owns (`claims_of`) and shares with the others (`shares_of`)."""
    claims, shares = claims_of(groups, rest), shares_of(groups)
    tables = []

    def listed(values: Sequence[str]) -> str:
        return ", ".join(f'"{value}"' for value in values)

    for name in sorted(groups, key=lambda group: (group != rest, group)):
        if name == rest:
            owns = f"[{listed(claims[name][0][0])}]"
        else:
            owns = "[" + ",\n        ".join(
                f'{{ kinds = [{listed(kinds)}], prefix = "{prefix}", labels = {{ {label} = "{name}" }} }}'
                for kinds, prefix in claims[name]) + "]"
        table = f'[[sources]]\nname = "{name}"\nrepo = "<the URL of the {name} repo>"\nowns = {owns}\n'
        if name in shares:
            table += "shares = [" + ",\n          ".join(
                f"{{ kinds = [{listed([kind])}], ids = [{listed(ids)}], with = [{listed(readers)}] }}"
                for (kind, readers), ids in shares[name].items()) + "]\n"
        tables.append(table)
    return "\n".join(tables)


def export_split(body: Mapping[str, Any], args: argparse.Namespace, out: Path,
                 rules: SecretRules = NO_RULES) -> int:
    """`gitsync export --split-by LABEL` of the live config `body`: one repo per owner under `out`, each
    proven; exit 0 proven, 1 written with differences, 2 usage or a live config that cannot be split
    (the caller reports the gateway's and the file system's errors). Every check `export` makes of one
    repo is made of each before anything is written."""
    try:
        groups = split(live_items(body, []), args.split_by, args.split_rest)
        tables = sources_toml(groups, args.split_by, args.split_rest)  # before anything is written
        built = {name: build(items, args.layout, args.strip_defaults, rules)
                 for name, items in groups.items()}
        secrets = {f"{name}/{key}": value for name, done in built.items()
                   for key, value in done.secrets.items()}
        for value in secrets.values():
            register_secret(value)
        problems = [problem] if (problem := usage_problem(args, out, secrets)) else \
            [leak for done in built.values() for leak in clear_values(done.files, done.secrets)]
        if problems:
            for line in problems:
                print(f"gitsync export: {line}", file=sys.stderr)
            return 2
        # every repo and the tables as one tree: checked whole, written all or nothing
        tree = {f"{name}/{path}": data for name, done in built.items() for path, data in done.files.items()}
        tree[SOURCES_FILE] = tables.encode("utf-8")
        repo_writer.check_tree(out, tree)
        for name, done in built.items():
            if done.secrets:
                write_secrets(_secrets_path(args.secrets_out, name, bool(args.age_recipient)), done.secrets,
                              args.age_recipient)
        repo_writer.write_tree(out, tree)
    except SplitError as exc:
        print(f"gitsync export: --split-by {args.split_by}: {exc}", file=sys.stderr)
        return 2
    return _prove_each(built, groups, args, out)


def _secrets_path(base: Path, name: str, sops: bool) -> Path:
    """Where one owner's secret values go: a directory of its own, or a SOPS file of its own."""
    return base / f"{name}.sops.yaml" if sops else base / name


def _prove_each(built: Mapping[str, Exported], groups: Mapping[str, Items], args: argparse.Namespace,
                out: Path) -> int:
    """Prove each repo (references into kinds the repos share left to the composed payload) and say so."""
    failed = 0
    for name, done in sorted(built.items()):
        for warning in done.warnings:
            logger.warning("{}", warning)
        whole = {kind for kind in KINDS if kind in groups[name]} if name == args.split_rest else set()
        problems, notes = prove(done, RenderOptions(unmanaged=frozenset(KINDS) - whole))
        count = sum(len(items) for items in done.live.values())
        print(f"exported {count} item(s) of {name} into {len(done.files)} file(s) under {out / name}"
              + (f"; {len(done.secrets)} secret value(s)" if done.secrets else ""))
        for note in notes:
            print(f"note: {name}: {note}")
        for line in problems:
            print(f"gitsync export: round trip of {name}: {redact(line)}", file=sys.stderr)
        failed += bool(problems) and not args.strip_defaults
    print(f"[[sources]] that compose them again: {out / SOURCES_FILE}")
    if failed:
        return 1
    print("round trip: render of each written repo equals its live items (modifiedIndex aside)")
    return 0
