"""What the doors' tests share: the variable that makes a missing trainer library a failure."""

from __future__ import annotations

REQUIRE_VARIABLE = "HERMES_ENVGEN_REQUIRE_TORCH"  # CI installs the trainers' libraries
