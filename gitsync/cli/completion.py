"""``gitsync completion bash|zsh|fish``: a completion script generated from the command line itself.

shtab writes a static script from the argparse parser (subcommands, flags, choices):
nothing runs at TAB time, so completing costs no Python start-up (argcomplete would
start gitsync on every TAB, about 0.5 s here), and the script always matches the
installed version's flags. shtab is kept up to date and covers all three shells.
"""

from __future__ import annotations

import argparse
import sys

import shtab


def completion_command(_settings: object, args: argparse.Namespace) -> int:
    from gitsync.cli.parser import build_parser

    sys.stdout.write(shtab.complete(build_parser(), shell=args.shell))
    return 0
