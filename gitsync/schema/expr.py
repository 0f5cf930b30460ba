"""``vars`` expressions as lua-resty-expr (``resty.expr.v1``) compiles them, with its error texts.

APISIX refuses a route (or a traffic-split rule, or a plugin's ``_meta.filter``)
whose ``vars`` does not compile: ``failed to validate the 'vars' expression:
<why>``. Only the compile step matters here; nothing is evaluated.
"""

from __future__ import annotations

from typing import Any

_OPERATORS = frozenset({"==", "~=", ">", ">=", "<", "<=", "~~", "~*", "in", "has", "ipmatch"})
_LOGIC = frozenset({"OR", "!OR", "AND", "!AND"})


def _length(value: Any) -> int:
    """Lua's ``#`` of a decoded JSON value: an object (hash part only) counts 0."""
    return len(value) if isinstance(value, list) else 0


def _upper(value: Any) -> str | None:
    return value.upper() if isinstance(value, str) else None


def _compile_expr(rule: list[Any]) -> str | None:
    if len(rule) == 4:
        if rule[1] != "!":
            return "bad 'not' expression"
        left, op, right = rule[0], rule[2], rule[3]
    else:
        left, op, right = [*rule, None, None, None][:3]
    if isinstance(op, str):
        op = op.lower()
    if right is None and op not in _OPERATORS:
        right, op = op, "=="  # [var, value]: an equality, for compatibility
        if right is None:
            return "invalid expression"
    if left is None or op is None:
        return "invalid expression"
    if op not in _OPERATORS:
        return f"invalid operator '{op}'"
    return None


def _compile(rules: Any) -> str | None:
    if not isinstance(rules, list) or not rules:
        return "rule too short"
    if isinstance(rules[0], list | dict):
        for rule in rules:
            problem = _compile(rule)
            if problem:
                return problem
        return None
    if _upper(rules[0]) in _LOGIC:
        if len(rules) <= 2:
            return "rule too short"
        for rule in rules[1:]:
            problem = _compile(rule)
            if problem:
                return problem
        return None
    return _compile_expr(rules)


def expr_problem(rule: Any) -> str | None:
    """Why ``expr.new(rule)`` refuses `rule`, or None when it compiles."""
    if _length(rule) == 0:
        return None
    first = rule[0]
    if not isinstance(first, list | dict) and _upper(first) not in _LOGIC:
        return "rule should be wrapped inside brackets"
    return _compile(rule)
