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
from dataclasses import dataclass, field, replace
from typing import Any

from gitsync.configfiles import ConfigFiles
from gitsync.kinds import KINDS, item_id
from gitsync.log import MASK, Redactor, redact, register_secret, register_secrets
from gitsync.notation import secret_field_problem
from gitsync.problems import Location, Problem, ProblemsError
from gitsync.render.build import Built, Loaded, build
from gitsync.render.facts import FACTS, FileFacts
from gitsync.render.filememo import MemoSlot
from gitsync.render.healthchecks import CHECKS, Check, parse_checks
from gitsync.render.layers import layers
from gitsync.render.load import Document, ParsedFile, blob_sha
from gitsync.render.memo_api import NoMemo, RenderMemo
from gitsync.render.openapi.declaration import OPENAPI
from gitsync.render.openapi.stage import expand
from gitsync.render.options import RenderOptions
from gitsync.render.references import dependants, refers_to
from gitsync.render.result import LastGood, LeftOut, Rendered
from gitsync.render.secrets import SecretRules, classify, document_secret_values, value_at
from gitsync.render.sourcemap import FilePositions, Generated, ItemSource, SourceMap, field_text
from gitsync.render.substitute import Substitution
from gitsync.render.validate import item_contents, validate


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
    detail = None if problem.detail is None else clean(_mask_quoted_parts(problem.detail, own) if own else
                                                       problem.detail)
    return replace(problem, message=clean(message), detail=detail,
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


#: Where a plain file's parse keeps the values the classifier finds secret in it, by the rules it used.
SECRET_VALUES: MemoSlot[dict[tuple[str, ...], frozenset[str]]] = MemoSlot("secret values")


def register_file_secrets(parsed: ParsedFile, rules: SecretRules) -> None:
    """Register the values the classifier finds secret in a plain file (one without templates or SOPS)
    with the log redactor, worked out once per parse (kept in its memo, never stored). A render from
    the last one (`gitsync.render.memo_api.RenderMemo.render_next`) calls it for the files it changed,
    as a full render does for every file."""
    kept = parsed.memo.setdefault(SECRET_VALUES, {})
    values = kept.get(rules.entries)
    if values is None:
        facts = parsed.memo.get(FACTS)
        values = kept[rules.entries] = frozenset(
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


@dataclass
class _Loading:
    """What loading a commit's files gathers: their documents (after decryption and substitution), the
    problems found on the way, and what later stages need to know of each file."""

    files: Mapping[str, bytes]
    options: RenderOptions
    positions: FilePositions
    substitution: Substitution
    problems: list[Problem] = field(default_factory=list)
    loaded: list[Loaded] = field(default_factory=list)
    secrets: set[str] = field(default_factory=set)  # decrypted values
    facts: dict[str, FileFacts] = field(default_factory=dict)  # plain files: what validation may reuse
    plain_files: list[ParsedFile] = field(default_factory=list)
    unsubstituted: set[tuple[str, int, str, int]] = field(default_factory=set)  # items with a failed ${{ }}
    secret_fields: SecretFields = field(default_factory=dict)
    #: Files whose items are unknown, with their bytes (a YAML error: what they may declare can be
    #: searched) or None (never read, or encrypted: they may declare anything).
    unknown: dict[str, bytes | None] = field(default_factory=dict)
    rendered_files: list[str] = field(default_factory=list)  # the config files under the paths, in order
    parsed: dict[str, ParsedFile] = field(default_factory=dict)  # each file's parse, by name
    #: The items rendered from OpenAPI specs (`gitsync.render.openapi`): where each came from.
    generated: dict[tuple[str, ItemSource], Generated] = field(default_factory=dict)
    warnings: list[Problem] = field(default_factory=list)  # plain scalars YAML 1.1 reads otherwise

    def too_large(self, name: str, size: int) -> None:
        self.problems.append(Problem(f"the file is {size} bytes, more than max_file_size = "
                                     f"{self.options.max_file_size}", Location(name)))
        self.unknown[name] = None

    def file(self, name: str, layer: int, parsed: ParsedFile) -> None:
        """Load one parsed file: its documents, or why it cannot be used."""
        self.parsed[name] = parsed
        if parsed.issues:
            self.problems += [Problem(i.message, Location(name, i.line, i.col)) for i in parsed.issues]
            self.unknown[name] = self.files[name]
            return
        if parsed.warnings:
            noted = [Problem(w.message, Location(name, w.line, w.col)) for w in parsed.warnings]
            if self.options.ambiguous_scalars == "error":
                self.problems += noted
            else:
                self.warnings += noted
        plain = not parsed.has_templates and not parsed.has_sops
        if plain:
            self.facts[name] = FileFacts.of(parsed)
            self.plain_files.append(parsed)
        if parsed.has_sops and len(parsed.documents) > 1:
            # sops's MAC covers every document of the file; the decrypt seam takes one at a time.
            self.problems.append(Problem("a SOPS file with several YAML documents is not supported: keep one "
                                         "document per encrypted file", Location(name)))
            self.unknown[name] = None
            return
        for doc in parsed.documents:
            content = self.document(name, parsed, doc)
            if content is not _UNREADABLE:
                self.loaded.append(Loaded(name, layer, doc, content, parsed.memo if plain else None))

    def document(self, name: str, parsed: ParsedFile, doc: Document) -> Any:
        """A document's content, decrypted and substituted as its file needs (`_UNREADABLE`: none)."""
        if not parsed.has_templates and not parsed.has_sops:
            return doc.shared
        content = doc.data
        encrypted = parsed.has_sops and isinstance(content, dict) and isinstance(content.get("sops"), dict)
        if encrypted:
            content = _decrypt(name, doc, content, self.options, self.secrets, self.problems,
                               self.secret_fields)
            if content is None:
                self.unknown[name] = None
                return _UNREADABLE
        if parsed.has_templates or encrypted:
            substitution = self.substitution
            before, leaves_before = len(substitution.problems), len(substitution.secret_leaves)
            content = substitution.document(content)
            _secret_fields(content, substitution.secret_leaves[leaves_before:], self.secret_fields)
            for path, message in substitution.problems[before:]:
                self.problems.append(_doc_problem(name, doc, content, path, message, self.positions))
                if len(path) >= 2 and isinstance(path[1], int):
                    self.unsubstituted.add((name, doc.index, str(path[0]), path[1]))
        return content


_UNREADABLE = object()


def _render(files: Mapping[str, bytes], options: RenderOptions, memo: RenderMemo,
            fallback: LastGood | None = None) -> Rendered:
    following = memo.render_next(files, options) if fallback is None else None
    if following is not None:
        return following
    run = _load(files, options, memo)
    _expand_specs(run, memo)
    built = build(run.loaded)
    source_map = SourceMap(files, built.sources, run.positions, built.patched, run.generated)
    checks, rules, problems = _checked(built, source_map, run, options)
    _register_classified(run.plain_files, [one.data for one in run.loaded if one.memo is None], rules)
    everything = run.problems + problems
    left_out: dict[tuple[str, str], LeftOut] = {}
    if everything and options.partial and _each_of_one_item(everything):
        everything, source_map = _partial(built, everything, run, fallback, left_out)
    if everything:
        stage = "render" if run.problems else "validate"
        _classified_fields(built, everything, rules, run.secret_fields)
        redactors: dict[frozenset[str], Redactor] = {}
        raise ProblemsError(stage, [_redacted(p, run.secret_fields, redactors) for p in _sorted(everything)])
    rendered = _result(built, source_map, run, checks, rules, left_out, fallback)
    memo.remember(options, files, built, run.facts, rendered, run.rendered_files)
    return rendered


def _load(files: Mapping[str, bytes], options: RenderOptions, memo: RenderMemo) -> _Loading:
    """Every config file under the configured paths, loaded in layer order (parsed by the memo)."""
    known = files if isinstance(files, ConfigFiles) else ConfigFiles()
    buckets, empty = layers([*files, *known.unread, *known.oversized], options.paths)
    run = _Loading(files, options, FilePositions(files), Substitution(options.vars, options.secret_lookup))
    run.problems += [Problem(f"no config files (*.yaml, *.yml, *.json) under the path {path!r}")
                     for path in empty]
    run.rendered_files = [name for names in buckets for name in names]
    hashed = _parse_missing(files, known, run.rendered_files, options, memo)
    for layer, names in enumerate(buckets):
        for name in names:
            blob = known.blob_ids.get(name) or hashed.get(name)
            parsed = memo.cached(blob) if blob else None
            # a parsed file's size is the memo's: its bytes are read (from the mirror) only when needed
            size = parsed.size if parsed is not None else _unread_size(files, known, name)
            if name in known.oversized or size > options.max_file_size:
                run.too_large(name, size)
                continue
            run.file(name, layer, parsed or memo.get(files[name], blob))
    return run


def _expand_specs(run: _Loading, memo: RenderMemo) -> None:
    """The repo's OpenAPI specs rendered into documents of their items (`gitsync.render.openapi.stage`);
    the spec files, and those their references read, are no config files."""
    specs = expand(run.loaded, run.problems, run.files, run.parsed, memo, run.positions,
                   run.options.max_file_size, run.options.max_items)
    if specs is None:
        return
    run.loaded, run.problems, run.generated = specs.loaded, specs.problems, specs.generated
    spec_parses = {id(run.parsed[name]) for name in specs.files if name in run.parsed}
    run.plain_files = [parsed for parsed in run.plain_files if id(parsed) not in spec_parses]
    for name in specs.files:
        run.facts.pop(name, None)
        run.unknown.pop(name, None)
    for conversion in specs.conversions:
        if conversion.problems:  # its items are unknown: what refers to them is not reported as well
            run.unknown[conversion.declaration.spec] = None


def _unread_size(files: Mapping[str, bytes], known: ConfigFiles, name: str) -> int:
    return known.oversized.get(name) or len(files.get(name) or b"")


def _checked(built: Built, source_map: SourceMap, run: _Loading, options: RenderOptions,
             ) -> tuple[list[Check], SecretRules, list[Problem]]:
    """The repo's health checks and secret rules taken out of the payload, and every problem of the
    rest (its items, references and limits)."""
    def check_field(index: int, path: tuple[str | int, ...]) -> Location | None:
        return source_map.problem(CHECKS, index, "", path).location

    checks, problems = parse_checks(built.payload.pop(CHECKS, []), check_field, options.check_limits)
    for kind in (CHECKS, OPENAPI):  # the declarations were rendered by the spec stage
        built.payload.pop(kind, None)
        built.ids.pop(kind, None)
        built.segments.pop(kind, None)
    rules, rule_problems = _repo_rules(built, source_map, options)
    problems = built.problems + problems + rule_problems
    problems += validate(built.payload, source_map, options, run.unknown, run.facts, run.unsubstituted,
                         built.segments, built.ids)
    return checks, rules, problems


def _partial(built: Built, problems: list[Problem], run: _Loading, fallback: LastGood | None,
             left_out: dict[tuple[str, str], LeftOut]) -> tuple[list[Problem], SourceMap]:
    """Partial apply: leave out the items with problems (and what refers to them) until what is left
    validates, or a problem is not one item's; `left_out` gathers them. What is still wrong, and the
    source map of what is left."""
    source_map = SourceMap(run.files, built.sources, run.positions, built.patched, run.generated)
    while problems and _each_of_one_item(problems):
        for out in _leave_out(built, source_map, problems, fallback, set(left_out)):
            left_out[out.kind, out.id] = out
        source_map = SourceMap(run.files, built.sources, run.positions, built.patched, run.generated)
        run.facts = {}  # a last good item may stand where a file's item stood: no file is as parsed
        problems = validate(built.payload, source_map, run.options, run.unknown, run.facts, run.unsubstituted,
                            ids=built.ids)
    return problems, source_map


def _result(built: Built, source_map: SourceMap, run: _Loading, checks: list[Check], rules: SecretRules,
            left_out: Mapping[tuple[str, str], LeftOut], fallback: LastGood | None) -> Rendered:
    """The render of a commit that validated (with what partial apply left out of it)."""
    secrets = run.secrets | run.substitution.secret_values
    if left_out and fallback is not None:
        secrets |= fallback.secret_values
    _classified_fields(built, [out.why for out in left_out.values()], rules, run.secret_fields)
    redactors: dict[frozenset[str], Redactor] = {}
    contents, splits = item_contents(built.payload, source_map, run.facts,
                                     built.segments if not left_out else {})
    outs = sorted((replace(out, why=_redacted(out.why, run.secret_fields, redactors))
                   for out in left_out.values()), key=_where)
    return Rendered(built.payload, source_map, frozenset(secrets), tuple(checks), contents, tuple(outs),
                    built.ids, splits, rules, tuple(_sorted(run.warnings)))


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
