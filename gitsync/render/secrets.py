"""Which values of a payload are secret, and why: the one classifier every output uses.

Render's and diff's masking, validate's messages, the log redactor (and through it notes,
status files and the web view's pages), the web view's "as written" lines, export and
import all ask `classify` (one item) or `find_secrets` (a payload). Pure functions: data in,
findings out. A finding is a string of the item, at a path, secret whole or in parts
(`Finding.spans`), with the reason.

What makes a value secret, in this order:

- **APISIX's own list**: every ``encrypt_fields`` path of the plugin's schemas
  (`gitsync.schema.encrypt_fields`), walked as APISIX walks it: any depth, into every
  element of an array met on the way, a string, list or mapping at the end. Both
  ``schema`` and ``consumer_schema`` apply wherever the plugin is configured (APISIX picks
  one by place; the union hides no less), ``metadata_schema`` to its plugin_metadata;
  a plugin nested in ``workflow``'s actions counts as that plugin.
- **kind fields**: an SSL's ``key``/``keys``, an upstream's (or inline upstream's)
  ``tls.client_key``, a secret manager's credentials (``vault``'s token, ``aws``'s keys,
  ``gcp``'s private key).
- **names**: fields whose name says secret (``password``, ``*_token``, ``client_secret``…)
  anywhere, and an auth plugin's ``key``.
- **declared**: ``secret_fields`` of the repo or settings (`SecretRules`): ``plugin.path``
  or ``kind.path`` for what only the site knows (a custom plugin's token).
- **shapes**, wherever they appear: a PEM private key, a JWT, a credential after an
  authorization scheme (``Bearer …``, ``Basic …``), a URL's password or token query
  parameters (`gitsync.urls.credentials`); in a header map (any mapping under a key naming
  headers), the value of ``Authorization``, ``Proxy-Authorization``, ``Cookie``,
  ``Set-Cookie`` and ``*-Key``/``*-Token``/``*-Secret`` headers, in either form
  (``{Name: value}`` or ``"Name: value"``).
- **likely**: a long high-entropy value in a header map, a URL's query or path that
  nothing above names; the value a ``vars`` expression compares a request's header, argument or
  cookie with (``["http_x_api_key", "==", "…"]``: a fixed credential, whatever its shape), and the
  string literals of code the gateway runs (``serverless-*`` functions, a route's ``script``) that
  look like a token (`CODE_LITERAL`). Masked like the rest; `Finding.certain` is False so that
  export can warn about it, naming the field.

References are never secrets: ``$secret://…``, ``$env://…``, an expression
``${{ … }}`` standing alone, an nginx variable (``$http_x_token``) as a header's value.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitsync.kinds import KINDS
from gitsync.notation import secret_field_problem
from gitsync.schema.encrypt_fields import ENCRYPT_FIELDS, KIND_FIELDS, SECRET_MANAGER_FIELDS
from gitsync.schema.plugins import AUTH_PLUGINS
from gitsync.urls import SCHEME, credentials

FieldPath = tuple[str | int, ...]
Span = tuple[int, int]

#: Field names (lower case, ``-`` read as ``_``) that hold a secret wherever they appear. Cloud
#: access-key ids count with their secret half: the pair is one credential.
SECRET_NAMES = frozenset({
    "password", "secret", "secret_key", "private_key", "client_secret", "token", "api_key", "apikey",
    "access_token", "refresh_token", "session_token", "secret_access_key", "client_key", "auth_key",
    "passphrase", "credentials", "redis_password", "sasl_password", "auth_header", "authorization",
    "proxy_authorization", "access_key_id", "access_key", "accesskey", "secretkey", "secret_id",
    "secret_fallbacks", "service_account_json", "http_proxy_authorization", "https_proxy_authorization",
})
SECRET_SUFFIXES = ("_password", "_secret", "_token", "_api_key", "_apikey", "_private_key")
#: Fields secret inside one plugin's config only: an auth plugin's ``key`` is the credential (or the
#: consumer's key to it), limit-count's ``key`` only names a variable.
PLUGIN_NAMES: dict[str, frozenset[str]] = {name: frozenset({"key"}) for name in AUTH_PLUGINS}
#: Header names (lower case) whose value is a credential; and endings of such names.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie",
                                "x-api-key", "api-key", "apikey", "x-auth", "x-auth-token"})
_HEADER_ENDINGS = re.compile(r"(?:^|[-_.])(?:key|token|secret|password|passwd|signature|credential|"
                             r"credentials|auth|session)$", re.I)

_PEM = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----.*?(?:-----END \1-----|\Z)", re.S)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
#: Authorization schemes: the word before a credential in an ``Authorization`` value.
_SCHEMES = "bearer|basic|digest|token|bot|apikey|api-key|sso-key|aws4-hmac-sha256|hmac|negotiate|ntlm"
_AUTH_SCHEME = re.compile(rf"(?i)\b(?:{_SCHEMES})\s+([A-Za-z0-9._~+/=:,;-]{{8,}})")
_SCHEME_WORD = re.compile(rf"(?i)^\s*(?:{_SCHEMES})\s+")
#: A cheap first look: a string with none of these has no shape to find.
_ANY_SHAPE = re.compile(rf"(?i)-----BEGIN|eyJ|://|{_SCHEMES}")
_HEADER_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_REFERENCE = re.compile(r"^\s*(?:\$(?:secret|env|ENV)://\S*|\$\{\{[^}]*\}\})\s*$")
_NGINX_VARIABLE = re.compile(r"^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$")
_PATH_START = re.compile(r"[/?#]")
_URL_PART = re.compile(r"[^/?#&=\s]+")
_TOKENISH = re.compile(r"^[A-Za-z0-9+/=_.~-]+$")
MIN_LIKELY_LENGTH = 20
MIN_LIKELY_BITS = 3.5


@dataclass(frozen=True)
class Finding:
    """A secret string of an item: where (`path` from the item), which of its characters (`spans`;
    None: all of them), why, and whether the classifier is sure (False: it only looks like one)."""

    path: FieldPath
    spans: tuple[Span, ...] | None
    why: str
    certain: bool = True

    def pieces(self, value: str) -> list[str]:
        """The secret texts of `value` (the string at `path`)."""
        if self.spans is None:
            return [value]
        return [value[start:end] for start, end in self.spans]

    def masked(self, value: str, mask: str) -> str:
        """`value` with its secret parts replaced by `mask` (all of it, for a whole-value finding)."""
        if self.spans is None:
            return mask
        out, pos = "", 0
        for start, end in self.spans:
            out += value[pos:start] + mask
            pos = end
        return out + value[pos:]


# ---------------------------------------------------------------------------------------------------------
# Declared secret fields (repo ``secret_fields:``, setting ``secret_fields``)


@dataclass(frozen=True)
class SecretRules:
    """Secret fields a site declares: ``plugin.path`` (that plugin's config wherever it is, and its
    plugin_metadata) or ``kind.path`` (every item of the kind). Paths read as APISIX's
    ``encrypt_fields`` do."""

    entries: tuple[str, ...] = ()
    plugins: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict, compare=False)
    kinds: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, entries: Iterable[str]) -> SecretRules:
        """The rules of well-formed entries (`gitsync.notation.secret_field_problem`); a bad one is
        skipped."""
        kept = tuple(dict.fromkeys(e.strip() for e in entries if secret_field_problem(e) is None))
        plugins: dict[str, list[tuple[str, ...]]] = {}
        kinds: dict[str, list[tuple[str, ...]]] = {}
        for entry in kept:
            head, *rest = entry.split(".")
            (kinds if head in KINDS else plugins).setdefault(head, []).append(tuple(rest))
        return cls(kept, {k: tuple(v) for k, v in plugins.items()}, {k: tuple(v) for k, v in kinds.items()})

    def __add__(self, other: SecretRules) -> SecretRules:
        return SecretRules.of((*self.entries, *other.entries))

    def __bool__(self) -> bool:
        return bool(self.entries)


NO_RULES = SecretRules()


# ---------------------------------------------------------------------------------------------------------
# One item


def is_secret_name(name: str) -> bool:
    normal = name.lower().replace("-", "_")
    return normal in SECRET_NAMES or normal.endswith(SECRET_SUFFIXES)


def is_reference(text: str) -> bool:
    """``$secret://…``, ``$env://…`` or one ``${{ … }}`` expression: where a value comes from, not a value."""
    return bool(_REFERENCE.match(text))


