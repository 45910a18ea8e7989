"""Shared by the tests: moved out of runtime/doors/test_openenv.py."""

from __future__ import annotations

REQUIRE_VARIABLE = "HERMES_ENVGEN_REQUIRE_TORCH"  # CI installs the trainers' libraries
