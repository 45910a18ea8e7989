"""A rollout's vocabulary, in one module: the task it starts from (:class:`Task`), the state
its turn hooks see (:class:`RolloutState`), what the agent loop returns (:class:`AgentResult`,
with its :class:`ToolErrorRecord` list and, in token mode, its :class:`TokenTrace`), and the
finished rollout with its reward (:class:`Rollout`), its record (:class:`RolloutRecord`), the
running sums its metrics come from (:class:`RolloutStats`), the metric names (:class:`Metric`)
and the one estimator of ``train/`` and ``eval/mean_reward`` (:func:`mean_reward`).

Everything that writes or reads a rollout (the loop, the base env, evaluation, ``check``,
``view``, the testing kit, generated tests) takes these types from here. This module imports
nothing of the runtime's but the tool context's type, so it stays below every layer that uses
it (the loop, the env, the chat templates' token traces, the rollouts' files).
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, TypedDict

from typing_extensions import TypeVar as DefaultedTypeVar

if TYPE_CHECKING:  # an annotation of RolloutState only
    from hermes_envgen.runtime.loop.tool_context import ToolContext

# What an env's tasks are (its dataset's items) and what it keeps per rollout (``new_state``):
# an env names both, ``HermesAgentBaseEnv[MyTask, MyState]``; unnamed, each is Any.
TaskT = DefaultedTypeVar("TaskT", default=Any)
StateT = DefaultedTypeVar("StateT", default=Any)


class _Prompted(TypedDict):
    # The one required key, in a base of its own: typing.Required is Python 3.11+.
    prompt: str


class Task(_Prompted, total=False):
    """One task of an env's dataset. Only ``prompt`` is required; the rest is what the built-in
    samples, the datasets loader and the reward building blocks read when it is there.

    - ``prompt``: the task as the agent reads it (the env's ``format_prompt`` may add to it);
    - ``answer``: the reference the reward compares with;
    - ``files``: workspace path -> content, put into the sandbox before the agent starts;
    - ``checks``: check-file path -> content, placed after the rollout (binary verification);
    - ``solution`` / ``gold_answer``: a command that solves the task and a correct reply, which
      the tests replay to show that the reward pays for solving the task, and only for that;
    - ``metadata``: anything else the env keeps per task (ids, difficulty, source...).
    """

    answer: str
    files: dict[str, str]
    checks: dict[str, str]
    solution: str
    gold_answer: str
    metadata: dict[str, Any]


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


# The label of a position that is not trained (the prompt's), as Hugging Face's losses skip it.
MASKED = -100
# The logprob of a masked (prompt) position: > 0 is impossible, so trainers can tell it apart
# (atroposlib's ManagedServer uses the same placeholder).
MASKED_LOGPROB = 1.0


@dataclass
class TokenTrace:
    """One rollout as a single token sequence: prompt pieces masked, generated tokens trained."""

    tokens: list[int] = field(default_factory=list)
    masks: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[tuple[int, int]] = field(default_factory=list)  # [start, end) per generation

    def add_prompt(self, ids: list[int]) -> None:
        """Append tokens the model did not generate (masked, placeholder logprobs)."""
        self.tokens.extend(ids)
        self.masks.extend([MASKED] * len(ids))
        self.logprobs.extend([MASKED_LOGPROB] * len(ids))

    def add_generated(self, ids: list[int], logprobs: list[float]) -> None:
        """Append one generation: trained tokens with the server's logprobs."""
        # Servers may send fewer logprobs than tokens (or more): pad/cut so they stay aligned.
        aligned = [float(lp) for lp in logprobs[: len(ids)]]
        aligned += [MASKED_LOGPROB] * (len(ids) - len(aligned))
        start = len(self.tokens)
        self.tokens.extend(ids)
        self.masks.extend(ids)
        self.logprobs.extend(aligned)
        self.turns.append((start, len(self.tokens)))

    @property
    def num_trained(self) -> int:
        """How many tokens are trained (generated by the model)."""
        return sum(1 for m in self.masks if m != MASKED)

    def generated(self) -> list[list[int]]:
        """The token ids of each generation, in order."""
        return [self.tokens[start:end] for start, end in self.turns]


@dataclass
class AssistantTurn:
    """One model response, whatever the server type that produced it."""

    content: str
    tool_calls: list[dict[str, Any]]
    reasoning: str | None = None
    finish_reason: str | None = None
    parse_error: str | None = None  # text that looks like a tool call but did not parse


@dataclass
class AgentResult(Generic[StateT]):
    """A finished rollout: the conversation and what happened in it."""

    messages: list[dict[str, Any]]
    turns_used: int = 0
    # Ended by the model's answer or the env (should_stop, finish), not by turns, time or a
    # failed server.
    finished_naturally: bool = False
    tool_errors: list[ToolErrorRecord] = field(default_factory=list)
    reasoning_per_turn: list[str | None] = field(default_factory=list)
    error: str | None = None  # why the rollout stopped early (server or hook failure), if it did
    failed_hook: str | None = None  # the turn hook whose failure ``error`` is, if one's is
    timed_out: bool = False  # ended by the loop's time budget (max_rollout_seconds)
    replaced_characters: int = 0  # lone surrogates in the model's replies, made U+FFFD
    turn_rewards: list[float | None] = field(default_factory=list)  # turn_reward, per turn
    metadata: dict[str, Any] = field(default_factory=dict)  # untyped scratch of the hooks
    # The env's own state of this rollout, as its hooks left it: ``new_state(task)``'s value
    # (None for an env without one).
    data: StateT = None  # type: ignore[assignment]
    # Token mode: the exact tokens the model saw and generated, masks and logprobs; None in
    # chat mode, whose training data is rebuilt from ``messages``.
    token_trace: TokenTrace | None = None

    @property
    def final_response(self) -> str:
        """The content of the last assistant message that has any ("" when none has)."""
        for message in reversed(self.messages):
            content = message.get("content")
            if message.get("role") == "assistant" and content and isinstance(content, str):
                return content
        return ""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """Every tool call the model made, in order, as ``{"name", "arguments"}`` dicts."""
        calls = []
        for message in self.messages:
            if message.get("role") == "assistant":
                for call in message.get("tool_calls") or []:
                    function = call["function"]
                    calls.append({"name": function["name"], "arguments": function["arguments"]})
        return calls

    @property
    def tools_used(self) -> list[str]:
        """The names of the tools the model called, each once, in order of first use."""
        return list(dict.fromkeys(call["name"] for call in self.tool_calls))


@dataclass
class RolloutState(Generic[TaskT, StateT]):
    """One rollout as every turn hook sees it, after each turn of the model.

    ``data`` is the env's own state of this rollout (a game's board, a simulated user's mood),
    typed by the env: ``new_state(task)`` makes it, the hooks change it, ``compute_reward``
    finds it in ``result.data``. ``messages`` and ``turn_rewards`` are the result's own. Add
    messages by returning them from ``env_response``, never by editing ``messages``: in token
    mode the model's prompt is the exact tokens of what came before.
    """

    task: TaskT  # the item of the dataset, as format_prompt got it
    task_id: str
    result: AgentResult[StateT]  # the rollout so far
    tool_context: ToolContext  # the rollout's tools and sandbox
    split: str = "train"  # or "eval"
    turn: int = 0  # turns of the model so far; the hooks run after turn ``turn``
    finished: bool = False  # set by finish(): this turn's env_response is the rollout's last

    @property
    def data(self) -> StateT:
        """The env's own state of this rollout (``new_state``'s), kept across its turns."""
        return self.result.data

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far (the result's; read it, do not edit it)."""
        return self.result.messages

    @property
    def metadata(self) -> dict[str, Any]:
        """An untyped dict for the hooks, empty at the start (``data`` is the typed state)."""
        return self.result.metadata

    @property
    def turn_rewards(self) -> list[float | None]:
        """The ``turn_reward`` of each turn so far (None where it gave none)."""
        return self.result.turn_rewards

    @property
    def last_reply(self) -> dict[str, Any]:
        """The model's message of this turn (``content``, maybe ``tool_calls``); {} before one."""
        return next((m for m in reversed(self.messages) if m.get("role") == "assistant"), {})

    def finish(self) -> None:
        """End the rollout after this turn: what ``env_response`` returns is the final message
        (a game's "you won", a user's goodbye). It counts as finished naturally."""
        self.finished = True