def apisix_paths(conf: Any, segments: tuple[str, ...], base: FieldPath = ()) -> Iterator[FieldPath]:
    """The nodes a dotted ``encrypt_fields`` path names in `conf`, as APISIX's ``process_encrypt_field``
    finds them: a missing or scalar step ends the walk; an array on the way is walked element by element."""
    if not segments or not isinstance(conf, dict) or segments[0] not in conf:
        return
    here = (*base, segments[0])
    child = conf[segments[0]]
    if len(segments) == 1:
        yield here
    elif isinstance(child, list):
        for index, element in enumerate(child):
            yield from apisix_paths(element, segments[1:], (*here, index))
    else:
        yield from apisix_paths(child, segments[1:], here)


def _dotted(paths: Iterable[str]) -> list[tuple[str, ...]]:
    return [tuple(p.split(".")) for p in paths]


def _plugin_marks(name: str, conf: Any, base: FieldPath, rules: SecretRules,
                  marks: dict[FieldPath, str]) -> None:
    """Mark the secret fields of one plugin's config at `base`."""
    declared = ENCRYPT_FIELDS.get(name)
    if declared is not None:
        for path in _dotted((*declared.schema, *declared.consumer)):
            for found in apisix_paths(conf, path, base):
                marks.setdefault(found, f"{name}'s encrypt_fields ({declared.file})")
    for path in rules.plugins.get(name, ()):
        for found in apisix_paths(conf, path, base):
            marks.setdefault(found, f"secret_fields: {name}.{'.'.join(path)}")
    if isinstance(conf, dict):
        for field_name in PLUGIN_NAMES.get(name, ()):
            if field_name in conf:
                marks.setdefault((*base, field_name), f"{name}'s credential")
        if name == "workflow":
            _workflow_marks(conf, base, rules, marks)


