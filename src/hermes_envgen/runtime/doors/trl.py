"""The door to TRL's ``GRPOTrainer``: the env, unchanged, as TRL's environment and rewards.

Two ways in, for the two ways TRL takes an environment:

- ``environment_factory`` (TRL runs the loop: its chat template, its tool-call parsing):
  :func:`environment_factory` makes the class TRL wants (no-argument constructor,
  ``reset(**row)``, each of the env's tools a public typed method with an ``Args:`` docstring,
  picklable); :func:`dataset` yields the env's tasks as rows (``prompt``: the env's opening
  messages, ``task``: the task as JSON, which ``reset`` starts in a fresh sandbox);
  :func:`env_reward` is the reward function (``reward_funcs=[env_reward]``): the env's
  ``compute_reward`` over each rollout's transcript and sandbox, its named signals logged as
  metrics of their own. An env with turn hooks (a game, a simulated user) gets one more
  method, ``reply(message)``: the model's message to the other side, answered by the env's
  hooks as its loop answers a turn (``EnvSession.reply``); the transcript the session keeps
  that way is what ``compute_reward`` scores, as the loop's would be.
- ``rollout_func`` (our loop: the env's own agent loop, its parser and hooks, in token mode):
  :func:`rollout_func` samples through the trainer's generation server (a vLLM server, or any
  server the env's token mode speaks to) and returns the tokens, logprobs and masks the model
  sampled, and the reward (``reward_funcs=[rollout_reward]``).

Every env process of TRL holds one instance of the env per factory, on a thread of its own
(:class:`SessionThread`); each rollout is one :class:`EnvSession` with its own sandbox, closed
once scored, and reaped if a crashed trainer never scores it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from hermes_envgen.runtime.doors import (
    refuse_unsupported,
    require,
    shared_sessions,
    typed_function,
)
from hermes_envgen.runtime.doors.session import (
    DEFAULT_SESSION_IDLE_TIMEOUT,
    REPLY_DOC,
    REPLY_TOOL,
    EnvSession,
    SessionThread,
    turn_hooks,
)
from hermes_envgen.runtime.env.base_env import HermesAgentBaseEnv
from hermes_envgen.runtime.errors import DoorUnavailable
from hermes_envgen.runtime.loop.agent_loop import normalize_tool_call
from hermes_envgen.runtime.rewards import Reward
from hermes_envgen.runtime.tools.registry import Tool

SUPPORTED = ("1.16", "1.17")  # the TRL releases this door was tested with
# TRL's own names on an environment: never a tool's.
RESERVED = frozenset({"reset", "get_reward"})


def require_trl() -> Any:
    """The ``trl`` module, or one line naming the extra to install (exit 2)."""
    return require("trl", "trl", SUPPORTED, "trl")


# -- environment_factory ------------------------------------------------------------------


class EnvironmentFactory:
    """TRL's ``environment_factory``: each call a new environment; pickled by its settings."""

    def __init__(
        self,
        env_cls: type[HermesAgentBaseEnv],
        settings: dict[str, Any],
        idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
    ) -> None:
        self.env_cls = env_cls
        self.settings = settings
        self.idle_timeout = idle_timeout
        self._cls: type[Environment] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_cls"} | {"_cls": None}

    @property
    def thread(self) -> SessionThread:
        """The env's sessions in this process."""
        return shared_sessions(self.env_cls, self.settings, self.idle_timeout)

    @property
    def environment_class(self) -> type[Environment]:
        """The class TRL reads tools from: one public method per tool of the env."""
        if self._cls is None:
            env = self.thread.sessions.env
            tools = [env.tool_registry.get(name) for name in sorted(env._resolve_tools()[1])]
            methods: dict[str, Any] = {"factory": self}
            for tool in tools:
                methods[tool.name] = _method(tool)
            if turn_hooks(type(env)):
                if REPLY_TOOL in methods:
                    raise DoorUnavailable(
                        f"the tool {REPLY_TOOL!r} clashes with the method through which TRL "
                        "plays an env with turn hooks: rename it"
                    )
                methods[REPLY_TOOL] = _reply
            self._cls = type(f"{type(env).__name__}TRL", (Environment,), methods)
        return self._cls

    def __call__(self) -> Environment:
        return self.environment_class()


