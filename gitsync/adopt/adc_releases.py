"""The ADC releases `gitsync import adc` covers, and how each writes a standalone gateway.

ADC's standalone backend (api7/adc ``libs/backend-apisix-standalone``, first in 0.20.0)
writes the same ids in every release; what changed between releases is the shape of
upstreams, which schema defaults its lint fills in, and the ``managed-by`` label.
Releases that write alike form one `Release` range here; docs/adoption.md has the
table with the api7/adc commits behind each difference.

A takeover changes nothing only when the import writes what the ADC that last
synced the gateway wrote, so the import needs to know which one that was: from
``--adc-version``, from the live gateway (`gitsync.adopt.adc_gateway`), or the latest
release by default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

#: The active health check's certificate-verification flag, as ADC's schema spells it. ADC writes its
#: fields verbatim; APISIX itself reads ``https_verify_certificate`` and ``req_headers``.
VERIFY_CERT_OLD = "https_verify_cert"
VERIFY_CERT = "https_verify_certificate"
MANAGED_BY = ("managed-by", "adc")
UPSTREAM_SERVICE_LABEL = "__ADC_UPSTREAM_SERVICE_ID"


@dataclass(frozen=True)
class Release:
    """A range of ADC releases whose ``adc sync`` writes the same items for the same files."""

    first: str
    last: str
    nested_upstream: bool  # the service's upstream inside the service item (no upstream item)
    full_defaults: bool  # lint (zod 4) fills every schema default; else (zod 3) keepalive_pool's only
    checks: bool  # health checks and service discovery fields are written (else dropped)
    empty_nodes: bool  # an upstream without nodes gets ``nodes: []``
    verify_cert: str  # the name under which the lint fills the active check's default ``true``

    @property
    def name(self) -> str:
        return self.first if self.first == self.last else f"{self.first} – {self.last}"


RELEASES: tuple[Release, ...] = (
    Release("0.20.0", "0.20.0", nested_upstream=True, full_defaults=False, checks=False, empty_nodes=True,
            verify_cert=VERIFY_CERT_OLD),
    Release("0.21.0", "0.21.0", nested_upstream=False, full_defaults=True, checks=False, empty_nodes=True,
            verify_cert=VERIFY_CERT_OLD),
    Release("0.21.1", "0.21.1", nested_upstream=False, full_defaults=True, checks=True, empty_nodes=True,
            verify_cert=VERIFY_CERT_OLD),
    Release("0.21.2", "0.25.x", nested_upstream=False, full_defaults=True, checks=True, empty_nodes=False,
            verify_cert=VERIFY_CERT_OLD),
    Release("0.26.0", "0.28.0", nested_upstream=False, full_defaults=True, checks=True, empty_nodes=False,
            verify_cert=VERIFY_CERT),
)
LATEST = RELEASES[-1]
LATEST_RELEASED = "0.28.0"
#: ADC's main branch after 0.28.0 writes what 0.28.0 does, plus ``labels.managed-by: adc``.
MAIN = "main"


@dataclass(frozen=True)
class Behaviour:
    """What one ``adc sync`` wrote: the release range, whether it stamped ``managed-by: adc``, and
    whether its lint ran (``adc sync --no-lint`` fills in no default at all)."""

    release: Release = LATEST
    managed_by: bool = False
    lint: bool = True

    @property
    def name(self) -> str:
        text = f"ADC {MAIN} (after {LATEST_RELEASED})" if self.managed_by and self.release is LATEST \
            else f"ADC {self.release.name}"
        return text + (" with --no-lint" if not self.lint else "")

    def with_(self, **changes: object) -> Behaviour:
        return replace(self, **changes)  # type: ignore[arg-type]


DEFAULT = Behaviour()

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


class UnknownRelease(ValueError):
    """A ``--adc-version`` this gitsync does not cover."""


def _version(text: str) -> tuple[int, int, int]:
    match = _VERSION.fullmatch(text)
    if match is None:
        raise UnknownRelease(f"{text!r}: expected an ADC release such as 0.28.0 or 0.24, or main")
    return int(match[1]), int(match[2]), int(match[3] or 0)


def _range_of(version: tuple[int, int, int]) -> Release:
    shown = ".".join(map(str, version))
    if version[:2] > _version(LATEST_RELEASED)[:2]:
        raise UnknownRelease(f"ADC {shown} is newer than the releases this gitsync knows ({covered()}): give "
                             "--gateway URL to follow what it wrote, or the closest --adc-version")
    found = [r for r in RELEASES if _version(r.first) <= version]
    if not found:
        raise UnknownRelease(f"ADC {shown} has no standalone backend (it came in {RELEASES[0].first})")
    return found[-1]


def behaviour_for(version: str) -> Behaviour:
    """``--adc-version``: ``main``, ``X.Y`` (read as X.Y.0) or ``X.Y.Z``, a leading ``v`` allowed."""
    text = version.strip()
    if text.lower() == MAIN:
        return Behaviour(LATEST, managed_by=True)
    return Behaviour(_range_of(_version(text)))


def covered() -> str:
    """The covered releases, for help texts and messages."""
    return ", ".join(r.name for r in RELEASES) + f", {MAIN}"


#: Fields only ADC writes: a difference in them comes from importing for another ADC release.
_ADC_FIELDS = frozenset({VERIFY_CERT_OLD, "http_request_headers", UPSTREAM_SERVICE_LABEL})


def _label_change(fields: tuple[tuple[str, ...], ...], values: tuple[tuple[object, object], ...] | None,
                  absent: object) -> tuple[object, object] | None:
    """(gateway, repo) of ``labels.managed-by`` when that label is all that differs; an item without
    any other label differs in ``labels`` as a whole."""
    if values is None or len(fields) != 1:
        return None
    before, after = values[0]
    if fields[0] == ("labels", MANAGED_BY[0]):
        return before, after
    only = dict([MANAGED_BY])
    if fields[0] == ("labels",) and (before, after) in ((absent, only), (only, absent)):
        return (absent, MANAGED_BY[1]) if before is absent else (MANAGED_BY[1], absent)
    return None


def diff_hint(kind: str, fields: tuple[tuple[str, ...], ...],
              values: tuple[tuple[object, object], ...] | None, absent: object) -> str | None:
    """Why many items of a kind differ the same way after ``gitsync import adc``, and what to re-run;
    None when nothing says the difference comes from ADC."""
    label = _label_change(fields, values, absent)
    if label == (absent, MANAGED_BY[1]):
        return ("the gateway has no managed-by label (ADC up to 0.28.0 writes none): re-run the import "
                "with --no-managed-by-label, or with --gateway URL to follow the gateway")
    if label == (MANAGED_BY[1], absent):
        return ("the gateway has ADC's managed-by label (ADC after 0.28.0): re-run the import with "
                "--managed-by-label (or --adc-version main), or with --gateway URL to follow the gateway")
    if kind in ("upstreams", "services") and any(step in _ADC_FIELDS for path in fields for step in path):
        return ("another ADC release wrote the gateway than the import assumed: re-run `gitsync import adc` "
                "with --gateway URL to follow it, or with --adc-version")
    return None
