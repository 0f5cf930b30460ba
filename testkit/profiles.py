"""Hypothesis profiles for the suite: ``dev`` (light, the default when pytest runs by hand) and ``ci``
(full; the test command, scripts/test, selects it). ``HYPOTHESIS_PROFILE`` picks one.

A property test states how its cost compares with a typical one through `examples(weight)` (a pure
function over small data: weight above 1; one that starts servers or processes per example: below
1), never as a fixed count, so one knob sets the depth of the whole suite.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

BASE = {"dev": 20, "ci": 200}
_QUIET = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]

for _name, _count in BASE.items():
    settings.register_profile(_name, max_examples=_count, deadline=None, suppress_health_check=_QUIET)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
settings.load_profile(PROFILE)


def examples(weight: float = 1.0) -> settings:
    """Settings of a property test `weight` times as deep as the profile's typical one (at least 3)."""
    return settings(max_examples=max(3, round(BASE.get(PROFILE, BASE["dev"]) * weight)))


__all__ = ["PROFILE", "examples"]