class Environment:
    """One rollout of the env as TRL drives it: ``reset`` starts a task in a fresh sandbox."""

    factory: EnvironmentFactory

    def __init__(self) -> None:
        self.session: EnvSession | None = None
        self.task: str | None = None  # the row's task, as JSON
        self.reward: Reward | None = None
        self.turn_rewards: list[float] = []  # the env's turn_reward of each turn that had one

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Its class is made at run time: rebuilt from the factory, without a session.
        return (_new_environment, (self.factory,))

    def reset(self, **row: Any) -> str | None:
        """Start the row's task (its ``task`` column) in a fresh sandbox; the prompt is the
        row's ``prompt`` already, so nothing is added to it."""
        self._close()
        if "task" not in row:
            raise DoorUnavailable(
                "the dataset has no 'task' column: make it with hermes_envgen's doors.trl.dataset"
            )
        self.task = row["task"]
        item = json.loads(self.task)
        sessions = self.factory.thread.sessions
        self.session = self.factory.thread.run(sessions.open(item))
        self.reward = None
        self.turn_rewards = []
        return None

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self.session is None:
            return "Error: no task was started (reset was not called)"
        return self.factory.thread.run(self.session.call_tool(name, arguments))

    def _reply(self, message: str) -> str:
        if self.session is None:
            return "Error: no task was started (reset was not called)"
        return self.factory.thread.run(self.session.reply(message)).text

    def _score(self, completion: Sequence[dict[str, Any]]) -> Reward:
        """The env's ``compute_reward`` over this rollout (``completion``: TRL's messages after
        the prompt); the sandbox is closed after it."""
        if self.reward is not None:
            return self.reward
        if self.session is None:
            raise DoorUnavailable("a reward before reset(): no task was started")
        transcript = [*self.session.messages, *(_openai_message(m) for m in completion)]
        thread = self.factory.thread
        try:
            self.reward = thread.run(self.session.score(transcript))
            self.turn_rewards = [r for r in self.session.result.turn_rewards if r is not None]
        finally:
            self._close()
        return self.reward

    def _close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            thread = self.factory.thread
            thread.run(thread.sessions.close(session.task_id))


def _reply(self: Environment, message: str) -> str:
    return self._reply(message)


_reply.__name__ = _reply.__qualname__ = REPLY_TOOL
_reply.__annotations__ = {"message": str, "return": str}  # what TRL describes to the model
_reply.__doc__ = REPLY_DOC


def _new_environment(factory: EnvironmentFactory) -> Environment:
    return factory()


def _method(tool: Tool) -> Callable[..., str]:
    """``tool`` as a method TRL offers the model, calling the tool in the rollout's sandbox."""
    name = tool.name
    if name in RESERVED or name.startswith("_"):
        raise DoorUnavailable(
            f"the tool {name!r} cannot be a TRL environment method (TRL reserves reset, "
            "get_reward and names starting with _): rename it"
        )

    def method(self: Environment, **arguments: Any) -> str:
        return self._call(name, arguments)

    typed_function(method, tool, method=True)
    try:  # what TRL will do with it: a type it cannot describe is refused now, with the reason
        from transformers.utils import get_json_schema

        get_json_schema(method)
    except Exception as exc:
        raise DoorUnavailable(f"the tool {name!r} cannot be offered to TRL: {exc}") from None
    return method


