"""HermesAgentBaseEnv: an Atropos environment whose rollouts are multi-turn, tool-using agents.

A subclass writes what is particular to its task (``config_init``, ``setup``,
``get_next_item``, ``format_prompt``, ``compute_reward``, ``evaluate``); the base runs the
group's rollouts concurrently, each in its own sandbox, scores them, turns the conversations
into exact training data, and keeps training and evaluation metrics apart.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import sys
import time
import uuid
from abc import abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from atroposlib.envs.base import BaseEnv, ScoredDataGroup

from hermes_envgen.errors import HermesEnvgenError, ViewError
from hermes_envgen.runtime.agent_loop import AgentResult, HermesAgentLoop
from hermes_envgen.runtime.chat_template import prepare_chat_template
from hermes_envgen.runtime.config import HermesAgentEnvConfig, renamed_flags
from hermes_envgen.runtime.delivery import (
    GROUP_ID_KEY,
    GroupDelivery,
    check_rollout_server,
    disconnect_env,
)
from hermes_envgen.runtime.errors import (
    ChatTemplateError,
    EnvConfigError,
    ModelServerError,
    NothingMeasured,
    RolloutServerLost,
)
from hermes_envgen.runtime.evaluation import (
    ResumeError,
    SampleJournal,
    eval_settings,
    plan_eval,
    record_run,
    run_record,
    summarize,
    tool_error_count,
)
from hermes_envgen.runtime.exact_tokens import ExactTokensBackend, TokenTrace
from hermes_envgen.runtime.inference import (
    CHAT_MODE_DATA,
    ModelClient,
    check_model_server,
    same_server,
)
from hermes_envgen.runtime.parsers import UnknownParserError, get_parser
from hermes_envgen.runtime.progress import RunProgress
from hermes_envgen.runtime.records import Metric, RolloutRecord, ToolErrorRecord, metric
from hermes_envgen.runtime.rewards import Reward
from hermes_envgen.runtime.rollout_view import write_view
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxUnavailable
from hermes_envgen.runtime.sandbox.choice import choose_backend, hide_run_from_commands
from hermes_envgen.runtime.sandbox.runs import exit_on_termination
from hermes_envgen.runtime.serve_log import EqualScoreSkips, RegistrationWait, lost_rollout_server
from hermes_envgen.runtime.tool_context import ToolContext, set_default_sandbox_manager
from hermes_envgen.runtime.tools import REGISTRY, ToolRegistry
from hermes_envgen.runtime.tools.mcp_tools import mcp_registry
from hermes_envgen.runtime.trajectory import tokenize_conversation

logger = logging.getLogger(__name__)


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
    sequence: TokenTrace | None = None  # Phase 2 (vllm/sglang): the exact tokens and logprobs
    failure: str | None = None  # why the score was not measured: evaluation leaves it out

    def sample(self) -> RolloutRecord:
        """A JSON-ready record of the rollout, as evaluation saves it."""
        return {
            "item": _jsonable(self.item),
            "task_id": self.task_id,
            "reward": None if self.failure else self.reward,  # a stand-in is no measurement
            "failure": self.failure,
            "turns_used": self.result.turns_used,
            "finished_naturally": self.result.finished_naturally,
            "tool_calls": len(self.result.tool_calls),
            "tools_used": self.result.tools_used,
            # ToolError's fields are ToolErrorRecord's: the record is its dict
            "tool_errors": [cast(ToolErrorRecord, asdict(e)) for e in self.result.tool_errors],
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
    """Running sums over rollouts, flushed into metrics (one instance per split)."""

    rewards: list[float] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    tool_calls: int = 0
    tool_errors: int = 0
    rollout_errors: int = 0
    failures: int = 0  # scores that are stand-ins (e.g. the judge failed): see Rollout.failure
    finished_naturally: int = 0
    counts: dict[str, float] = field(default_factory=dict)
    signals: dict[str, list[float]] = field(default_factory=dict)

    def add(self, rollout: Rollout) -> None:
        self.rewards.append(rollout.reward)
        self.turns.append(rollout.result.turns_used)
        self.tool_calls += len(rollout.result.tool_calls)
        self.tool_errors += len(rollout.result.tool_errors)
        self.rollout_errors += rollout.result.error is not None
        self.failures += rollout.failure is not None
        self.finished_naturally += rollout.result.finished_naturally
        for name, value in rollout.counts.items():
            self.counts[name] = self.counts.get(name, 0.0) + value
        for name, value in rollout.signals.items():
            self.signals.setdefault(name, []).append(value)

    def metrics(self, prefix: str) -> dict[str, float]:
        n = len(self.rewards)
        if n == 0:
            return {}
        reward_metrics = {metric(prefix, name): value for name, value in self.counts.items()}
        reward_metrics.update(
            {metric(prefix, name): sum(v) / len(v) for name, v in self.signals.items()}
        )
        calls = self.tool_calls
        values = {
            Metric.MEAN_REWARD: sum(self.rewards) / n,
            Metric.MEAN_TURNS: sum(self.turns) / n,
            Metric.TOOL_CALLS_PER_ROLLOUT: calls / n,
            Metric.TOOL_ERRORS_PER_ROLLOUT: self.tool_errors / n,
            Metric.TOOL_ERROR_RATE: self.tool_errors / calls if calls else 0.0,
            Metric.FINISHED_NATURALLY_RATE: self.finished_naturally / n,
            Metric.REWARD_ERRORS: self.counts.get(Metric.REWARD_ERRORS, 0.0),
            Metric.ROLLOUT_ERRORS: float(self.rollout_errors),
            Metric.FAILURES: float(self.failures),
            Metric.ROLLOUTS: float(n),
        }
        return reward_metrics | {metric(prefix, name): value for name, value in values.items()}


class HermesAgentBaseEnv(BaseEnv):  # type: ignore[misc]  # atroposlib: no types
    """Base class of tool-using agent environments on Atropos."""

    env_config_cls = HermesAgentEnvConfig
    jsonl_writer: Any  # process mode's output file (atroposlib's __init__ opens it)
    tool_registry: ToolRegistry = REGISTRY
    # The client of the reward's LLM judge (from make_judge): checked at start-up beside the
    # policy's server; a judge that fails every request for good stops the run.
    judge: ModelClient | None = None

    def __init__(
        self,
        config: HermesAgentEnvConfig,
        server_configs: Any,
        slurm: bool = False,
        testing: bool = False,
    ) -> None:
        if not config.wandb_name:
            # run-api rejects a registration without a name (HTTP 422): default to the env's.
            config.wandb_name = self.name or type(self).__name__
        if config.use_wandb and not _wandb_configured():
            logger.warning(
                "W&B logging is off: no WANDB_API_KEY is set (set it, or WANDB_MODE, to log)"
            )
            config.use_wandb = False
        if not config.tokenizer_name or config.tokenizer_name == "none":
            raise EnvConfigError(
                "tokenizer_name is not set: pass --env.tokenizer_name with the Hugging Face "
                "repo id (or local directory) of the model's tokenizer"
            )
        for server_config in server_configs if isinstance(server_configs, list) else []:
            _check_api_key(server_config)
            if getattr(server_config, "tokenizer_name", None) == "none":
                # vllm/sglang servers load a tokenizer too: the env's is the model's.
                server_config.tokenizer_name = config.tokenizer_name
        try:
            super().__init__(config, server_configs, slurm=slurm, testing=testing)
        except OSError as exc:  # in BaseEnv.__init__ this is the tokenizer failing to load
            raise EnvConfigError(
                f"cannot load the tokenizer {config.tokenizer_name!r}: {exc}".splitlines()[0]
                + " (offline? pass --env.tokenizer_name with a local directory)"
            ) from None
        self.config: HermesAgentEnvConfig = config
        sandbox_settings = config.sandbox_settings()
        try:  # auto: bwrap where it works; local as root only when opted in (say it, either way)
            sandbox_settings.backend = choose_backend(
                sandbox_settings.backend, config.sandbox_allow_unsafe_local
            )
        except EnvConfigError:
            self._discard_empty_output()
            raise
        if sandbox_settings.backend == "local":
            hide_run_from_commands()  # the agent's commands, this user's, cannot read our keys
        if config.mcp_servers:  # their tools, listed now: a server that cannot start stops here
            try:  # in a sandbox of the backend the rollouts use, resolved above
                self.tool_registry = mcp_registry(
                    self.tool_registry, config.mcp_servers, sandbox_settings
                )
            except EnvConfigError:
                self._discard_empty_output()
                raise
        self._resolve_tools_for_group()  # an unknown toolset fails here, at startup
        # Every request to the model goes through one client: its retries, its errors.
        self.model = ModelClient.of(
            [s.config for s in self.server.servers],
            api=config.inference_api,
            retries=config.request_retries,
        )
        self._token_server = self.model.token_level  # Phase 2: exact tokens and logprobs
        try:  # a setting that cannot work stops the env here, in one line, with no output
            if self._token_server:
                try:
                    get_parser(config.tool_call_parser)
                except UnknownParserError as exc:
                    raise EnvConfigError(str(exc)) from None
            # A template that drops tool calls or results.
            prepare_chat_template(
                self.tokenizer,
                config.chat_template,
                config.tokenizer_name,
                exact_tokens=self._token_server,
                system_prompt=config.system_prompt,
                template_variables=(config.extra_body or {}).get("chat_template_kwargs"),
                server_type=self.model.endpoints[0].server_type,
            )
            self.judge = self.make_judge()
            if self.judge is not None and self.judge is self.model:
                logger.warning(
                    "warning: the judge is the policy's own server: the policy grades its own "
                    "answers, and an answer can try to talk it into a high score; set "
                    "judge_base_url to a separate judge"
                )
            # The toolsets' settings and clients, in every rollout's ToolContext; those the
            # env names in enabled_toolsets are checked now.
            named = self._resolve_tools_for_group()[1] if config.enabled_toolsets else set()
            self.tool_services = config.tool_services(named)
        except EnvConfigError:
            self._discard_empty_output()
            raise
        self.sandboxes = SandboxManager(sandbox_settings, lifetime=config.sandbox_idle_lifetime)
        set_default_sandbox_manager(self.sandboxes)
        self._sandbox_errors_logged: set[str] = set()
        self._train_stats = RolloutStats()
        self._pending_eval_metrics: dict[str, float] = {}
        self._progress: RunProgress | None = None  # process mode's bar, made on first group
        self._delivery: GroupDelivery | None = None  # serve mode's, from registration on
        self._equal_scores = EqualScoreSkips()  # serve mode's groups left out, said rarely

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
        exit_on_termination()  # SIGTERM exits normally: the run's sandboxes are removed

        from pydantic import ValidationError

        sys.argv[1:] = renamed_flags(sys.argv[1:])
        try:
            super().cli()
        except HermesEnvgenError as exc:  # configuration mistakes exit 2, the model server's too
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except ValidationError as exc:
            print(f"error: {_validation_line(exc)}", file=sys.stderr)
            sys.exit(2)

    # -- the model server -----------------------------------------------------------------------

    async def check_model_server(self) -> None:
        """Stop the run in one line (exit 2) when the model server cannot serve it.

        One small request per server, as the rollouts will make it (same API, tools and
        tool_choice), retried for ``startup_wait`` seconds while the server may be starting.
        """
        schemas, _ = self._resolve_tools_for_group()
        await check_model_server(
            self.model,
            tools=schemas,
            tool_choice=self.config.tool_choice,
            extra_body=self.config.extra_body,
            startup_wait=self.config.startup_wait,
            rollout_server_url=self.config.rollout_server_url,
        )
        judge = self.judge
        if judge is self.model and self.model.token_level:
            # The judge asks the policy's server for chat completions, which Atropos's
            # /generate-only server does not serve: ask it one.
            judge = ModelClient(self.model.endpoints, api="chat", retries=0)
        if judge is not None and judge is not self.model:
            await check_model_server(judge, startup_wait=self.config.startup_wait, judge=True)

    def _announce_training_data(self) -> None:
        """Say at start-up that chat-mode groups lack what atroposlib's GRPO trainer needs."""
        if not self._token_server:
            logger.warning(CHAT_MODE_DATA)

    def _stop_run(self, error: ModelServerError) -> ModelServerError:
        """``error``, after telling serve mode's env_manager to end the run with it."""
        lost = getattr(self, "_model_lost", None)
        if lost is not None and not lost.done():
            lost.set_result(error)
        return error

    async def env_manager(self) -> None:
        """Serve mode; at its end, however it ends, the worker disconnects from run-api."""
        try:
            await self._serve()
        finally:
            if self._delivery is not None:  # registered
                await disconnect_env(self.config.rollout_server_url, self.env_id)

    async def _serve(self) -> None:
        for server in self.server.servers:  # serve mode runs beside run-api
            _check_not_rollout_server(server.config, self.config.rollout_server_url)
        # Unreachable run-api: one line and exit 2, not atroposlib's retries and stack trace.
        await check_rollout_server(self.config.rollout_server_url, self.config.startup_wait)
        await self.check_model_server()
        self._announce_training_data()
        # atroposlib only logs a worker's exception: a model server that fails every request
        # for good would keep serve mode asking forever, so such a failure ends the run.
        self._model_lost: asyncio.Future[ModelServerError] = (
            asyncio.get_running_loop().create_future()
        )
        manager = asyncio.ensure_future(super().env_manager())
        await asyncio.wait({manager, self._model_lost}, return_when=asyncio.FIRST_COMPLETED)
        if manager.done():
            try:
                await manager
            except Exception as exc:
                # run-api gone (its trainer exited): one line, not atroposlib's traceback
                if (problem := lost_rollout_server(exc)) is None:
                    raise
                for task in getattr(self, "workers", ()):
                    task.cancel()
                if self._delivery is not None:
                    await self._delivery.abandon()
                raise RolloutServerLost(
                    f"run-api at {self.config.rollout_server_url} stopped answering "
                    f"({problem}): serve ends. Did the trainer exit? Start run-api and a "
                    "trainer, then serve again."
                ) from None
            await self._finish_deliveries()
            return
        for task in [manager, *getattr(self, "workers", ())]:
            task.cancel()
        await asyncio.gather(manager, return_exceptions=True)
        await self._finish_deliveries()
        raise self._model_lost.result()

    async def register_env(self) -> None:
        """Register with run-api; from then on groups go out through :class:`GroupDelivery`.

        The groups file (``data_path_to_save_groups``) then records what run-api accepted,
        not what was about to be posted.
        """
        waiting = RegistrationWait(self.config.rollout_server_url)
        logging.getLogger().addFilter(waiting)  # atroposlib says it on the root logger
        try:
            await super().register_env()
        finally:
            logging.getLogger().removeFilter(waiting)
        if self._delivery is None:
            record = None
            if self.jsonl_writer is not None:  # atroposlib opened it; it is still empty
                self.jsonl_writer.close()
                self.jsonl_writer = None
                record = Path(self.config.data_path_to_save_groups)
            self._delivery = GroupDelivery(
                self.config.rollout_server_url,
                record,
                retry_for=self.config.delivery_retry_seconds,
                request_timeout=self.config.delivery_request_timeout,
            )

    async def handle_send_to_api(
        self,
        scored_data: ScoredDataGroup | list[ScoredDataGroup] | None,
        item: Any = None,
        do_send_to_api: bool = True,
        abort_on_any_max_length_exceeded: bool = True,
    ) -> None:
        """atroposlib's, with groups of equal scores left out here: counted and said rarely.

        atroposlib would skip them too, with a line per group that never says what it means.
        """
        if self.config.ensure_scores_are_not_same and scored_data is not None:
            groups = scored_data if isinstance(scored_data, list) else [scored_data]
            kept = [
                group
                for group in groups
                if group is None
                or not group.get("scores")
                or not self._equal_scores.offered(list(group["scores"]))
            ]
            if not any(group is not None for group in kept):
                return
            scored_data = kept if isinstance(scored_data, list) else kept[0]
        await super().handle_send_to_api(
            scored_data, item, do_send_to_api, abort_on_any_max_length_exceeded
        )

    async def _send_scored_data_to_api(
        self, scored_data: ScoredDataGroup | list[ScoredDataGroup]
    ) -> None:
        """Post the group(s) in a task that cancelling the rollout's worker does not stop."""
        if self._delivery is None:  # never registered: atroposlib's own post
            await super()._send_scored_data_to_api(scored_data)
            return
        for group in scored_data if isinstance(scored_data, list) else [scored_data]:
            group["env_id"] = self.env_id
        await self._delivery.send(scored_data)

    async def _finish_deliveries(self) -> None:
        """The end of serve mode: every group under way is accepted, or logged as not."""
        if self._delivery is not None:
            await self._delivery.drain()

    async def _run_evaluate(self) -> None:
        await self.check_model_server()
        await super()._run_evaluate()

    # -- what a subclass writes ---------------------------------------------------------------

    @abstractmethod
    def format_prompt(self, item: Any) -> str | list[dict[str, Any]]:
        """The task as the agent sees it: a user message, or a list of messages."""

    @abstractmethod
    async def compute_reward(
        self, item: Any, result: AgentResult, ctx: ToolContext
    ) -> float | Reward:
        """Score a finished rollout in [0, 1]; ``ctx`` reaches into the rollout's sandbox."""

    async def prepare_sandbox(self, item: Any, ctx: ToolContext) -> None:
        """Put what the task needs into the fresh sandbox before the agent starts (optional)."""

    def make_judge(self) -> ModelClient | None:
        """The client of the reward's LLM judge (optional; ``judge_client`` makes one)."""
        return None

    # -- tools --------------------------------------------------------------------------------

    def _resolve_tools_for_group(self) -> tuple[list[dict[str, Any]], set[str]]:
        """The tool schemas offered to the model and the names it may call."""
        tools = self.tool_registry.resolve(
            self.config.enabled_toolsets, self.config.disabled_toolsets
        )
        return [t.schema for t in tools], {t.name for t in tools}

    # -- rollouts -----------------------------------------------------------------------------

    def build_messages(self, item: Any) -> list[dict[str, Any]]:
        """The conversation's opening: the system prompt, then the formatted task."""
        prompt = self.format_prompt(item)
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        if self.config.system_prompt and not any(m["role"] == "system" for m in messages):
            messages = [{"role": "system", "content": self.config.system_prompt}, *messages]
        return messages

    def _max_tokens_per_request(self) -> int | None:
        """The token limit each model request carries: the per-turn one, else for token-level
        requests the context's (ExactTokensBackend's default); None: the server's own."""
        if self.config.max_tokens_per_turn is not None:
            return self.config.max_tokens_per_turn
        return self.config.max_token_length if self._token_server else None

    async def run_agent(
        self,
        item: Any,
        *,
        split: str = "train",
        temperature: float | None = None,
        tools: tuple[list[dict[str, Any]], set[str]] | None = None,
    ) -> Rollout:
        """Run one full rollout with tools in a fresh sandbox, score it, clean up the sandbox."""
        schemas, names = tools or self._resolve_tools_for_group()
        task_id = f"{split}-{uuid.uuid4().hex[:16]}"
        ctx = ToolContext(task_id, self.sandboxes, self.tool_registry, self.tool_services)
        if temperature is None:
            temperature = (
                self.config.agent_temperature if split == "train" else self.config.eval_temperature
            )
        backend = None
        if self._token_server:  # vllm/sglang: token ids in and out, tool calls parsed here
            backend = ExactTokensBackend(
                self.model,
                self.tokenizer,
                self.config.tool_call_parser,
                default_max_tokens=self.config.max_token_length,
            )
        loop = HermesAgentLoop(
            self.model,
            schemas,
            names,
            max_turns=self.config.max_agent_turns,
            task_id=task_id,
            temperature=temperature,
            max_tokens=self.config.max_tokens_per_turn,
            extra_body=self.config.extra_body,
            tool_context=ctx,
            max_tool_output_chars=self.config.max_tool_output_chars,
            max_parallel_tools=self.config.max_parallel_tools,
            split=split,
            request_retries=0,  # the model client retries, by kind of failure
            backend=backend,
            tool_choice=self.config.tool_choice,
            max_seconds=self.config.max_rollout_seconds,
        )
        try:
            try:
                # A sandbox that cannot start fails before the model is asked; rollouts whose
                # tools take no sandbox make none (prepare_sandbox makes one if it needs it).
                if any("sandbox" in self.tool_registry.get(name).injected for name in names):
                    await ctx.sandbox.start()
                await self.prepare_sandbox(item, ctx)
            except SandboxUnavailable as exc:
                return self._unstarted_rollout(item, task_id, str(exc))
            result = await loop.run(self.build_messages(item))
            # Nothing the agent started may run on while its work is scored.
            await self.sandboxes.stop_agent_processes(task_id)
            reward, reward_error = await self._score(item, result, ctx)
        finally:
            await ctx.cleanup()
        return Rollout(
            item,
            result,
            reward.score,
            task_id,
            reward_error,
            reward.counts,
            reward.signals,
            sequence=backend.trace if backend is not None else None,
            failure=reward.failure,
        )

    def _unstarted_rollout(self, item: Any, task_id: str, error: str) -> Rollout:
        """A rollout whose sandbox could not start: scored 0.0 with the reason as reward error.

        The model is never asked (its tools could not run); the group goes on. The reason is
        logged once per distinct message, not once per rollout.
        """
        if error not in self._sandbox_errors_logged:
            self._sandbox_errors_logged.add(error)
            logger.error("the sandbox could not start; rollouts score 0.0: %s", error)
        result = AgentResult(messages=self.build_messages(item))
        reward = Reward(0.0, counts={Metric.REWARD_ERRORS: 1.0}, failure=f"sandbox failed: {error}")
        return Rollout(item, result, 0.0, task_id, error, reward.counts, failure=reward.failure)

    async def _score(
        self, item: Any, result: AgentResult, ctx: ToolContext
    ) -> tuple[Reward, str | None]:
        """The reward; 0.0 and a ``reward_error`` when compute_reward fails (the group goes on)."""
        try:
            outcome = await self.compute_reward(item, result, ctx)
        except Exception as exc:
            logger.exception("compute_reward failed; scoring 0.0. Item: %r", item)
            error = f"{type(exc).__name__}: {exc}"
            return _reward_error(error), error
        reward = outcome if isinstance(outcome, Reward) else Reward(float(outcome))
        if not math.isfinite(reward.score):
            logger.error("compute_reward returned %r; scoring 0.0. Item: %r", reward.score, item)
            error = f"non-finite reward {reward.score!r}"
            return _reward_error(error), error
        if result.error is not None and reward.failure is None:
            # The server gave up mid-rollout: whatever the reward says, the model was not measured.
            reward.failure = f"inference failed: {result.error}"
        return reward, None

    async def collect_trajectories(self, item: Any) -> tuple[ScoredDataGroup | None, list[Any]]:
        """Run ``group_size`` rollouts of the item concurrently and build the scored group."""
        tools = self._resolve_tools_for_group()
        rollouts = await asyncio.gather(
            *(
                self.run_agent(item, split="train", tools=tools)
                for _ in range(self.config.group_size)
            )
        )
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        # Unique across env workers and restarts: a trainer fed by many workers can tell groups
        # apart and drop a repeat (a submission retried after its answer was lost).
        group["group_overrides"] = {GROUP_ID_KEY: uuid.uuid4().hex}
        logprobs: list[list[float]] = []
        for rollout in rollouts:
            self._train_stats.add(rollout)
            if not any(m["role"] == "assistant" for m in rollout.result.messages):
                continue  # the model never answered (server down): nothing to train on
            if rollout.sequence is not None:
                # Phase 2: the tokens the server saw and generated, with its logprobs.
                if not rollout.sequence.num_trained:
                    continue
                tokens, masks = rollout.sequence.tokens, rollout.sequence.masks
                logprobs.append(rollout.sequence.logprobs)
            else:  # Phase 1: rebuilt from the conversation with the chat template
                try:
                    sequence = tokenize_conversation(
                        self.tokenizer, rollout.result.messages, tools[0]
                    )
                except ChatTemplateError as exc:
                    logger.error("a rollout is left out of the training data: %s", exc)
                    continue
                tokens, masks = sequence.tokens, sequence.masks
            group["tokens"].append(tokens)
            group["masks"].append(masks)
            group["scores"].append(rollout.reward)
            group["messages"].append(rollout.result.messages)
        self._report_group(rollouts, kept=len(group["tokens"]) >= self.config.group_size)
        if not group["tokens"] and self.model.hopeless():
            # Every rollout failed on a request that cannot succeed: asking again will not help.
            raise self._stop_run(ModelServerError(f"every request fails: {self.model.last_fatal}"))
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

    # -- evaluation ---------------------------------------------------------------------------

    async def run_eval(self, items: list[Any], task_name: str | None = None) -> dict[str, float]:
        """Evaluate with the full agent loop and tools: k samples per item, saved as they finish.

        Scored rollouts go to samples.jsonl and failures (no measured score) to failures.jsonl,
        a line per rollout as soon as it is done; metrics.json gets pass@k, 95% intervals and
        what the run was (versions, model, provider, config). With ``resume`` the rollouts an
        interrupted run saved are not run again. The numbers go to ``eval/`` metrics only,
        never into training buffers. See :mod:`hermes_envgen.runtime.evaluation`.
        """
        start = time.time()
        config = self.config
        try:
            journal = SampleJournal(
                config.data_dir_to_save_evals, eval_settings(self), resume=config.resume
            )
        except ResumeError as exc:
            raise EnvConfigError(str(exc)) from None
        tasks = plan_eval(items, config.eval_samples_per_item)
        saved = [journal.records[t.key] for t in tasks if t.key in journal.records]
        if len(saved) < len(journal.records):
            logger.warning(
                "%d saved rollout(s) belong to no item of this evaluation; left out",
                len(journal.records) - len(saved),
            )
        if config.resume:
            print(f"resuming: {len(saved)} of {len(tasks)} rollouts already saved", file=sys.stderr)
        progress = RunProgress("evaluate", len(tasks), "rollouts", completed=len(saved))
        for record in saved:
            progress.record(
                None if record.get("failure") else record["reward"], tool_error_count(record)
            )
        pending = (t for t in tasks if t.key not in journal.records)

        async def worker() -> None:
            # A fixed pool pulling from the plan: no task object per rollout of the whole run.
            for task in pending:
                rollout = await self.run_agent(task.item, split="eval")
                journal.append(rollout.sample() | task.identity())
                progress.record(
                    None if rollout.failure else rollout.reward, len(rollout.result.tool_errors)
                )
                progress.advance()

        try:
            await asyncio.gather(*(worker() for _ in range(max(1, config.max_eval_workers))))
        finally:
            progress.close()
            journal.close()
        records = [journal.records[t.key] for t in tasks]  # earlier runs' and this one's
        metrics = summarize(records, config.eval_samples_per_item, config.eval_pass_threshold)
        self._pending_eval_metrics = dict(metrics)
        await self.evaluate_log(
            metrics,
            task_name=task_name,
            start_time=start,
            end_time=time.time(),
            generation_parameters={
                "temperature": config.eval_temperature,
                # What each request asked for (atroposlib would record max_token_length).
                "max_new_tokens": self._max_tokens_per_request(),
                "max_agent_turns": config.max_agent_turns,
                "samples_per_item": config.eval_samples_per_item,
            },
            samples=None,  # already in samples.jsonl, written as the rollouts finished
        )
        if config.data_dir_to_save_evals is not None:
            record_run(Path(config.data_dir_to_save_evals) / "metrics.json", run_record(self))
        failed = [r for r in records if r.get("failure")]
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
            progress_reward = None if rollout.failure else rollout.reward
            self._progress.record(progress_reward, len(rollout.result.tool_errors))
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
        groups = Path(self.config.data_path_to_save_groups)
        try:
            page = write_view(groups, groups.with_suffix(".html"))
        except ViewError as exc:  # no groups to show: the run itself says why
            logger.warning("no HTML view of %s: %s", groups, exc)
        else:
            logger.info("HTML view of the groups: %s", page)

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        """Add reward, turn and tool-error metrics (training and last evaluation), then log."""
        wandb_metrics = dict(wandb_metrics or {})
        wandb_metrics.update(self._train_stats.metrics("train"))
        wandb_metrics.update(self._pending_eval_metrics)
        self._train_stats = RolloutStats()
        self._pending_eval_metrics = {}
        await super().wandb_log(wandb_metrics)


