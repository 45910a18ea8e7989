"""Live progress of ``process`` and ``evaluate``: done of total, mean reward, tool errors, rate;
and what feeds it: finished rollouts, and the records an interrupted evaluation saved.

Drawn with rich on stderr, and only when stderr is a terminal, so that logs, pipes and CI
output stay free of control characters.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hermes_envgen.runtime.rollout import Rollout
from hermes_envgen.runtime.rollouts.evaluation.journal import tool_error_count


class RunProgress:
    """A progress bar over ``total`` units (groups, rollouts) with running rollout statistics."""

    def __init__(
        self,
        description: str,
        total: int,
        unit: str,
        *,
        completed: int = 0,
        console: Console | None = None,
    ) -> None:
        self.unit = unit
        self.rollouts = 0
        self.scored = 0
        self.reward_sum = 0.0
        self.tool_errors = 0
        self.failures = 0
        self._completed = completed
        self._total = total
        self._new = 0  # units done by this run, for the rate (a resumed run starts ahead)
        self._started = time.monotonic()
        console = console or Console(stderr=True)
        self._progress: Progress | None = None
        if console.is_terminal and total > 0:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(unit),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                console=console,
            )
            self._task = self._progress.add_task(
                description, total=total, completed=completed, stats=""
            )
            self._progress.start()

    @property
    def enabled(self) -> bool:
        """Whether a bar is drawn (stderr is a terminal)."""
        return self._progress is not None

    def record(self, reward: float | None, tool_errors: int = 0) -> None:
        """Count one finished rollout; ``reward`` None for a failure (no measured score)."""
        self.rollouts += 1
        self.tool_errors += tool_errors
        if reward is None:
            self.failures += 1
        else:
            self.scored += 1
            self.reward_sum += reward
        self._refresh()

    def advance(self, units: int = 1) -> None:
        """Mark units done; the bar closes itself once all are."""
        self._completed += units
        self._new += units
        self._refresh(advance=units)
        if self._completed >= self._total:
            self.close()

    def stats(self) -> str:
        """The running statistics, as the bar shows them."""
        parts = []
        if self.scored:
            parts.append(f"mean reward {self.reward_sum / self.scored:.3f}")
        parts.append(f"tool errors {self.tool_errors}")
        if self.failures:
            parts.append(f"failures {self.failures}")
        elapsed = time.monotonic() - self._started
        if self._new and elapsed > 0:
            parts.append(f"{self._new / elapsed:.2f} {self.unit}/s")
        return " · ".join(parts)

    def close(self) -> None:
        """Stop drawing, leaving the final state on screen."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _refresh(self, advance: int = 0) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=advance, stats=self.stats())


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
