"""The speed layer: what makes a render of a large repo cost about the files that changed, and nothing
that decides what is pushed. `ParseCache` (`cache`) keeps parsed files by blob SHA in memory and on
disk (`store`), renders a commit from the last render when only a few plain files' items changed
(`incremental`), and parses many files on every CPU (`workers`). Render's core (`gitsync.render`)
never imports this package: it takes any `gitsync.render.memo_api.RenderMemo`, and without one it
parses every file every time (`NoMemo`) — the plain path, which gives the same payload. Whoever
renders gets its memo from one factory, `render_memo(settings, store)`.
"""

from gitsync.render.memo.cache import ParseCache, render_memo
from gitsync.render.memo.store import ParseStore

__all__ = ["ParseCache", "ParseStore", "render_memo"]
