"""The rollout record and the metric names: one typed definition for everything that writes or
reads them (the base env, evaluation, ``check``, ``view``, the testing kit, generated tests);
the finished rollout (:class:`Rollout`), the running sums its metrics come from
(:class:`RolloutStats`), and the one estimator of ``train/`` and ``eval/mean_reward``
(:func:`mean_reward`).
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypedDict

if TYPE_CHECKING:  # only annotations: agent_loop imports this module, which stays a leaf
    from hermes_envgen.runtime.rollout import AgentResult

# The files an evaluation writes into --env.data_dir_to_save_evals.
SAMPLES_FILE = "samples.jsonl"  # one RolloutRecord per scored rollout
FAILURES_FILE = "failures.jsonl"  # one RolloutRecord per rollout whose score was not measured
SETTINGS_FILE = "eval_settings.json"  # what a resume must not change
METRICS_FILE = "metrics.json"  # atroposlib's evaluate_log, with our config_general added

# How the agent loop marks a tool result that is an error, for the model and for readers.
TOOL_ERROR_PREFIX = "Error:"


@dataclass
class ToolErrorRecord:
    """A tool call that could not be carried out, as the model made it: a record, no exception.

    ``AgentResult.tool_errors`` holds these; a rollout record saves each as the dict of its
    fields (``as_json``).
    """

    turn: int
    tool_name: str
    arguments: str
    error: str  # what went wrong
    tool_result: str  # what the model was told instead of the tool's output

    def as_json(self) -> dict[str, Any]:
        """The record as saved in a rollout record's ``tool_errors``."""
        return asdict(self)


class RolloutRecord(TypedDict, total=False):
    """One finished rollout as evaluation saves it (a line of samples.jsonl/failures.jsonl)."""

    key: str  # item_key#sample_index: the same in every run of the same evaluation
    item_key: str
    sample_index: int
    item: Any
    task_id: str
    reward: float | None  # None when the score was not measured (see failure)
    failure: str | None  # why the score was not measured: it counts as failure_score
    turns_used: int
    finished_naturally: bool
    tool_calls: int
    tools_used: list[str]
    tool_errors: list[dict[str, Any]]  # each a ToolErrorRecord's fields
    turn_rewards: list[float | None]  # the env's turn_reward of each turn (None: none given)
    reward_error: str | None
    reward_counts: dict[str, float]
    reward_signals: dict[str, float]
    rollout_error: str | None
    timed_out: bool  # the agent ran past max_rollout_seconds and was stopped, then scored
    replaced_characters: int  # invalid characters (lone surrogates) of the model's, now U+FFFD
    final_response: str
    messages: list[dict[str, Any]]


class Metric:
    """Metric names without their split: ``metric("eval", Metric.MEAN_REWARD)``."""

    ROLLOUTS = "rollouts"  # measured ones: a failure is in no mean but the reward's
    FAILURES = "failures"  # rollouts whose score was not measured (Rollout.failure)
    FAILURE_RATE = "failure_rate"  # failures among every rollout: high, the numbers mean little
    MEAN_REWARD = "mean_reward"
    MEAN_TURNS = "mean_turns"
    MEAN_TURN_REWARD = "mean_turn_reward"  # over the turns the env's turn_reward scored
    PASS_AT_1 = "pass@1"
    TOOL_CALLS_PER_ROLLOUT = "tool_calls_per_rollout"
    TOOL_ERRORS_PER_ROLLOUT = "tool_errors_per_rollout"
    TOOL_ERROR_RATE = "tool_error_rate"
    FINISHED_NATURALLY_RATE = "finished_naturally_rate"
    REWARD_ERRORS = "reward_errors"
    ROLLOUT_ERRORS = "rollout_errors"
    JUDGE_FAILURES = "judge_failures"
    ITEMS = "items"
    SAMPLES_PER_ITEM = "samples_per_item"

    @staticmethod
    def pass_at(k: int) -> str:
        """The chance that at least one of k samples passes: ``pass@3``."""
        return f"pass@{k}"

    @staticmethod
    def pass_hat(k: int) -> str:
        """The chance that all of k samples pass: ``pass^3``."""
        return f"pass^{k}"

    @staticmethod
    def items(name: str) -> str:
        """How many items had enough samples for ``name``: ``pass@3_items``."""
        return f"{name}_items"

    @staticmethod
    def ci_low(name: str) -> str:
        """The low end of the 95% interval of ``name`` (with or without its split)."""
        return f"{name}_ci_low"

    @staticmethod
    def ci_high(name: str) -> str:
        """The high end of the 95% interval of ``name`` (with or without its split)."""
        return f"{name}_ci_high"


