"""A payload written as config repo files: deterministic block YAML, safe file names, one layout.

Export and both imports end here. The content comes from outside (a live gateway, a
team's files), so nothing in it decides where a file goes: names are derived from ids
by `safe_stems` (only ``[A-Za-z0-9._-]``, no leading dot, at most 64 characters,
collisions told apart by a digest of the original, names Windows reserves for devices
prefixed with ``_``) and `write_tree` refuses any path that would leave the output
directory, follows no symlink and never overwrites. It checks every path before it
writes the first file, and removes what it wrote when a write fails: all or nothing.

Items keep the order they came in: render reads files in path order and documents
in file order, and a kind whose order changes is a kind the first sync re-sends.
Within an item the identity comes first and every mapping's keys are sorted, so the
same input always gives the same bytes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitsync.adopt.arguments import LAYOUTS
from gitsync.adopt.secret_fields import Placeholder
from gitsync.kinds import KINDS, item_id
from gitsync.render.scalars import read as read_plain

MAX_STEM = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: Names Windows keeps for devices, in any case and with any extension (``nul.yaml``, ``aux.x.yaml``).
WINDOWS_RESERVED = frozenset({"con", "prn", "aux", "nul", *(f"{port}{n}" for port in ("com", "lpt")
                                                           for n in range(10))})
_IDENTITY_KEYS = ("id", "username")

Payload = Mapping[str, Sequence[Any]]


class WriteError(Exception):
    """The output cannot be written as asked (not empty, outside the directory, a clash)."""


# ---------------------------------------------------------------------------------------------------------
# Values


def escape_templates(value: Any) -> Any:
    """Every ``${{`` (in keys too) written as ``$${{``, so render gives back the literal text.

    A `Placeholder` is already in repo syntax and is kept as it is.
    """
    if isinstance(value, Placeholder):
        return value
    if isinstance(value, str):
        return value.replace("${{", "$${{")
    if isinstance(value, Mapping):
        return {escape_templates(k): escape_templates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_templates(v) for v in value]
    return value


class TextTemplate(Placeholder):
    """Repo text that is exactly one ``${{ vars.X }}`` and must stay text: written quoted (unquoted,
    render gives it the type YAML gives its value)."""

    __slots__ = ()


class NumberReference(Placeholder):
    """Repo text that is exactly one ``${{ number(vars.X) }}``: rendered as the number X holds."""

    __slots__ = ()

    @classmethod
    def to(cls, name: str) -> NumberReference:
        return cls(f"${{{{ number(vars.{name}) }}}}")


def rewrite_matches(value: Any, pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str]) -> Any:
    """Every string holding `pattern` rewritten as repo text: each match by `replace` (repo syntax,
    e.g. ``${{ vars.X }}``), the text around it escaped; the result is a `Placeholder`."""
    if isinstance(value, str):
        if not pattern.search(value):
            return value
        text, pos = "", 0
        for match in pattern.finditer(value):
            text += escape_templates(value[pos:match.start()]) + replace(match)
            pos = match.end()
        return Placeholder(text + escape_templates(value[pos:]))
    if isinstance(value, Mapping):
        return {k: rewrite_matches(v, pattern, replace) for k, v in value.items()}
    if isinstance(value, list):
        return [rewrite_matches(v, pattern, replace) for v in value]
    return value


def dollar_before(reference: str, name: str, tool: str) -> str:
    """Why `reference`, a ``$`` and then a reference to `name` in `tool`'s syntax, cannot be imported."""
    return (f"{reference}: {tool} writes a '$' and then the value of {name}; gitsync's syntax cannot write "
            "that ('$${{' is its escape of a literal '${{'): put the '$' into the variable's value")


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def ordered_item(item: Any) -> Any:
    """The item with its identity (`id`, `username`) first and every mapping's keys sorted."""
    if not isinstance(item, Mapping):
        return _sorted_keys(item)
    first = {k: item[k] for k in _IDENTITY_KEYS if k in item}
    return {**first, **{k: _sorted_keys(item[k]) for k in sorted(item) if k not in first}}


class _Literal(str):
    """Written as a ``|`` block."""

    __slots__ = ()


class _Quoted(str):
    """Written double-quoted, with escapes."""

    __slots__ = ()


def _styled(value: Any) -> Any:
    """Multi-line printable strings (certificates, protos) as ``|`` blocks; any string holding another
    control character (keys too) double-quoted with escapes, the one style that keeps it exact; and a
    string that YAML 1.1 tools would read as something else unquoted (``yes``, ``on``), quoted: every
    tool then reads the text gitsync reads, and ``gitsync validate`` has nothing to warn of."""
    if isinstance(value, TextTemplate):
        return _Quoted(value)
    if isinstance(value, str):
        lines = value.split("\n")
        if not all(line.isprintable() for line in lines) or read_plain(value).note is not None:
            return _Quoted(value)
        return _Literal(value) if len(value.rstrip("\n").split("\n")) > 1 else str(value)
    if isinstance(value, Mapping):
        return {_styled(k): _styled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_styled(v) for v in value]
    return value


def _scalar(style: str) -> Callable[[Any, str], Any]:
    return lambda representer, text: representer.represent_scalar("tag:yaml.org,2002:str", str(text),
                                                                  style=style)


@functools.cache
def _dumper() -> YAML:
    """libyaml's emitter (ruamel's C extension; the pure-Python one took 2 s per 1,000 routes), set
    up once: a per-item export dumps one small document per file."""
    yaml = YAML(typ="safe", pure=False)
    yaml.default_flow_style = False
    yaml.allow_unicode = True
    yaml.width = 4096
    yaml.representer.sort_base_mapping_type_on_output = False
    yaml.representer.ignore_aliases = lambda *_: True
    yaml.representer.add_representer(_Literal, _scalar("|"))
    yaml.representer.add_representer(_Quoted, _scalar('"'))
    return yaml


def dump_documents(documents: Iterable[Mapping[str, Any]]) -> bytes:
    """Block YAML, one document per mapping, keys in the order given, no anchors, lines not folded."""
    stream = io.StringIO()
    _dumper().dump_all([_styled(doc) for doc in documents], stream)
    return stream.getvalue().encode("utf-8")


def document(kinds: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """``{kind: [items]}`` in KINDS order, items ordered for reading, empty kinds left out."""
    return {kind: [ordered_item(i) for i in kinds[kind]] for kind in KINDS if kinds.get(kind)}


# ---------------------------------------------------------------------------------------------------------
# File names


def _stem(text: str) -> str:
    return _UNSAFE.sub("_", text).lstrip("._-")[:MAX_STEM].rstrip("._-")


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _checkout_safe(stem: str) -> str:
    """`stem`, or ``_`` + `stem` when Windows reserves it for a device (``CON``, ``nul.x``, ``COM1``): no
    other stem starts with ``_``, so the escaped ones stay distinct from every other."""
    return "_" + stem if stem.split(".", 1)[0].lower() in WINDOWS_RESERVED else stem


def safe_stems(names: Iterable[str]) -> dict[str, str]:
    """A file-name stem for each name: safe characters only, unique even on a case-blind disk, never a
    name Windows reserves.

    A name that is already safe keeps its own spelling unless another safe name differs
    only in case; every other name gets its digest appended, so the result depends on
    the set of names, never on their order. A stem Windows reserves for a device gets a
    leading ``_`` (`_checkout_safe`).
    """
    stems = {name: _stem(name) for name in set(names)}
    safe_per_folded: dict[str, int] = {}
    for name, stem in stems.items():
        if stem == name:
            safe_per_folded[stem.lower()] = safe_per_folded.get(stem.lower(), 0) + 1
    out: dict[str, str] = {}
    for name, stem in stems.items():
        if stem and stem == name and safe_per_folded[stem.lower()] == 1:
            out[name] = _checkout_safe(stem)
        else:
            out[name] = _checkout_safe(f"{stem[:MAX_STEM - 9]}-{_digest(name)}" if stem
                                       else f"item-{_digest(name)}")
    return out


# ---------------------------------------------------------------------------------------------------------
# Layouts


def _identity(kind: str, item: Any, index: int) -> str:
    return item_id(kind, item) or f"#{index}"


def plan_files(payload: Payload, layout: str) -> dict[str, dict[str, list[Any]]]:
    """Relative path → the document it holds, for `layout` (see docs/repo-format.md)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (one of {', '.join(LAYOUTS)})")
    kinds = {kind: list(payload.get(kind) or ()) for kind in KINDS if payload.get(kind)}
    if layout == "per-kind":
        return {f"{kind}.yaml": {kind: items} for kind, items in kinds.items()}
    if layout == "per-item":
        files: dict[str, dict[str, list[Any]]] = {}
        for kind, items in kinds.items():
            stems = safe_stems(_identity(kind, item, i) for i, item in enumerate(items))
            for index, item in enumerate(items):
                files[f"{kind}/{stems[_identity(kind, item, index)]}.yaml"] = {kind: [item]}
        return files
    return _per_service(kinds)


def _per_service(kinds: dict[str, list[Any]]) -> dict[str, dict[str, list[Any]]]:
    """One file per service with the routes and stream routes that use it; other items by kind."""
    services = kinds.pop("services", [])
    ids = [_identity("services", s, i) for i, s in enumerate(services)]
    stems = safe_stems(ids)
    files: dict[str, dict[str, list[Any]]] = {}
    owned: dict[str, dict[str, list[Any]]] = {sid: {"services": [svc]} for sid, svc in zip(ids, services,
                                                                                          strict=True)}
    for kind in ("routes", "stream_routes"):
        rest = []
        for item in kinds.pop(kind, []):
            owner = str(item.get("service_id")) if isinstance(item, Mapping) else None
            if owner in owned:
                owned[owner].setdefault(kind, []).append(item)
            else:
                rest.append(item)
        if rest:
            kinds[kind] = rest
    for sid, doc in owned.items():
        files[f"services/{stems[sid]}.yaml"] = doc
    for kind, items in kinds.items():
        files[f"{kind}.yaml"] = {kind: items}
    return files


def render_files(planned: Mapping[str, Mapping[str, Sequence[Any]]]) -> dict[str, bytes]:
    """The bytes of every planned file (templates escaped, keys ordered)."""
    return {path: dump_documents([document(escape_templates(doc))]) for path, doc in sorted(planned.items())}


# ---------------------------------------------------------------------------------------------------------
# Writing


def check_target(out: Path) -> None:
    """`out` must be absent or hold only dot-entries (``.git``): the export never merges into files."""
    if out.is_symlink():
        raise WriteError(f"{out}: is a symbolic link; give a real directory")
    if out.exists() and not out.is_dir():
        raise WriteError(f"{out}: exists and is not a directory")
    if out.is_dir():
        visible = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
        if visible:
            raise WriteError(f"{out}: is not empty ({', '.join(visible[:3])}…); give a new directory")


def _plain_parts(relative: str) -> list[str]:
    parts = relative.split("/")
    if any(p in ("", ".", "..") or "\0" in p or "\\" in p for p in parts):
        raise WriteError(f"refusing the path {relative!r}: not a plain relative path")
    return parts


def check_tree(out: Path, files: Iterable[str]) -> None:
    """Every path of `files` may be created under `out`: a plain relative path, not there yet, no
    symbolic link and no file on the way. The first one that may not is raised as a `WriteError`."""
    if out.is_symlink():
        raise WriteError(f"{out}: is a symbolic link; give a real directory")
    if out.exists() and not out.is_dir():
        raise WriteError(f"{out}: exists and is not a directory")
    root = out.resolve()
    for relative in sorted(files):
        parts = _plain_parts(relative)
        place = root
        for part in parts[:-1]:
            place = place / part
            if place.is_symlink():
                raise WriteError(f"refusing the path {relative!r}: a directory on the way is a symbolic link")
            if place.exists() and not place.is_dir():
                raise WriteError(f"refusing the path {relative!r}: {place} is not a directory")
        target = place / parts[-1]
        if os.path.lexists(target):
            what = "a symbolic link" if target.is_symlink() else "already there"
            raise WriteError(f"{target}: {what}; nothing is overwritten")


def _make_dirs(directory: Path, created: list[Path]) -> None:
    """Create `directory` and its missing parents, each noted in `created` (in order)."""
    missing = []
    while not directory.exists() and not directory.is_symlink():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        path.mkdir()
        created.append(path)


def _remove(files: list[Path], directories: list[Path]) -> None:
    """Undo a write: the files it created, then the directories it created (deepest first)."""
    for path in reversed(files):
        with contextlib.suppress(OSError):
            path.unlink()
    for path in reversed(directories):
        with contextlib.suppress(OSError):
            path.rmdir()


def write_tree(out: Path, files: Mapping[str, bytes], mode: int = 0o644) -> list[Path]:
    """Create each file under `out`, all or nothing: every path is checked first (`check_tree`), and a
    write that fails removes what this call created before the error is raised."""
    check_tree(out, files)
    root = out.resolve()
    written: list[Path] = []
    made: list[Path] = []
    try:
        _make_dirs(root, made)
        for relative, data in sorted(files.items()):
            target = root.joinpath(*_plain_parts(relative))
            _make_dirs(target.parent, made)
            if target.parent.resolve() != target.parent:  # a link put there since the check
                raise WriteError(f"refusing the path {relative!r}: a directory on the way is a symbolic link")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            try:
                fd = os.open(target, flags, mode)
            except FileExistsError:
                raise WriteError(f"{target}: already exists; nothing is overwritten") from None
            written.append(target)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
    except BaseException:
        _remove(written, made)
        raise
    return written


def replace_files(out: Path, files: Mapping[str, bytes]) -> None:
    """Create or replace each file (a plain name) in the directory `out`, never through a link: `out`
    and every existing entry are checked before anything is written, and each file is written beside
    its place and renamed over it (a hard link's other names keep their content)."""
    if out.is_symlink():
        raise WriteError(f"{out}: is a symbolic link; give a real directory")
    if out.exists() and not out.is_dir():
        raise WriteError(f"{out}: exists and is not a directory")
    for name in files:
        if _plain_parts(name) != [name]:
            raise WriteError(f"refusing the name {name!r}: not a plain file name")
        target = out / name
        if target.is_symlink() or (target.exists() and not target.is_file()):
            kind = "a symbolic link" if target.is_symlink() else "not a regular file"
            raise WriteError(f"{target}: {kind}; nothing is written through it")
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        fd, temporary = tempfile.mkstemp(dir=out, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(temporary, 0o644)
            os.replace(temporary, out / name)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
