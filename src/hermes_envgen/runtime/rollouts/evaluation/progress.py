"""What feeds the progress bar (:mod:`hermes_envgen.runtime.rollouts.progress`) of a run's rollouts
(``evaluate``'s and ``process``'s): finished rollouts, and the records an interrupted
evaluation saved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hermes_envgen.runtime.rollout import Rollout
from hermes_envgen.runtime.rollouts.evaluation.journal import tool_error_count
from hermes_envgen.runtime.rollouts.progress import RunProgress


def resumed_progress(total: int, saved: Sequence[Mapping[str, Any]]) -> RunProgress:
    """``evaluate``'s bar over ``total`` rollouts, with those a resumed run saved already in."""
    progress = RunProgress("evaluate", total, "rollouts", completed=len(saved))
    for record in saved:
        progress.record(
            None if record.get("failure") else record["reward"], tool_error_count(record)
        )
    return progress


def record_rollout(progress: RunProgress, rollout: Rollout) -> None:
    """Count a finished rollout in the bar: a failure has no reward to average."""
    progress.record(None if rollout.failure else rollout.reward, len(rollout.result.tool_errors))
