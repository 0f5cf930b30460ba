"""The slugs ADC's converter names services and routes with, when the spec names none.

ADC calls the npm package ``slugify`` (1.6, default options) on the title, the path and the method:
NFC, each character mapped by slugify's table (``$`` → ``dollar``, ``&`` → ``and``, ``Ä`` → ``A``…),
every character but ``\\w \\s $*_+~.()'"!-:@`` dropped, ``-`` read as a space, the ends trimmed and
each run of white space made one ``-``. This module maps ASCII and the Latin letters with marks
(by their canonical decomposition) as slugify does; a letter of another script (Greek, Cyrillic…),
which slugify transliterates, is dropped here, so a route named from such a path differs from
ADC's: give it an ``operationId`` or ``x-adc-name``.
"""

from __future__ import annotations

import functools
import re
import unicodedata

#: slugify's own spellings of the characters a canonical decomposition does not take to plain letters.
_TABLE = {
    "$": "dollar", "%": "percent", "&": "and", "<": "less", ">": "greater", "|": "or", "¢": "cent",
    "£": "pound", "¤": "currency", "¥": "yen", "©": "(c)", "®": "(r)", "º": "o", "ª": "a", "Æ": "AE",
    "æ": "ae", "Ð": "D", "ð": "d", "Ø": "O", "ø": "o", "Þ": "TH", "þ": "th", "ß": "ss", "ẞ": "SS",
    "Đ": "DJ", "đ": "dj", "Ł": "L", "ł": "l", "Œ": "OE", "œ": "oe", "ı": "i", "ƒ": "f", "Ə": "E",
    "ə": "e", "–": "-", "‘": "'", "’": "'", "“": '"', "”": '"', "„": '"', "†": "+", "•": "*",
    "…": "...", "€": "euro", "™": "tm", "℠": "sm", "∞": "infinity", "∑": "sum", "♥": "love",
}
_REMOVE = re.compile(r"[^A-Za-z0-9_\s$*+~.()'\"!\-:@]+")
_SPACES = re.compile(r"\s+")


def _mapped(char: str) -> str:
    if char in _TABLE:
        return _TABLE[char]
    if char.isascii():
        return char
    plain = "".join(c for c in unicodedata.normalize("NFD", char) if not unicodedata.combining(c))
    return plain if plain.isascii() and plain.isalpha() else char


@functools.lru_cache(maxsize=4096)  # a spec's title and methods, asked for every operation
def slugify(text: str) -> str:
    """``My API (v2) & co`` → ``My-API-(v2)-and-co``; ``/absolute-redirect/{n}`` → ``absolute-redirectn``."""
    out = []
    for char in unicodedata.normalize("NFC", text):
        piece = _mapped(char)
        out.append(" " if piece == "-" else _REMOVE.sub("", piece))
    return _SPACES.sub("-", "".join(out).strip())


__all__ = ["slugify"]
