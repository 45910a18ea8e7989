"""The evaluation's metrics, computed from its saved records."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from hermes_envgen.runtime.rollout import EVAL, Metric, mean_reward, metric
from hermes_envgen.runtime.rollouts.evaluation.journal import tool_call_count, tool_error_count
from hermes_envgen.runtime.rollouts.evaluation.stats import (
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


# A share of failed rollouts above which the run's numbers say more about its failures than
# about the model: evaluation says so in a warning.
FAILURE_WARN_SHARE = 0.1


def summarize(
    records: Iterable[dict],
    samples_per_item: int,
    pass_threshold: float,
    prefix: str = EVAL,
    failure_score: float = 0.0,
) -> dict[str, float]:
    """The evaluation's metrics from its saved records (scored rollouts and failures).

    Mean reward and the pass rates count every rollout, a failure at ``failure_score``; the
    turn and tool metrics and the reward's signals the measured ones.
    """
    records = list(records)
    scored = [r for r in records if not r.get("failure")]
    k = samples_per_item

    def name(base: str) -> str:
        return metric(prefix, base)

    metrics: dict[str, float] = {}
    for record in records:  # counts (judge_failures, reward_errors, ...) cover every rollout
        for count, value in (record.get("reward_counts") or {}).items():
            metrics[name(count)] = metrics.get(name(count), 0.0) + float(value)
    signals: dict[str, list[float]] = {}
    for record in scored:
        for signal, value in (record.get("reward_signals") or {}).items():
            signals.setdefault(signal, []).append(float(value))
    metrics.update({name(signal): statistics.fmean(v) for signal, v in signals.items()})
    metrics |= {
        name(Metric.ITEMS): float(len({r["item_key"] for r in records})),
        name(Metric.SAMPLES_PER_ITEM): float(k),
        name(Metric.ROLLOUTS): float(len(scored)),
        name(Metric.FAILURES): float(len(records) - len(scored)),
        name(Metric.FAILURE_RATE): (len(records) - len(scored)) / len(records) if records else 0.0,
        name(Metric.REWARD_ERRORS): metrics.get(name(Metric.REWARD_ERRORS), 0.0),
        name(Metric.ROLLOUT_ERRORS): float(sum(1 for r in records if r.get("rollout_error"))),
    }
    if not records:
        return metrics

    def score(record: dict) -> float:
        return failure_score if record.get("failure") else float(record["reward"])

    every: dict[str, list[float]] = {}
    for record in records:
        every.setdefault(record["item_key"], []).append(score(record))
    rewards = list(every.values())
    passes = [sum(passed(x, pass_threshold) for x in group) for group in rewards]
    n_items = len(rewards)

    def rate(base: str, value: float, units: float) -> None:
        low, high = wilson_interval(value, units)
        full = name(base)
        metrics.update({full: value, Metric.ci_low(full): low, Metric.ci_high(full): high})

    rate(Metric.MEAN_REWARD, mean_reward(rewards), n_items)
    rate(
        Metric.PASS_AT_1,
        statistics.fmean(c / len(g) for g, c in zip(rewards, passes)),
        n_items,
    )
    if k > 1:
        complete = [(len(g), c) for g, c in zip(rewards, passes) if len(g) >= k]
        metrics[name(Metric.items(Metric.pass_at(k)))] = float(len(complete))
        if complete:
            rate(
                Metric.pass_at(k),
                statistics.fmean(pass_at_k(n, c, k) for n, c in complete),
                len(complete),
            )
            rate(
                Metric.pass_hat(k),
                statistics.fmean(pass_hat_k(n, c, k) for n, c in complete),
                len(complete),
            )

    if not scored:
        return metrics
    by_item: dict[str, list[dict]] = {}
    for record in scored:
        by_item.setdefault(record["item_key"], []).append(record)
    item_turns = [statistics.fmean(r["turns_used"] for r in g) for g in by_item.values()]
    mean_turns = name(Metric.MEAN_TURNS)
    metrics[mean_turns] = statistics.fmean(item_turns)
    interval = normal_interval(item_turns)
    if interval is not None:
        metrics[Metric.ci_low(mean_turns)], metrics[Metric.ci_high(mean_turns)] = interval

    calls = sum(tool_call_count(r) for r in scored)
    errors = sum(tool_error_count(r) for r in scored)
    if calls:
        rate(Metric.TOOL_ERROR_RATE, errors / calls, calls)
    else:
        metrics[name(Metric.TOOL_ERROR_RATE)] = 0.0
    given = [float(x) for r in scored for x in r.get("turn_rewards") or () if x is not None]
    if given:  # the env's turn_reward: the mean over every turn that got one
        metrics[name(Metric.MEAN_TURN_REWARD)] = statistics.fmean(given)
    n = len(scored)
    finished = sum(bool(r.get("finished_naturally")) for r in scored)
    metrics |= {
        name(Metric.TOOL_CALLS_PER_ROLLOUT): calls / n,
        name(Metric.TOOL_ERRORS_PER_ROLLOUT): errors / n,
        name(Metric.FINISHED_NATURALLY_RATE): finished / n,
    }
    return metrics
