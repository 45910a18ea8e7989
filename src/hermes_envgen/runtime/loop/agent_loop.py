"""The multi-turn agent loop: ask the model, run the tools it calls, repeat until it answers.

``HermesAgentLoop.run(messages)`` returns an ``AgentResult`` with the whole conversation in
OpenAI message format. Nothing the model does ends the loop with an exception: an unknown tool,
arguments that are not JSON, a tool that fails, a call that does not parse (token mode), each
becomes a ``ToolErrorRecord`` and a message back to the model; a server that keeps failing ends
the rollout with ``AgentResult.error`` set; a rollout past its time budget (``max_seconds``) is
ended where it stands, with ``AgentResult.timed_out`` set. Every text of a reply is made valid
Unicode as it arrives (lone surrogates replaced, counted in ``replaced_characters``).

After every turn the loop asks its ``TurnHooks`` (the env, in a rollout the base env runs),
each given the rollout's ``RolloutState``: ``turn_reward`` (the turn's own reward), then
``should_stop`` (the stop rule: True ends the rollout here, with no reply), then
``env_response`` (messages the environment adds: a simulated user, a game's board, a test
runner's verdict; ``state.finish()`` makes them the last). A reply without tool calls ends the
rollout unless the environment responded. The env's own per-rollout state is ``state.data``,
made by ``new_state(task)`` and typed by the env (``TurnHooks[TaskT, StateT]``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from numbers import Real
from typing import Any, Generic, NoReturn, Protocol, TypeAlias, TypedDict, TypeVar, overload

from typing_extensions import Unpack

from hermes_envgen.runtime.errors import EnvConfigError, InferenceError
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.parsers.base import new_alnum_id
from hermes_envgen.runtime.retries import with_retries
from hermes_envgen.runtime.rollout import (
    TOOL_ERROR_PREFIX,
    AgentResult,
    AssistantTurn,
    RolloutState,
    StateT,
    TaskT,
    ToolErrorRecord,
)
from hermes_envgen.runtime.text import valid_unicode
from hermes_envgen.runtime.tools.registry import printable

logger = logging.getLogger(__name__)

# The tool name of a ToolErrorRecord for a call that could not be parsed from the model's text.
UNPARSED_TOOL = "(unparsed)"

# The roles of the messages an env's env_response may add.
ENV_ROLES = ("user", "system", "tool")

# The Hermes skill's name of the record (``AgentResult.tool_errors`` holds them): kept for good.
ToolError = ToolErrorRecord

_T = TypeVar("_T")
# A hook may be a plain ``def`` or an ``async def``: its value, or an awaitable of it.
MaybeAwaitable: TypeAlias = _T | Awaitable[_T]

# The hooks' earlier contract: a hook of this name is refused at start-up (see check_hooks).
_RENAMED_HOOKS = {
    "is_done": "the stop rule is now should_stop(state), asked after turn_reward and before "
    "env_response (a finished game gets no trailing reply): rename it, and decide from the turn "
    "itself (state.last_reply, state.data) rather than from what env_response kept",
}


class TurnHooks(Generic[TaskT, StateT]):
    """The turn logic an env overrides; the defaults add nothing (the plain tool-calling loop).

    ``new_state`` once before the first turn; after each turn ``turn_reward``, then
    ``should_stop``, then (unless it stopped) ``env_response``. Each may be ``async def`` or
    plain ``def``. One that raises, or returns what it must not, ends the rollout with
    ``AgentResult.error`` naming it (logged); the rollout is scored as a failure.
    """

    def new_state(self, task: TaskT) -> StateT:
        """The env's own state of a rollout of ``task``, before its first turn (``state.data``).

        The default keeps none (None); a game returns its board, a simulated user its memory.
        """
        return None  # type: ignore[return-value]

    def turn_reward(self, state: RolloutState[TaskT, StateT]) -> MaybeAwaitable[float | None]:
        """The reward of this turn (a finite number), or None for none; kept in
        ``AgentResult.turn_rewards``. Asked first, before the env reacts to the turn."""
        return None

    def should_stop(self, state: RolloutState[TaskT, StateT]) -> MaybeAwaitable[bool]:
        """The stop rule: True ends the rollout now, before the env replies (a won game).

        The rollout then counts as finished naturally. Turns and time still run out as set
        (``max_agent_turns``, ``max_rollout_seconds``), whatever this says.
        """
        return False

    def env_response(
        self, state: RolloutState[TaskT, StateT]
    ) -> MaybeAwaitable[list[dict[str, Any]]]:
        """Messages the environment adds after this turn (after any tool results).

        A simulated user's reply, a game's new state, a test runner's verdict: usually
        ``{"role": "user", "content": "..."}``. When the model answered without tool calls,
        the rollout goes on if this returns any message and ends if it returns none; after
        ``state.finish()`` it ends with them. Roles ``user``, ``system`` or ``tool``, content a
        string: an ``assistant`` message (chat mode would train it) ends the rollout as a
        failed hook. In token mode they are part of the next prompt, masked: never trained.
        """
        return []


def check_hooks(hooks: object) -> None:
    """Refuse, in one line, hooks written for the earlier contract (``EnvConfigError``)."""
    for name, change in _RENAMED_HOOKS.items():
        if callable(getattr(hooks, name, None)):
            raise EnvConfigError(f"{type(hooks).__name__}.{name}: {change}")


def briefly(value: Any, show: Any = repr) -> str:
    """A value a hook returned (or raised), as one short line of a failure's reason."""
    text = " ".join(show(value).split())
    return text if len(text) <= 120 else f"{text[:100]}... ({len(text)} characters)"