TRAIN: Final = "train"
"""The training split, as a metric prefix: ``metric(TRAIN, Metric.MEAN_REWARD)``."""
EVAL: Final = "eval"
"""The evaluation split, as a metric prefix: ``metric(EVAL, Metric.MEAN_REWARD)``."""


def metric(split: str, name: str) -> str:
    """The full metric name: ``eval/mean_reward``."""
    return f"{split}/{name}"


_FIXED_NAMES = {v for k, v in vars(Metric).items() if k.isupper() and isinstance(v, str)}
_DECLARED = re.compile(
    rf"(?:{TRAIN}|{EVAL})/"
    rf"(?:(?:{'|'.join(map(re.escape, sorted(_FIXED_NAMES)))})(?:_ci_low|_ci_high)?"
    r"|pass[@^][1-9][0-9]*(?:_ci_low|_ci_high)?|pass@[1-9][0-9]*_items)"
)


def item_key(item: Any) -> str:
    """A key of the item's content: unchanged across runs, seeds and orderings."""
    try:
        canonical = json.dumps(item, sort_keys=True, ensure_ascii=False, default=repr)
    except TypeError:  # keys that cannot be sorted together (str and int)
        canonical = repr(item)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def mean_reward(rewards_by_item: Iterable[Sequence[float]]) -> float:
    """The mean reward of training and of evaluation alike, over every rollout.

    Each item's mean over its rollouts, averaged over the items that have one: an item weighs
    the same however many samples it had. A failed rollout (see ``Rollout.failure``) is passed
    in at the env's ``failure_score``, so that breaking something never raises the mean.
    ValueError without any.
    """
    return statistics.fmean(statistics.fmean(rewards) for rewards in rewards_by_item if rewards)


def is_declared(name: str) -> bool:
    """Whether ``name`` is a full metric name that this module declares (not an env's own)."""
    return _DECLARED.fullmatch(name) is not None


@dataclass
class Rollout:
    """One finished rollout: the agent's result and its reward."""

    item: Any
    result: AgentResult
    reward: float
    task_id: str
    reward_error: str | None = None
    counts: dict[str, float] = field(default_factory=dict)
    signals: dict[str, float] = field(default_factory=dict)
    # Why the score was not measured; ``reward`` is then the env's failure_score.
    failure: str | None = None

    def record(self) -> RolloutRecord:
        """The JSON-ready record of the rollout, as evaluation saves it."""
        return {
            "item": _jsonable(self.item),
            "task_id": self.task_id,
            "reward": None if self.failure else self.reward,  # a stand-in is no measurement
            "failure": self.failure,
            "turns_used": self.result.turns_used,
            "finished_naturally": self.result.finished_naturally,
            "tool_calls": len(self.result.tool_calls),
            "tools_used": self.result.tools_used,
            "tool_errors": [e.as_json() for e in self.result.tool_errors],
            "turn_rewards": list(self.result.turn_rewards),
            "reward_error": self.reward_error,
            "reward_counts": self.counts,
            "reward_signals": self.signals,
            "rollout_error": self.result.error,
            "timed_out": self.result.timed_out,
            "replaced_characters": self.result.replaced_characters,
            "final_response": self.result.final_response,
            "messages": self.result.messages,
        }


