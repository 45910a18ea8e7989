"""One session of an env, driven by whoever runs the agent: a trainer's loop, a server, a test.

An :class:`EnvSession` is one task of an env as its author wrote it: started with its sandbox
prepared (``prepare_sandbox``), its opening messages (``build_messages``) and its tools with
their JSON schemas; a tool call runs in that task's sandbox exactly as the env's agent loop
runs one (the same checks, errors and output cap); after each turn the env's turn hooks
(``env_response``, ``turn_reward``, ``is_done``) may answer; a finished transcript is scored
by the env's own ``compute_reward`` (an ``AgentResult`` built from it, the sandbox as the agent
left it); closing it runs the ``ToolContext`` clean-up. Nothing here knows a trainer: the doors
to TRL, OpenEnv and verifiers (``runtime.doors``) are built on it, and Atropos's modes do not
use it at all.

:class:`EnvSessions` holds the open sessions of one env and closes those left idle longer
than ``idle_timeout`` (a trainer that crashed, a dropped connection), so that no sandbox
outlives its user by more than that. :class:`SessionThread` runs them on an event loop of their
own for callers that are not asynchronous (TRL calls tools from plain threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hermes_envgen.runtime.env.base_env import HermesAgentBaseEnv
from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop, _HookFailed, normalize_tool_call
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.rewards import Reward
from hermes_envgen.runtime.rollout import AgentResult, RolloutState
from hermes_envgen.runtime.sandbox.closing import close_concurrently

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Seconds an open session may sit unused before its sandbox is closed for it.
DEFAULT_SESSION_IDLE_TIMEOUT = 600.0


def open_env(
    env_cls: type[HermesAgentBaseEnv],
    *,
    tokenizer_name: str | None = None,
    base_url: str | None = None,
    model_name: str | None = None,
    server_overrides: dict[str, Any] | None = None,
    **config_overrides: Any,
) -> HermesAgentBaseEnv:
    """An instance of ``env_cls`` built from its own ``config_init``, with no Atropos run behind it.

    Nothing is asked of the model server here (it is needed only by a door that samples with
    the env's own loop: ``base_url``, ``model_name``); ``config_overrides`` replace config
    fields, ``server_overrides`` server fields. W&B is off: a door's trainer logs.
    """
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    config, servers = env_cls.config_init()
    values = config.model_dump() | {"use_wandb": False}
    if tokenizer_name is not None:
        values["tokenizer_name"] = str(tokenizer_name)
    values.update(config_overrides)
    server_list = servers if isinstance(servers, list) else [servers]
    server_values = server_list[0].model_dump() if server_list else {}
    server_values["health_check"] = False  # nothing runs a health loop outside Atropos's modes
    if base_url is not None:
        server_values["base_url"] = base_url
    elif not server_values.get("api_key"):
        # The door's trainer samples, not the env: its policy server is never asked, and a
        # remote one's key is not needed (a judge of its own keeps its key and its checks).
        server_values["api_key"] = "EMPTY"
    if model_name is not None:
        server_values["model_name"] = model_name
    server_values.update(server_overrides or {})
    return env_cls(type(config)(**values), [APIServerConfig(**server_values)])


@dataclass
class TurnEnd:
    """What the env's turn hooks said after one turn of the model."""

    added: list[dict[str, Any]] = field(default_factory=list)  # env_response's messages
    reward: float | None = None  # turn_reward's
    done: bool = False  # is_done's, or a hook that failed (the rollout ends)


# The tool through which a door's trainer plays an env with turn hooks (a game, a simulated
# user): the model's message to the other side, whose answer (env_response) comes back.
REPLY_TOOL = "reply"
REPLY_DESCRIPTION = (
    "Say this to the other side of the conversation: your message to the user you are "
    "helping, or your move in the game you are playing. Their answer comes back; when it says "
    "the conversation is over, stop calling this tool and finish."
)
REPLY_ARGUMENT = "message"
REPLY_ARGUMENT_DESCRIPTION = "What you say (or the move you make), in full."
REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        REPLY_ARGUMENT: {"type": "string", "description": REPLY_ARGUMENT_DESCRIPTION},
    },
    "required": [REPLY_ARGUMENT],
}
# The reply tool as a documented function (TRL and FastMCP read a tool from its docstring).
REPLY_DOC = f"{REPLY_DESCRIPTION}\n\nArgs:\n    {REPLY_ARGUMENT}: {REPLY_ARGUMENT_DESCRIPTION}"
# The hooks that answer between turns: an env that has one is played through the reply tool.
TURN_HOOKS = ("env_response", "turn_reward", "should_stop")
OVER = "The conversation is over: stop calling reply and finish."


