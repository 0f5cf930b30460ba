"""Configurations holding a distinct canary in every secret place: every ``encrypt_fields`` path of
APISIX 3.18's plugins (`gitsync.schema.encrypt_fields`) and every value shape the classifier knows.

`Canaries` makes the values: tokens of distinct letters and digits (unique in any output, and of high
entropy by construction, so that a "likely" secret is one however Hypothesis shrinks the seed).
`plugin_conf` builds one plugin's configuration with a canary at each of its paths, shaped as APISIX
3.18's schemas shape them.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterable
from typing import Any

#: Path segments that are arrays in APISIX 3.18's schemas: ai-proxy-multi's ``instances``
#: (apisix/plugins/ai-proxy/schema.lua), kafka-logger's and error-log-logger's ``brokers``.
ARRAYS = frozenset({"instances", "brokers"})
#: Leaves that are mappings of strings (headers, query parameters) or lists of strings.
MAP_LEAVES = frozenset({"header", "query", "headers"})
LIST_LEAVES = frozenset({"secret_fallbacks"})
#: What the plugins gitsync checks in full need besides their secret fields.
BASES: dict[str, dict[str, Any]] = {
    "limit-count": {"count": 10, "time_window": 60, "policy": "redis", "redis_host": "10.0.0.5"},
    "limit-req": {"rate": 1, "burst": 1, "key": "remote_addr", "policy": "redis", "redis_host": "10.0.0.5"},
    "limit-conn": {"conn": 1, "burst": 1, "default_conn_delay": 0.1, "key": "remote_addr", "policy": "redis",
                   "redis_host": "10.0.0.5"},
    "basic-auth": {"username": "user"},
    "jwt-auth": {"key": "jwt-key"},
    "hmac-auth": {"key_id": "hmac-key"},
}
CREDENTIAL_HEADERS = ("Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key",
                      "X-Auth-Token", "X-Vendor-Secret")
TOKEN_PARAMETERS = ("private_token", "access_token", "token", "key", "sig")


class Canaries:
    """Distinct canary tokens from one seed; `made` lists every one handed out."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.made: list[str] = []

    def token(self) -> str:
        chars = self.rng.sample(string.ascii_letters, 14) + self.rng.sample(string.digits, 6)
        self.rng.shuffle(chars)
        value = "".join(chars)
        self.made.append(value)
        return value

    def headers(self, count: int) -> dict[str, str]:
        """`count` credential headers and their values (the canary after a scheme, in a cookie, or bare)."""
        shapes = {"Authorization": "Bearer {}", "Proxy-Authorization": "Basic {}", "Cookie": "sid={}",
                  "Set-Cookie": "sid={}; Path=/"}
        return {name: shapes.get(name, "{}").format(self.token())
                for name in self.rng.sample(CREDENTIAL_HEADERS, count)}

    def url(self) -> str:
        """A URL whose password holds every reserved character, and a token query parameter."""
        password = f"p@s/s?w#d {self.token()}"
        parameter = self.rng.choice(TOKEN_PARAMETERS)
        return f"http://user:{password}@logs.example:9000/in?x=1&{parameter}={self.token()}"

    def pem(self) -> str:
        body = "".join(self.token() for _ in range(3))
        return f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"

    def jwt(self) -> str:
        return f"eyJhbGciOiJIUzI1NiJ9.eyJ{self.token()}.{self.token()}"


def plugin_conf(name: str, paths: Iterable[str], canaries: Canaries, elements: Callable[[], int]) -> dict:
    """`name`'s config with a canary at each dotted path (`elements()` elements in each array)."""
    conf: dict[str, Any] = dict(BASES.get(name, {}))
    for path in paths:
        _put(conf, path.split("."), canaries, elements)
    return conf


def _put(conf: dict[str, Any], segments: list[str], canaries: Canaries, elements: Callable[[], int]) -> None:
    head, rest = segments[0], segments[1:]
    if not rest:
        if head in MAP_LEAVES:
            conf[head] = canaries.headers(2)
        elif head in LIST_LEAVES:
            conf[head] = [canaries.token() for _ in range(elements())]
        else:
            conf[head] = canaries.token()
    elif head in ARRAYS:
        if head not in conf:
            conf[head] = [{} for _ in range(elements())]
        for element in conf[head]:
            _put(element, rest, canaries, elements)
    else:
        _put(conf.setdefault(head, {}), rest, canaries, elements)