class _HookFailed(Exception):
    """A turn hook failed: the rollout ends (its reason is already in ``AgentResult.error``)."""


class ChatServer(Protocol):
    """What the loop needs of a server: atroposlib's ServerManager fits."""

    async def chat_completion(self, **kwargs: Any) -> Any: ...


def normalize_tool_call(call: Any) -> dict[str, Any]:
    """An OpenAI-form tool call dict from a dict or an SDK object; arguments as a string."""
    get = (
        call.get
        if isinstance(call, dict)
        else lambda key, default=None: getattr(call, key, default)
    )
    function = get("function") or {}
    fget = (
        function.get
        if isinstance(function, dict)
        else lambda key, default=None: getattr(function, key, default)
    )
    arguments = fget("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        # A made-up id has the 9 alphanumeric characters that every template takes.
        "id": get("id") or new_alnum_id(9),
        "type": "function",
        "function": {"name": fget("name", "") or "", "arguments": arguments},
    }


def _make_valid(reply: AssistantTurn) -> int:
    """Make every text of ``reply`` valid Unicode, in place; how many characters were replaced."""
    replaced = 0

    def valid(text: Any) -> Any:
        nonlocal replaced
        if not isinstance(text, str):
            return text
        text, count = valid_unicode(text)
        replaced += count
        return text

    reply.content = valid(reply.content)
    reply.reasoning = valid(reply.reasoning)
    reply.parse_error = valid(reply.parse_error)
    for call in reply.tool_calls:
        call["id"] = valid(call.get("id"))
        function = call["function"]
        function["name"] = valid(function.get("name"))
        function["arguments"] = valid(function.get("arguments"))
    return replaced


def _valid_values(value: Any) -> tuple[Any, int]:
    """``value`` (decoded JSON) with its strings made valid Unicode; how many were replaced."""
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, list):
        pairs = [_valid_values(v) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    if isinstance(value, dict):
        items = {valid_unicode(k)[0]: _valid_values(v) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, sum(n for _, n in items.values())
    return value, 0


def _answer_stopped_calls(messages: list[dict[str, Any]], budget: float) -> None:
    """Give each call of the last turn that has no result one saying it was stopped.

    A conversation whose tool call has no answer is one no chat template renders as it was.
    """
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    if last is None or not last.get("tool_calls"):
        return
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    for call in last["tool_calls"]:
        if call["id"] not in answered:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": f"{TOOL_ERROR_PREFIX} the rollout ran past its {budget:g} s "
                    "budget; this call was stopped",
                }
            )