_LOCAL_HOSTS = ("localhost", "127.0.0.1", "0.0.0.0", "[::1]")


def _check_not_rollout_server(server_config: Any, rollout_server_url: str | None) -> None:
    """Refuse a model URL that is the rollout server's (run-api): it answers 404 to every turn."""
    base_url = getattr(server_config, "base_url", None)
    if base_url and rollout_server_url and same_server(base_url, rollout_server_url):
        raise EnvConfigError(
            f"the model server URL {base_url} is the rollout server's (run-api, "
            f"{rollout_server_url}): point --openai.base_url at the inference server "
            "(Atropos's convention: http://localhost:9001/v1)"
        )


def _validation_line(exc: Any) -> str:
    """A pydantic ValidationError in one line: the field and what is wrong with it.

    A field of several types fails once per type; the most telling failure is kept (a JSON
    string's parse error rather than 'not a dictionary').
    """
    by_field: dict[str, list[dict[str, Any]]] = {}
    for error in exc.errors():
        # Union members show up in the location as type names: leave them out.
        parts = [str(p) for p in error.get("loc", ()) if not any(c in str(p) for c in "[]-")]
        by_field.setdefault(".".join(parts) or exc.title, []).append(error)
    if not by_field:
        return str(exc).splitlines()[0]
    where, errors = next(iter(by_field.items()))
    plain_type = ("dict_type", "model_type", "string_type", "none_required")
    first = next((e for e in errors if e.get("type") not in plain_type), errors[0])
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (+{len(by_field) - 1} more)" if len(by_field) > 1 else ""
    return f"{where}: {message}{more}"


def _check_api_key(server_config: Any) -> None:
    """Give local servers a placeholder key; refuse a remote server without one."""
    if not hasattr(server_config, "api_key") or server_config.api_key:
        return
    base_url = server_config.base_url or ""
    host = base_url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    if host in _LOCAL_HOSTS or host.startswith("127.") or not base_url:
        server_config.api_key = "EMPTY"  # the OpenAI client refuses to start without a key
        return
    raise EnvConfigError(
        f"no API key for {base_url}: set the environment variable the env reads it from "
        "(see .env.example) or pass --openai.api_key"
    )


def _wandb_configured() -> bool:
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE"):
        return True
    netrc = Path.home() / ".netrc"
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False


def _reward_error(error: str) -> Reward:
    """The stand-in of a reward that could not be computed: 0.0 in training, a failure in eval."""
    failure = f"compute_reward failed: {error}"
    return Reward(0.0, counts={Metric.REWARD_ERRORS: 1.0}, failure=failure)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)
