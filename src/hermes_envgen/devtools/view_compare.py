"""``hermes-envgen view A.jsonl B.jsonl``: two runs of an env side by side, task by task.

The tasks are matched across the runs by their item key (evaluation records) or, for process
groups, by the first user message; each task's rewards before (A) and after (B), its mean's
change, and what changed at the level of the run: mean reward over the tasks both ran, tasks
that improved, regressed or stayed, groups that gained or lost their spread. One page,
inline SVG, nothing fetched, like the single-run page.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from html import escape
from pathlib import Path

from hermes_envgen.errors import ViewError
from hermes_envgen.runtime.rollouts.rollout_card import RolloutCard
from hermes_envgen.runtime.rollouts.rollout_view import PAGE_CSS, first_user_text, read_run
from hermes_envgen.runtime.rollouts.run_glance import GLANCE_CSS, SAME_REWARD, histogram_svg

MAX_ROWS = 500  # tasks listed in the table, largest changes first; the rest are counted


@dataclass
class TaskChange:
    """One task's measured rewards in both runs."""

    task: str
    before: list[float]
    after: list[float]
    label: str = ""  # what a person reads: the task's first user message

    @property
    def delta(self) -> float:
        return statistics.fmean(self.after) - statistics.fmean(self.before)

    @property
    def changed(self) -> bool:
        return abs(self.delta) > SAME_REWARD or sorted(self.before) != sorted(self.after)


def _rewards_by_task(cards: list[RolloutCard]) -> dict[str, list[float]]:
    tasks: dict[str, list[float]] = {}
    for card in cards:
        if card.task is None or card.failure or card.reward is None:
            continue
        tasks.setdefault(card.task, []).append(card.reward)
    return tasks


def compare_runs(before: list[RolloutCard], after: list[RolloutCard]) -> list[TaskChange]:
    """The tasks both runs scored, each with its rewards before and after."""
    a, b = _rewards_by_task(before), _rewards_by_task(after)
    labels = {card.task: first_user_text(card.messages) for card in after if card.task}
    return [TaskChange(task, a[task], b[task], labels.get(task) or task) for task in a if task in b]


def render_comparison(
    before: list[RolloutCard], after: list[RolloutCard], names: tuple[str, str]
) -> str:
    """The page of two runs side by side."""
    changes = compare_runs(before, after)
    a, b = _rewards_by_task(before), _rewards_by_task(after)
    only_a, only_b = len(a.keys() - b.keys()), len(b.keys() - a.keys())
    up = [c for c in changes if c.delta > SAME_REWARD]
    down = [c for c in changes if c.delta < -SAME_REWARD]
    same = len(changes) - len(up) - len(down)
    lines = [
        f"{len(changes)} tasks in both runs; {only_a} only in {names[0]}, {only_b} only in "
        f"{names[1]}."
    ]
    if changes:
        mean_a = statistics.fmean(statistics.fmean(c.before) for c in changes)
        mean_b = statistics.fmean(statistics.fmean(c.after) for c in changes)
        lines.append(
            f"Mean reward over those tasks: {mean_a:.3f} → {mean_b:.3f} ({mean_b - mean_a:+.3f})."
        )
        lines.append(f"{len(up)} improved, {len(down)} regressed, {same} with the same mean.")
        flat_a = sum(1 for c in changes if _flat(c.before))
        flat_b = sum(1 for c in changes if _flat(c.after))
        lines.append(f"Tasks whose rollouts all earned one reward: {flat_a} → {flat_b}.")
    else:
        lines.append(
            "No task is in both runs: are these runs of the same env and tasks? Tasks are "
            "matched by item key, or by the first user message."
        )
    rewards_a = [r for rs in a.values() for r in rs]
    rewards_b = [r for rs in b.values() for r in rs]
    panels = (
        _panel(f"Rewards in {names[0]} (A)", histogram_svg(rewards_a, "reward"))
        + _panel(f"Rewards in {names[1]} (B)", histogram_svg(rewards_b, "reward"))
        + (_panel("Each task's mean reward, A → B", _scatter(changes)) if changes else "")
    )
    ordered = sorted(changes, key=lambda c: -abs(c.delta))
    rows = "".join(_row(c) for c in ordered[:MAX_ROWS] if c.changed)
    more = len([c for c in ordered[MAX_ROWS:] if c.changed])
    table = (
        '<table class="changes"><tr><th>task</th><th>A rewards</th><th>B rewards</th>'
        f"<th>change of the mean</th></tr>{rows}</table>"
        + (f"<p>and {more} more changed tasks</p>" if more else "")
        if rows
        else "<p>No task's rewards changed.</p>"
    )
    summary = "".join(f"<p>{escape(line)}</p>" for line in lines)
    title = f"{names[0]} → {names[1]}"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)} · two runs</title><style>{PAGE_CSS}{GLANCE_CSS}{COMPARE_CSS}"
        f'</style></head><body><div class="top"><h1>{escape(title)}</h1></div><main>'
        f'<section class="verdicts">{summary}</section>'
        f'<section class="glance">{panels}</section><h2>Tasks that changed</h2>{table}'
        "</main></body></html>"
    )


