"""A run at a glance: the top of the rollout page, plots drawn as inline SVG in Python.

The reward distribution, each group's spread (groups whose rollouts all earned the same reward
flagged: GRPO learns nothing from them), turns, tool calls and tool errors per rollout, the
reward's named signals, and pass@k with its 95% interval for an evaluation. Every plot is
plain SVG in the page (hover titles, no script, nothing fetched), and its size grows with the
number of bins and groups, never with the number of rollouts' contents.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from hermes_envgen.runtime.rollout import EVAL, Metric, metric
from hermes_envgen.runtime.rollouts.evaluation.metrics import summarize
from hermes_envgen.runtime.rollouts.records import METRICS_FILE
from hermes_envgen.runtime.rollouts.rollout_card import RolloutCard

# Rewards this close count as equal: a weighted sum may differ in its last bits.
SAME_REWARD = 1e-9
REWARD_BINS = 20
MAX_LISTED_GROUPS = 30  # zero-variance groups named by link; the rest are counted
DEFAULT_PASS_THRESHOLD = 1.0  # HermesAgentEnvConfig.eval_pass_threshold's default


@dataclass
class GroupSpread:
    """One group's rewards: the rollouts scored together (a process group, an eval item)."""

    name: str
    first_card: int  # index of its first rollout on the page, for a link
    rewards: list[float]
    label: str = ""  # what a person reads: the task's first user message

    @property
    def low(self) -> float:
        return min(self.rewards)

    @property
    def high(self) -> float:
        return max(self.rewards)

    @property
    def zero_variance(self) -> bool:
        """Two or more rollouts, one reward: the group's advantages are all zero."""
        return len(self.rewards) > 1 and self.high - self.low <= SAME_REWARD


def group_spreads(cards: Sequence[RolloutCard]) -> list[GroupSpread]:
    """The scored rollouts' rewards by group, in the order groups first appear."""
    groups: dict[str, GroupSpread] = {}
    for index, card in enumerate(cards):
        if card.group is None:
            continue
        if card.group not in groups:
            label = _first_user(card.messages) or card.group
            groups[card.group] = GroupSpread(card.group, index, [], label)
        group = groups[card.group]
        if card.reward is not None and not card.failure:
            group.rewards.append(card.reward)
    return [g for g in groups.values() if g.rewards]


def glance_html(cards: Sequence[RolloutCard], source: Path | None = None) -> str:
    """The section at the top of the page: what the run was, at a glance."""
    rewards = [c.reward for c in cards if c.reward is not None and not c.failure]
    scored = [c for c in cards if c.reward is not None and not c.failure]
    panels = [
        _panel(
            "Reward distribution",
            histogram_svg(rewards, "reward", bins=REWARD_BINS)
            if rewards
            else _note("No rollout has a measured reward."),
            _reward_caption(rewards, len(cards)),
        ),
        _pass_panel(cards, source),  # an evaluation's headline, beside its distribution
        _groups_panel(cards),
        _panel(
            "Turns per rollout",
            histogram_svg([c.turns for c in scored], "turns", integer=True),
            _mean_caption([c.turns for c in scored]),
        ),
        _panel(
            "Tool calls per rollout",
            histogram_svg([c.tool_calls for c in scored], "tool calls", integer=True),
            _mean_caption([c.tool_calls for c in scored]),
        ),
        _panel(
            "Tool errors per rollout",
            histogram_svg([c.tool_errors for c in scored], "tool errors", integer=True),
            _error_caption(scored),
        ),
        _signals_panel(scored),
        _panel(
            "Timing",
            _note(
                "These records hold no timing: model time, tool time and sandbox start are "
                "not recorded in a rollout record, so there is nothing to plot."
            ),
            "",
        ),
    ]
    return f'<section class="glance" id="glance">{"".join(p for p in panels if p)}</section>'


# -- panels -------------------------------------------------------------------------------


def _panel(title: str, body: str, caption: str, css: str = "") -> str:
    caption_html = f'<p class="caption">{caption}</p>' if caption else ""
    return (
        f'<figure class="panel{" " + css if css else ""}"><figcaption>{escape(title)}'
        f"</figcaption>{body}{caption_html}</figure>"
    )


