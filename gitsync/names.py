"""Names in the fleet: an agent's name as one component of a ref (and a file name), and the group
names agents put in their status and in `status_signers`.

The encoding must be injective: two agents with different names must never write the same status
ref, or they overwrite each other and a gate counts one of them twice or not at all. So every
character outside ``[A-Za-z0-9_-]`` is written as ``%XX`` per byte of its UTF-8, ``%`` included,
and a dot is kept only where git allows it in a ref component (not first, not last, not after
another dot, not before a final ``lock``); elsewhere it is ``%2E``. Decoding is plain percent
decoding, so different names always give different components. A name that would make a component
longer than `MAX_COMPONENT` bytes (a file name on most file systems is at most 255), or that holds
control characters, cannot be encoded and is refused when the settings are read.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote

MAX_COMPONENT = 200  # bytes of an encoded name: a ref component is a file name in a loose ref store
_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _escape(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))


def agent_slug(agent: str) -> str:
    """`agent` as one ref component and file name, injectively (see the module): ``edge-1`` stays
    ``edge-1``, ``eu/1`` is ``eu%2F1``, ``gw-é`` is ``gw-%C3%A9``. Raises ValueError for a name
    that cannot be encoded (`name_problem`)."""
    problem = name_problem(agent)
    if problem:
        raise ValueError(problem)
    return _encode(agent)


def _encode(agent: str) -> str:
    out: list[str] = []
    for index, char in enumerate(agent):
        if char in _KEPT:
            out.append(char)
        elif char == "." and 0 < index < len(agent) - 1 and agent[index - 1] != "." \
                and agent[index:] != ".lock":
            out.append(".")
        else:
            out.append(_escape(char))
    return "".join(out)


def decode_slug(slug: str) -> str:
    """The agent name a ref component stands for (the inverse of `agent_slug`)."""
    return unquote(slug, errors="strict")


def name_problem(agent: str) -> str | None:
    """Why `agent` cannot be an agent's name, or None."""
    if not agent:
        return "an agent name cannot be empty"
    try:
        agent.encode("utf-8")
    except UnicodeEncodeError:
        return "an agent name must be UTF-8 text"
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in agent):
        return "an agent name cannot hold control characters"
    if len(_encode(agent)) > MAX_COMPONENT:
        return (f"an agent name must fit a ref name of at most {MAX_COMPONENT} bytes once every character "
                "outside A-Z a-z 0-9 . _ - is percent-encoded")
    return None


def group_problem(group: str) -> str | None:
    """Why `group` cannot be a group's name, or None: it is matched against `status_signers`
    principals (``<agent>@<group>``), so it keeps to letters, digits, ``.``, ``_`` and ``-``."""
    if GROUP.match(group):
        return None
    return (f"a group name is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit, "
            f"not {group!r}")


def principal(agent: str, group: str | None) -> str:
    """Whom a status speaks for, as `status_signers` names it: ``<agent_slug>@<group>``, or the slug
    alone for an agent without a group. Injective: the slug never holds ``@``."""
    slug = agent_slug(agent)
    return f"{slug}@{group}" if group else slug


__all__ = ["MAX_COMPONENT", "agent_slug", "decode_slug", "group_problem", "name_problem", "principal"]
