"""An env made with hermes-envgen as a verifiers taskset (``vf-eval hermes-envgen-verifiers``).

The env runs in its own process, served by ``python -m hermes_envgen.runtime.doors.verifiers
package.module:EnvClass`` (verifiers pins mcp 2.0, which the env's runtime cannot share); this
package runs in verifiers' environment and needs nothing else of hermes-envgen. Per rollout:

- ``HermesTask.setup`` starts the task in a sandbox of its own on the env's server
  (``prepare_sandbox`` run there);
- its tools are that session's MCP endpoint (``HermesTools``, a toolset verifiers reaches at
  its URL, tools named as the env names them): every call runs in the rollout's sandbox through
  the env's own code;
- ``env_reward``, a ``@vf.reward``, sends the rollout's messages to the env, whose
  ``compute_reward`` scores them with the sandbox as the agent left it; the reward's named
  signals are the trace's metrics (``env/<name>``).

Its harness is verifiers' chat loop (``HermesChatHarness``, a ``null`` harness: MCP tools, no
code run on its host), the taskset's default. Run it with ``python -m hermes_envgen_verifiers
http://127.0.0.1:8765 -m MODEL --client.base-url URL``: ``vf-eval hermes-envgen-verifiers`` with
that ``url`` in a subprocess runtime (the harness must reach the env's door on 127.0.0.1);
prime-rl takes the same taskset id and ``url``.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Iterator
from typing import Any

from hermes_envgen_verifiers._require import require_verifiers

vf = require_verifiers()

import httpx  # noqa: E402  (verifiers is checked first: the one line that names what to do)

__all__ = ["HermesChatHarness", "HermesTaskset"]

# The MCP endpoint of the session that a rollout's setup opened, read by toolsets() right after
# it: verifiers asks both in the rollout's own asyncio task (and shares one Task object between
# a task's rollouts, so the object cannot hold it).
_TOOLS_URL: contextvars.ContextVar[str | None] = contextvars.ContextVar("hermes_tools_url")


from verifiers.v1.harnesses.null import NullHarness  # noqa: E402


class HermesChatHarness(NullHarness):
    """The taskset's own harness, verifiers' chat loop (``null``): the model's tool calls go
    to the env's MCP endpoint, and nothing of the model's runs on the harness's host."""


class HermesTasksetConfig(vf.TasksetConfig):
    url: str = "http://127.0.0.1:8765"
    """The env's verifiers door (``python -m hermes_envgen.runtime.doors.verifiers``)."""
    split: str = "eval"
    """Which of the env's tasks: ``eval`` (its held-out ones) or ``train``."""
    request_timeout: float = 600.0
    """Seconds one request to the env may take (starting a sandbox, scoring)."""


class HermesData(vf.TaskData):
    task: str
    """The env's task, as JSON: what its server starts a session of."""
    url: str
    """The env's door."""
    split: str = "eval"
    request_timeout: float = 600.0


class HermesState(vf.State):
    session: str | None = None
    """The rollout's session on the env's server."""


class HermesTools(vf.Toolset[vf.ToolsetConfig]):
    """The env's tools, served by its process at the session's MCP endpoint (named as the env
    names them: no prefix)."""

    TOOL_PREFIX = None


class HermesTask(vf.Task[HermesData, HermesState]):
    async def setup(self, trace: Any) -> None:
        data = self.data
        opened = await _post(data, "/sessions", {"task": data.task, "split": data.split})
        trace.state.session = opened["session"]
        _TOOLS_URL.set(f"{data.url}/mcp?session={opened['session']}")

    @classmethod
    def toolsets(cls, config: Any) -> list[Any]:
        url = _TOOLS_URL.get(None)
        return [HermesTools(vf.ToolsetConfig(url=url))] if url else []

    @vf.reward
    async def env_reward(self, trace: Any) -> float:
        """The env's compute_reward over this rollout's transcript and sandbox."""
        session = trace.state.session
        if session is None:
            return 0.0  # setup never opened a session: nothing the agent did can be scored
        from verifiers.v1.dialects.chat import message_to_wire

        messages = [message_to_wire(m) for m in trace.messages]
        scored = await _post(self.data, f"/sessions/{session}/score", {"messages": messages})
        trace.record_metrics({f"env/{k}": float(v) for k, v in scored["signals"].items()})
        trace.record_metric("env/failed", 1.0 if scored.get("failure") else 0.0)
        return float(scored["reward"])


class HermesTaskset(vf.Taskset[HermesTask, HermesTasksetConfig]):
    """The env's tasks (``split``), as its server lists them."""

    def load(self) -> Iterator[HermesTask]:
        config = self.config
        url = config.url.rstrip("/")
        try:
            response = httpx.get(f"{url}/tasks", params={"split": config.split}, timeout=60)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            detail = response.text if isinstance(exc, httpx.HTTPStatusError) else exc
            print(
                f"error: the env's verifiers door at {url} did not list its tasks ({detail}): "
                "serve the env with python -m hermes_envgen.runtime.doors.verifiers "
                "package.module:EnvClass, and give its URL",
                file=sys.stderr,
            )
            raise SystemExit(2) from None
        listed = response.json()
        for index, row in enumerate(listed["tasks"]):
            yield HermesTask(
                HermesData(
                    name=f"{listed['env']}#{config.split}-{index}",
                    prompt=[_message(m) for m in row["prompt"]],
                    task=row["task"],
                    url=url,
                    split=config.split,
                    request_timeout=config.request_timeout,
                ),
                config.task,
            )


def _message(message: dict[str, Any]) -> Any:
    """One of the env's opening messages as verifiers' message of its role."""
    kinds = {"system": vf.SystemMessage, "assistant": vf.AssistantMessage}
    return kinds.get(message.get("role"), vf.UserMessage)(content=message.get("content") or "")


async def _post(data: HermesData, path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=data.request_timeout) as client:
        response = await client.post(f"{data.url}{path}", json=body)
    if response.status_code != 200:
        raise vf.TaskError(f"the env's door answered {response.status_code}: {response.text}")
    answer: dict[str, Any] = response.json()
    return answer