def _workflow_marks(conf: dict, base: FieldPath, rules: SecretRules, marks: dict[FieldPath, str]) -> None:
    """``workflow``'s actions are ``[plugin name, its config]`` pairs: each config is that plugin's."""
    rules_list = conf.get("rules")
    for r, rule in enumerate(rules_list if isinstance(rules_list, list) else ()):
        actions = rule.get("actions") if isinstance(rule, dict) else None
        for a, action in enumerate(actions if isinstance(actions, list) else ()):
            if isinstance(action, list) and len(action) >= 2 and isinstance(action[0], str):
                _plugin_marks(action[0], action[1], (*base, "rules", r, "actions", a, 1), rules, marks)


def _marks(kind: str, item: dict, rules: SecretRules) -> dict[FieldPath, str]:
    """Every field the tables and rules name secret in `item` (subtrees, by path), with why."""
    marks: dict[FieldPath, str] = {}
    fields = [(p, f"{kind}'s {'.'.join(p)}") for p in _dotted(KIND_FIELDS.get(kind, ()))]
    if kind == "secrets":
        manager = str(item.get("id", "")).split("/", 1)[0]
        fields += [(p, f"the {manager} secret manager's {'.'.join(p)}")
                   for p in _dotted(SECRET_MANAGER_FIELDS.get(manager, ()))]
    fields += [(p, f"secret_fields: {kind}.{'.'.join(p)}") for p in rules.kinds.get(kind, ())]
    for path, why in fields:
        for found in apisix_paths(item, path):
            marks.setdefault(found, why)
    if kind == "plugin_metadata":
        name = str(item.get("id", ""))
        declared = ENCRYPT_FIELDS.get(name)
        paths = [(p, f"{name}'s metadata encrypt_fields ({declared.file})")
                 for p in _dotted(declared.metadata)] if declared is not None else []
        paths += [(p, f"secret_fields: {name}.{'.'.join(p)}") for p in rules.plugins.get(name, ())]
        for path, why in paths:
            for found in apisix_paths(item, path):
                marks.setdefault(found, why)
    plugins = item.get("plugins")
    if isinstance(plugins, dict):
        for name, conf in plugins.items():
            _plugin_marks(str(name), conf, ("plugins", name), rules, marks)
    return marks


