"""`python -m gitsync` and the `gitsync` command: the command line, in a process of its own."""

import sys


def run() -> int:
    """The `gitsync` process's entry point.

    gitsync is synchronous from end to end; httpcore imports trio, when it is installed, only to offer
    async support (0.2 s of every start here). In gitsync's own process it is kept out; a program
    that imports gitsync as a library is left as it is."""
    sys.modules.setdefault("trio", None)  # type: ignore[arg-type]
    from gitsync.cli import main

    return main()


if __name__ == "__main__":
    sys.exit(run())