def turn_hooks(env_cls: type[Any]) -> list[str]:
    """The turn hooks ``env_cls`` defines (a game's moves, a simulated user's replies)."""
    from hermes_envgen.runtime.loop.agent_loop import TurnHooks

    return [
        name
        for name in TURN_HOOKS
        if getattr(env_cls, name, None) not in (None, getattr(TurnHooks, name))
    ]


@dataclass
class EnvReply:
    """The env's answer to one message of the model sent through the reply tool."""

    messages: list[dict[str, Any]]  # env_response's (the final one when the env ended it)
    reward: float | None  # turn_reward's
    over: bool  # the conversation ended: the env said so, or turns ran out
    text: str  # what the model reads back

    def as_dict(self) -> dict[str, Any]:
        """The reply as JSON (the verifiers door's ``POST /sessions/<id>/turn`` answer)."""
        return {
            "messages": self.messages,
            "reward": self.reward,
            "over": self.over,
            "text": self.text,
        }


def _called_tools(messages: list[dict[str, Any]]) -> bool:
    """Whether the model's last turn in ``messages`` called tools (rather than answered)."""
    last: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "assistant"), {})
    return bool(last.get("tool_calls"))


class SessionClosed(EnvConfigError):
    """A session that is closed (or was reaped when idle) was used."""