#: Kinds whose every item is looked at: an SSL holds its private key, a secret manager its credentials.
ALWAYS_LOOKED_AT = frozenset({"ssls", "secrets"})


#: Parts of every secret name, scheme word and shape start (without ``-``/``_``, which names spell
#: either way): an item whose JSON holds none of them (nor the last name of a declared path) holds no
#: secret the classifier would find.
STEMS = ("pass", "secret", "key", "token", "credential", "auth", "account", "header", "-----begin", "eyj",
         "://", "bearer", "basic", "digest", "bot", "hmac", "negotiate", "ntlm", "sso", "aws4", '"vars"',
         "function", '"script"')


@functools.lru_cache(maxsize=16)
def _first_look(rules: SecretRules) -> tuple[re.Pattern[str], re.Pattern[bytes]]:
    """`STEMS`, and the last name of each declared path that holds none of them (``auth.query``), as one
    pattern over lower-case text (and one over bytes: an item's canonical content)."""
    declared = [path for d in ENCRYPT_FIELDS.values() for path in (*d.schema, *d.consumer, *d.metadata)]
    declared += [".".join(p) for paths in (*rules.plugins.values(), *rules.kinds.values()) for p in paths]
    more = {path.rsplit(".", 1)[-1].lower() for path in declared}
    stems = [*STEMS, *sorted(name for name in more if not any(stem in name for stem in STEMS))]
    text = "|".join(re.escape(stem) for stem in stems)
    return re.compile(text), re.compile(text.encode())


def could_hold_secrets(kind: str, item: Any, rules: SecretRules = NO_RULES,
                       text: str | bytes | None = None) -> bool:
    """Whether `item` may hold a secret at all (False: `classify` finds nothing), at the cost of one
    search of its text. `text`: its JSON, or its canonical content, when the caller has it."""
    if kind in ALWAYS_LOOKED_AT or kind in rules.kinds:
        return True
    if text is None:
        try:
            text = json.dumps(item, ensure_ascii=False)
        except (TypeError, ValueError):
            return True
    plain, raw = _first_look(rules)
    if isinstance(text, bytes):
        return raw.search(text.lower()) is not None
    return plain.search(text.lower()) is not None


def classify(kind: str, item: Any, rules: SecretRules = NO_RULES, text: str | bytes | None = None
             ) -> list[Finding]:
    """Every secret string of one item of `kind` (any value: a non-item is looked at for shapes only).
    `text`: the item's JSON when the caller has it (a first look at it skips most items)."""
    if not could_hold_secrets(kind, item, rules, text):
        return []
    return walk_item(kind, item, rules)


def walk_item(kind: str, item: Any, rules: SecretRules = NO_RULES) -> list[Finding]:
    """`classify` without its first look: every node of the item walked."""
    marks = _marks(kind, item, rules) if isinstance(item, dict) else {}
    found: list[Finding] = []
    _walk(item, (), marks, False, found)
    if isinstance(item, dict):
        taken = {finding.path for finding in found}
        found += [f for f in (*_vars_findings(item), *_code_findings(item)) if f.path not in taken]
    return found


# ---------------------------------------------------------------------------------------------------------
# What a request is compared with, and code


#: Request variables (nginx's ``http_*``, ``arg_*``, ``cookie_*``, ``post_arg_*``) that carry what a
#: client presents: a ``vars`` comparison of one with a literal holds a fixed credential.
_REQUEST_VARIABLE = re.compile(r"^(?:http|arg|cookie|post_arg)_(.+)$")
#: Plugins whose config holds code the gateway runs, and the fields of it.
CODE_FIELDS: dict[str, tuple[str, ...]] = {"serverless-pre-function": ("functions",),
                                           "serverless-post-function": ("functions",)}
