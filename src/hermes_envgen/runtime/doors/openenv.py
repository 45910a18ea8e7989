"""The door to OpenEnv: the env served as an OpenEnv MCP environment (``openenv-core``).

Each WebSocket session of the server is one :class:`EnvSession` with a sandbox of its own
(``SUPPORTS_CONCURRENT_SESSIONS``; ``max_concurrent_envs`` of them at once):

- ``reset(task=...)`` starts a task (the JSON of one, as ``doors.trl.dataset`` rows carry it;
  without one, the env's next training task) and answers a ``CallToolObservation`` of tool
  ``reset`` whose result holds the opening ``messages`` and the ``task``: OpenEnv 0.3 drops an
  observation's metadata on the wire, a tool result it keeps;
- the env's tools are MCP tools (``ListToolsAction``, ``CallToolAction``), run in the
  session's sandbox as the env's agent loop runs them;
- the reward comes from a terminal tool, ``finish(answer)``: the env's ``compute_reward``
  over the session's transcript (each call and the answer) and its sandbox, reported as the
  step's ``reward`` with ``done`` (where OpenEnv's consumers read it, NeMo Gym's adapter
  included, which sums step rewards); the result names the reward's signals;
- an env with turn hooks (a game, a simulated user) has one more MCP tool, ``reply(message)``:
  the model's message to the other side, answered by the env's hooks as its loop answers a
  turn (``EnvSession.reply``); ``finish``'s answer is its last word, and the conversation the
  session kept is what the reward scores.

A session whose client went away without closing is closed by the env's idle timeout.
"""

from __future__ import annotations

import json
from typing import Any

from hermes_envgen.runtime.doors import require, shared_sessions, typed_function
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

SUPPORTED = ("0.3", "0.4")  # openenv-core releases this door was tested with
FINISH = "finish"  # the terminal tool that reports the reward


def require_openenv() -> Any:
    """OpenEnv's server module, or one line naming the extra to install (exit 2)."""
    require("openenv.core", "openenv-core", SUPPORTED, "openenv")
    from openenv.core.env_server import mcp_environment

    return mcp_environment


def environment_class(
    env_cls: type[HermesAgentBaseEnv],
    *,
    idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
    **settings: Any,
) -> type[Any]:
    """The OpenEnv ``MCPEnvironment`` class of ``env_cls`` (``settings``: ``open_env``'s)."""
    mcp_environment = require_openenv()
    from fastmcp import FastMCP
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
    from openenv.core.env_server.types import State

    def sessions() -> SessionThread:
        return shared_sessions(env_cls, settings, idle_timeout)

    env = sessions().sessions.env
    tools = [env.tool_registry.get(name) for name in sorted(env._resolve_tools()[1])]
    hooked = bool(turn_hooks(env_cls))
    reserved = {"reset", "step", "state", "close", FINISH} | ({REPLY_TOOL} if hooked else set())
    clashing = [t.name for t in tools if t.name in reserved]
    if clashing:
        raise DoorUnavailable(
            f"the tool {clashing[0]!r} cannot be served by OpenEnv (reserved: "
            f"{', '.join(sorted(reserved))}): rename it"
        )

    base: Any = mcp_environment.MCPEnvironment

    class HermesOpenEnvironment(base):  # type: ignore[misc]
        """One session of the env per WebSocket connection."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__(FastMCP(env.name or type(env).__name__))
            self.session: EnvSession | None = None
            self.transcript: list[dict[str, Any]] = []
            self.steps = 0
            self.episode_id: str | None = None
            for tool in tools:
                self.tool()(self._tool_function(tool.name, tool))

            async def finish(answer: str) -> str:
                """End the task with your final answer; the reply is your reward.

                Args:
                    answer: Your final answer to the task.
                """
                return answer  # answered by step_async, which scores the session

            finish.__name__ = FINISH
            self.tool()(finish)
            if hooked:
                self.tool()(self._reply_function())

        def _reply_function(self) -> Any:
            async def reply(message: str) -> str:
                if self.session is None:
                    return "Error: no task was started (reset first)"
                self.steps += 1
                answer = await sessions().run_async(self.session.reply(message))
                return answer.text

            reply.__name__ = REPLY_TOOL
            reply.__doc__ = REPLY_DOC
            return reply

        def _tool_function(self, name: str, tool: Any) -> Any:
            async def call(**arguments: Any) -> str:
                if self.session is None:
                    return "Error: no task was started (reset first)"
                self.steps += 1
                output = await sessions().run_async(self.session.call_tool(name, arguments))
                call_id = f"call_{self.steps}"
                self.transcript += [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": json.dumps(arguments)},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": call_id, "content": output},
                ]
                return output

            typed_function(call, tool)
            return call

        async def reset_async(
            self,
            seed: int | None = None,
            episode_id: str | None = None,
            task: str | None = None,
            **kwargs: Any,
        ) -> Any:
            await self._close_session()
            item = json.loads(task) if task is not None else None
            thread = sessions()
            self.session = await thread.run_async(thread.sessions.open(item))
            self.transcript = [dict(m) for m in self.session.messages]
            self.steps = 0
            self.episode_id = episode_id or self.session.task_id
            result = {"messages": self.transcript, "task": json.dumps(self.session.item)}
            return CallToolObservation(tool_name="reset", result=result, done=False)

        def reset(
            self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
        ) -> Any:
            return sessions().run(self.reset_async(seed, episode_id, **kwargs))

        async def step_async(
            self, action: Any, timeout_s: float | None = None, **kwargs: Any
        ) -> Any:
            if isinstance(action, CallToolAction) and action.tool_name == FINISH:
                return await self._finish(str(action.arguments.get("answer", "")))
            return await super().step_async(action, timeout_s=timeout_s, **kwargs)

        def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
            raise DoorUnavailable(f"{type(action).__name__}: this env takes MCP tool calls only")

        async def _finish(self, answer: str) -> Any:
            if self.session is None:
                return CallToolObservation(
                    tool_name=FINISH, result={"error": "no task was started"}, done=True
                )
            self.transcript.append({"role": "assistant", "content": answer})
            thread = sessions()
            reward = await thread.run_async(self.session.score(self.transcript))
            await self._close_session()
            result = {
                "reward": reward.score,
                "signals": reward.signals,
                "failure": reward.failure,
            }
            return CallToolObservation(
                tool_name=FINISH, result=result, done=True, reward=reward.score
            )

        async def _close_session(self) -> None:
            if self.session is not None:
                session, self.session = self.session, None
                thread = sessions()
                await thread.run_async(thread.sessions.close(session.task_id))

        @property
        def state(self) -> Any:
            return State(episode_id=self.episode_id, step_count=self.steps)

        def close(self) -> None:
            if self.session is not None:
                session, self.session = self.session, None
                thread = sessions()
                thread.run(thread.sessions.close(session.task_id))
            super().close()

    HermesOpenEnvironment.__name__ = f"{type(env).__name__}OpenEnv"
    return HermesOpenEnvironment


def openenv_app(
    env_cls: type[HermesAgentBaseEnv],
    *,
    max_concurrent_envs: int = 8,
    idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
    **settings: Any,
) -> Any:
    """OpenEnv's FastAPI app serving ``env_cls`` (``uvicorn`` serves it; ``/ws`` sessions)."""
    environment = environment_class(env_cls, idle_timeout=idle_timeout, **settings)
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

    return create_fastapi_app(
        environment, CallToolAction, CallToolObservation, max_concurrent_envs=max_concurrent_envs
    )
