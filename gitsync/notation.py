"""How values are written where people write them, the settings file and the config repo alike:
durations (``30s``, ``5m``), sizes (``9MiB``), shares (``25%``) and the name of a secret field
(``PLUGIN.PATH`` or ``KIND.PATH``). Vocabulary (pure): `gitsync.settings` reads its values through
these, and so does render (a health check's timeout, a repo's ``secret_fields``).
"""

from __future__ import annotations

import re
from typing import Any

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|KB|MB|GB|k|K|M|G)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "KB": 1000, "MB": 1000**2,
               "GB": 1000**3, "k": 1024, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_duration(value: Any) -> float:
    """``30s``, ``5m``, ``1h``, ``2d``, ``250ms`` or a number of seconds → seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s or 5m, got a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"expected a duration such as 30s or 5m, got {value!r}")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def parse_size(value: Any) -> int:
    """``512KiB``, ``9MiB`` or a number of bytes → bytes."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 9MiB, got a boolean")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size such as 512KiB or 9MiB, got {value!r}")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


def parse_percent(value: Any) -> float:
    """``25%``, ``0.25`` or ``25`` (a percentage) → a fraction from 0 to 1."""
    if isinstance(value, bool):
        raise ValueError("expected a percentage such as 25%, got a boolean")
    text = str(value).strip()
    try:
        number = float(text.removesuffix("%"))
    except ValueError:
        raise ValueError(f"expected a percentage such as 25%, got {value!r}") from None
    fraction = number / 100 if text.endswith("%") or number > 1 else number
    if not 0 <= fraction <= 1:
        raise ValueError(f"expected a percentage from 0% to 100%, got {value!r}")
    return fraction


#: A well-formed secret field: a plugin or kind name, then one or more dotted steps.
SECRET_FIELD = re.compile(r"^[A-Za-z0-9_$@-][^.\s]*(\.[^.\s]+)+$")


def secret_field_problem(entry: Any) -> str | None:
    """Why `entry` is not a secret field (``plugin.path`` or ``kind.path``), or None."""
    if not isinstance(entry, str):
        return f"expected a text like \"my-plugin.conf.token\", got {type(entry).__name__}"
    if not SECRET_FIELD.match(entry.strip()):
        return (f"{entry!r} is not PLUGIN.PATH or KIND.PATH (dotted, no empty part, no spaces), "
                "e.g. \"my-plugin.conf.token\" or \"upstreams.discovery_args.token\"")
    return None


__all__ = ["SECRET_FIELD", "parse_duration", "parse_percent", "parse_size", "secret_field_problem"]