#: A string literal of Lua code ('…', "…", [[…]]).
_LUA_STRING = re.compile(r"""'((?:[^'\\\n]|\\.)*)'|"((?:[^"\\\n]|\\.)*)"|\[(=*)\[(.*?)\]\3\]""", re.S)
#: The shortest literal of code looked at as a token (a key, a password) rather than a word.
CODE_LITERAL = 8


def _tokenlike(literal: str) -> bool:
    """At least `CODE_LITERAL` characters, no space, with a digit or of high entropy: a key or a password
    rather than a word, a header's name or a path."""
    return (len(literal) >= CODE_LITERAL and not any(c.isspace() for c in literal)
            and not literal.startswith("/")
            and (any(c.isdigit() for c in literal) or entropy(literal) >= MIN_LIKELY_BITS))


def _vars_findings(item: dict) -> list[Finding]:
    """The literals ``vars`` expressions compare a client-presented value with (route ``vars``, and
    ``vars`` under a plugin: traffic-split's matches, workflow's cases)."""
    found: list[Finding] = []

    def expressions(value: Any, path: FieldPath) -> None:
        if not isinstance(value, list):
            return
        if len(value) >= 3 and all(isinstance(v, str) for v in value[:2]) and isinstance(value[-1], str):
            variable = _REQUEST_VARIABLE.match(value[0].lower())
            literal = value[-1]
            # a credential's name (a header, argument, cookie), or any request value and a token-like literal
            named = variable is not None and credential_header(variable.group(1).replace("_", "-"))
            if (variable and literal and not is_reference(literal) and not _NGINX_VARIABLE.match(literal)
                    and (named or _tokenlike(literal))):
                found.append(Finding((*path, len(value) - 1), None,
                                     f"the value a request's {value[0]!r} is compared with", certain=False))
            return
        for index, child in enumerate(value):
            expressions(child, (*path, index))

    def walk(value: Any, path: FieldPath) -> None:
        if isinstance(value, dict):
            for key, child in value.items():
                if key in ("vars", "case"):
                    expressions(child, (*path, key))
                else:
                    walk(child, (*path, key))
        elif isinstance(value, list):
            for index, child in enumerate(value):
                walk(child, (*path, index))

    walk(item, ())
    return found


def _code_findings(item: dict) -> list[Finding]:
    """The string literals of code the item makes the gateway run that look like a token: at least
    `CODE_LITERAL` characters, no space, with a digit or of high entropy (a key, a password; not a
    header's name or a word)."""
    code: list[tuple[FieldPath, str]] = []
    if isinstance(item.get("script"), str):
        code.append((("script",), item["script"]))
    plugins = item.get("plugins")
    for name, fields in CODE_FIELDS.items():
        conf = plugins.get(name) if isinstance(plugins, dict) else None
        for field_name in fields if isinstance(conf, dict) else ():
            value = conf.get(field_name)
            texts = value if isinstance(value, list) else [value]
            code += [(("plugins", name, field_name, *((i,) if isinstance(value, list) else ())), text)
                     for i, text in enumerate(texts) if isinstance(text, str)]
    found = []
    for path, text in code:
        spans = []
        for match in _LUA_STRING.finditer(text):
            group = next(g for g in (1, 2, 4) if match.group(g) is not None)
            literal = match.group(group)
            if _tokenlike(literal):
                spans.append((match.start(group), match.end(group)))
        if spans:
            found.append(Finding(path, tuple(spans), "a literal of code the gateway runs", certain=False))
    return found


def _whole(value: Any, path: FieldPath, why: str, found: list[Finding]) -> None:
    """Every string in `value` is secret whole (a reference stays what it is)."""
    if isinstance(value, str):
        if value and not is_reference(value):
            found.append(Finding(path, None, why))
    elif isinstance(value, dict):
        for key, child in value.items():
            _whole(child, (*path, key), why, found)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            _whole(child, (*path, index), why, found)


