"""One rollout as the viewer shows it: what the page (rollout_view), the run at a glance
(run_glance) and the token view (token_view) all read, in a module of its own so that none of
them imports another for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RolloutCard:
    """One rollout as the page shows it."""

    title: str
    messages: list[dict]
    reward: float | None
    turns: int
    tool_calls: int
    tool_errors: int
    failure: str | None = None
    facts: dict[str, str] = field(default_factory=dict)  # small extras: item key, task id, ...
    group: str | None = None  # the rollouts scored together: a process group, an eval item
    task: str | None = None  # the same task in another run of the env (for comparing runs)
    signals: dict[str, float] = field(default_factory=dict)  # the reward's named signals
    summary: dict[str, Any] | None = None  # an evaluation record's summary (for pass@k)
    tokens: Sequence[int] | None = None  # process mode's training data: the exact token ids,
    masks: Sequence[int] | None = None  # their masks (-100: not trained),
    logprobs: Sequence[float] | None = None  # and token mode's sampled logprobs
