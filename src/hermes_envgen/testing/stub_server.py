"""A scripted OpenAI-compatible server over real HTTP on 127.0.0.1, for offline tests.

It answers ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` (with ``tools``,
``tool_calls`` and ``n`` > 1) and ``POST /v1/completions`` from a :class:`Script`, and can
inject faults: HTTP 500s, latency, malformed bodies, dropped connections, hanging requests.

Use it in-process (``with StubServer(script) as stub: stub.base_url``), from pytest through the
``stub_server`` fixture, or as ``hermes-envgen stub-server --script FILE``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from hermes_envgen.testing.script import Script, ScriptedTurn, ScriptError

__all__ = ["Faults", "ScriptError", "StubServer"]

# Tool-call ids carry the conversation's index, so later turns find their conversation even
# when many rollouts share one prompt: call_s<conversation>_<random>.
_ID_MARKER = re.compile(r"^call_s(\d+)_")


@dataclass
class Faults:
    """Fault injection: each rate is the probability per request, drawn from a seeded RNG."""

    error_rate: float = 0.0
    latency: float = 0.0
    malformed_rate: float = 0.0
    drop_rate: float = 0.0
    hang_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("error_rate", "malformed_rate", "drop_rate", "hang_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if self.latency < 0:
            raise ValueError(f"latency must be >= 0, got {self.latency}")


def render_tool_calls_as_text(turn: ScriptedTurn) -> str:
    """A turn as raw model text, tool calls in the Hermes ``<tool_call>`` format."""
    parts = [turn.content] if turn.content else []
    for call in turn.tool_calls:
        parts.append(
            f'<tool_call>\n{{"name": "{call.name}", "arguments": {call.arguments}}}\n</tool_call>'
        )
    return "\n".join(parts)


class StubServer:
    """The scripted server; start it with ``start()`` or as a context manager."""

    def __init__(
        self,
        script: Script | dict | str | Path,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: Faults | None = None,
        announce: bool = False,
    ) -> None:
        self.script = Script.load(script)
        self.announce = announce
        self.host = host
        self.port = port
        self.faults = faults or Faults()
        self.requests: list[dict] = []  # bodies of the chat/completion requests, in order
        self._rng = random.Random(self.faults.seed)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ending in ``/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> StubServer:
        """Start serving in a background thread; returns once the port is listening."""
        self._thread = threading.Thread(target=self._serve, name="stub-server", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)
        self._thread = None

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self.serve_until_stopped())
        except BaseException as exc:  # reported to start() rather than lost in the thread
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def serve_until_stopped(self) -> None:
        """Serve in the running event loop until ``stop()`` (or cancellation)."""
        self._stopping = asyncio.Event()
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            await self._runner.cleanup()
            raise OSError(f"cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        sock.listen(1024)
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self._ready.set()
        if self.announce:
            print(f"stub server listening on {self.base_url}", flush=True)
        try:
            await self._stopping.wait()
        finally:
            await self._runner.cleanup()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/v1/completions", self._completions)
        return app

    # -- handlers --------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.script.model, "object": "model"}]}
        )

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        body, fault = await self._receive(request)
        if fault is not None:
            return fault
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "'messages' must be a non-empty list")
        first_user = next(
            (_text(m.get("content")) for m in messages if m.get("role") == "user"), ""
        )
        turn_index = sum(1 for m in messages if m.get("role") == "assistant")
        known = _conversation_marker(messages)
        index, conversation = self.script.select(first_user, known)
        turn = conversation.turn(turn_index)
        with_tools = bool(body.get("tools"))
        choices = [
            {
                "index": i,
                "message": self._message(turn, index, with_tools),
                "finish_reason": turn.finish_reason
                or ("tool_calls" if turn.tool_calls and with_tools else "stop"),
                "logprobs": None,
            }
            for i in range(int(body.get("n") or 1))
        ]
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or self.script.model,
                "choices": choices,
                "usage": _usage(json.dumps(messages), choices),
            }
        )

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body, fault = await self._receive(request)
        if fault is not None:
            return fault
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            prompt = prompt[0] if prompt and isinstance(prompt[0], str) else ""
        if not isinstance(prompt, str):
            return _error(400, "'prompt' must be a string")
        turn_index = max(0, prompt.count("<|im_start|>assistant") - 1)
        _, conversation = self.script.select(prompt, None)
        text = render_tool_calls_as_text(conversation.turn(turn_index))
        choices = [
            {"index": i, "text": text, "finish_reason": "stop", "logprobs": None}
            for i in range(int(body.get("n") or 1))
        ]
        return web.json_response(
            {
                "id": f"cmpl-{uuid.uuid4().hex[:24]}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": body.get("model") or self.script.model,
                "choices": choices,
                "usage": _usage(prompt, [{"message": {"content": text}}]),
            }
        )

    def _message(self, turn: ScriptedTurn, conversation: int, with_tools: bool) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.tool_calls and with_tools:
            marker = conversation if conversation >= 0 else 0
            message["tool_calls"] = [
                {
                    "id": f"call_s{marker}_{uuid.uuid4().hex[:16]}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in turn.tool_calls
            ]
        elif turn.tool_calls:  # no tools offered: the calls come back as text
            message["content"] = render_tool_calls_as_text(turn)
        if turn.reasoning:
            message["reasoning_content"] = turn.reasoning
        return message

    async def _receive(self, request: web.Request) -> tuple[dict, web.StreamResponse | None]:
        """Read the JSON body and apply the injected faults; (body, a fault response or None)."""
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return {}, _error(400, "the request body is not valid JSON")
        if not isinstance(body, dict):
            return {}, _error(400, "the request body must be a JSON object")
        if len(self.requests) < 100_000:
            self.requests.append(body)
        faults = self.faults
        if faults.latency:
            await asyncio.sleep(faults.latency)
        if faults.hang_rate and self._rng.random() < faults.hang_rate:
            await self._stopping.wait()  # hangs until the server stops
            return body, _error(503, "server stopping")
        if faults.drop_rate and self._rng.random() < faults.drop_rate:
            if request.transport is not None:
                request.transport.abort()
            return body, web.Response(status=500)
        if faults.error_rate and self._rng.random() < faults.error_rate:
            return body, _error(500, "injected server error")
        if faults.malformed_rate and self._rng.random() < faults.malformed_rate:
            return body, web.Response(text='{"choices": [', content_type="application/json")
        return body, None


def _conversation_marker(messages: list[dict]) -> int | None:
    for message in messages:
        for call in message.get("tool_calls") or []:
            match = _ID_MARKER.match(str(call.get("id", "")))
            if match:
                return int(match.group(1))
    return None


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _usage(prompt: str, choices: list[dict]) -> dict:
    prompt_tokens = max(1, len(prompt) // 4)
    completion_tokens = sum(max(1, len(json.dumps(c.get("message", {}))) // 4) for c in choices)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "stub_error", "code": status}}, status=status
    )


def serve_forever(server: StubServer) -> None:
    """Serve in the foreground until interrupted (the ``stub-server`` command)."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.serve_until_stopped())