def _walk(value: Any, path: FieldPath, marks: Mapping[FieldPath, str], headers: bool,
          found: list[Finding]) -> None:
    why = marks.get(path) if marks else None
    if why is not None:
        _whole(value, path, why, found)
    elif isinstance(value, str):
        finding = _in_text(value, path, headers)
        if finding is not None:
            found.append(finding)
    elif isinstance(value, dict):
        for key, child in value.items():
            here = (*path, key)
            if here in marks:
                _walk(child, here, marks, headers, found)
            elif headers and isinstance(child, str):
                finding = _header_value(str(key), child, here)
                if finding is not None:
                    found.append(finding)
            elif isinstance(key, str) and is_secret_name(key):
                if isinstance(child, str) and "authoriz" in key.lower():  # a scheme before the credential
                    finding = _header_value("Authorization", child, here)
                    found += [finding] if finding is not None else []
                else:
                    _whole(child, here, f"the field name {key!r}", found)
            else:
                _walk(child, here, marks, headers or "header" in str(key).lower(), found)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            _walk(child, (*path, index), marks, headers, found)


# ---------------------------------------------------------------------------------------------------------
# Shapes


def credential_header(name: str) -> bool:
    """Whether a header of this name carries a credential."""
    lower = name.strip().lower()
    return lower in CREDENTIAL_HEADERS or bool(_HEADER_ENDINGS.search(lower))


def _header_value(name: str, value: str, path: FieldPath, offset: int = 0) -> Finding | None:
    """The secret part of a header's value: a credential header's value (after its scheme), else what
    its shape says; a long high-entropy value is likely one."""
    if credential_header(name):
        scheme = _SCHEME_WORD.match(value)
        start = scheme.end() if scheme else len(value) - len(value.lstrip())
        secret = value[start:].rstrip()
        if secret and not is_reference(secret) and not _NGINX_VARIABLE.match(secret):
            return Finding(path, ((offset + start, offset + start + len(secret)),),
                           f"the value of the header {name!r}")
        return None
    spans = _shape_spans(value)
    if spans:
        return Finding(path, tuple((offset + s, offset + e) for s, e, _ in spans), spans[0][2])
    if _likely(value.strip()):
        start = len(value) - len(value.lstrip())
        return Finding(path, ((offset + start, offset + len(value.rstrip())),),
                       f"a high-entropy value of the header {name!r}", certain=False)
    return None


def _in_text(text: str, path: FieldPath, headers: bool) -> Finding | None:
    """A string outside every named field: a ``Name: value`` header line in a header list, or shapes."""
    if headers:
        name, colon, value = text.partition(":")
        if colon and _HEADER_NAME.fullmatch(name.strip()) and not SCHEME.match(text):
            return _header_value(name, value, path, len(name) + 1)
    spans = _shape_spans(text)
    likely = [] if spans else _likely_in_url(text)
    if spans:
        why = "; ".join(dict.fromkeys(w for _, _, w in spans))
        return Finding(path, tuple((s, e) for s, e, _ in spans), why)
    if likely:
        return Finding(path, tuple(likely), "a high-entropy part of a URL", certain=False)
    return None


def _shape_spans(text: str) -> list[tuple[int, int, str]]:
    """The parts of `text` that are secret by their shape, in order, without overlaps."""
    if not _ANY_SHAPE.search(text):
        return []
    spans: list[tuple[int, int, str]] = []
    for match in _PEM.finditer(text):
        spans.append((match.start(), match.end(), "a PEM private key"))
    for match in _JWT.finditer(text):
        spans.append((match.start(), match.end(), "a JWT"))
    for match in _AUTH_SCHEME.finditer(text):
        token = match.group(1)
        if any(c.isdigit() for c in token) or "=" in token or (len(token) >= 16 and not token.isalpha()):
            spans.append((match.start(1), match.end(1), "a credential after an authorization scheme"))
    if "://" in text:
        spans += [(c.start, c.end, f"a {c.what}") for c in credentials(text)]
    return _without_overlaps(spans, text)