class EnvSession:
    """One task of an env: its sandbox, its tools, its turn hooks and its reward."""

    def __init__(self, env: HermesAgentBaseEnv, item: Any, *, split: str = "train") -> None:
        self.env = env
        self.item = item
        self.split = split
        self.task_id = f"{split}-{uuid.uuid4().hex[:16]}"
        self.context = ToolContext(
            self.task_id, env.sandboxes, env.tool_registry, env.tool_services
        )
        self._schemas, self._names = env._resolve_tools()
        temperature = env.config.loop_settings(split).temperature
        # The env's own loop for this task: its tool checks and output cap, its hooks (the env).
        self.loop: HermesAgentLoop = env.make_loop(
            item,
            self.context,
            split=split,
            temperature=temperature,
            tools=(self._schemas, self._names),
        )
        self.messages: list[dict[str, Any]] = env.build_messages(item)
        self.result = AgentResult(messages=[dict(m) for m in self.messages])
        self._state = RolloutState(item, self.task_id, self.result, self.context, split)
        self.last_used = time.monotonic()
        self.closed = False
        self._reward: Reward | None = None
        # One turn at a time: a model may call reply several times at once (parallel tool
        # calls), and each must see the conversation as the one before it left it.
        self._turns = asyncio.Lock()
        # An env with turn hooks is played through reply(): the session keeps the transcript
        # as its loop would (the model's messages, the env's answers), and that is scored.
        self.hooked = bool(turn_hooks(type(env)))
        self.over: str | None = None  # why the conversation ended, once it has
        self._ended_naturally = False

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools the agent may call, as OpenAI ``tools`` entries (name, description, schema)."""
        return list(self._schemas)

    @property
    def idle_seconds(self) -> float:
        """Seconds since the session was last used."""
        return time.monotonic() - self.last_used

    def _use(self) -> None:
        if self.closed:
            raise SessionClosed(f"session {self.task_id} is closed (or was reaped when idle)")
        self.last_used = time.monotonic()

    async def start(self) -> list[dict[str, Any]]:
        """Start the task's sandbox (when its tools take one), prepare it; the opening messages."""
        self._use()
        if any("sandbox" in self.env.tool_registry.get(name).injected for name in self._names):
            await self.context.sandbox.start()
        await self.env.prepare_sandbox(self.item, self.context)
        # The env's own state of this task, made as the agent loop makes it before a turn; a
        # new_state that fails is named in result.error, and the session scores as a failure.
        with contextlib.suppress(_HookFailed):
            self.result.data = await self.loop._hook("new_state", self._state, self.item)
        return [dict(m) for m in self.messages]

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | str | None = None, *, turn: int | None = None
    ) -> str:
        """Run one tool call in this task's sandbox, as the env's agent loop runs one.

        Whatever the model asked for (an unknown tool, arguments that are not JSON, a tool that
        fails) comes back as the error message the model would read, and is recorded in the
        result's ``tool_errors``; nothing it does raises here.
        """
        self._use()
        call = normalize_tool_call({"function": {"name": name, "arguments": arguments or {}}})
        output = await self.loop._execute(call, turn or max(1, self.result.turns_used), self.result)
        if self.hooked:  # the transcript the session scores: the call and its result
            call_id = f"call_{len(self.result.messages)}"
            self.result.messages += [
                {"role": "assistant", "content": "", "tool_calls": [{**call, "id": call_id}]},
                {"role": "tool", "tool_call_id": call_id, "content": output},
            ]
        self.last_used = time.monotonic()
        return output

    async def reply(self, message: Any) -> EnvReply:
        """One turn of the model in words (``message``), answered by the env's turn hooks as
        its loop answers one: ``turn_reward``, ``should_stop``, ``env_response``. The
        conversation is over when the env ends it (``should_stop``, ``state.finish()``), when
        it adds nothing (the loop's end), when a hook fails, or when turns run out; a reply
        after that is refused in one line and changes nothing."""
        async with self._turns:
            return await self._reply(message)

    async def _reply(self, message: Any) -> EnvReply:
        self._use()
        if self.over is not None:
            text = f"Error: the conversation is over ({self.over}): stop calling reply and finish."
            return EnvReply(messages=[], reward=None, over=True, text=text)
        content = message if isinstance(message, str) else json.dumps(message, default=str)
        said = {"role": "assistant", "content": content}
        turn = await self._end_turn([*self.result.messages, said])
        answer = "\n\n".join(str(m.get("content") or "") for m in turn.added)
        if self.over is not None:
            answer = f"{answer}\n\n({OVER})" if answer else f"({OVER})"
        return EnvReply(turn.added, turn.reward, self.over is not None, answer)

    async def end_turn(self, messages: list[dict[str, Any]]) -> TurnEnd:
        """After a turn of the model (``messages``: the conversation so far), ask its hooks;
        the conversation is over (``over``) where the env's loop would end it."""
        async with self._turns:
            return await self._end_turn(messages)

    async def _end_turn(self, messages: list[dict[str, Any]]) -> TurnEnd:
        self._use()
        self.result.messages[:] = [dict(m) for m in messages]
        before = len(self.result.messages)
        self.result.turns_used = self._state.turn = self._state.turn + 1
        try:
            _, done = await self.loop._after_turn(self._state)
        except _HookFailed:
            done = True
        added = self.result.messages[before:]
        reward = self.result.turn_rewards[-1] if self.result.turn_rewards else None
        if self.over is None:  # where the loop would end the conversation
            if done:
                self.over = "the env ended the conversation"
                self._ended_naturally = self.result.error is None
            elif not added and not _called_tools(messages):  # an answer left unanswered
                self.over = "the env had nothing more to say"
                self._ended_naturally = True
            elif self._state.turn >= self.loop.settings.max_turns:
                self.over = f"the {self.loop.settings.max_turns} turns of the task ran out"
        return TurnEnd(added=[dict(m) for m in added], reward=reward, done=done)

    async def score(self, messages: list[dict[str, Any]] | None = None) -> Reward:
        """The env's ``compute_reward`` over the finished transcript (``messages``, else the
        session's own) and the sandbox as the agent left it; asked once, then remembered. A
        session of an env with turn hooks scores the conversation it kept (``reply``,
        ``end_turn``), ``messages``' closing answer without a tool call its last word.

        A reward that fails scores 0.0 with the failure named (as in every Atropos mode).
        """
        async with self._turns:  # after the replies already sent
            return await self._score(messages)

    async def _score(self, messages: list[dict[str, Any]] | None) -> Reward:
        if self._reward is not None:
            return self._reward
        self._use()
        if self.hooked:
            await self._last_word(messages)
        elif messages is not None:
            self.result.messages[:] = [dict(m) for m in messages]
        result = self.result
        replies = [m for m in result.messages if m.get("role") == "assistant"]
        result.turns_used = max(result.turns_used, len(replies))
        if self.hooked:
            result.finished_naturally = self._ended_naturally
        elif result.error is None and replies:
            result.finished_naturally = not replies[-1].get("tool_calls")
        # Nothing the agent started may run on while its work is scored.
        await self.env.sandboxes.stop_agent_processes(self.task_id)
        self._reward, _ = await self.env._score(self.item, result, self.context)
        self.last_used = time.monotonic()
        return self._reward

    async def _last_word(self, messages: list[dict[str, Any]] | None) -> None:
        """A hooked session's end: the trainer's transcript (``messages``) ends with the
        model's answer without a tool call, which is its last turn, answered by the hooks as
        the loop would (unless the env already ended the conversation). A conversation the
        env did not end was cut short: not finished naturally."""
        last = messages[-1] if messages else None
        if (
            self.over is None
            and last is not None
            and last.get("role") == "assistant"
            and not last.get("tool_calls")
        ):
            await self._reply(last.get("content") or "")

    async def close(self) -> None:
        """End the toolsets' sessions and close the sandbox; closing twice does nothing."""
        if self.closed:
            return
        self.closed = True
        await self.context.cleanup()