@dataclass
class RolloutStats:
    """Running sums over rollouts, flushed into metrics (one instance per split).

    The same definitions as evaluation's (``evaluation.metrics.summarize``): a failed rollout
    (``Rollout.failure``: the sandbox, the model server, the judge, a turn hook or
    ``compute_reward`` failed, so its score was not measured) counts in ``mean_reward`` at its
    stand-in score (the env's ``failure_score``: breaking something never pays), in the counts
    (``failures``, ``failure_rate``, ``reward_errors``, ``rollout_errors``, the reward's own)
    and in no other mean or rate; ``rollouts`` counts the measured ones: what a cut-short or
    never-started rollout did is the failure's, not the model's.
    """

    rewards: list[float] = field(default_factory=list)  # the measured rollouts'
    turns: list[int] = field(default_factory=list)
    tool_calls: int = 0
    tool_errors: int = 0
    rollout_errors: int = 0
    failures: int = 0  # scores that are stand-ins (e.g. the judge failed): see Rollout.failure
    finished_naturally: int = 0
    scores: dict[str, list[float]] = field(default_factory=dict)  # by item_key, every rollout's
    counts: dict[str, float] = field(default_factory=dict)
    signals: dict[str, list[float]] = field(default_factory=dict)
    turn_rewards: list[float] = field(default_factory=list)  # every turn's the env scored

    def add(self, rollout: Rollout) -> None:
        for name, value in rollout.counts.items():  # counts cover every rollout
            self.counts[name] = self.counts.get(name, 0.0) + value
        self.rollout_errors += rollout.result.error is not None
        self.scores.setdefault(item_key(rollout.item), []).append(rollout.reward)
        if rollout.failure is not None:
            self.failures += 1
            return
        self.rewards.append(rollout.reward)
        self.turns.append(rollout.result.turns_used)
        self.tool_calls += len(rollout.result.tool_calls)
        self.tool_errors += len(rollout.result.tool_errors)
        self.finished_naturally += rollout.result.finished_naturally
        for name, value in rollout.signals.items():
            self.signals.setdefault(name, []).append(value)
        self.turn_rewards += [r for r in rollout.result.turn_rewards if r is not None]

    def metrics(self, prefix: str) -> dict[str, float]:
        n = len(self.rewards)
        if n == 0 and self.failures == 0:
            return {}
        reward_metrics = {metric(prefix, name): value for name, value in self.counts.items()}
        values = {
            Metric.REWARD_ERRORS: self.counts.get(Metric.REWARD_ERRORS, 0.0),
            Metric.ROLLOUT_ERRORS: float(self.rollout_errors),
            Metric.FAILURES: float(self.failures),
            Metric.FAILURE_RATE: self.failures / (n + self.failures),
            Metric.ROLLOUTS: float(n),
            Metric.MEAN_REWARD: mean_reward(self.scores.values()),
        }
        if n:  # none when every rollout's score was a stand-in
            reward_metrics.update(
                {metric(prefix, name): sum(v) / len(v) for name, v in self.signals.items()}
            )
            if self.turn_rewards:  # the env's turn_reward: the mean over every turn that got one
                mean = sum(self.turn_rewards) / len(self.turn_rewards)
                reward_metrics[metric(prefix, Metric.MEAN_TURN_REWARD)] = mean
            calls = self.tool_calls
            values |= {
                Metric.MEAN_TURNS: sum(self.turns) / n,
                Metric.TOOL_CALLS_PER_ROLLOUT: calls / n,
                Metric.TOOL_ERRORS_PER_ROLLOUT: self.tool_errors / n,
                Metric.TOOL_ERROR_RATE: self.tool_errors / calls if calls else 0.0,
                Metric.FINISHED_NATURALLY_RATE: self.finished_naturally / n,
            }
        return reward_metrics | {metric(prefix, name): value for name, value in values.items()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)
