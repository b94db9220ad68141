"""Suite-wide settings: Hypothesis profiles and shared fixtures.

``GOSSAMER_HYPOTHESIS_PROFILE=thorough`` runs many more examples locally.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("GOSSAMER_HYPOTHESIS_PROFILE", "default"))

# Multi-host network-namespace fixtures (gossamer.testing.pytest_plugin).
pytest_plugins = ["gossamer.testing.pytest_plugin"]
