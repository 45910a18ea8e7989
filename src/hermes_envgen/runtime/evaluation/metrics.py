"""The evaluation's metrics, computed from its saved records."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from hermes_envgen.runtime.evaluation.journal import tool_call_count, tool_error_count
from hermes_envgen.runtime.evaluation.stats import (
    normal_interval,
    pass_at_k,
    pass_hat_k,
    passed,
    wilson_interval,
)

INTERVALS = (
    "95% intervals: Wilson score over items for mean reward and pass rates, Wilson over tool "
    "calls for the tool-error rate, normal over items for mean turns"
)


def summarize(
    records: Iterable[dict], samples_per_item: int, pass_threshold: float, prefix: str = "eval"
) -> dict[str, float]:
    """The evaluation's metrics from its saved records (scored rollouts and failures)."""
    records = list(records)
    scored = [r for r in records if not r.get("failure")]
    k = samples_per_item
    metrics: dict[str, float] = {}
    for record in records:  # counts (judge_failures, reward_errors, ...) cover every rollout
        for name, value in (record.get("reward_counts") or {}).items():
            metrics[f"{prefix}/{name}"] = metrics.get(f"{prefix}/{name}", 0.0) + float(value)
    signals: dict[str, list[float]] = {}
    for record in scored:
        for name, value in (record.get("reward_signals") or {}).items():
            signals.setdefault(name, []).append(float(value))
    metrics.update({f"{prefix}/{name}": statistics.fmean(v) for name, v in signals.items()})
    metrics |= {
        f"{prefix}/items": float(len({r["item_key"] for r in records})),
        f"{prefix}/samples_per_item": float(k),
        f"{prefix}/rollouts": float(len(scored)),
        f"{prefix}/failures": float(len(records) - len(scored)),
        f"{prefix}/reward_errors": metrics.get(f"{prefix}/reward_errors", 0.0),
        f"{prefix}/rollout_errors": float(sum(1 for r in records if r.get("rollout_error"))),
    }
    if not scored:
        return metrics

    by_item: dict[str, list[dict]] = {}
    for record in scored:
        by_item.setdefault(record["item_key"], []).append(record)
    rewards = [[float(r["reward"]) for r in group] for group in by_item.values()]
    passes = [sum(passed(x, pass_threshold) for x in group) for group in rewards]
    n_items = len(rewards)

    def rate(name: str, value: float, units: float) -> None:
        low, high = wilson_interval(value, units)
        metrics.update({name: value, f"{name}_ci_low": low, f"{name}_ci_high": high})

    rate(f"{prefix}/mean_reward", statistics.fmean(statistics.fmean(g) for g in rewards), n_items)
    rate(
        f"{prefix}/pass@1",
        statistics.fmean(c / len(g) for g, c in zip(rewards, passes)),
        n_items,
    )
    if k > 1:
        complete = [(len(g), c) for g, c in zip(rewards, passes) if len(g) >= k]
        metrics[f"{prefix}/pass@{k}_items"] = float(len(complete))
        if complete:
            rate(
                f"{prefix}/pass@{k}",
                statistics.fmean(pass_at_k(n, c, k) for n, c in complete),
                len(complete),
            )
            rate(
                f"{prefix}/pass^{k}",
                statistics.fmean(pass_hat_k(n, c, k) for n, c in complete),
                len(complete),
            )

    item_turns = [statistics.fmean(r["turns_used"] for r in g) for g in by_item.values()]
    metrics[f"{prefix}/mean_turns"] = statistics.fmean(item_turns)
    interval = normal_interval(item_turns)
    if interval is not None:
        metrics[f"{prefix}/mean_turns_ci_low"], metrics[f"{prefix}/mean_turns_ci_high"] = interval

    calls = sum(tool_call_count(r) for r in scored)
    errors = sum(tool_error_count(r) for r in scored)
    if calls:
        rate(f"{prefix}/tool_error_rate", errors / calls, calls)
    else:
        metrics[f"{prefix}/tool_error_rate"] = 0.0
    n = len(scored)
    metrics |= {
        f"{prefix}/tool_calls_per_rollout": calls / n,
        f"{prefix}/tool_errors_per_rollout": errors / n,
        f"{prefix}/finished_naturally_rate": sum(bool(r.get("finished_naturally")) for r in scored)
        / n,
    }
    return metrics
