"""The repo format's scalar schema: what a plain (unquoted) YAML scalar means, and where YAML 1.1 disagrees.

gitsync reads a plain scalar as the YAML 1.2 core schema does, as every YAML 1.2 tool reads it:
ADC (js-yaml 5), yaml-language-server (the ``yaml`` package) and so the editors. Only these texts
are not text:

=================================================================  =========================================
written                                                            read as
=================================================================  =========================================
nothing, ``~``, ``null``, ``Null``, ``NULL``                       null
``true`` ``True`` ``TRUE`` ``false`` ``False`` ``FALSE``          a boolean
``[-+]?[0-9]+``                                                    an integer, in decimal (``0777`` is 777)
``0o[0-7]+``, ``0x[0-9a-fA-F]+``                                   an integer, in octal or hexadecimal
``[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?``           a number with a fraction or an exponent
``[-+]?.inf``, ``.nan`` (also ``.Inf``, ``.INF``, ``.NaN``, ``.NAN``)  refused: JSON has no such number
``<<``                                                             refused: YAML 1.1's merge key
=================================================================  =========================================

YAML 1.1 tools (PyYAML, Go's yaml.v2, ruamel in 1.1 mode, older editors) read some scalars otherwise:
``yes``/``no``/``on``/``off``/``y``/``n`` as booleans, ``0777`` as octal, ``0b101``, ``1_000``, ``1:20``
(base 60) and ``1_0.5`` as numbers, ``2024-01-02`` as a date, ``=`` as a value key; and ``08``,
``0o17``, ``1e3`` or ``+.5`` as text. Such a scalar is read as YAML 1.2 reads it, with a *note* that
names the quoted or typed form to write, so that every tool reads the same (`Reading.note`; gitsync
reports it as a warning at the scalar's ``file:line``, or as an error under ``ambiguous_scalars =
"error"``). The YAML 1.1 reading is PyYAML's resolver, with the ``y``/``n`` booleans of the YAML 1.1
type repository (yaml.org/type/bool.html) that Go's yaml.v2 reads too.

`read` is the one function every reading of a plain scalar goes through (the loader, the typing of
an unquoted ``${{ vars.X }}``, the explicit ``!!int``/``!!float``/``!!bool``/``!!null`` tags): a faster
parser must give the same `Reading` for every text (``testkit/yamlforms.py`` holds the forms and the
independent reference a test checks both against).
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any, NamedTuple

#: Digits of the largest integer a 64-bit float (what APISIX's JSON decoder makes of a number) can hold.
MAX_INT_DIGITS = len(str(int(sys.float_info.max)))


class Reading(NamedTuple):
    """What a plain scalar means: its value, an error (the value cannot be carried: the file is refused),
    and a note when YAML 1.1 tools read the same text otherwise (what to write instead)."""

    value: Any
    error: str | None = None
    note: str | None = None


NULL, BOOL, INT, FLOAT, TEXT = "null", "bool", "int", "float", "text"

_CORE_NUMBER = re.compile(r"""
    (?P<int>[-+]?[0-9]+)
  | (?P<oct>0o[0-7]+)
  | (?P<hex>0x[0-9a-fA-F]+)
  | (?P<float>[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?)
  | (?P<inf>[-+]?\.(?:inf|Inf|INF))
  | (?P<nan>\.(?:nan|NaN|NAN))
""", re.VERBOSE)

#: YAML 1.1's numbers and dates, as PyYAML's resolver reads them (yaml.org/type/{int,float,timestamp}).
_YAML11 = re.compile(r"""
    (?P<bin>[-+]?0b[0-1_]+)
  | (?P<oct>[-+]?0[0-7_]+)
  | (?P<int>[-+]?(?:0|[1-9][0-9_]*))
  | (?P<hex>[-+]?0x[0-9a-fA-F_]+)
  | (?P<sexagesimal>[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)
  | (?P<float>[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?)
  | (?P<sexagesimal_float>[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*)
  | (?P<infinity>[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))
  | (?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2}
      |[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?
       (?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)
""", re.VERBOSE)

#: First characters of a plain scalar that either schema may read as a number or a date.
NUMERIC_FIRST = frozenset("0123456789+-.")

_TRUE_12, _FALSE_12 = ("true", "True", "TRUE"), ("false", "False", "FALSE")
_TRUE_11 = ("y", "Y", "yes", "Yes", "YES", "on", "On", "ON")
_FALSE_11 = ("n", "N", "no", "No", "NO", "off", "Off", "OFF")
_NULLS = ("", "~", "null", "Null", "NULL")
MERGE_KEY = "<<"
MERGE_MESSAGE = 'merge keys (<<) are not supported: write the keys out (quote "<<" if it is text)'


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def number_text(value: int | float) -> str:
    """A number written so that YAML 1.2 and YAML 1.1 read it alike: an integer (or a float that is one)
    in plain decimal, a fraction with its point (``0.5``; ``1.5e+300``, since YAML 1.1 wants both the
    point and the exponent's sign)."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))  # the same number to JSON and to APISIX
    text = repr(value)
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def shown(value: str, limit: int = 24) -> str:
    """A scalar's text for a message: whole when short, else its start and its length."""
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}… ({len(value)} characters)"


def too_large(value: str) -> str:
    return (f"the number {shown(value)} is too large: APISIX reads numbers as 64-bit floats, which end "
            "near 1.8e308; quote it if it is text")


def _meaning(value: Any, kind: str) -> str:
    if kind == TEXT:
        return f"the text {_quoted(value)}"
    if kind == BOOL:
        return f"the boolean {'true' if value else 'false'}"
    if kind == "date":
        return "a date"
    if kind == "value key":
        return "YAML 1.1's value key (which most of those tools refuse)"
    return f"the number {number_text(value)}"


def _note(text: str, read: Any, read_kind: str, yaml11: Any, yaml11_kind: str) -> str:
    """What to write so that YAML 1.1 tools read what gitsync reads, or what they read."""
    if read_kind == TEXT:
        if yaml11_kind in (INT, FLOAT, BOOL):
            other = "true" if yaml11 is True else "false" if yaml11 is False else number_text(yaml11)
            advice = f"quote it ({_quoted(text)}) to keep the text, or write {other} for the " \
                     f"{'boolean' if yaml11_kind == BOOL else 'number'}"
        else:
            advice = f"quote it ({_quoted(text)})"
    elif yaml11_kind == TEXT:
        advice = f"write {number_text(read)} for the number, or quote it ({_quoted(text)}) for the text"
    else:  # two numbers: 0777 is 777 in YAML 1.2 and 511 in YAML 1.1
        advice = f"write {number_text(read)} for what gitsync reads, {number_text(yaml11)} for what " \
                 f"YAML 1.1 reads, or quote it ({_quoted(text)}) for the text"
    return (f"unquoted {text} is {_meaning(read, read_kind)} in YAML 1.2 (how gitsync, ADC and "
            f"editors read it) but {_meaning(yaml11, yaml11_kind)} in YAML 1.1 (what older tools read): "
            f"{advice}")


def _yaml11_number(text: str) -> tuple[Any, str] | None:
    """(value, kind) of `text` as YAML 1.1 reads a number or a date (PyYAML's resolver), or None."""
    match = _YAML11.fullmatch(text)
    if match is None:
        return None
    kind = match.lastgroup
    if kind == "date":
        return text, "date"
    if kind == "infinity":
        return text, FLOAT  # refused by gitsync already
    digits = text.replace("_", "")
    sign = -1 if digits[:1] == "-" else 1
    digits = digits.lstrip("+-")
    if kind != "float" and len(digits) > MAX_INT_DIGITS + 2:  # no note: YAML 1.2's reading says enough
        return None
    if kind in ("sexagesimal", "sexagesimal_float"):
        total: float = 0
        for part in digits.split(":"):
            total = total * 60 + (float(part) if "." in part else int(part))
        return sign * total, INT if kind == "sexagesimal" else FLOAT
    if kind == "float":
        return sign * float(digits), FLOAT
    if kind == "bin":
        return sign * int(digits[2:] or "0", 2), INT
    if kind == "hex":
        return sign * int(digits[2:] or "0", 16), INT
    if kind == "oct":
        return sign * int(digits[1:] or "0", 8), INT
    return sign * int(digits), INT


def _number(text: str) -> Reading:
    """A plain scalar starting like a number: YAML 1.2's reading, and YAML 1.1's when it differs."""
    if text.isdigit() and text.isascii() and (text[0] != "0" or len(text) == 1):
        if len(text) > MAX_INT_DIGITS:  # before int(): Python refuses 4,300+ digits
            return Reading(None, too_large(text))
        return _new(Reading, (int(text), None, None))  # the usual number (a port, a weight): read alike
    match = _CORE_NUMBER.fullmatch(text)
    kind = TEXT if match is None else match.lastgroup
    value: Any = text
    if kind in ("inf", "nan"):
        return Reading(None, f"{shown(text)} is not a number JSON can carry")
    if kind == "float":
        value = float(text)
        if not math.isfinite(value):
            return Reading(None, too_large(text))
        kind = FLOAT
    elif kind != TEXT:
        digits = text.lstrip("+-")
        if kind == "int" and len(digits.lstrip("0")) > MAX_INT_DIGITS:
            return Reading(None, too_large(text))
        value = int(text) if kind == "int" else int(text[2:], 8 if kind == "oct" else 16)
        if abs(value) > sys.float_info.max:
            return Reading(None, too_large(text))
        kind = INT
    yaml11 = _yaml11_number(text)
    yaml11_value, yaml11_kind = yaml11 if yaml11 is not None else (text, TEXT)
    if yaml11_kind == kind and type(yaml11_value) is type(value) and yaml11_value == value:
        return Reading(value)
    return Reading(value, None, _note(text, value, kind, yaml11_value, yaml11_kind))


def _words() -> dict[str, Reading]:
    """The reading of every plain scalar that is a word either schema gives a meaning."""
    words = {text: Reading(None) for text in _NULLS}
    words |= {text: Reading(True) for text in _TRUE_12} | {text: Reading(False) for text in _FALSE_12}
    for texts, meaning in ((_TRUE_11, True), (_FALSE_11, False)):
        words |= {text: Reading(text, None, _note(text, text, TEXT, meaning, BOOL)) for text in texts}
    words[MERGE_KEY] = Reading(MERGE_KEY, MERGE_MESSAGE)
    words["="] = Reading("=", None, _note("=", "=", TEXT, "=", "value key"))
    return words


WORDS = _words()
_new = tuple.__new__  # a Reading without NamedTuple's own __new__, a Python function: read() runs per scalar


def read(text: str) -> Reading:
    """What the plain scalar `text` means (see the module): the one reading of the repo format."""
    word = WORDS.get(text)
    if word is not None:
        return word
    if text[:1] in NUMERIC_FIRST:
        return _number(text)
    return _new(Reading, (text, None, None))


def read_tagged(tag: str, text: str) -> Reading:
    """A scalar with an explicit core tag (``!!int``, ``!!float``, ``!!bool``, ``!!null``): its text
    read as a plain scalar must be of that type (``!!float`` takes an integer too)."""
    reading = read(text)
    if reading.error:
        return reading
    value = reading.value
    fits = {INT: type(value) is int, FLOAT: type(value) in (int, float), BOOL: type(value) is bool,
            NULL: value is None}[tag]
    if not fits:
        return Reading(None, f"the tag !!{tag} does not fit {shown(text)}, which YAML 1.2 reads as "
                             f"{_kind_name(value)}")
    return Reading(float(value) if tag == FLOAT else value)


def _kind_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number" if isinstance(value, int | float) else "text"


def plain_value(text: str) -> Any:
    """What an unquoted YAML scalar `text` means: a number, boolean, null, or the text itself (also
    for a number JSON cannot carry, which the loader would refuse)."""
    reading = read(text)
    return text if reading.error else reading.value


__all__ = ["MAX_INT_DIGITS", "MERGE_KEY", "MERGE_MESSAGE", "NUMERIC_FIRST", "WORDS", "Reading", "number_text",
           "plain_value", "read", "read_tagged", "shown", "too_large"]
