"""render(): files → load → decrypt → substitute → build → validate, as one pure function.

The input is ``{repo-relative path: bytes}``, so a git tree, a plain directory and
a test all feed it the same way. Nothing is written and nothing but the optional
secret lookup and decrypt callables reaches outside.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gitsync.configfiles import ConfigFiles
from gitsync.kinds import KINDS, item_id
from gitsync.log import MASK, Redactor, redact, register_secret, register_secrets
from gitsync.problems import Location, Problem, ProblemsError
from gitsync.render.build import Built, Loaded, build
from gitsync.render.facts import FileFacts
from gitsync.render.healthchecks import CHECKS, parse_checks
from gitsync.render.layers import layers
from gitsync.render.load import Document, ParsedFile, blob_sha
from gitsync.render.memo_api import NoMemo, RenderMemo
from gitsync.render.options import RenderOptions
from gitsync.render.result import LastGood, LeftOut, Rendered
from gitsync.render.secrets import SecretRules, classify, document_secret_values, value_at
from gitsync.render.sourcemap import FilePositions, SourceMap, field_text
from gitsync.render.substitute import Substitution
from gitsync.render.validate import dependants, item_contents, refers_to, validate
from gitsync.settings import secret_field_problem


def _sorted(problems: list[Problem]) -> list[Problem]:
    """Problems in file order; those without a place (limits) last."""
    return sorted(problems, key=lambda p: (p.location is None, p.location or Location("")))


#: (kind, item id) → (field, value) of each string of the item that holds a secret value.
SecretFields = dict[tuple[str, str | None], list[tuple[str, str]]]


def _redacted(problem: Problem, secret_fields: SecretFields,
              redactors: dict[frozenset[str], Redactor]) -> Problem:
    """A problem safe to log, print or write into a git note: no secret value in any part of it.

    Schema messages quote field values (``failed to match pattern ... with "<value>"``) and a value
    may have come from ``${{ secrets.* }}`` or a SOPS file. Render knows which fields did: a problem
    about such a field (or an item or container holding it) has that value masked in every spelling,
    even one too short for the log redactor (which masks the rest: values quoted elsewhere).
    """
    own = frozenset(value for field, value in secret_fields.get((problem.kind or "", problem.id), ())
                    if problem.field is None or _within(field, problem.field))
    local = redactors.get(own)
    if local is None:
        local = redactors[own] = Redactor(whole_words=True)
        local.add(own)

    def clean(text: str) -> str:
        return local.redact(redact(text))

    message = _mask_quoted_parts(problem.message, own) if own else problem.message
    return replace(problem, message=clean(message),
                   id=None if problem.id is None else clean(problem.id),
                   field=None if problem.field is None else clean(problem.field))


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", re.S)


def _mask_quoted_parts(message: str, values: frozenset[str]) -> str:
    """A message about a field holding a secret may quote a *part* of its value, in any escaping (the
    manager of a ``$secret://`` reference, Python's repr of a segment): every quoted text that is a
    piece of a secret value is masked, whatever its spelling."""

    def mask(match: re.Match[str]) -> str:
        literal = match.group(0)
        for decode in (_json_string, ast.literal_eval):
            try:
                text = decode(literal)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(text, str):
                break
        else:
            text = literal[1:-1]
        if text and any(text in value for value in values):
            return literal[0] + MASK + literal[-1]
        return literal

    return _QUOTED.sub(mask, message)


def _json_string(literal: str) -> Any:
    return json.loads(literal, strict=False)  # a value's raw line breaks and controls included


def _within(field: str, container: str) -> bool:
    """`field` is `container` or inside it (``a.b[0]`` is within ``a`` and ``a.b``)."""
    return field == container or field.startswith((container + ".", container + "["))


def _secret_fields(content: Any, leaves: list[tuple[tuple[str | int, ...], str]], into: SecretFields) -> None:
    """Record, per item, the fields of a document's `leaves` (paths into `content`) holding a secret."""
    if not isinstance(content, dict):
        return
    for path, value in leaves:
        if len(path) >= 2 and path[0] in KINDS and isinstance(path[1], int):
            items = content.get(path[0])
            item = items[path[1]] if isinstance(items, list) and path[1] < len(items) else None
            into.setdefault((str(path[0]), item_id(str(path[0]), item)), []).append(
                (field_text(path[2:]), value))


SECRET_FIELDS = "secret_fields"


def _repo_rules(built: Built, source_map: SourceMap, options: RenderOptions) -> tuple[SecretRules,
                                                                                        list[Problem]]:
    """The secret fields the repo declares (top-level ``secret_fields:``, never pushed) with the
    settings' own, and a problem for each entry that is not ``PLUGIN.PATH`` or ``KIND.PATH``."""
    entries = built.payload.pop(SECRET_FIELDS, [])
    built.ids.pop(SECRET_FIELDS, None)
    built.segments.pop(SECRET_FIELDS, None)
    problems = [source_map.problem(SECRET_FIELDS, index, why) for index, entry in enumerate(entries)
                if (why := secret_field_problem(entry)) is not None]
    return options.secret_rules + SecretRules.of(e for e in entries if isinstance(e, str)), problems


def _register_classified(parsed_files: list[ParsedFile], documents: list[Any], rules: SecretRules) -> None:
    """Every value the classifier finds secret goes to the log redactor (and so out of every log line,
    note, status file and web page): a plain file's once per parse (`register_file_secrets`), others
    each time."""
    for parsed in parsed_files:
        register_file_secrets(parsed, rules)
    for content in documents:
        register_secrets(document_secret_values(content, rules))


def register_file_secrets(parsed: ParsedFile, rules: SecretRules) -> None:
    """Register the values the classifier finds secret in a plain file (one without templates or SOPS)
    with the log redactor, worked out once per parse (kept in its memo, never stored). A render from
    the last one (`gitsync.render.memo_api.RenderMemo.render_next`) calls it for the files it changed,
    as a full render does for every file."""
    key = ("secret values", rules.entries)
    values = parsed.memo.get(key)
    if values is None:
        facts = parsed.memo.get("facts")
        values = parsed.memo[key] = frozenset(
            v for doc in parsed.documents
            for v in document_secret_values(doc.shared, rules, _contents(facts, doc.index)))
    register_secrets(values)


def _contents(facts: FileFacts | None, doc: int) -> dict[str, list[bytes]]:
    """The canonical contents validation worked out for a plain document's lists, by kind."""
    if facts is None:
        return {}
    return {kind: known.contents for (at, kind), known in facts.segments.items() if at == doc}


def _classified_fields(built: Built, problems: list[Problem], rules: SecretRules, into: SecretFields) -> None:
    """The fields of each item a problem is about that the classifier finds secret, with their values, so
    that the problem's message masks them in every spelling (`_redacted`)."""
    wanted = {(p.kind, p.id) for p in problems if p.kind in KINDS and p.id is not None}
    for kind, ident in wanted:
        ids = built.ids.get(kind, [])
        if ident not in ids:
            continue
        item = built.payload[kind][ids.index(ident)]
        for finding in classify(kind, item, rules):
            for piece in finding.pieces(value_at(item, finding.path)):
                into.setdefault((kind, ident), []).append((field_text(finding.path), piece))


def _doc_problem(file: str, doc: Document, data: Any, path: tuple[str | int, ...], message: str,
                 positions: FilePositions) -> Problem:
    """A problem at `path` inside a document, named ``kind[id].field`` when the path is inside an item."""
    location = positions.location(file, doc.index, path, doc.pos)
    if len(path) >= 2 and path[0] in KINDS and isinstance(path[1], int) and isinstance(data, dict):
        items = data.get(path[0])
        item = items[path[1]] if isinstance(items, list) and path[1] < len(items) else None
        return Problem(message, location, str(path[0]), item_id(str(path[0]), item),
                       field_text(path[2:]) or None)
    return Problem(message, location, None, None, field_text(path) or None)


def _decrypted_leaves(encrypted: Any, plain: Any, path: tuple[str | int, ...] = ()
                      ) -> list[tuple[tuple[str | int, ...], str]]:
    """(path, plain string) of each value that was ``ENC[...]`` in the encrypted document."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    if isinstance(encrypted, str):
        if encrypted.startswith("ENC[") and isinstance(plain, str):
            found.append((path, plain))
    elif isinstance(encrypted, dict) and isinstance(plain, dict):
        for key, value in encrypted.items():
            if key != "sops" and key in plain:
                found += _decrypted_leaves(value, plain[key], (*path, key))
    elif isinstance(encrypted, list) and isinstance(plain, list):
        for index, (value, plain_value) in enumerate(zip(encrypted, plain, strict=False)):
            found += _decrypted_leaves(value, plain_value, (*path, index))
    return found


def _decrypt(file: str, doc: Document, encrypted: Any, options: RenderOptions, secrets: set[str],
             problems: list[Problem], secret_fields: SecretFields) -> Any:
    """The plain document of a SOPS-encrypted one, or None (with a problem) when it cannot be had."""
    where = Location(file, *doc.pos)
    if options.decrypt is None:
        problems.append(Problem("this file is encrypted with SOPS but no age identity is configured "
                                "(--age-key-file, GITSYNC_AGE_KEY, SOPS_AGE_KEY_FILE)", where))
        return None
    try:
        plain = options.decrypt(file, copy.deepcopy(encrypted))
    except Exception as exc:  # the decrypt seam: whatever it raises is a problem with this file
        problems.append(Problem(f"cannot decrypt: {redact(str(exc)) or type(exc).__name__}", where))
        return None
    leaves = _decrypted_leaves(encrypted, plain)
    for _, value in leaves:
        register_secret(value)
    secrets.update(value for _, value in leaves)
    if isinstance(plain, dict) and "sops" in plain:
        plain = {k: v for k, v in plain.items() if k != "sops"}
    _secret_fields(plain, leaves, secret_fields)
    return plain


def render(files: Mapping[str, bytes], options: RenderOptions | None = None,
           memo: RenderMemo | None = None, fallback: LastGood | None = None) -> Rendered:
    """Render the config files to one payload; raise ProblemsError with every problem found.

    With ``options.partial``, problems that each belong to one item do not refuse the whole: see
    `_leave_out`; `fallback` gives a left-out item its last good version."""
    options = options or RenderOptions()
    memo = memo if memo is not None else NoMemo()
    try:
        return _render(files, options, memo, fallback)
    finally:
        memo.end_render()


def _render(files: Mapping[str, bytes], options: RenderOptions, memo: RenderMemo,
            fallback: LastGood | None = None) -> Rendered:
    following = memo.render_next(files, options) if fallback is None else None
    if following is not None:
        return following
    render_problems: list[Problem] = []
    known = files if isinstance(files, ConfigFiles) else ConfigFiles()
    oversized = known.oversized
    buckets, empty = layers([*files, *known.unread, *oversized], options.paths)
    for path in empty:
        render_problems.append(Problem(f"no config files (*.yaml, *.yml, *.json) under the path {path!r}"))
    positions = FilePositions(files)
    substitution = Substitution(options.vars, options.secret_lookup)
    secrets: set[str] = set()
    loaded: list[Loaded] = []
    facts: dict[str, FileFacts] = {}
    unsubstituted: set[tuple[str, int, str, int]] = set()  # items still holding a failed expression
    secret_fields: SecretFields = {}
    plain_files: list[ParsedFile] = []
    #: Files whose items are unknown, with their bytes (a YAML error: what they may declare can be
    #: searched) or None (never read, or encrypted: they may declare anything).
    unknown: dict[str, bytes | None] = {}
    hashed = _parse_missing(files, known, [name for names in buckets for name in names], options, memo)
    for layer, names in enumerate(buckets):
        for name in names:
            blob = known.blob_ids.get(name) or hashed.get(name)
            parsed: ParsedFile | None = memo.cached(blob) if blob else None
            size = parsed.size if parsed is not None else oversized.get(name) or len(files.get(name) or b"")
            if name in oversized or size > options.max_file_size:
                render_problems.append(Problem(f"the file is {size} bytes, more than max_file_size = "
                                               f"{options.max_file_size}", Location(name)))
                unknown[name] = None
                continue
            parsed = parsed or memo.get(files[name], blob)
            if parsed.issues:
                render_problems += [Problem(i.message, Location(name, i.line, i.col)) for i in parsed.issues]
                unknown[name] = files[name]
                continue
            if not parsed.has_templates and not parsed.has_sops:
                facts[name] = FileFacts.of(parsed)
            if parsed.has_sops and len(parsed.documents) > 1:
                # sops's MAC covers every document of the file; the decrypt seam takes one at a time.
                render_problems.append(Problem("a SOPS file with several YAML documents is not supported: "
                                               "keep one document per encrypted file", Location(name)))
                unknown[name] = None
                continue
            plain = not parsed.has_templates and not parsed.has_sops
            if plain:
                plain_files.append(parsed)
            for doc in parsed.documents:
                content = doc.shared if plain else doc.data
                encrypted = parsed.has_sops and isinstance(content, dict) and isinstance(content.get("sops"),
                                                                                           dict)
                if encrypted:
                    content = _decrypt(name, doc, content, options, secrets, render_problems, secret_fields)
                    if content is None:
                        unknown[name] = None
                        continue
                if parsed.has_templates or encrypted:
                    before, leaves_before = len(substitution.problems), len(substitution.secret_leaves)
                    content = substitution.document(content)
                    _secret_fields(content, substitution.secret_leaves[leaves_before:], secret_fields)
                    for path, message in substitution.problems[before:]:
                        render_problems.append(_doc_problem(name, doc, content, path, message, positions))
                        if len(path) >= 2 and isinstance(path[1], int):
                            unsubstituted.add((name, doc.index, str(path[0]), path[1]))
                loaded.append(Loaded(name, layer, doc, content, parsed.memo if plain else None))
    built = build(loaded)
    source_map = SourceMap(files, built.sources, positions, built.patched)
    def check_field(index: int, path: tuple[str | int, ...]) -> Location | None:
        return source_map.problem(CHECKS, index, "", path).location

    checks, check_problems = parse_checks(built.payload.pop(CHECKS, []), check_field, options.check_limits)
    built.ids.pop(CHECKS, None)
    built.segments.pop(CHECKS, None)
    rules, rule_problems = _repo_rules(built, source_map, options)
    check_problems += rule_problems
    problems = built.problems + check_problems + validate(built.payload, source_map, options, unknown, facts,
                                                          unsubstituted, built.segments, built.ids)
    _register_classified(plain_files, [one.data for one in loaded if one.memo is None], rules)
    everything = render_problems + problems
    left_out: dict[tuple[str, str], LeftOut] = {}
    while everything and options.partial and _each_of_one_item(everything):
        for out in _leave_out(built, source_map, everything, fallback, set(left_out)):
            left_out[out.kind, out.id] = out
        source_map = SourceMap(files, built.sources, positions, built.patched)
        facts = {}  # a last good item may stand where a file's item stood: no file is as parsed
        everything = validate(built.payload, source_map, options, unknown, facts, unsubstituted,
                              ids=built.ids)
    if everything:
        stage = "render" if render_problems else "validate"
        redactors: dict[frozenset[str], Redactor] = {}
        _classified_fields(built, everything, rules, secret_fields)
        raise ProblemsError(stage, [_redacted(p, secret_fields, redactors) for p in _sorted(everything)])
    if left_out and fallback is not None:
        secrets |= fallback.secret_values
    redactors = {}
    _classified_fields(built, [out.why for out in left_out.values()], rules, secret_fields)
    contents, splits = item_contents(built.payload, source_map, facts, built.segments if not left_out else {})
    rendered = Rendered(built.payload, source_map, frozenset(secrets | substitution.secret_values),
                        tuple(checks), contents,
                        tuple(sorted((replace(out, why=_redacted(out.why, secret_fields, redactors))
                                      for out in left_out.values()), key=_where)),
                        built.ids, splits, rules)
    memo.remember(options, files, built, facts, rendered, [name for names in buckets for name in names])
    return rendered


def _parse_missing(files: Mapping[str, bytes], known: ConfigFiles, names: list[str], options: RenderOptions,
                   memo: RenderMemo) -> dict[str, str]:
    """Have the memo parse the files it lacks ahead of the render (on every CPU, when they are many).
    The blob SHA of each file that came without one (a directory's), worked out once for the render."""
    missing, hashed = {}, {}
    for name in names:
        blob = known.blob_ids.get(name)
        if name in known.oversized or (blob is not None and memo.has(blob)):
            continue  # reported by the render; or parsed already, its bytes not even read
        data = files.get(name)
        if data is None or len(data) > options.max_file_size:
            continue
        if blob is None:
            blob = hashed[name] = blob_sha(data)
            if memo.has(blob):
                continue
        missing[blob] = data
    memo.prepare(list(missing.items()))
    return hashed


def _where(out: LeftOut) -> tuple[Location, str, str]:
    return out.why.location or Location(""), out.kind, out.id


def _each_of_one_item(problems: list[Problem]) -> bool:
    """Whether every problem belongs to one identified item (else partial apply cannot help: a file
    that did not load, a payload too large, an item without an id)."""
    return all(p.kind in KINDS and p.id is not None for p in problems)


def _leave_out(built: Built, sources: SourceMap, problems: list[Problem], fallback: LastGood | None,
               again: set[tuple[str, str]]) -> list[LeftOut]:
    """Partial apply: the items with a problem, and every item that refers to one of them (until none
    does), are left out of this commit. Each keeps its last good version where `fallback` has one,
    in place, unless it is in `again` (its last good version was kept and failed too); else it is
    not applied at all. `built` is changed in place."""
    why: dict[tuple[str, str], Problem] = {}
    for problem in problems:
        assert problem.kind is not None and problem.id is not None
        why.setdefault((problem.kind, problem.id), problem)
    bad = set(why)
    while more := dependants(built.payload, bad) - bad:
        for kind, ident in more:
            target = min(refers_to(kind, _item(built.payload, (kind, ident))) & bad)
            why[kind, ident] = sources.problem(kind, sources.index_of(kind, ident),
                                               f"refers to {target[0]}[{target[1]}], which is left out")
        bad |= more
    kept = fallback.items if fallback is not None else {}
    out = []
    for kind in list(built.payload):
        keep = []
        for item, source in zip(built.payload[kind], built.sources[kind], strict=True):
            key = (kind, item_id(kind, item) or "")
            last = None if key in again else kept.get(key)
            if key in bad:
                out.append(LeftOut(kind, key[1], why[key], last is not None))
                item = last
            if item is not None:
                keep.append((item, source))
        built.payload[kind] = [item for item, _ in keep]
        built.sources[kind] = [source for _, source in keep]
        built.ids[kind] = [source.id for _, source in keep]
    built.segments.clear()  # the runs of whole documents no longer hold
    return out


def _item(payload: Mapping[str, list[Any]], key: tuple[str, str]) -> Any:
    return next(item for item in payload.get(key[0], ()) if item_id(key[0], item) == key[1])