def _note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def _reward_caption(rewards: list[float], total: int) -> str:
    if not rewards:
        return f"{total} rollouts, none scored"
    text = f"{len(rewards)} scored of {total} · mean {statistics.fmean(rewards):.3f}"
    if len(rewards) > 1:
        text += f" · sd {statistics.pstdev(rewards):.3f}"
    return escape(text + f" · min {min(rewards):.4g} · max {max(rewards):.4g}")


def _mean_caption(values: list[int]) -> str:
    if not values:
        return ""
    return escape(f"mean {statistics.fmean(values):.2f} · max {max(values)}")


def _error_caption(scored: Sequence[RolloutCard]) -> str:
    if not scored:
        return ""
    calls = sum(c.tool_calls for c in scored)
    errors = sum(c.tool_errors for c in scored)
    with_errors = sum(1 for c in scored if c.tool_errors)
    rate = f" · {errors / calls:.1%} of {calls} calls" if calls else ""
    return escape(f"{with_errors} of {len(scored)} rollouts with a tool error{rate}")


def _groups_panel(cards: Sequence[RolloutCard]) -> str:
    groups = group_spreads(cards)
    if not groups:
        return _panel(
            "Group spread",
            _note("These records name no groups (no process groups, no evaluation items)."),
            "",
        )
    flat = [g for g in groups if g.zero_variance]
    in_flat = sum(len(g.rewards) for g in flat)
    total = sum(len(g.rewards) for g in groups)
    verdict = (
        f"{len(flat)} of {len(groups)} groups ({len(flat) / len(groups):.0%}) have zero "
        f"variance: {in_flat} of {total} rollouts ({in_flat / total:.0%}) earned the same "
        "reward as the rest of their group, which gives GRPO no signal."
    )
    links = "".join(
        f'<a href="#r{g.first_card}" class="flat-group" title="{escape(g.name)}">'
        f"{escape(_short(g.label))} "
        f"({len(g.rewards)}× {g.low:.4g})</a>"
        for g in flat[:MAX_LISTED_GROUPS]
    )
    more = f" and {len(flat) - MAX_LISTED_GROUPS} more" if len(flat) > MAX_LISTED_GROUPS else ""
    listing = f'<p class="flat-list">{links}{escape(more)}</p>' if flat else ""
    css = "warn" if flat else ""
    return _panel(
        "Group spread",
        _spread_svg(groups) + f'<p class="verdict{" flat" * bool(flat)}">{escape(verdict)}</p>'
        f"{listing}",
        escape(
            "each group's rewards, lowest to highest, groups sorted by their mean; "
            "red: zero variance"
        ),
        css,
    )


def _first_user(messages: list[dict]) -> str:
    content = next((m.get("content") for m in messages if m.get("role") == "user"), "")
    if isinstance(content, list):  # content parts
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return " ".join(str(content or "").split())


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _signals_panel(scored: Sequence[RolloutCard]) -> str:
    signals: dict[str, list[float]] = {}
    for card in scored:
        for name, value in card.signals.items():
            signals.setdefault(name, []).append(value)
    if not signals:
        return _panel(
            "Reward signals",
            _note(
                "No named signals in these records (evaluation records carry the reward's "
                "signals; process groups carry only the score)."
            ),
            "",
        )
    rows = "".join(
        f"<tr><th>{escape(name)}</th><td>{len(values)}</td>"
        f"<td>{statistics.fmean(values):.3f}</td><td>{min(values):.4g}</td>"
        f"<td>{max(values):.4g}</td>"
        f"<td>{histogram_svg(values, name, bins=10, small=True)}</td></tr>"
        for name, values in sorted(signals.items())
    )
    table = (
        '<table class="signals"><tr><th>signal</th><th>n</th><th>mean</th><th>min</th>'
        f"<th>max</th><th>distribution</th></tr>{rows}</table>"
    )
    return _panel("Reward signals", table, "", "wide")


