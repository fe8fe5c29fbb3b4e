"""Shared test setup: hypothesis profiles and the bundled fixture paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("ci", parent=settings.get_profile("default"), max_examples=200)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

FIXTURES = Path(__file__).parent / "fixtures"
OBSERVATIONS = FIXTURES / "observations"
FIXTURE_NAMES = sorted(p.stem for p in OBSERVATIONS.glob("*.xml"))


@pytest.fixture(scope="session")
def observations_dir() -> Path:
    """The folder of real desktop observations copied from ../shared/fixtures."""
    return OBSERVATIONS
