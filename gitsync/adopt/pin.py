"""How a scaffolded repo's CI installs gitsync: one wheel, named by its sha256, and never a bare name.

The project publishes as ``apisix-gitsync`` (`gitsync.DISTRIBUTION`); the name ``gitsync`` on the package
index belongs to an unrelated project, so a CI job that installed by that name would run someone
else's code. `gitsync init` therefore writes two files under ``ci/``:

- ``gitsync-requirements.txt``: ``apisix-gitsync==<version> --hash=sha256:<wheel>`` (or the wheel's URL
  with its hash), installed with ``--require-hashes --no-deps``: pip installs that exact file or stops;
- ``gitsync-libraries.txt``: the libraries that wheel declares (its ``Requires-Dist``), by the names
  their own projects publish, installed first. pip's hash-checking mode would demand a hash for every
  one of them on every platform, which no scaffold can know offline: gitsync's own wheel is what the
  hash protects, and the agents already run these libraries with the admin key.

The hash is the wheel's the agents run: the one given with ``--wheel FILE``, or the one this gitsync was
installed from (pip records its sha256 in the installed distribution's ``direct_url.json``). Wheels are
built reproducibly (hatchling), so the same source gives the same file and hash wherever it is built.
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import re
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from gitsync import DISTRIBUTION, __version__

REQUIREMENTS = "ci/gitsync-requirements.txt"
LIBRARIES = "ci/gitsync-libraries.txt"
#: The commands that install gitsync from those files, as every CI file and the README write them.
INSTALL = (f"python -m pip install -r {LIBRARIES}",
           f"python -m pip install --require-hashes --no-deps -r {REQUIREMENTS}",
           "python -m pip check")


class PinError(Exception):
    """No wheel to pin CI to, or a file that is not a gitsync wheel: the message names the next step."""


def normalized(name: str) -> str:
    """A distribution name as the package index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class WheelPin:
    """The wheel a scaffold's CI installs: its version, sha256, where from, and what it requires."""

    version: str
    sha256: str | None  # None: no wheel known yet (`unpinned`): the file stops pip until it is pinned
    requires: tuple[str, ...]
    url: str | None = None  # None: from the package index (or PIP_INDEX_URL, PIP_FIND_LINKS)
    why: str = ""  # why there is no hash (for `unpinned`)

    def requirements(self) -> str:
        if self.sha256 is None:
            return self._unpinned()
        where = f"{DISTRIBUTION} @ {self.url}" if self.url else f"{DISTRIBUTION}=={self.version}"
        source = f"the wheel at {self.url}" if self.url else \
            "the package index\n# (or the PIP_INDEX_URL / PIP_FIND_LINKS your CI sets)"
        return (
            f"# gitsync {self.version} for this repo's CI and pre-commit: the project's distribution\n"
            f"# {DISTRIBUTION} (its command is gitsync), from {source}, pinned by the sha256\n"
            "# of its wheel: pip installs that one file or stops. Written by `gitsync init`; to move to\n"
            "# another version: `gitsync init --pin-only --wheel FILE .` with the wheel your agents run.\n"
            f"#   {INSTALL[0]}\n#   {INSTALL[1]}\n"
            f"{where} \\\n    --hash=sha256:{self.sha256}\n")

    def _unpinned(self) -> str:
        """A requirements file that pip refuses (``--require-hashes`` with no hash: "Hashes are required
        in --require-hashes mode"), so CI fails closed, with the step that pins it written in it."""
        return (
            f"# NOT PINNED YET: gitsync init knew no wheel hash ({self.why}).\n"
            "# CI installs nothing until this file names the wheel your agents run, by its sha256:\n"
            f"#   pip download {DISTRIBUTION}=={self.version} --no-deps -d wheels/   (or your own build)\n"
            f"#   gitsync init --pin-only --wheel wheels/{wheel_name(self.version)} .\n"
            "# Until then pip refuses this file (--require-hashes: the hash is missing). Do not add a bare\n"
            "# name here: `gitsync` on the package index is another project.\n"
            f"{DISTRIBUTION}=={self.version}\n")

    def libraries(self) -> str:
        lines = "".join(f"{requirement}\n" for requirement in self.requires)
        return (f"# The libraries gitsync {self.version} needs, as its wheel declares them, by the names\n"
                f"# their own projects publish. Installed before {REQUIREMENTS}; `pip check` confirms them.\n"
                f"{lines}")

    def files(self) -> dict[str, str]:
        return {REQUIREMENTS: self.requirements(), LIBRARIES: self.libraries()}