def _pass_panel(cards: Sequence[RolloutCard], source: Path | None) -> str:
    summaries = [c.summary for c in cards if c.summary is not None]
    if not summaries:
        return ""  # not an evaluation: pass@k has no meaning for training groups
    per_item = Counter(str(s["item_key"]) for s in summaries if not s.get("failure"))
    k = max(per_item.values(), default=1)
    threshold, where = _pass_threshold(source)
    metrics = summarize(summaries, k, threshold)
    rows = []
    names = [Metric.MEAN_REWARD, Metric.PASS_AT_1]
    if k > 1:
        names += [Metric.pass_at(k), Metric.pass_hat(k)]
    for name in names:
        full = metric(EVAL, name)
        if full not in metrics:
            continue
        low = metrics.get(Metric.ci_low(full))
        high = metrics.get(Metric.ci_high(full))
        interval = f"{low:.3f} – {high:.3f}" if low is not None and high is not None else "—"
        rows.append(
            f"<tr><th>{escape(name)}</th><td>{metrics[full]:.3f}</td><td>{interval}</td>"
            f"<td>{_interval_svg(metrics[full], low, high)}</td></tr>"
        )
    if not rows:
        return _panel("Evaluation", _note("No rollout of this evaluation was scored."), "")
    table = (
        '<table class="pass"><tr><th>metric</th><th>value</th><th>95% interval</th><th></th>'
        f"</tr>{''.join(rows)}</table>"
    )
    caption = (
        f"{len(per_item)} items, k = {k} samples per item, passed at reward ≥ {threshold:g} "
        f"({where}); Wilson intervals over items"
    )
    return _panel("Evaluation: pass@k", table, escape(caption))


def _pass_threshold(source: Path | None) -> tuple[float, str]:
    """The run's pass threshold from the metrics.json beside its samples, or the default."""
    if source is not None:
        try:
            data = json.loads((source.parent / METRICS_FILE).read_text())
            value = data["config_general"]["evaluation"]["pass_threshold"]
            if isinstance(value, (int, float)):
                return float(value), f"the run's, from {METRICS_FILE}"
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return DEFAULT_PASS_THRESHOLD, f"the default: no {METRICS_FILE} with it beside the file"


# -- SVG ------------------------------------------------------------------------------------

WIDTH, HEIGHT, PAD = 340, 130, 22


def _bins(values: Sequence[float], bins: int, integer: bool) -> tuple[list[int], float, float]:
    low, high = min(values), max(values)
    if integer:
        width = max(1, math.ceil((high - low + 1) / 30))  # at most 30 bars of whole numbers
        counts = [0] * (int((high - low) // width) + 1)
        for v in values:
            counts[int((v - low) // width)] += 1
        return counts, low, low + len(counts) * width
    if low >= 0.0 and high <= 1.0:  # rewards in [0, 1]: the whole range, comparable runs
        low, high = 0.0, 1.0
    if high <= low:
        high = low + 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - low) / (high - low) * bins))] += 1
    return counts, low, high


def histogram_svg(
    values: Sequence[float],
    label: str,
    bins: int = REWARD_BINS,
    *,
    integer: bool = False,
    small: bool = False,
) -> str:
    if not values:
        return _note("nothing to plot")
    counts, low, high = _bins(values, bins, integer)
    width, height = (160, 36) if small else (WIDTH, HEIGHT)
    pad = 0 if small else PAD
    top = max(counts)
    bar = (width - 2 * pad) / len(counts)
    step = (high - low) / len(counts)
    rects = []
    for index, count in enumerate(counts):
        if not count:
            continue
        h = (height - 2 * pad) * count / top
        x = pad + index * bar
        start = low + index * step
        span = f"{start:g}" if integer and step == 1 else f"{start:.4g} – {start + step:.4g}"
        rects.append(
            f'<rect x="{x:.1f}" y="{height - pad - h:.1f}" width="{max(bar - 1, 0.8):.1f}" '
            f'height="{h:.1f}"><title>{escape(label)} {span}: {count}</title></rect>'
        )
    axis = ""
    if not small:
        axis = (
            f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
            'class="axis"/>'
            f'<text x="{pad}" y="{height - 6}">{low:.4g}</text>'
            f'<text x="{width - pad}" y="{height - 6}" text-anchor="end">'
            f"{high - (1 if integer and step == 1 else 0):.4g}</text>"
            f'<text x="{pad}" y="12">{top}</text>'
        )
    return (
        f'<svg class="plot hist" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" aria-label="{escape(label)} histogram">{"".join(rects)}{axis}</svg>'
    )


