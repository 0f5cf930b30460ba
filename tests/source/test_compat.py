"""dulwich's private API that gitsync uses (gitsync/compat.py) is still what was reviewed.

A failure here is not a bug in gitsync yet: dulwich changed a method gitsync copies or calls.
Read the new source, adapt `gitsync/compat.py` if needed, then record the new fingerprint.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect

import pytest

from gitsync.source.compat import REVIEWED


@pytest.mark.parametrize("qualified", sorted(REVIEWED))
def test_the_private_dulwich_methods_are_the_reviewed_ones(qualified: str) -> None:
    module_name, class_name, method = qualified.rsplit(".", 2)
    owner = getattr(importlib.import_module(module_name), class_name, None)
    assert owner is not None, f"{module_name}.{class_name} is gone from dulwich"
    function = getattr(owner, method, None)
    assert function is not None, f"{qualified} is gone from dulwich: gitsync/compat.py needs a new way"
    found = hashlib.sha256(inspect.getsource(function).encode()).hexdigest()
    assert found == REVIEWED[qualified], (
        f"{qualified} changed in this dulwich; review gitsync/compat.py against it, then record {found}")
