"""The parse cache: parsed files by git blob SHA, kept in memory for the agent's life and on disk
between processes (`store`), with the last clean render (`incremental`) and the parse workers
(`workers`). It is the speed layer's implementation of `gitsync.render.memo_api.RenderMemo`."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gitsync.render.build import Built
from gitsync.render.facts import FileFacts
from gitsync.render.load import ParsedFile, blob_sha, parse
from gitsync.render.memo.incremental import remember, render_next
from gitsync.render.memo.store import ParseStore
from gitsync.render.memo.workers import parse_all
from gitsync.render.memo_api import NoMemo, RenderMemo
from gitsync.render.options import RenderOptions
from gitsync.render.pipeline import register_file_secrets
from gitsync.render.result import Rendered
from gitsync.settings import Settings

if TYPE_CHECKING:
    from gitsync.render.memo.incremental import LastRender


class ParseCache:
    """Parsed files by git blob SHA. `parses` counts real parses (the test of "one file changed").

    With a `store` (`gitsync.render.memo.store.ParseStore`), a file missing here is looked for on disk
    before it is parsed, and `end_render` writes the files parsed since to the store, leaving it
    holding what this cache holds."""

    def __init__(self, keep_renders: int = 2, store: ParseStore | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[ParsedFile, int]] = {}
        self._generation = 0
        self._keep = keep_renders
        self._store = store
        self._unstored: set[str] = set()  # parsed here, not yet written to the store
        self.parses = 0
        #: The last clean render, for the next one (`gitsync.render.memo.incremental`).
        self.last_render: LastRender | None = None

    def has(self, key: str) -> bool:
        """Whether the file of this git blob SHA is parsed already (its bytes need not be read)."""
        with self._lock:
            return key in self._entries or (self._store is not None and self._store.has(key))

    def cached(self, key: str) -> ParsedFile | None:
        """The parsed file of this git blob SHA, when it is in the cache (it stays: used this render)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                parsed = self._store.load(key) if self._store is not None else None
                if parsed is None:
                    return None
                entry = (parsed, self._generation)
            self._entries[key] = (entry[0], self._generation)
            return entry[0]

    def touch(self, keys: Iterable[str]) -> None:
        """Count these files as used by this render (a render that did not look each one up)."""
        with self._lock:
            for key in keys:
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries[key] = (entry[0], self._generation)

    def get(self, data: bytes, key: str | None = None) -> ParsedFile:
        """The parsed file of `data` (`key`, its blob SHA, when the caller knows it)."""
        key = key or blob_sha(data)
        parsed = self.cached(key)
        if parsed is not None:
            return parsed
        parsed = parse(data)
        self.put(key, parsed)
        return parsed

    @property
    def store(self) -> ParseStore | None:
        return self._store

    def put(self, key: str, parsed: ParsedFile, stored: bool = False) -> None:
        """Keep `parsed`, the file of git blob SHA `key` parsed just now (counted as a parse);
        `stored`: it is in the store already (a parse worker wrote it)."""
        with self._lock:
            self.parses += 1
            self._entries[key] = (parsed, self._generation)
            if not stored:
                self._unstored.add(key)

    def end_render(self) -> None:
        """Forget files no render has used in the last `keep_renders` renders (bounded memory); with a
        store, write what was parsed since the last render (validation's facts included) and remove
        from it what was forgotten."""
        with self._lock:
            oldest = self._generation - self._keep + 1
            self._entries = {k: v for k, v in self._entries.items() if v[1] >= oldest}
            self._generation += 1
            if self._store is not None:
                for key in self._unstored & self._entries.keys():
                    self._store.save(key, self._entries[key][0])
                self._store.retain(self._entries)
            self._unstored.clear()

    def __len__(self) -> int:
        return len(self._entries)

    # -- the rest of the `RenderMemo` interface: parse ahead, render from the last render --------------

    def prepare(self, files: Sequence[tuple[str, bytes]]) -> None:
        """Parse these files (blob SHA, bytes) ahead of the render, on every CPU when they are many."""
        parse_all(files, self.put, self._store)

    def render_next(self, files: Mapping[str, bytes], options: RenderOptions) -> Rendered | None:
        """The render of `files` from the last clean one, when only a few plain files' items changed;
        the secret values of the files it changed registered, as the render it follows registered
        every other file's (the log redactor keeps them for the process's life)."""
        last = self.last_render
        following = render_next(files, options, last,
                                lambda name, blob: self.cached(blob) or self.get(files[name], blob))
        if following is None or last is None:
            return None
        rendered, self.last_render = following
        self.touch(self.last_render.blobs.values())
        for name, blob in self.last_render.blobs.items():
            parsed = self.cached(blob) if last.blobs.get(name) != blob else None
            if parsed is not None:
                register_file_secrets(parsed, rendered.secret_rules)
        return rendered

    def remember(self, options: RenderOptions, files: Mapping[str, bytes], built: Built,
                 facts: Mapping[str, FileFacts], rendered: Rendered, rendered_files: Collection[str]) -> None:
        """Keep this render for the next one, when it can start from it."""
        self.last_render = remember(options, files, built, facts, rendered, rendered_files)


def render_memo(settings: Settings | None = None, store: Path | None = None) -> RenderMemo:
    """The speed layer, built one way for every render that uses it: a `ParseCache`, kept on disk in
    `store` when given (an agent's or a source's ``<state_dir>/parse-cache``) and in memory only
    otherwise (a one-shot command); `NoMemo` (every file parsed anew, every render in full) when
    ``parse_cache = false``. Without settings (a render of files made here: export's proof), in memory."""
    if settings is not None and not settings.parse_cache:
        return NoMemo()
    return ParseCache(store=ParseStore(store) if store is not None else None)


__all__ = ["ParseCache", "render_memo"]