def _field(message: Any, key: str) -> Any:
    value = message.get(key) if isinstance(message, dict) else getattr(message, key, None)
    if value is None and not isinstance(message, dict):
        value = (getattr(message, "model_extra", None) or {}).get(key)
    return value


def _reasoning_of(message: Any) -> str | None:
    """The reasoning of a reply: vLLM's ``reasoning_content``, ``reasoning``, or OpenRouter's
    ``reasoning_details`` (its text and summary parts, joined)."""
    for key in ("reasoning_content", "reasoning"):
        value = _field(message, key)
        if isinstance(value, str) and value:
            return value
    details = _field(message, "reasoning_details")
    if isinstance(details, list):
        parts = []
        for detail in details:
            text = _field(detail, "text") or _field(detail, "summary")
            if isinstance(text, str) and text:
                parts.append(text)
        if parts:
            return "\n".join(parts)
    return None


class ChatCompletionBackend:
    """Chat mode: the server parses tool calls itself (an OpenAI-compatible chat endpoint)."""

    def __init__(self, server: ChatServer) -> None:
        self.server = server

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> AssistantTurn:
        # Past reasoning stays in the result but is not sent back: APIs differ on accepting it.
        outgoing = list(messages)  # the list only: the server sees the turn as it was sent
        if any("reasoning_content" in m for m in messages):
            outgoing = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in messages]
        response = await self.server.chat_completion(messages=outgoing, **kwargs)
        choice = response.choices[0]
        message = choice.message
        content = message.get("content") if isinstance(message, dict) else message.content
        raw_calls = (
            message.get("tool_calls") if isinstance(message, dict) else message.tool_calls
        ) or []
        return AssistantTurn(
            content=content or "",
            tool_calls=[normalize_tool_call(c) for c in raw_calls],
            reasoning=_reasoning_of(message),
            finish_reason=getattr(choice, "finish_reason", None),
        )


@dataclass(frozen=True)
class LoopSettings:
    """How the agent loop runs its rollouts: turns, sampling, tool output, retries, time.

    A base env makes it from its flags (``config.loop_settings(split)``) and hands it to each
    loop whole; ``dataclasses.replace`` makes a variant.
    """

    max_turns: int = 30  # most model turns before the rollout is cut off (max_agent_turns)
    temperature: float = 1.0  # sampling temperature of every request
    max_tokens: int | None = None  # per request (max_tokens_per_turn); None: the server's own
    extra_body: dict[str, Any] | None = None  # extra JSON fields of every request
    max_tool_output_chars: int = 20_000  # longer tool output is cut, with a notice
    max_parallel_tools: int = 8  # tool calls of one message run concurrently, up to this
    request_retries: int = 2  # extra tries of a failed request (0 with a ModelClient: it retries)
    retry_backoff: float = 0.5  # seconds before the first retry, doubled each time
    request_timeout: float | None = None  # seconds per request; None: the server's own
    tool_choice: str | None = None  # sent with requests that offer tools ('auto', 'required')
    max_seconds: float | None = None  # the rollout's wall-clock budget; None: no limit


class LoopSettingsByName(TypedDict, total=False):
    """``LoopSettings``' fields as ``HermesAgentLoop`` keywords (the Hermes skill's call)."""

    max_turns: int
    temperature: float
    max_tokens: int | None
    extra_body: dict[str, Any] | None
    max_tool_output_chars: int
    max_parallel_tools: int
    request_retries: int
    retry_backoff: float
    request_timeout: float | None
    tool_choice: str | None
    max_seconds: float | None