def write_comparison(
    before: str | Path, after: str | Path, output: str | Path | None = None
) -> Path:
    """Render runs ``before`` and ``after`` side by side; returns where the page went."""
    before, after = Path(before), Path(after)
    run_a, run_b = read_run(before), read_run(after)
    target = (
        Path(output)
        if output is not None
        else after.with_name(f"{after.name}.vs-{before.name}.html")
    )
    page = render_comparison(run_a.cards, run_b.cards, (before.name, after.name))
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ViewError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def _direction(delta: float) -> str:
    return "up" if delta > SAME_REWARD else "down" if delta < -SAME_REWARD else "same"


def _flat(rewards: list[float]) -> bool:
    return len(rewards) > 1 and max(rewards) - min(rewards) <= SAME_REWARD


def _panel(title: str, body: str) -> str:
    return f'<figure class="panel"><figcaption>{escape(title)}</figcaption>{body}</figure>'


def _rewards(values: list[float]) -> str:
    return escape(", ".join(f"{v:.3g}" for v in values))


def _row(change: TaskChange) -> str:
    css = _direction(change.delta)
    task = change.label if len(change.label) <= 160 else change.label[:160] + "…"
    return (
        f'<tr class="{css}"><td>{escape(task)}</td><td>{_rewards(change.before)}</td>'
        f"<td>{_rewards(change.after)}</td><td>{change.delta:+.3f}</td></tr>"
    )


def _scatter(changes: list[TaskChange]) -> str:
    size, pad = 240, 24
    means = [(statistics.fmean(c.before), statistics.fmean(c.after), c) for c in changes]
    low = min(0.0, *(min(x, y) for x, y, _ in means))
    high = max(1.0, *(max(x, y) for x, y, _ in means))

    def at(value: float) -> float:
        return pad + (size - 2 * pad) * (value - low) / (high - low)

    points = "".join(
        f'<circle class="{_direction(y - x)}" cx="{at(x):.1f}" cy="{size - at(y):.1f}" r="3">'
        f"<title>{escape(c.label[:80])}: "
        f"{x:.3g} → {y:.3g}</title></circle>"
        for x, y, c in means
    )
    return (
        f'<svg class="plot scatter" viewBox="0 0 {size} {size}" width="{size}" height="{size}">'
        f'<line class="axis" x1="{pad}" y1="{size - pad}" x2="{size - pad}" y2="{pad}"/>'
        f'<text x="{pad}" y="{size - 6}">A {low:g}</text>'
        f'<text x="{size - pad}" y="{size - 6}" text-anchor="end">A {high:g}</text>'
        f'<text x="2" y="{pad - 8}">B {high:g}</text>{points}</svg>'
    )


COMPARE_CSS = """
.verdicts p { margin: 4px 0; font-size: 15px; }
h2 { font-size: 16px; }
table.changes { border-collapse: collapse; width: 100%; background: var(--card); }
table.changes th, table.changes td { border-top: 1px solid var(--line); padding: 4px 8px;
  text-align: left; vertical-align: top; overflow-wrap: anywhere; }
tr.up td:last-child { color: var(--good); font-weight: 600; }
tr.down td:last-child { color: var(--bad); font-weight: 600; }
.scatter circle.up { fill: var(--good); }
.scatter circle.down { fill: var(--bad); }
.scatter circle.same { fill: #98a2b3; }
"""
