"""`python -m gitsync` and the `gitsync` command: the command line, in a process of its own."""

import contextlib
import gc
import os
import sys


def run() -> int:
    """The `gitsync` process's entry point.

    gitsync is synchronous from end to end; httpcore imports trio, when it is installed, only to offer
    async support (0.2 s of every start here). In gitsync's own process it is kept out; a program
    that imports gitsync as a library is left as it is.

    A command that closes everything it opened (`Command.closes_all`: ``sync``, ``render``,
    ``validate``, ``diff``) ends the process as soon as its output is flushed, without freeing its
    objects one by one (what it left with `cli.leave_to_exit` included): after a sync of 10,000 routes
    that is hundreds of thousands of them, 0.1 s of a ``sync --once`` that the operating system does
    at once.

    The process starts without the cyclic garbage collector: what start-up allocates (modules,
    settings) lives as long as the process, and collections set off by it would walk it over and
    over (a measurable part of every start). `cli.dispatch` turns the collector on for a long-lived
    command; a one-shot command (``closes_all``) runs to its end without it."""
    gc.disable()
    sys.modules.setdefault("trio", None)  # type: ignore[arg-type]
    from gitsync.cli.parser import dispatch, ending_process

    ending_process()
    status, command = dispatch()
    if command is not None and command.closes_all:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe, a closed stream
                stream.flush()
        os._exit(status)
    return status


if __name__ == "__main__":
    sys.exit(run())