class EnvSessions:
    """The open sessions of one env, by task id; those idle past ``idle_timeout`` are closed."""

    def __init__(
        self, env: HermesAgentBaseEnv, *, idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT
    ) -> None:
        if idle_timeout <= 0:
            raise EnvConfigError(f"idle_timeout must be positive seconds, not {idle_timeout!r}")
        self.env = env
        self.idle_timeout = idle_timeout
        self._sessions: dict[str, EnvSession] = {}
        self._set_up = False
        self._setup_lock = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._sessions

    async def setup(self) -> None:
        """The env's ``setup`` (its tasks loaded and split), once."""
        async with self._setup_lock:
            if not self._set_up:
                await self.env.setup()
                self._set_up = True

    async def training_tasks(self, count: int | None = None) -> list[Any]:
        """The env's training tasks: its ``train_items`` when it has them (every env on the
        base's task loading), else ``count`` drawn from ``get_next_item``."""
        await self.setup()
        items = getattr(self.env, "train_items", None)
        if isinstance(items, list) and items:
            return list(items if count is None else items[:count])
        if count is None:
            items = getattr(self.env, "items", None)  # an env that keeps its own list
            if isinstance(items, list) and items:
                return list(items)
            raise EnvConfigError(
                f"{type(self.env).__name__} keeps no list of tasks (train_items): pass a count "
                "to draw them from get_next_item"
            )
        return [await self.env.get_next_item() for _ in range(count)]

    async def eval_tasks(self) -> list[Any]:
        """The env's held-out tasks (``eval_items``); none when it keeps no split."""
        await self.setup()
        return list(getattr(self.env, "eval_items", None) or [])

    async def open(self, item: Any = None, *, split: str = "train") -> EnvSession:
        """A started session of ``item`` (the env's next training task when None)."""
        await self.setup()
        if item is None:
            item = await self.env.get_next_item()
        session = EnvSession(self.env, item, split=split)
        self._sessions[session.task_id] = session
        self._start_reaper()
        try:
            await session.start()
        except BaseException:
            await self.close(session.task_id)
            raise
        return session

    def get(self, task_id: str) -> EnvSession:
        """The open session ``task_id``; a closed or reaped one: :class:`SessionClosed`."""
        session = self._sessions.get(task_id)
        if session is None:
            raise SessionClosed(f"no open session {task_id!r} (closed, or reaped when idle)")
        return session

    async def close(self, task_id: str) -> None:
        """Close the session ``task_id`` if it is open."""
        session = self._sessions.pop(task_id, None)
        if session is not None:
            await session.close()

    async def close_all(self) -> None:
        """Close every session and the env's sandboxes (at shutdown)."""
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        # concurrently: a thousand sessions closed one after another outlast any shutdown
        await close_concurrently(functools.partial(self.close, t) for t in list(self._sessions))
        await self.env.sandboxes.close_all()

    async def reap_idle(self) -> list[str]:
        """Close the sessions unused for longer than ``idle_timeout``; their task ids."""
        idle = [t for t, s in self._sessions.items() if s.idle_seconds > self.idle_timeout]
        for task_id in idle:
            logger.warning(
                "closing session %s: unused for over %g s (its user went away?)",
                task_id,
                self.idle_timeout,
            )
        await close_concurrently(functools.partial(self.close, task_id) for task_id in idle)
        return idle

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        interval = max(0.05, min(30.0, self.idle_timeout / 4))
        while self._sessions:
            await asyncio.sleep(interval)
            await self.reap_idle()


class SessionThread:
    """An env's sessions on an event loop of their own, for callers that are not async.

    The env is built on that loop's thread (``make_env``), so every sandbox, client and reaper
    of it lives there; ``run`` hands a coroutine over and waits for its result.
    """

    def __init__(
        self,
        make_env: Any,
        *,
        idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="env-sessions"
        )
        self._thread.start()

        async def build() -> EnvSessions:
            return EnvSessions(make_env(), idle_timeout=idle_timeout)

        self.sessions: EnvSessions = self.run(build())

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coroutine`` on the sessions' loop; its result (or its exception)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def run_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """``run`` for a caller on another event loop: awaited there, never blocking it."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    def close(self) -> None:
        """Close every session and stop the loop."""
        if not self._loop.is_running():
            return
        try:
            self.run(self.sessions.close_all(), timeout=60)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