def _spread_svg(groups: list[GroupSpread]) -> str:
    ordered = sorted(groups, key=lambda g: statistics.fmean(g.rewards))
    low = min(0.0, min(g.low for g in groups))
    high = max(1.0, max(g.high for g in groups))
    width, height = WIDTH, HEIGHT
    step = (width - 2 * PAD) / len(ordered)

    def y(value: float) -> float:
        return height - PAD - (height - 2 * PAD) * (value - low) / (high - low)

    marks = []
    for index, group in enumerate(ordered):
        x = PAD + (index + 0.5) * step
        title = (
            f"<title>{escape(_short(group.label, 60))}: {len(group.rewards)} rollouts, "
            f"{group.low:.4g} – {group.high:.4g}</title>"
        )
        if group.zero_variance:
            marks.append(
                f'<circle class="flat" cx="{x:.1f}" cy="{y(group.low):.1f}" r="2.2">{title}'
                "</circle>"
            )
        else:
            marks.append(
                f'<line class="range" x1="{x:.1f}" x2="{x:.1f}" y1="{y(group.low):.1f}" '
                f'y2="{y(group.high):.1f}">{title}</line>'
            )
    axis = (
        f'<line x1="{PAD}" y1="{height - PAD}" x2="{width - PAD}" y2="{height - PAD}" '
        'class="axis"/>'
        f'<text x="2" y="{y(low) + 4:.1f}">{low:g}</text>'
        f'<text x="2" y="{y(high) + 4:.1f}">{high:g}</text>'
        f'<text x="{width - PAD}" y="{height - 6}" text-anchor="end">{len(groups)} groups</text>'
    )
    return (
        f'<svg class="plot spread" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" aria-label="group spread">{"".join(marks)}{axis}</svg>'
    )


def _interval_svg(value: float, low: float | None, high: float | None) -> str:
    width, height = 160, 18

    def x(v: float) -> float:
        return 4 + (width - 8) * min(1.0, max(0.0, v))

    band = (
        f'<line class="ci" x1="{x(low):.1f}" x2="{x(high):.1f}" y1="9" y2="9"/>'
        if low is not None and high is not None
        else ""
    )
    return (
        f'<svg class="plot interval" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}"><line class="axis" x1="4" x2="{width - 4}" y1="16" y2="16"/>'
        f'{band}<circle cx="{x(value):.1f}" cy="9" r="3"/></svg>'
    )


GLANCE_CSS = """
.glance { display: grid; grid-template-columns: repeat(auto-fill, minmax(370px, 1fr));
  gap: 14px; margin-bottom: 22px; }
.panel { margin: 0; background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  padding: 10px 12px; min-width: 0; }
.panel.wide { grid-column: 1 / -1; }
.panel.warn { border-color: var(--bad); }
.panel figcaption { font-weight: 600; margin-bottom: 6px; }
.panel .caption { margin: 4px 0 0; font-size: 12px; color: var(--muted); max-width: 360px; }
.panel .note { color: var(--muted); max-width: 340px; margin: 4px 0; }
.plot { display: block; }
.plot rect { fill: var(--accent); }
.plot text { font-size: 10px; fill: var(--muted); }
.plot .axis { stroke: #98a2b3; stroke-width: 1; }
.plot .range { stroke: var(--good); stroke-width: 2; stroke-linecap: round; }
.plot .flat { fill: var(--bad); }
.plot .ci { stroke: var(--accent); stroke-width: 4; opacity: .45; }
.plot.interval circle { fill: var(--accent); }
.verdict { margin: 6px 0 0; max-width: 360px; }
.verdict.flat { color: var(--bad); font-weight: 600; }
.flat-list { display: flex; flex-wrap: wrap; gap: 4px; max-width: 360px; margin: 6px 0 0;
  font-size: 12px; max-height: 96px; overflow: auto; }
.flat-list a { color: var(--bad); background: var(--bad-bg); border-radius: 999px;
  padding: 0 6px; text-decoration: none; }
table.signals, table.pass { border-collapse: collapse; font-size: 13px; }
table.signals th, table.signals td, table.pass th, table.pass td { padding: 2px 10px 2px 0;
  text-align: left; vertical-align: middle; }
"""