def _runtime(requires: list[str] | None) -> tuple[str, ...]:
    """The requirements an install without extras needs (those under ``extra == …`` are left out)."""
    return tuple(r for r in requires or () if not re.search(r"\bextra\s*==", r))


def from_wheel(path: Path, url: str | None = None) -> WheelPin:
    """The pin of a wheel file: its sha256, its version and requirements from its own METADATA."""
    try:
        data = path.read_bytes()
        with zipfile.ZipFile(path) as wheel:
            names = [n for n in wheel.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
            if len(names) != 1:
                raise PinError(f"{path}: not a wheel (no single *.dist-info/METADATA)")
            meta = email.parser.Parser().parsestr(wheel.read(names[0]).decode("utf-8"))
    except (OSError, zipfile.BadZipFile) as exc:
        raise PinError(f"{path}: cannot read the wheel: {exc}") from None
    if normalized(meta.get("Name", "")) != DISTRIBUTION:
        raise PinError(f"{path}: a wheel of {meta.get('Name')!r}, not of {DISTRIBUTION}")
    return WheelPin(meta["Version"], hashlib.sha256(data).hexdigest(),
                    _runtime(meta.get_all("Requires-Dist")), url)


def wheel_name(version: str) -> str:
    return f"apisix_gitsync-{version}-py3-none-any.whl"


def of_this_install() -> WheelPin:
    """The pin of the wheel this gitsync was installed from, as pip recorded it (PEP 610); when pip
    recorded none (installed from a package index, a checkout, or in editable mode), an unpinned one
    (`WheelPin.sha256` None) that stops CI until `gitsync init --pin-only --wheel FILE` pins it."""
    hint = (f"give the wheel your agents run: gitsync init --wheel {wheel_name(__version__)} DIR (`pip "
            f"download {DISTRIBUTION}=={__version__} --no-deps` fetches it from the package index)")
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise PinError(f"this gitsync is not installed from a wheel ({DISTRIBUTION} is not installed): "
                       f"{hint}") from None
    if dist.version != __version__:
        raise PinError(f"the installed {DISTRIBUTION} is {dist.version}, this gitsync {__version__}: {hint}")
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except json.JSONDecodeError:
        direct = {}
    info = direct.get("archive_info") or {}
    digest = (info.get("hashes") or {}).get("sha256") or \
        (info.get("hash", "")[7:] if str(info.get("hash", "")).startswith("sha256=") else "")
    url = str(direct.get("url") or "")
    if not digest or not url.endswith(".whl"):
        return WheelPin(dist.version, None, _runtime(dist.requires),
                        why="pip recorded no wheel hash for this gitsync: installed from a package index, "
                            "a checkout or in editable mode")
    return WheelPin(dist.version, digest, _runtime(dist.requires),
                    url if url.startswith(("https://", "http://")) else None)


def choose(wheel: Path | None, url: str | None) -> WheelPin:
    """The pin `gitsync init` writes: the wheel given, else the one this gitsync was installed from."""
    if wheel is not None:
        return from_wheel(wheel, url)
    if url is not None:
        raise PinError("--wheel-url needs --wheel FILE: the sha256 is taken from the file itself")
    return of_this_install()


__all__ = ["INSTALL", "LIBRARIES", "REQUIREMENTS", "PinError", "WheelPin", "choose", "from_wheel",
           "normalized", "of_this_install", "wheel_name"]
