"""HermesAgentBaseEnv: an Atropos environment whose rollouts are multi-turn, tool-using agents.

A subclass writes what is particular to its task (``config_init``, ``format_prompt``,
``compute_reward``, optionally ``prepare_sandbox``, ``make_judge`` and ``load_tasks``) and, for
turn logic of its own, the turn hooks of :class:`TurnHooks` (``new_state``, ``turn_reward``,
``should_stop``, ``env_response``) or ``make_loop``; the base loads, splits and cycles the
tasks and evaluates the held-out ones (:class:`EnvTasks`), runs the group's rollouts
concurrently, each in its own sandbox, scores them, turns the conversations into exact training
data, and keeps training and evaluation metrics apart.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
import uuid
from abc import abstractmethod
from numbers import Real
from pathlib import Path
from typing import Any, ClassVar, Generic

from atroposlib.envs.base import BaseEnv, ScoredDataGroup

from hermes_envgen.runtime.chat.token_mode import ExactTokensBackend
from hermes_envgen.runtime.chat.trajectory import tokenize_conversation
from hermes_envgen.runtime.env.cli import run_env_cli
from hermes_envgen.runtime.env.config import HermesAgentEnvConfig
from hermes_envgen.runtime.env.delivery import GROUP_ID_KEY, GroupDelivery, ServeDelivery
from hermes_envgen.runtime.env.overrides import TrainingBuffer, guard_overrides
from hermes_envgen.runtime.env.serve_log import EqualScoreSkips
from hermes_envgen.runtime.env.startup import ENV_CHECKS, SETTINGS_CHECKS
from hermes_envgen.runtime.env.tasks import EnvTasks
from hermes_envgen.runtime.errors import (
    ChatTemplateError,
    EnvConfigError,
    ModelServerError,
    NothingMeasured,
)
from hermes_envgen.runtime.inference import (
    CHAT_MODE_DATA,
    ModelClient,
    check_model_server,
)
from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop, TurnHooks, briefly
from hermes_envgen.runtime.loop.tool_context import ToolContext, set_default_sandbox_manager
from hermes_envgen.runtime.rewards import Reward
from hermes_envgen.runtime.rollout import (
    EVAL,
    TRAIN,
    AgentResult,
    Metric,
    Rollout,
    RolloutStats,
    StateT,
    TaskT,
    metric,
)
from hermes_envgen.runtime.rollouts.evaluation import (
    FAILURE_WARN_SHARE,
    ResumeError,
    SampleJournal,
    eval_settings,
    plan_eval,
    record_run,
    run_record,
    summarize,
)
from hermes_envgen.runtime.rollouts.progress import RunProgress, record_rollout, resumed_progress
from hermes_envgen.runtime.rollouts.records import FAILURES_FILE, METRICS_FILE
from hermes_envgen.runtime.rollouts.rollout_view import write_groups_page
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings, SandboxUnavailable
from hermes_envgen.runtime.tools import REGISTRY, Tool, ToolRegistry

logger = logging.getLogger(__name__)

# a rollout's training data: tokens, masks, and in token mode the logprobs of its trace
_Sequence = tuple[list[int], list[int], list[float] | None]


# atroposlib is untyped: BaseEnv is Any to mypy, which a subclass of it is told of (misc).
class HermesAgentBaseEnv(
    EnvTasks,
    TurnHooks[TaskT, StateT],
    ServeDelivery,
    BaseEnv,  # type: ignore[misc]
    Generic[TaskT, StateT],
):
    """Base class of tool-using agent environments on Atropos (its tasks: see EnvTasks).

    ``HermesAgentBaseEnv[MyTask, MyState]`` types the env's tasks and its per-rollout state
    (``new_state``) for its hooks and ``compute_reward``; left out, both are Any.
    """

    env_config_cls = HermesAgentEnvConfig
    tool_registry: ToolRegistry = REGISTRY
    # The client of the reward's LLM judge (from make_judge): checked at start-up beside the
    # policy's server; a judge that fails every request for good stops the run.
    judge: ModelClient | None = None
    # The client of the policy's server (every rollout's requests): made at start-up.
    policy: ModelClient
    # The toolsets' settings and shared objects, by toolset name (each rollout's ToolContext).
    tool_services: dict[str, Any]
    _token_mode: bool  # the policy samples exact tokens (vllm/sglang)
    _sandbox_settings: SandboxSettings  # the rollouts' sandboxes, their backend chosen
    # The toolsets this env is made for: a hint beside the enabled_toolsets setting, which
    # decides; used when the setting is left unset (None).
    default_toolsets: ClassVar[list[str] | None] = None
    # What the guards around the author's overrides keep (see env_overrides).
    runtime_attribute_names: frozenset[str] = frozenset()
    evaluations_running = 0
    evaluate_mode = False
    wandb_log_running = False
    wandb_log_reached_base = False
    warned_wandb_log = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        guard_overrides(cls)  # the author's setup, get_next_item, compute_reward, evaluate...

    def __setattr__(self, name: str, value: Any) -> None:
        # A list the env makes while an evaluation runs (``self.buffer = []`` in wandb_log) is
        # a TrainingBuffer too, so that evaluation's entries stay out of it.
        own = name not in self.runtime_attribute_names
        if type(value) is list and self.evaluations_running and own:
            value = TrainingBuffer(value)
        super().__setattr__(name, value)

    def __init__(
        self,
        config: HermesAgentEnvConfig,
        server_configs: Any,
        slurm: bool = False,
        testing: bool = False,
    ) -> None:
        for check in SETTINGS_CHECKS:  # the settings alone (see env.startup)
            check(self, config, server_configs)
        try:
            super().__init__(config, server_configs, slurm=slurm, testing=testing)
        except OSError as exc:  # in BaseEnv.__init__ this is the tokenizer failing to load
            raise EnvConfigError(
                f"cannot load the tokenizer {config.tokenizer_name!r}: {exc}".splitlines()[0]
                + " (offline? pass --env.tokenizer_name with a local directory)"
            ) from None
        self.config: HermesAgentEnvConfig = config
        self._sandbox_settings = config.sandbox_settings()  # its backend chosen by a check
        try:  # a setting that cannot work stops the env here, in one line, with no output
            for env_check in ENV_CHECKS:
                env_check(self)
        except EnvConfigError:
            self._discard_empty_output()
            raise
        self.sandboxes = SandboxManager(
            self._sandbox_settings, lifetime=config.sandbox_idle_lifetime
        )
        set_default_sandbox_manager(self.sandboxes)
        self._sandbox_errors_logged: set[str] = set()
        self._train_stats = RolloutStats()
        self._pending_eval_metrics: dict[str, float] = {}
        self._progress: RunProgress | None = None  # process mode's bar, made on first group
        self._delivery: GroupDelivery | None = None  # serve mode's, from registration on
        self._equal_scores = EqualScoreSkips()  # serve mode's groups left out, said rarely
        if config.data_dir_to_save_evals is None:  # evaluate always saves its results
            config.data_dir_to_save_evals = str(Path("eval_results") / (self.name or "env"))
        self.runtime_attribute_names = frozenset(vars(self))

    def _discard_empty_output(self) -> None:
        """Close and remove the JSONL that process mode opened, while it is still empty."""
        writer = getattr(self, "jsonl_writer", None)
        if writer is None:
            return
        writer.close()
        path = Path(self.config.data_path_to_save_groups or "")
        if path.is_file() and path.stat().st_size == 0:
            path.unlink()

    @classmethod
    def cli(cls) -> None:
        """Atropos's serve / process / evaluate CLI, with user mistakes reported in one line."""
        run_env_cli(super().cli)

    # -- the model server -----------------------------------------------------------------------

    async def check_model_server(self) -> None:
        """Stop the run in one line (exit 2) when the model server cannot serve it.

        One small request per server, as the rollouts will make it (same API, tools and
        tool_choice), retried for ``startup_wait`` seconds while the server may be starting.
        """
        schemas, _ = self._resolve_tools()
        await check_model_server(
            self.policy,
            tools=schemas,
            tool_choice=self.config.tool_choice,
            extra_body=self.config.extra_body,
            startup_wait=self.config.startup_wait,
            rollout_server_url=self.config.rollout_server_url,
        )
        judge = self.judge
        if judge is self.policy and self.policy.token_mode:
            # The judge asks the policy's server for chat completions, which Atropos's
            # /generate-only server does not serve: ask it one.
            judge = ModelClient(self.policy.endpoints, api="chat", retries=0)
        if judge is not None and judge is not self.policy:
            await check_model_server(judge, startup_wait=self.config.startup_wait, judge=True)

    def _announce_training_data(self) -> None:
        """Say at start-up that chat-mode groups lack what atroposlib's GRPO trainer needs."""
        if not self._token_mode:
            logger.warning(CHAT_MODE_DATA)

    def _stop_run(self, error: ModelServerError) -> ModelServerError:
        """``error``, after telling serve mode's env_manager to end the run with it."""
        lost = getattr(self, "_model_lost", None)
        if lost is not None and not lost.done():
            lost.set_result(error)
        return error

    async def _run_evaluate(self) -> None:
        await self.check_model_server()
        self.evaluate_mode = True  # setup must leave evaluation tasks (env_overrides)
        await super()._run_evaluate()

    # -- what a subclass writes ---------------------------------------------------------------

    @abstractmethod
    def format_prompt(self, item: TaskT) -> str | list[dict[str, Any]]:
        """The task as the agent sees it: a user message, or a list of messages."""

    @abstractmethod
    async def compute_reward(
        self, item: TaskT, result: AgentResult[StateT], ctx: ToolContext
    ) -> float | Reward:
        """Score a finished rollout in [0, 1]; ``ctx`` reaches into the rollout's sandbox, and
        ``result.data`` is the state the turn hooks kept (``new_state``'s)."""

    async def prepare_sandbox(self, item: TaskT, ctx: ToolContext) -> None:
        """Put what the task needs into the fresh sandbox before the agent starts (optional)."""

    def gold_player(self, item: TaskT) -> list[str | dict[str, Any]] | None:
        """A scripted player that solves ``item``: the model's replies in order (a text, or a
        turn with ``tool_calls``), which ``check`` and the reward checks replay as its gold
        solution (optional; a task may carry its own as ``player``, or a shell ``solution``)."""
        return None

    def make_judge(self) -> ModelClient | None:
        """The client of the reward's LLM judge (optional; ``judge_client`` makes one)."""
        return None

    # -- tools --------------------------------------------------------------------------------

    def _resolve_tools(self) -> tuple[list[dict[str, Any]], set[str]]:
        """The tool schemas offered to the model and the names it may call (each rollout's)."""
        tools = self._offered_tools()
        return [t.schema for t in tools], {t.name for t in tools}

    def _offered_tools(self) -> list[Tool]:
        """The tools of the enabled toolsets (the env's default ones when unset), less the
        disabled."""
        settings = self.config.tool_settings()
        enabled = settings.enabled_toolsets
        return self.tool_registry.resolve(
            self.default_toolsets if enabled is None else enabled, settings.disabled_toolsets
        )

    def _resolve_tools_for_group(self) -> tuple[list[dict[str, Any]], set[str]]:
        """``_resolve_tools`` by the name the Hermes skill's ``evaluate`` calls it."""
        return self._resolve_tools()

    # -- rollouts -----------------------------------------------------------------------------

    def build_messages(self, item: TaskT) -> list[dict[str, Any]]:
        """The conversation's opening: the system prompt, then the formatted task."""
        prompt = self.format_prompt(item)
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        if self.config.system_prompt and not any(m["role"] == "system" for m in messages):
            messages = [{"role": "system", "content": self.config.system_prompt}, *messages]
        return messages

    def _max_tokens_per_request(self) -> int | None:
        """The token limit each model request carries: the per-turn one, else for token-mode
        requests the context's (ExactTokensBackend's default); None: the server's own."""
        if self.config.max_tokens_per_turn is not None:
            return self.config.max_tokens_per_turn
        return self.config.max_token_length if self._token_mode else None

    def make_loop(
        self,
        item: TaskT,
        ctx: ToolContext,
        *,
        split: str,
        temperature: float,
        tools: tuple[list[dict[str, Any]], set[str]],
    ) -> HermesAgentLoop:
        """The agent loop of one rollout of ``item``; ``ctx`` is its tools' and sandbox's.

        Override it for a loop of your own per task: change the one made here (``max_turns``,
        ``max_seconds``: any field of its ``settings``, by name on the loop) or return a
        ``HermesAgentLoop`` subclass. Its hooks are this env's
        (``new_state``, ``turn_reward``, ``should_stop``, ``env_response``), its task ``item``.
        """
        backend = None
        if self._token_mode:  # vllm/sglang: token ids in and out, tool calls parsed here
            backend = ExactTokensBackend(
                self.policy,
                self.tokenizer,
                self.config.tool_call_parser,
                default_max_tokens=self.config.max_token_length,
            )
        schemas, names = tools
        return HermesAgentLoop(
            self.policy,
            schemas,
            names,
            settings=self.config.loop_settings(split),
            temperature=temperature,
            tool_context=ctx,
            split=split,
            backend=backend,
            hooks=self,
            task=item,
        )

    async def run_agent(
        self,
        item: TaskT,
        *,
        split: str = "train",
        temperature: float | None = None,
        tools: tuple[list[dict[str, Any]], set[str]] | None = None,
    ) -> Rollout:
        """Run one full rollout with tools in a fresh sandbox, score it, clean up the sandbox."""
        tools = tools or self._resolve_tools()
        task_id = f"{split}-{uuid.uuid4().hex[:16]}"
        ctx = ToolContext(task_id, self.sandboxes, self.tool_registry, self.tool_services)
        if temperature is None:
            temperature = self.config.loop_settings(split).temperature
        loop = self.make_loop(item, ctx, split=split, temperature=temperature, tools=tools)
        try:
            try:
                # A sandbox that cannot start fails before the model is asked; rollouts whose
                # tools take no sandbox make none (prepare_sandbox makes one if it needs it).
                if any("sandbox" in self.tool_registry.get(name).injected for name in tools[1]):
                    await ctx.sandbox.start()
                await self.prepare_sandbox(item, ctx)
            except SandboxUnavailable as exc:
                return self._unstarted_rollout(item, task_id, str(exc))
            result = await loop.run(self.build_messages(item))
            try:
                # Nothing the agent started may run on while its work is scored.
                await self.sandboxes.stop_agent_processes(task_id)
            except SandboxUnavailable as exc:  # its engine went away mid-run (docker)
                return self._unstarted_rollout(item, task_id, str(exc), result, lost=True)
            reward, reward_error = await self._score(item, result, ctx)
        finally:
            await ctx.cleanup()
        # A failure (its judge, a hook, the server gave out) scores what the env set, whatever
        # the reward made of what was left: an agent gains nothing by breaking something.
        score = self.config.failure_score if reward.failure else reward.score
        return Rollout(
            item,
            result,
            score,
            task_id,
            reward_error,
            reward.counts,
            reward.signals,
            failure=reward.failure,
        )

    def _unstarted_rollout(
        self,
        item: Any,
        task_id: str,
        error: str,
        result: AgentResult | None = None,
        lost: bool = False,
    ) -> Rollout:
        """A rollout whose sandbox could not start: a failure (``failure_score``) with the
        reason as reward error.

        The model is never asked (its tools could not run); the group goes on. The reason is
        logged once per distinct message, not once per rollout. ``lost``: the sandbox went
        away under the rollout (its Docker engine disappeared), after the agent's ``result``.
        """
        what = "was lost mid-rollout" if lost else "could not start"
        if error not in self._sandbox_errors_logged:
            self._sandbox_errors_logged.add(error)
            logger.error("the sandbox %s; its rollouts are failures: %s", what, error)
        result = result or AgentResult(messages=self.build_messages(item))
        failure = f"sandbox {'lost' if lost else 'failed'}: {error}"
        score = self.config.failure_score
        counts = {Metric.REWARD_ERRORS: 1.0}
        return Rollout(item, result, score, task_id, error, counts, failure=failure)

    async def _score(
        self, item: Any, result: AgentResult, ctx: ToolContext
    ) -> tuple[Reward, str | None]:
        """The reward; a failure and a ``reward_error`` when compute_reward fails (the group goes
        on)."""
        try:
            outcome = await self.compute_reward(item, result, ctx)
        except Exception as exc:
            logger.exception("compute_reward failed; a failure. Item: %r", item)
            error = f"{type(exc).__name__}: {exc}"
            return _reward_error(error), error
        if not isinstance(outcome, (Reward, Real)):  # a shape no score can be made of
            logger.error("compute_reward returned %s; a failure. Item: %r", briefly(outcome), item)
            error = f"it returned {briefly(outcome)}, not a number or a Reward"
            return _reward_error(error), error
        reward = outcome if isinstance(outcome, Reward) else Reward(float(outcome))
        if not math.isfinite(reward.score):
            logger.error("compute_reward returned %r; a failure. Item: %r", reward.score, item)
            error = f"non-finite reward {reward.score!r}"
            return _reward_error(error), error
        if result.error is not None and reward.failure is None:
            # The server (or a turn hook) gave up mid-rollout: whatever the reward says, the
            # model was not measured.
            failed = result.error if result.failed_hook else f"inference failed: {result.error}"
            reward.failure = failed
        return reward, None

    async def collect_trajectories(self, item: Any) -> tuple[ScoredDataGroup | None, list[Any]]:
        """Run ``group_size`` rollouts of the item concurrently and build the scored group."""
        tools = self._resolve_tools()  # once for the group's rollouts

        async def rollout_and_sequence() -> tuple[Rollout, _Sequence | None]:
            # Each rollout's training data is made as it ends, while the group's others still
            # run: made all at once after the last, it held the env's one thread while every
            # sandbox of the group sat idle (256 conversations: most of a second).
            rollout = await self.run_agent(item, split="train", tools=tools)
            return rollout, self._training_sequence(rollout, tools[0])

        finished = await asyncio.gather(
            *(rollout_and_sequence() for _ in range(self.config.group_size))
        )
        rollouts = [rollout for rollout, _ in finished]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        # Unique across env workers and restarts: a trainer fed by many workers can tell groups
        # apart and drop a repeat (a submission retried after its answer was lost).
        group["group_overrides"] = {GROUP_ID_KEY: uuid.uuid4().hex}
        logprobs: list[list[float]] = []
        for rollout, sequence in finished:
            self._train_stats.add(rollout)
            if sequence is None:
                continue
            tokens, masks, trace_logprobs = sequence
            if trace_logprobs is not None:
                logprobs.append(trace_logprobs)
            group["tokens"].append(tokens)
            group["masks"].append(masks)
            group["scores"].append(rollout.reward)
            group["messages"].append(rollout.result.messages)
        self._report_group(rollouts, kept=len(group["tokens"]) >= self.config.group_size)
        if not group["tokens"] and self.policy.hopeless():
            # Every rollout failed on a request that cannot succeed: asking again will not help.
            raise self._stop_run(ModelServerError(f"every request fails: {self.policy.last_fatal}"))
        judge = self.judge
        if judge is not None and judge.hopeless() and all(r.failure for r in rollouts):
            # Every score is a stand-in for a judge that cannot answer: training on them is
            # training on zeros.
            raise self._stop_run(ModelServerError(f"every judge request fails: {judge.last_fatal}"))
        if logprobs and len(logprobs) == len(group["tokens"]):
            group["inference_logprobs"] = logprobs  # aligned with tokens; 1.0 where masked
        if len(group["tokens"]) < self.config.group_size:
            logger.warning(
                "only %d of %d rollouts produced a model turn; the group is dropped",
                len(group["tokens"]),
                self.config.group_size,
            )
            return None, []
        return group, []

    def _training_sequence(
        self, rollout: Rollout, schemas: list[dict[str, Any]]
    ) -> _Sequence | None:
        """A rollout's tokens, masks and (token mode) logprobs; None when it has nothing to
        train on."""
        if not any(m["role"] == "assistant" for m in rollout.result.messages):
            return None  # the model never answered (server down): nothing to train on
        if (trace := rollout.result.token_trace) is not None:
            # Token mode: the tokens the server saw and generated, with its logprobs.
            if not trace.num_trained:
                return None
            return trace.tokens, trace.masks, trace.logprobs
        try:  # chat mode: rebuilt from the conversation with the chat template
            sequence = tokenize_conversation(self.tokenizer, rollout.result.messages, schemas)
        except ChatTemplateError as exc:
            logger.error("a rollout is left out of the training data: %s", exc)
            return None
        return sequence.tokens, sequence.masks, None

    # -- evaluation ---------------------------------------------------------------------------

    async def run_eval(self, items: list[Any], task_name: str | None = None) -> dict[str, float]:
        """Evaluate with the full agent loop and tools: k samples per item, saved as they finish.

        Scored rollouts go to samples.jsonl and failures (no measured score: each counts at
        ``failure_score``) to failures.jsonl, a line per rollout as soon as it is done; a high
        failure share is a warning; metrics.json gets pass@k, 95% intervals and
        what the run was (versions, model, provider, config). With ``resume`` the rollouts an
        interrupted run saved are not run again. The numbers go to ``eval/`` metrics only,
        never into training buffers. See :mod:`hermes_envgen.runtime.rollouts.evaluation`.
        """
        start = time.time()
        settings = self.config.evaluation_settings()
        try:
            journal = SampleJournal(settings.save_dir, eval_settings(self), resume=settings.resume)
        except ResumeError as exc:
            raise EnvConfigError(str(exc)) from None
        tasks = plan_eval(items, settings.samples_per_item)
        saved = [journal.records[t.key] for t in tasks if t.key in journal.records]
        if len(saved) < len(journal.records):
            logger.warning(
                "%d saved rollout(s) belong to no item of this evaluation; left out",
                len(journal.records) - len(saved),
            )
        if settings.resume:
            print(f"resuming: {len(saved)} of {len(tasks)} rollouts already saved", file=sys.stderr)
        progress = resumed_progress(len(tasks), saved)
        pending = (t for t in tasks if t.key not in journal.records)

        async def worker() -> None:
            # A fixed pool pulling from the plan: no task object per rollout of the whole run.
            for task in pending:
                rollout = await self.run_agent(task.item, split="eval")
                journal.append(rollout.record() | task.identity())
                record_rollout(progress, rollout)
                progress.advance()

        try:
            await asyncio.gather(*(worker() for _ in range(settings.workers)))
        finally:
            progress.close()
            journal.close()
        records = [journal.records[t.key] for t in tasks]  # earlier runs' and this one's
        metrics = summarize(
            records,
            settings.samples_per_item,
            settings.pass_threshold,
            failure_score=settings.failure_score,
        )
        self._pending_eval_metrics = dict(metrics)
        await self.evaluate_log(
            metrics,
            task_name=task_name,
            start_time=start,
            end_time=time.time(),
            generation_parameters={
                "temperature": settings.temperature,
                # What each request asked for (atroposlib would record max_token_length).
                "max_new_tokens": self._max_tokens_per_request(),
                "max_agent_turns": self.config.max_agent_turns,
                "samples_per_item": settings.samples_per_item,
            },
            samples=None,  # already in samples.jsonl, written as the rollouts finished
        )
        if settings.save_dir is not None:
            record_run(Path(settings.save_dir) / METRICS_FILE, run_record(self))
        failed = [r for r in records if r.get("failure")]
        if failed and len(failed) > FAILURE_WARN_SHARE * len(records):
            # Loud: these numbers measure what broke more than the model.
            print(
                f"warning: {len(failed)} of {len(records)} rollouts failed "
                f"({metric(EVAL, Metric.FAILURE_RATE)} {len(failed) / len(records):.2f}), each "
                f"counted at failure_score {settings.failure_score:g}; the first: "
                f"{failed[0]['failure']} (the rest in {FAILURES_FILE})",
                file=sys.stderr,
            )
        if records and len(failed) == len(records):
            raise NothingMeasured(
                f"no rollout could be measured: all {len(records)} failed; the first: "
                f"{failed[0]['failure']}"
            )
        return metrics

    def _report_group(self, rollouts: list[Rollout], kept: bool) -> None:
        """Move process mode's progress bar on (nothing in serve mode or off a terminal)."""
        if not getattr(self, "process_mode", False):
            return
        if self._progress is None:
            self._progress = RunProgress("process", self.n_groups_to_process, "groups")
        for rollout in rollouts:
            record_rollout(self._progress, rollout)
        if kept:
            self._progress.advance()

    # -- logging ------------------------------------------------------------------------------

    async def process_manager(self) -> None:
        """Atropos's process mode, then the ``hermes-envgen view`` page of the groups beside them.

        It replaces the page Atropos writes there (``PATH.html``), which shows tool calls blank.
        The model server is checked first: a dead one stops the run with its reason. A run
        stopped before its first group leaves no groups file behind.
        """
        try:
            await self.check_model_server()
            self._announce_training_data()
            await super().process_manager()
        except BaseException:  # whatever stopped it: an empty file is no output
            self._discard_empty_output()
            raise
        write_groups_page(Path(self.config.data_path_to_save_groups), self.tokenizer)

    def signal_means(self) -> dict[str, float]:
        """The means of the reward's signals over this step's measured training rollouts, as
        ``train/<signal>`` (what ``wandb_log`` logs of them)."""
        signals = self._train_stats.signals
        return {metric(TRAIN, name): sum(v) / len(v) for name, v in signals.items() if v}

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        """Add reward, turn and tool-error metrics (training and last evaluation), then log."""
        self.wandb_log_reached_base = True
        wandb_metrics = dict(wandb_metrics or {})
        wandb_metrics.update(self._train_stats.metrics("train"))
        wandb_metrics.update(self._pending_eval_metrics)
        self._train_stats = RolloutStats()
        self._pending_eval_metrics = {}
        await super().wandb_log(wandb_metrics)


guard_overrides(HermesAgentBaseEnv)
guard_overrides(EnvTasks)


def _reward_error(error: str) -> Reward:
    """The stand-in of a reward that could not be computed: 0.0 in training, a failure in eval."""
    failure = f"compute_reward failed: {error}"
    return Reward(0.0, counts={Metric.REWARD_ERRORS: 1.0}, failure=failure)
