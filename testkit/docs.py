"""The shell blocks of the project's docs, to run as written (a walk-through test): a section's
```` ```sh ```` blocks, each command joined across its ``\\`` continuations, and the example addresses
swapped for the test's own (`swapped`)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from testkit.processes import ROOT


def section(doc: str, heading: str) -> str:
    """The text of `doc`'s section `heading` (a ``## `` heading), up to the next ``## ``."""
    text = (ROOT / doc).read_text()
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"{doc} has its section {heading!r}"
    return match.group(1)


def sh_blocks(doc: str, heading: str) -> list[str]:
    """The ```` ```sh ```` blocks of a section, as written."""
    return re.findall(r"^```sh\n(.*?)^```", section(doc, heading), re.S | re.M)


def commands(block: str) -> list[str]:
    """The commands of a block, one each: ``\\`` continuations joined, blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def swapped(text: str, places: Mapping[str, str]) -> str:
    """`text` with each example address of the docs (a key) replaced by the test's own."""
    for example, own in places.items():
        text = text.replace(example, own)
    return text


__all__ = ["commands", "section", "sh_blocks", "swapped"]