def _openai_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message of TRL's completion as the env's rewards read messages (OpenAI form)."""
    message = dict(message)
    if message.get("tool_calls"):
        message["tool_calls"] = [normalize_tool_call(c) for c in message["tool_calls"]]
    return message


def environment_factory(
    env_cls: type[HermesAgentBaseEnv],
    *,
    tokenizer_name: str | None = None,
    idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
    **settings: Any,
) -> EnvironmentFactory:
    """TRL's ``environment_factory`` for ``env_cls`` (``tokenizer_name``: the model's, else the
    env's own; ``settings``: ``open_env``'s keywords). Making and driving it needs no TRL (a
    project's tests drive it as TRL does); a TRL at a version this door was not tested with is
    refused, naming the extra."""
    refuse_unsupported("trl", SUPPORTED, "trl")
    if tokenizer_name is not None:
        settings["tokenizer_name"] = tokenizer_name
    factory = EnvironmentFactory(env_cls, settings, idle_timeout)
    factory.environment_class  # noqa: B018  (tools that TRL cannot take are refused now)
    return factory


def dataset(
    factory: EnvironmentFactory | RolloutFunc, split: str = "train", count: int | None = None
) -> Any:
    """The env's tasks as a ``datasets.Dataset``: ``prompt`` (its opening messages) and
    ``task`` (the task as JSON, for ``reset``); ``split`` "train" or "eval"."""
    from datasets import Dataset

    thread = factory.thread
    sessions = thread.sessions
    if split == "eval":
        items = thread.run(sessions.eval_tasks())
    else:
        items = thread.run(sessions.training_tasks(count))
    rows = []
    for item in items:
        try:
            task = json.dumps(item)
        except TypeError as exc:
            raise DoorUnavailable(f"a task of the env is not JSON ({exc}): {item!r:.80}") from None
        rows.append({"prompt": sessions.env.build_messages(item), "task": task})
    return Dataset.from_list(rows)


def env_reward(
    completions: list[Any], environments: list[Environment], **kwargs: Any
) -> list[float]:
    """TRL's reward function: each rollout's env ``compute_reward`` (its named signals,
    failures and, for an env with turn hooks, the mean ``turn_reward`` logged as metrics
    through TRL's ``log_metric``), as the env's loop pays and logs them."""
    rewards = [env._score(completion) for env, completion in zip(environments, completions)]
    _log_signals(rewards, kwargs.get("log_metric"))
    turn_rewards = [r for env in environments for r in env.turn_rewards]
    if turn_rewards and kwargs.get("log_metric") is not None:  # as the env's loop logs them
        kwargs["log_metric"]("env/mean_turn_reward", sum(turn_rewards) / len(turn_rewards))
    return [r.score for r in rewards]


def _log_signals(rewards: list[Reward], log_metric: Callable[[str, float], None] | None) -> None:
    if log_metric is None or not rewards:
        return
    names = sorted({name for r in rewards for name in r.signals})
    for name in names:
        values = [r.signals[name] for r in rewards if name in r.signals]
        log_metric(f"env/{name}", sum(values) / len(values))
    log_metric("env/failures", sum(1.0 for r in rewards if r.failure) / len(rewards))


# -- rollout_func --------------------------------------------------------------------------


class RolloutFunc:
    """TRL's ``rollout_func``: the env's own agent loop, in token mode, for each prompt.

    Each prompt (the env's opening messages, as :func:`dataset` made them) is run as one
    rollout of its task with the env's loop against ``base_url`` (token mode: tool calls parsed
    by the env's ``tool_call_parser``); what TRL trains on is that rollout's exact token trace:
    the tokens the server sampled with their logprobs, tool results and the env's messages
    masked out (``env_mask``), and the reward its ``compute_reward`` gave.
    """

    def __init__(self, env_cls: type[HermesAgentBaseEnv], settings: dict[str, Any]) -> None:
        self.env_cls = env_cls
        self.settings = settings

    @property
    def thread(self) -> SessionThread:
        return shared_sessions(self.env_cls, self.settings, DEFAULT_SESSION_IDLE_TIMEOUT)

    def __call__(self, prompts: list[Any], trainer: Any = None) -> dict[str, list[Any]]:
        thread = self.thread
        env = thread.sessions.env
        tasks = thread.run(thread.sessions.training_tasks()) + thread.run(
            thread.sessions.eval_tasks()
        )
        by_prompt = {_prompt_key(env.build_messages(item)): item for item in tasks}
        items = []
        for prompt in prompts:
            item = by_prompt.get(_prompt_key(prompt))
            if item is None:
                raise DoorUnavailable(
                    "a prompt of the batch is no task of the env: make the dataset with "
                    "hermes_envgen's doors.trl.dataset"
                )
            items.append(item)

        async def run_all() -> list[Any]:
            import asyncio

            return list(await asyncio.gather(*(env.run_agent(item) for item in items)))

        rollouts = thread.run(run_all())
        out: dict[str, list[Any]] = {
            "prompt_ids": [],
            "completion_ids": [],
            "logprobs": [],
            "env_mask": [],
            "env_reward": [],
        }
        for rollout in rollouts:
            trace = rollout.result.token_trace
            if trace is None or not trace.turns:
                why = rollout.result.error or "the env is not in token mode (inference_api)"
                raise DoorUnavailable(f"a rollout produced no token trace: {why}")
            start = trace.turns[0][0]
            out["prompt_ids"].append(trace.tokens[:start])
            out["completion_ids"].append(trace.tokens[start:])
            out["env_mask"].append([0 if m == -100 else 1 for m in trace.masks[start:]])
            # TRL reads a logprob per completion token; masked ones are never trained.
            out["logprobs"].append(
                [
                    lp if m != -100 else 0.0
                    for lp, m in zip(trace.logprobs[start:], trace.masks[start:])
                ]
            )
            out["env_reward"].append(rollout.reward)
        return out


def rollout_func(
    env_cls: type[HermesAgentBaseEnv],
    *,
    base_url: str,
    model_name: str,
    tokenizer_name: str,
    inference_api: str = "completions",
    server_type: str = "vllm",
    **settings: Any,
) -> RolloutFunc:
    """TRL's ``rollout_func`` for ``env_cls``, sampling from the server at ``base_url``
    (token mode: ``inference_api`` "completions" for stock vLLM, "generate" for Atropos's)."""
    require_trl()
    if inference_api == "chat":
        raise DoorUnavailable(
            "rollout_func needs the sampled tokens: inference_api 'completions' or 'generate'"
        )
    return RolloutFunc(
        env_cls,
        {
            "tokenizer_name": tokenizer_name,
            "base_url": base_url,
            "model_name": model_name,
            "inference_api": inference_api,
            "server_overrides": {"server_type": server_type},
            **settings,
        },
    )


def rollout_reward(completions: list[Any], env_reward: list[float], **kwargs: Any) -> list[float]:
    """The reward of :class:`RolloutFunc`'s rollouts (its ``env_reward`` column)."""
    return [float(r) for r in env_reward]


# The door's entry points under the names generated projects import from
# ``hermes_envgen.runtime`` (src/<package>/trl_environment.py).
trl_environment_factory = environment_factory
"""TRL's ``environment_factory`` made from an env class (:func:`environment_factory`)."""
trl_dataset = dataset
"""An env's tasks as the rows of a TRL dataset: ``prompt`` and ``task`` (:func:`dataset`)."""
trl_env_reward = env_reward
"""TRL's reward function: each rollout's ``compute_reward`` (:func:`env_reward`)."""


def _prompt_key(messages: Any) -> str:
    return json.dumps(
        [{"role": m.get("role"), "content": m.get("content")} for m in messages], sort_keys=True
    )
