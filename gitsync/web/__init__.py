"""The read-only web view of what is live, served by `gitsync run` on its listen address when
``ui = true``: the overview (`/`), the items of the live commit (`/items`, `/items/<kind>/<id>`)
and the fleet (`/fleet`). Server-rendered HTML; a little JavaScript filters a table in place.

Modules, along the data flow: `live` asks the gateways and the status branch (I/O, cached briefly);
`catalog` indexes a commit's items and shows one as written and as pushed (pure), each item's lines
parsed from an excerpt of its file (`excerpt`); `pages` turns
plain data into HTML (pure, everything escaped through `html`); `auth` decides who may look; `app`
routes a request and adds the security headers.
"""

from gitsync.web.app import WebView, serves

__all__ = ["WebView", "serves"]