class _Setting(Generic[_T]):
    """A field of the loop's ``settings``, read and set by its name on the loop
    (``loop.max_turns = 5`` in a ``make_loop`` override)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, loop: None, owner: type) -> _Setting[_T]: ...
    @overload
    def __get__(self, loop: HermesAgentLoop, owner: type) -> _T: ...
    def __get__(self, loop: HermesAgentLoop | None, owner: type) -> _T | _Setting[_T]:
        if loop is None:
            return self
        value: _T = getattr(loop.settings, self.name)
        return value

    def __set__(self, loop: HermesAgentLoop, value: _T) -> None:
        changed: dict[str, Any] = {self.name: value}
        loop.settings = replace(loop.settings, **changed)


class HermesAgentLoop:
    """Runs one rollout of a tool-using agent against an inference server.

    ``settings`` says how (turns, sampling, tool output, retries, time); the Hermes skill's
    keywords (``max_turns=``, ``temperature=``, ``max_tokens=``, ``extra_body=``, any field of
    ``LoopSettings``) set single fields over it. The rest is the rollout's own: its server and
    tools, ``task_id`` (the tool context's when one is given), ``tool_context``, ``split``,
    ``backend`` (token mode's; chat completions by default), ``hooks`` and ``task``.
    """

    # Each setting by its name on the loop, read and set (``loop.max_turns = 5``).
    max_turns = _Setting[int]()
    temperature = _Setting[float]()
    max_tokens = _Setting[int | None]()
    extra_body = _Setting[dict[str, Any] | None]()
    max_tool_output_chars = _Setting[int]()
    max_parallel_tools = _Setting[int]()
    request_retries = _Setting[int]()
    retry_backoff = _Setting[float]()
    request_timeout = _Setting[float | None]()
    tool_choice = _Setting[str | None]()
    max_seconds = _Setting[float | None]()

    def __init__(
        self,
        server: ChatServer,
        tool_schemas: list[dict[str, Any]],
        valid_tool_names: set[str] | list[str],
        *,
        settings: LoopSettings | None = None,
        task_id: str | None = None,
        tool_context: ToolContext | None = None,
        split: str = "train",
        backend: Any = None,
        hooks: TurnHooks | None = None,
        task: Any = None,
        **by_name: Unpack[LoopSettingsByName],
    ) -> None:
        self.settings = replace(settings or LoopSettings(), **by_name)
        self.tool_schemas = tool_schemas
        self.valid_tool_names = set(valid_tool_names)
        self.task_id = task_id or (tool_context.task_id if tool_context else uuid.uuid4().hex)
        self.tool_context = tool_context or ToolContext(self.task_id)
        self.split = split
        self.backend = backend or ChatCompletionBackend(server)
        self.hooks = hooks or TurnHooks()  # the env's turn logic; the defaults add nothing
        self.task = task  # what the hooks see as ``state.task``
        self._tool_slots: asyncio.Semaphore | None = None

    async def run(self, messages: list[dict[str, Any]]) -> AgentResult:
        """Run the conversation until the model answers without a tool call (and the env adds
        nothing), the env's ``should_stop`` or ``state.finish()`` says so, or turns or the time
        budget run out. Hooks of the earlier contract are refused here (``EnvConfigError``)."""
        check_hooks(self.hooks)
        result: AgentResult[Any] = AgentResult(messages=[dict(m) for m in messages])
        try:
            if self.settings.max_seconds is None:
                await self._turns(result)
                return result
            try:
                # Cancelling the turns kills the commands under way (finish_command) and drops
                # a request or a hook in flight; ``result`` keeps every message up to that point.
                await asyncio.wait_for(self._turns(result), self.settings.max_seconds)
            except asyncio.TimeoutError:
                result.timed_out = True
                _answer_stopped_calls(result.messages, self.settings.max_seconds)
                logger.warning(
                    "task %s: the rollout ran past its %g s budget (max_rollout_seconds); ended",
                    self.task_id,
                    self.settings.max_seconds,
                )
            return result
        finally:
            # Token mode: the backend traced every token of this rollout; the result carries it.
            result.token_trace = getattr(self.backend, "trace", None)

    async def _turns(self, result: AgentResult) -> None:
        """The turns of a rollout, each appended to ``result`` as it completes."""
        state = RolloutState(self.task, self.task_id, result, self.tool_context, self.split)
        try:
            result.data = await self._hook("new_state", state, self.task)
        except _HookFailed:
            return
        for turn in range(1, self.settings.max_turns + 1):
            try:
                reply = await self._complete(result.messages)
            except Exception as exc:  # the server failed every retry: end this rollout only
                result.error = (
                    str(exc)
                    if isinstance(exc, InferenceError)
                    else (f"{type(exc).__name__}: {exc}")
                )
                logger.warning("task %s: inference failed, rollout ended: %s", self.task_id, exc)
                break
            if replaced := _make_valid(reply):
                result.replaced_characters += replaced
                logger.warning(
                    "task %s: %d invalid character(s) (lone surrogates) in the model's reply "
                    "replaced with U+FFFD",
                    self.task_id,
                    replaced,
                )
            assistant: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                assistant["tool_calls"] = reply.tool_calls
            if reply.reasoning:
                assistant["reasoning_content"] = reply.reasoning
            result.messages.append(assistant)
            result.turns_used = state.turn = turn
            result.reasoning_per_turn.append(reply.reasoning)
            answered = False  # the model replied without calling a tool
            if reply.parse_error and not reply.tool_calls:
                # The model meant to call a tool: tell it the call did not parse, and go on.
                # A user message, as there is no call id to answer and every template has one.
                message = f"{TOOL_ERROR_PREFIX} {reply.parse_error}"
                result.tool_errors.append(
                    ToolErrorRecord(turn, UNPARSED_TOOL, reply.content, reply.parse_error, message)
                )
                result.messages.append({"role": "user", "content": message})
            elif not reply.tool_calls:
                answered = True
            else:
                await self._run_tools(reply.tool_calls, turn, result)
            try:
                responded, done = await self._after_turn(state)
            except _HookFailed:
                break
            if done:
                result.finished_naturally = True
                break
            if answered and not responded:
                # A reply cut at the token limit did not finish: the model was stopped.
                result.finished_naturally = reply.finish_reason != "length"
                break

    async def _run_tools(self, calls: list[dict[str, Any]], turn: int, result: AgentResult) -> None:
        """Run the turn's tool calls (concurrently when several) and append their results."""
        if len(calls) == 1:  # the common case: no task per call
            outputs = [await self._execute(calls[0], turn, result)]
        else:
            outputs = await asyncio.gather(*(self._execute(call, turn, result) for call in calls))
        for call, output in zip(calls, outputs):
            result.messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})

    async def _after_turn(self, state: RolloutState) -> tuple[bool, bool]:
        """Run the hooks after a turn: whether the env responded, and whether it is done."""
        reward = await self._hook("turn_reward", state)
        if reward is not None:
            if not isinstance(reward, Real) or not math.isfinite(float(reward)):
                self._hook_failed(
                    state, "turn_reward", f"it returned {briefly(reward)}, not a finite number"
                )
            reward = float(reward)
        state.result.turn_rewards.append(reward)
        stop = await self._hook("should_stop", state)
        if not isinstance(stop, bool):
            self._hook_failed(
                state, "should_stop", f"it returned {briefly(stop)}, not True or False"
            )
        if stop:
            return False, True
        added = await self._hook("env_response", state)
        if not isinstance(added, list) or not all(isinstance(m, dict) for m in added):
            self._hook_failed(
                state,
                "env_response",
                f"it returned {briefly(added)}, not a list of messages (dicts)",
            )
        if spoken := [m.get("role") for m in added if m.get("role") not in ENV_ROLES]:
            # Assistant text is trained (chat mode): the env must not put words in its mouth.
            self._hook_failed(
                state,
                "env_response",
                f"a message of role {spoken[0]!r} (the env speaks as {', '.join(ENV_ROLES)})",
            )
        if odd := [m.get("content") for m in added if not isinstance(m.get("content"), str)]:
            self._hook_failed(
                state,
                "env_response",
                f"a message whose content is {briefly(odd[0])}, not a string",
            )
        state.result.messages.extend(dict(m) for m in added)
        return bool(added), state.finished

    async def _hook(self, name: str, state: RolloutState, *args: Any) -> Any:
        """Call one hook (on ``state``, or on ``args`` when given), sync or async; a hook that
        raises ends the rollout (``_HookFailed``)."""
        try:
            value = getattr(self.hooks, name)(*(args or (state,)))
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            logger.exception("task %s: %s failed; the rollout ends", self.task_id, name)
            self._hook_failed(state, name, f"{type(exc).__name__}: {briefly(exc, str)}")
        return value

    def _hook_failed(self, state: RolloutState, name: str, why: str) -> NoReturn:
        state.result.error = f"{name} failed: {why}"
        state.result.failed_hook = name
        raise _HookFailed(name)

    async def _complete(self, messages: list[dict[str, Any]]) -> AssistantTurn:
        kwargs: dict[str, Any] = {
            "n": 1,
            "temperature": self.settings.temperature,
            "split": self.split,
        }
        if self.tool_schemas:
            kwargs["tools"] = self.tool_schemas
            if self.settings.tool_choice:
                kwargs["tool_choice"] = self.settings.tool_choice
        if self.settings.max_tokens is not None:
            kwargs["max_tokens"] = self.settings.max_tokens
        if self.settings.extra_body:
            kwargs["extra_body"] = self.settings.extra_body

        async def attempt(number: int) -> AssistantTurn:
            del number
            return await asyncio.wait_for(
                self.backend.complete(messages, **kwargs), self.settings.request_timeout
            )

        # A server of its own (not a ModelClient, which retries by kind) is asked again unless
        # its error says it cannot succeed.
        return await with_retries(
            attempt,
            retries=self.settings.request_retries,
            backoff=self.settings.retry_backoff,
            may_pass=lambda exc: getattr(exc, "retryable", True),
            what=f"task {self.task_id}: request failed",
        )

    async def _execute(self, call: dict[str, Any], turn: int, result: AgentResult) -> str:
        """Run one tool call; every failure becomes a ToolErrorRecord and a message to the model."""
        name = call["function"]["name"]
        raw_arguments = call["function"]["arguments"]
        errors = result.tool_errors

        def refuse(error: str) -> str:
            error = printable(error)  # it may quote names the agent made
            message = f"{TOOL_ERROR_PREFIX} {error}"
            errors.append(ToolErrorRecord(turn, name, raw_arguments, error, message))
            return message

        if name not in self.valid_tool_names:
            valid = ", ".join(sorted(self.valid_tool_names)) or "none"
            return refuse(f"unknown tool {name!r}. Valid tools: {valid}")
        try:
            arguments = json.loads(raw_arguments) if raw_arguments.strip() else {}
            if (
                "\\u" in raw_arguments
            ):  # an escape may decode to a lone surrogate: none reach a tool
                arguments, replaced = _valid_values(arguments)
                result.replaced_characters += replaced
        except (ValueError, RecursionError) as exc:  # RecursionError: nested thousands deep
            return refuse(f"the arguments of {name} are not valid JSON ({exc}); it was not run")
        if not isinstance(arguments, dict):
            return refuse(f"the arguments of {name} must be a JSON object; it was not run")
        if self._tool_slots is None:  # made on first use: a setting changed after __init__ counts
            self._tool_slots = asyncio.Semaphore(self.settings.max_parallel_tools)
        async with self._tool_slots:
            try:
                output = await self.tool_context.call_tool(name, arguments)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                return refuse(str(exc) or type(exc).__name__)
        return self._cap(output)

    def _cap(self, output: str) -> str:
        limit = self.settings.max_tool_output_chars
        if len(output) <= limit:
            return output
        return output[:limit] + (
            f"\n[output truncated: showing {limit} of {len(output)} characters]"
        )
