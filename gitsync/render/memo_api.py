"""What a render may reuse from earlier ones: the interface of the speed layer (`gitsync.render.memo`)
and the plain path without it (`NoMemo`).

The interface is all render's core knows of the speed layer, so a reader can tell what decides the
payload (render's core) from what only makes it fast (the memo), and a test can prove both give the
same: every method of a memo either returns what the plain path would compute, or `None` for "do
it the plain way".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from gitsync.render.load import ParsedFile, parse

if TYPE_CHECKING:
    from gitsync.render.build import Built
    from gitsync.render.facts import FileFacts
    from gitsync.render.options import RenderOptions
    from gitsync.render.result import Rendered


class RenderMemo(Protocol):
    """Parsed files by git blob SHA, and the last clean render (see `gitsync.render.memo.ParseCache`)."""

    parses: int  # files parsed for real

    def has(self, key: str) -> bool:
        """Whether the file of this blob SHA is parsed already (its bytes need not be read)."""
        ...

    def cached(self, key: str) -> ParsedFile | None:
        """The parsed file of this blob SHA, when held."""
        ...

    def get(self, data: bytes, key: str | None = None) -> ParsedFile:
        """The parsed file of `data` (`key`, its blob SHA, when known)."""
        ...

    def prepare(self, files: Sequence[tuple[str, bytes]]) -> None:
        """Parse these (blob SHA, bytes) ahead of the render."""
        ...

    def render_next(self, files: Mapping[str, bytes], options: RenderOptions) -> Rendered | None:
        """The render of `files` made from the last one, or None: render in full. The values the
        classifier finds secret in the files it changed are registered with the log redactor
        (`gitsync.render.pipeline.register_file_secrets`), as a full render registers every file's."""
        ...

    def remember(self, options: RenderOptions, files: Mapping[str, bytes], built: Built,
                 facts: Mapping[str, FileFacts], rendered: Rendered, rendered_files: Collection[str]) -> None:
        """Keep a clean render for the next one."""
        ...

    def end_render(self) -> None:
        """A render ended (bounded memory; writes to disk)."""
        ...


class NoMemo:
    """The plain path: every file parsed every time, every render in full, nothing kept."""

    def __init__(self) -> None:
        self.parses = 0

    def has(self, key: str) -> bool:
        return False

    def cached(self, key: str) -> ParsedFile | None:
        return None

    def get(self, data: bytes, key: str | None = None) -> ParsedFile:
        self.parses += 1
        return parse(data)

    def prepare(self, files: Sequence[tuple[str, bytes]]) -> None:
        pass

    def render_next(self, files: Mapping[str, bytes], options: RenderOptions) -> Rendered | None:
        return None

    def remember(self, options: RenderOptions, files: Mapping[str, bytes], built: Built,
                 facts: Mapping[str, FileFacts], rendered: Rendered, rendered_files: Collection[str]) -> None:
        pass

    def end_render(self) -> None:
        pass


__all__ = ["NoMemo", "RenderMemo"]