def _without_overlaps(spans: list[tuple[int, int, str]], text: str) -> list[tuple[int, int, str]]:
    """Spans sorted, overlapping ones merged, references left out."""
    out: list[tuple[int, int, str]] = []
    for start, end, why in sorted(spans):
        if out and start < out[-1][1]:
            last = out[-1]
            out[-1] = (last[0], max(last[1], end), last[2])
        else:
            out.append((start, end, why))
    return [(s, e, w) for s, e, w in out if e > s and not is_reference(text[s:e])]


def entropy(text: str) -> float:
    """Shannon entropy of `text`, in bits per character."""
    counts: dict[str, int] = {}
    for char in text:
        counts[char] = counts.get(char, 0) + 1
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in counts.values())


def _likely(text: str) -> bool:
    """A long token of mixed letters and digits with high entropy: likely a credential."""
    return (len(text) >= MIN_LIKELY_LENGTH and bool(_TOKENISH.match(text))
            and any(c.isdigit() for c in text) and any(c.isalpha() for c in text)
            and entropy(text) >= MIN_LIKELY_BITS)


def _likely_in_url(text: str) -> list[Span]:
    """High-entropy path segments and query values of a URL (``https://hooks.example/T0/B0/XXXX``)."""
    match = SCHEME.search(text)
    if match is None or text[:match.start()].strip():
        return []
    path = _PATH_START.search(text, match.end())
    if path is None:
        return []
    return [(part.start(), part.end()) for part in _URL_PART.finditer(text, path.start())
            if _likely(part.group())]


# ---------------------------------------------------------------------------------------------------------
# A payload


def find_secrets(payload: Mapping[str, Any], rules: SecretRules = NO_RULES,
                 contents: Mapping[str, Sequence[bytes]] | None = None) -> Iterator[tuple[str, int, Finding]]:
    """(kind, index, finding) of every secret string of a payload ``{kind: [items]}``. `contents`: each
    item's canonical content by kind, in payload order, when the caller has them (a cheap first look)."""
    for kind, items in payload.items():
        if not isinstance(items, list):
            continue
        texts = (contents or {}).get(kind)
        if texts is not None and len(texts) != len(items):
            texts = None
        if texts is not None and not could_hold_secrets(kind, None, rules, b"\n".join(texts)):
            continue  # one look at the whole list: most lists hold no secret at all
        for index, item in enumerate(items):
            for finding in classify(kind, item, rules, texts[index] if texts is not None else None):
                yield kind, index, finding


def value_at(item: Any, path: FieldPath) -> Any:
    for step in path:
        item = item[step]
    return item


def secret_values(payload: Mapping[str, Any], rules: SecretRules = NO_RULES,
                  contents: Mapping[str, Sequence[bytes]] | None = None) -> set[str]:
    """Every secret text of a payload (whole values, or the secret parts of a string)."""
    out: set[str] = set()
    for kind, index, finding in find_secrets(payload, rules, contents):
        value = value_at(payload[kind][index], finding.path)
        out.update(piece.strip() for piece in finding.pieces(value) if piece.strip())
    return out


def document_secret_values(data: Any, rules: SecretRules = NO_RULES,
                           contents: Mapping[str, Sequence[bytes]] | None = None) -> set[str]:
    """`secret_values` of one config document (``{kind: [items]}``; other keys are not items)."""
    if not isinstance(data, dict):
        return set()
    lists = {kind: items for kind, items in data.items() if kind in KINDS and isinstance(items, list)}
    return secret_values(lists, rules, contents)


def mask_text(text: str, mask: str) -> str:
    """Free text (a log line, a title) with every secret shape in it masked (not header lines: a
    free text has no header map)."""
    spans = _shape_spans(text)
    if not spans:
        return text
    return Finding((), tuple((s, e) for s, e, _ in spans), "").masked(text, mask)


__all__ = ["ALWAYS_LOOKED_AT", "NO_RULES", "SECRET_NAMES", "STEMS", "Finding", "SecretRules",
           "apisix_paths", "classify", "could_hold_secrets", "credential_header", "document_secret_values",
           "entropy", "find_secrets", "is_reference", "is_secret_name", "mask_text",
           "secret_values", "value_at", "walk_item"]
