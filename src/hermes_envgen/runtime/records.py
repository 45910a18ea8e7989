"""The rollout record and the metric names: one typed definition for everything that writes or
reads them (the base env, evaluation, ``check``, ``view``, the testing kit, generated tests).
"""

from __future__ import annotations

import re
from typing import Any, Final, TypedDict

# The files an evaluation writes into --env.data_dir_to_save_evals.
SAMPLES_FILE = "samples.jsonl"  # one RolloutRecord per scored rollout
FAILURES_FILE = "failures.jsonl"  # one RolloutRecord per rollout whose score was not measured
SETTINGS_FILE = "eval_settings.json"  # what a resume must not change
METRICS_FILE = "metrics.json"  # atroposlib's evaluate_log, with our config_general added

# How the agent loop marks a tool result that is an error, for the model and for readers.
TOOL_ERROR_PREFIX = "Error:"


class ToolErrorRecord(TypedDict):
    """A tool call that failed, as saved (``AgentResult.tool_errors``)."""

    turn: int
    tool_name: str
    arguments: str
    error: str
    tool_result: str


class RolloutRecord(TypedDict, total=False):
    """One finished rollout as evaluation saves it (a line of samples.jsonl/failures.jsonl)."""

    key: str  # item_key#sample_index: the same in every run of the same evaluation
    item_key: str
    sample_index: int
    item: Any
    task_id: str
    reward: float | None  # None when the score was not measured (see failure)
    failure: str | None  # why the score was not measured; such records stay out of metrics
    turns_used: int
    finished_naturally: bool
    tool_calls: int
    tools_used: list[str]
    tool_errors: list[ToolErrorRecord]
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

    ROLLOUTS = "rollouts"
    FAILURES = "failures"
    MEAN_REWARD = "mean_reward"
    MEAN_TURNS = "mean_turns"
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


def is_declared(name: str) -> bool:
    """Whether ``name`` is a full metric name that this module declares (not an env's own)."""
    return _DECLARED.fullmatch(name) is not None
