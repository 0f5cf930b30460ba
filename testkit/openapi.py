"""OpenAPI specs for tests: converting one without a repo around it, ADC's published cases, and a
repo that declares specs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gitsync.problems import Location
from gitsync.render.load import parse
from gitsync.render.openapi.convert import Conversion, convert
from gitsync.render.openapi.declaration import Declaration
from gitsync.render.openapi.refs import MISSING
from gitsync.render.sourcemap import FilePositions

ADC_CASES = Path(__file__).resolve().parent.parent / "tests" / "data" / "openapi" / "adc"


def conversion(files: Mapping[str, bytes | str], spec: str = "spec.yaml", **declared: Any) -> Conversion:
    """`convert` of the spec `spec` among `files` (name → text), declared with `declared` (the fields of
    `Declaration`) in ``openapi.yaml`` (whose every field is placed at its line 1)."""
    data = {name: text.encode() if isinstance(text, str) else text for name, text in files.items()}
    parsed = {name: parse(text) for name, text in data.items()}

    def documents(name: str) -> Any:
        if name not in parsed:
            return MISSING
        found = parsed[name]
        return None if found.issues or len(found.documents) != 1 else found.documents[0].shared

    positions = FilePositions(data)
    declaration = Declaration("spec", spec, lambda path: Location("openapi.yaml", 1, 1), **declared)
    return convert(declaration, documents, lambda place: positions.location(place.file, 0, place.path))


def adc_case(name: str) -> str:
    """The spec of one of ADC's converter test cases (``basic-1.yaml`` …)."""
    return (ADC_CASES / name).read_text()


def adc_expected() -> dict[str, list[dict[str, Any]]]:
    """What ADC 0.28.0's ``adc convert openapi`` writes for each of its test cases (see the file)."""
    text = (ADC_CASES / "expected.yaml").read_text()
    return json.loads("\n".join(line for line in text.splitlines() if not line.startswith("#")))


def spec_repo(root: Path, specs: Mapping[str, str], declaration: str, extra: Mapping[str, str] | None = None,
              ) -> Path:
    """A directory holding `specs` (path → text), ``openapi.yaml`` with `declaration` and `extra` files."""
    for name, text in {**specs, "openapi.yaml": declaration, **(extra or {})}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


__all__ = ["ADC_CASES", "adc_case", "adc_expected", "conversion", "spec_repo"]
