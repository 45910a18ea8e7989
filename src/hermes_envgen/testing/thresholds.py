"""The reward checks' thresholds, in a module of their own: the CLI's ``check`` flags take them
as defaults, and importing them must not import the runtime.
"""

from __future__ import annotations

GOLD_THRESHOLD = 0.9  # the least reward a task's gold solution must earn
NOOP_THRESHOLD = 0.1  # the most reward answering at once, without tools, may earn
