"""Lua source in a config (a route's ``filter_func`` and ``script``) compiled as APISIX compiles it.

APISIX runs on LuaJIT and refuses what its ``loadstring`` refuses, with LuaJIT's
own message (``[string "..."]:1: unexpected symbol near 'end'``). lupa embeds
the same LuaJIT, so the message is the gateway's. Nothing is run: only compiled.
"""

from __future__ import annotations

import os
import threading
from functools import cache
from typing import Any

_lock = threading.Lock()


@cache
def _loadstring() -> Any:
    from lupa import luajit21  # imported on first use: most configs carry no Lua

    runtime = luajit21.LuaRuntime(register_eval=False, register_builtins=False)
    return runtime.eval("function(source) local _, err = loadstring(source) return err end")


def _after_fork_in_child() -> None:
    """A forked child (a parse worker) starts with a lock and a Lua state of its own: a thread of the
    parent may have held them when it forked."""
    global _lock
    _lock = threading.Lock()
    _loadstring.cache_clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def compile_problem(source: str) -> str | None:
    """LuaJIT's message for `source` that does not compile, or None when it does."""
    with _lock:  # one Lua state, shared by the double's request threads
        return _loadstring()(source)
