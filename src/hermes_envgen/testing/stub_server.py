"""A scripted OpenAI-compatible server over real HTTP on 127.0.0.1, for offline tests.

It answers ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` (with ``tools``,
``tool_calls``, ``n`` > 1 and ``stream``: server-sent events, as OpenAI streams them) and
``POST /v1/completions`` from a :class:`Script`, and can inject faults: HTTP 500s, latency,
malformed bodies, dropped connections, hanging requests.

It also answers token-mode requests in the three forms servers take them: Atropos's vLLM API
server's ``POST /generate`` (``{"prompt": {"prompt_token_ids": [...]}, "logprobs": 0, ...}``),
SGLang's (``{"input_ids": [...], "sampling_params": {...}, "return_logprob": true}``), and
stock ``vllm serve``'s ``POST /v1/completions`` with a token-id prompt (``"prompt": [ids]``,
``logprobs``, ``return_tokens_as_token_ids``, ``return_token_ids``). With ``generate=False``
it has no ``/generate``, like stock ``vllm serve``; with ``openai_api=False`` it has only
``/health`` and ``/generate``, like Atropos's vLLM API server. It decodes the
prompt to match the script, and encodes the scripted turn (:func:`generated_text`, then the
end-of-turn token) with a fixed fake logprob per token. A request that extends a sequence the
stub generated continues that conversation, so token-mode rollouts follow their script. The
tokenizer must be the env's: ``tokenizer=DIR`` (``--tokenizer DIR``), by default the offline
tokenizer of :mod:`hermes_envgen.testing.tokenizer` (the ``offline_tokenizer`` fixture's).

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

from hermes_envgen.errors import StubServerError, UsageError
from hermes_envgen.testing.script import Script, ScriptedConversation, ScriptedTurn, ScriptError

__all__ = ["Faults", "ScriptError", "StubServer", "generated_text"]

# Tool-call ids carry the conversation's index, so later turns find their conversation even
# when many rollouts share one prompt: call_s<conversation>_<random>.
_ID_MARKER = re.compile(r"^call_s(\d+)_")

# The logprob /generate gives every generated token: fixed, so tests can check it.
FAKE_LOGPROB = -0.5
# Sequences /generate produced, remembered to continue their conversations (oldest dropped).
_MAX_REMEMBERED = 4096
_CHATML_USER = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S)


@dataclass
class Faults:
    """Fault injection: each rate is the probability per request, drawn from a seeded RNG."""

    error_rate: float = 0.0
    latency: float = 0.0
    malformed_rate: float = 0.0
    drop_rate: float = 0.0
    hang_rate: float = 0.0
    seed: int = 0
    status: int = 0  # answer requests with this HTTP status (and an error body), if set
    status_after: int = 0  # ... once this many requests have been answered normally

    def __post_init__(self) -> None:
        if self.status and not 400 <= self.status <= 599:
            raise StubServerError(
                f"status must be an HTTP error status (400-599), got {self.status}"
            )
        for name in ("error_rate", "malformed_rate", "drop_rate", "hang_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise StubServerError(f"{name} must be between 0 and 1, got {value}")
        if self.latency < 0:
            raise StubServerError(f"latency must be >= 0, got {self.latency}")


def render_tool_calls_as_text(turn: ScriptedTurn) -> str:
    """A turn as raw model text, tool calls in the Hermes ``<tool_call>`` format."""
    parts = [turn.content] if turn.content else []
    for call in turn.tool_calls:
        parts.append(
            f'<tool_call>\n{{"name": "{call.name}", "arguments": {call.arguments}}}\n</tool_call>'
        )
    return "\n".join(parts)


def generated_text(turn: ScriptedTurn) -> str:
    """What the scripted model generates on ``/generate`` before its end-of-turn token."""
    if turn.text is not None:
        return turn.text  # the model's own format, its end token included
    thinking = f"<think>{turn.reasoning}</think>\n" if turn.reasoning else ""
    return thinking + render_tool_calls_as_text(turn)


class StubServer:
    """The scripted server; start it with ``start()`` or as a context manager."""

    def __init__(
        self,
        script: Script | dict | str | Path,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: Faults | None = None,
        announce: bool = False,
        tokenizer: str | Path | None = None,
        generate: bool = True,
        openai_api: bool = True,
    ) -> None:
        self.script = Script.load(script)
        self.serves_generate = generate  # False: no /generate, as stock `vllm serve`
        self.serves_openai = openai_api  # False: no /v1/*, as Atropos's vLLM API server
        # /generate's tokenizer: the given one (loaded now, to fail early), else the offline one
        # (built on first use, so stubs that never see /generate do not pay for transformers).
        self._tokenizer = _load_tokenizer(tokenizer) if tokenizer is not None else None
        # (generated sequence, its conversation, its turn index), for /generate continuations
        self._generated: list[tuple[tuple[int, ...], ScriptedConversation, int]] = []
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
    def tokenizer(self) -> Any:
        """The tokenizer /generate decodes prompts and encodes replies with."""
        if self._tokenizer is None:
            self._tokenizer = _offline_tokenizer()
        return self._tokenizer

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
        loop = self._loop
        if loop is not None and not loop.is_closed() and self._stopping is not None:  # once
            loop.call_soon_threadsafe(self._stopping.set)
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
            message = f"cannot listen on {self.host}:{self.port}: {exc.strerror}"
            raise StubServerError(message) from None
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
        if self.serves_openai:
            app.router.add_get("/v1/models", self._models)
            app.router.add_post("/v1/chat/completions", self._chat_completions)
            app.router.add_post("/v1/completions", self._completions)
        if self.serves_generate:
            app.router.add_post("/generate", self._generate)
        return app

    # -- handlers --------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        # requests: how many chat/completion requests came, for tests in another process
        return web.json_response({"status": "ok", "requests": len(self.requests)})

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
        with_tools = bool(body.get("tools"))
        known = _conversation_marker(messages)
        if known is None and turn_index:
            known = self._continued_in_words(first_user, messages, with_tools)
        index, conversation = self.script.select(first_user, known)
        turn = conversation.turn(turn_index)
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
        answer = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.script.model,
            "choices": choices,
            "usage": _usage(json.dumps(messages), choices),
        }
        if body.get("stream"):
            return await self._stream_chat(request, answer, body.get("stream_options") or {})
        return web.json_response(answer)

    async def _stream_chat(
        self, request: web.Request, answer: dict, options: dict
    ) -> web.StreamResponse:
        """``answer`` as OpenAI streams a chat completion: server-sent ``chat.completion.chunk``
        events, each message cut into deltas (role, content, each tool call's name, then its
        arguments in pieces), a last chunk with the finish reason, the usage when
        ``stream_options.include_usage`` asks for it, then ``[DONE]``."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        head = {key: answer[key] for key in ("id", "created", "model")}

        async def send(choices: list[dict], **extra: Any) -> None:
            chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        for choice in answer["choices"]:
            index = choice["index"]
            for delta in _deltas(choice["message"]):
                await send([{"index": index, "delta": delta, "finish_reason": None}])
            await send([{"index": index, "delta": {}, "finish_reason": choice["finish_reason"]}])
        if options.get("include_usage"):
            await send([], usage=answer["usage"])
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body, fault = await self._receive(request)
        if fault is not None:
            return fault
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            prompt = prompt[0]  # a batch of one token-id prompt
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return self._token_completion(body, prompt)
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

    def _token_completion(self, body: dict, prompt_ids: list[int]) -> web.Response:
        """Stock vLLM's /v1/completions with a token-id prompt: ids and logprobs returned."""
        generated = self._generate_ids(prompt_ids, body.get("max_tokens"))
        if isinstance(generated, web.Response):
            return generated
        ids, finish_reason = generated
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        choice: dict[str, Any] = {
            "index": 0,
            "text": self.tokenizer.decode(ids, skip_special_tokens=False),
            "finish_reason": finish_reason,
            "logprobs": None,
        }
        if body.get("logprobs") is not None:
            choice["logprobs"] = {
                "tokens": [f"token_id:{t}" if as_ids else self.tokenizer.decode([t]) for t in ids],
                "token_logprobs": [FAKE_LOGPROB] * len(ids),
                "top_logprobs": None,
                "text_offset": [],
            }
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
            choice["prompt_token_ids"] = prompt_ids
        return web.json_response(
            {
                "id": f"cmpl-{uuid.uuid4().hex[:24]}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": body.get("model") or self.script.model,
                "choices": [choice],
                "usage": {
                    "prompt_tokens": len(prompt_ids),
                    "completion_tokens": len(ids),
                    "total_tokens": len(prompt_ids) + len(ids),
                },
            }
        )

    def _generate_ids(
        self, prompt_ids: Any, max_tokens: Any
    ) -> tuple[list[int], str] | web.Response:
        """The scripted reply to a token-id prompt, or the error response for a bad prompt."""
        if not isinstance(prompt_ids, list) or not all(isinstance(t, int) for t in prompt_ids):
            return _error(400, "the prompt must be a list of token ids")
        unknown = [t for t in prompt_ids if not 0 <= t < len(self.tokenizer)]
        if unknown:
            return _error(
                400,
                f"token id {unknown[0]} is not in the stub's tokenizer ({len(self.tokenizer)} "
                "tokens): start the stub with --tokenizer set to the env's tokenizer",
            )
        conversation, turn_index = self._continued(prompt_ids)
        ids, finish_reason = self._reply_ids(conversation.turn(turn_index), max_tokens)
        self._generated.append((tuple(prompt_ids + ids), conversation, turn_index))
        del self._generated[:-_MAX_REMEMBERED]
        return ids, finish_reason

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        """Token ids in, token ids and logprobs out: vLLM (Atropos) or SGLang native form."""
        body, fault = await self._receive(request)
        if fault is not None:
            return fault
        sglang = "input_ids" in body
        if sglang:
            prompt_ids, params = body.get("input_ids"), body.get("sampling_params") or {}
            max_tokens = params.get("max_new_tokens")
        else:
            prompt, params = body.get("prompt"), body
            if isinstance(prompt, str):
                prompt = {"prompt_token_ids": self.tokenizer.encode(prompt)}
            prompt_ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else None
            max_tokens = params.get("max_tokens")
        if not isinstance(params, dict):
            return _error(400, "'sampling_params' must be an object")
        generated = self._generate_ids(prompt_ids, max_tokens)
        if isinstance(generated, web.Response):
            return generated
        ids, finish_reason = generated
        assert isinstance(prompt_ids, list)  # _generate_ids refuses anything else
        n = int(params.get("n") or 1)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if sglang:
            results = [
                {
                    "text": text,
                    "meta_info": {
                        "id": uuid.uuid4().hex,
                        "finish_reason": {"type": finish_reason},
                        "prompt_tokens": len(prompt_ids),
                        "completion_tokens": len(ids),
                        "output_token_logprobs": [[FAKE_LOGPROB, t, None] for t in ids],
                    },
                }
                for _ in range(n)
            ]
            return web.json_response(results[0] if n == 1 else results)
        answer: dict[str, Any] = {
            "text": [text] * n,
            "logprobs": [[[{str(t): FAKE_LOGPROB}] for t in ids] for _ in range(n)],
            "finish_reasons": [finish_reason] * n,
        }
        if body.get("prompt_logprobs"):
            answer["prompt_logprobs"] = [None] + [[{str(t): FAKE_LOGPROB}] for t in prompt_ids[1:]]
        return web.json_response(answer)

    def _continued(self, prompt_ids: list[int]) -> tuple[ScriptedConversation, int]:
        """The conversation and turn of a /generate prompt: continued, or newly selected."""
        best: tuple[tuple[int, ...], ScriptedConversation, int] | None = None
        for entry in self._generated:
            ids = entry[0]
            longer = best is None or len(ids) > len(best[0])
            if longer and len(ids) <= len(prompt_ids) and tuple(prompt_ids[: len(ids)]) == ids:
                best = entry
        if best is not None:
            return best[1], best[2] + 1
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        first_user = _CHATML_USER.search(text)
        _, conversation = self.script.select(first_user.group(1) if first_user else text, None)
        return conversation, 0

    def _reply_ids(self, turn: ScriptedTurn, max_tokens: Any) -> tuple[list[int], str]:
        """The scripted turn as token ids ending in end-of-turn, cut at ``max_tokens``."""
        ids = list(self.tokenizer.encode(generated_text(turn), add_special_tokens=False))
        if turn.text is None and self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        finish_reason = turn.finish_reason or "stop"
        if isinstance(max_tokens, int) and 0 <= max_tokens < len(ids):
            ids, finish_reason = ids[:max_tokens], "length"
        return ids, finish_reason

    def _continued_in_words(
        self, first_user: str, messages: list[dict], with_tools: bool
    ) -> int | None:
        """The one conversation whose script said the request's assistant messages, if one did.

        Conversations in words only carry no call id to continue by (an env's simulated user
        answers between their turns); without this each turn would be handed out anew.
        """
        said = [_text(m.get("content")) for m in messages if m.get("role") == "assistant"]
        found = [
            index
            for index in self.script.candidates(first_user)
            if [
                self._message(self.script.conversations[index].turn(k), index, with_tools).get(
                    "content"
                )
                or ""
                for k in range(len(said))
            ]
            == said
        ]
        return found[0] if len(found) == 1 else None

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
        if faults.status and len(self.requests) > faults.status_after:
            return body, _error(faults.status, f"injected HTTP {faults.status}")
        if faults.latency:
            await asyncio.sleep(faults.latency)
        if faults.hang_rate and self._rng.random() < faults.hang_rate:
            assert self._stopping is not None  # made before the server answers anything
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


def _load_tokenizer(source: str | Path) -> Any:
    """A Hugging Face tokenizer from a directory (or hub name); StubServerError when it fails."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        message = f"cannot load the tokenizer {str(source)!r}: {first_line}"
        raise StubServerError(message) from None


def _offline_tokenizer() -> Any:
    """The offline byte-level ChatML tokenizer, loaded into memory."""
    import tempfile

    from transformers import AutoTokenizer

    from hermes_envgen.testing.tokenizer import build_offline_tokenizer

    with tempfile.TemporaryDirectory(prefix="stub-tokenizer-") as directory:
        return AutoTokenizer.from_pretrained(str(build_offline_tokenizer(directory)))


def _pieces(text: str, size: int = 8) -> list[str]:
    """``text`` cut into pieces of ``size`` characters, as a server streams its tokens."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def _deltas(message: dict) -> list[dict]:
    """The stream deltas of an assistant ``message``: the role, its reasoning and content in
    pieces, then each tool call (its id and name first, its arguments after in pieces)."""
    deltas: list[dict] = [{"role": "assistant", "content": ""}]
    for piece in _pieces(message.get("reasoning_content") or ""):
        deltas.append({"reasoning_content": piece})
    for piece in _pieces(message.get("content") or ""):
        deltas.append({"content": piece})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        opening = {"index": index, "id": call["id"], "type": "function"}
        opening["function"] = {"name": function["name"], "arguments": ""}
        deltas.append({"tool_calls": [opening]})
        for piece in _pieces(function["arguments"]):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


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


def serve_script_or_tasks(
    script: Path | None, tasks: str | None, faults: Faults, **options: Any
) -> None:
    """The ``stub-server`` command: a script's model, or the test kit's policy for the SAMPLES
    of module ``tasks``, served in the foreground (``options``: StubServer's)."""
    if (script is None) == (tasks is None):
        raise UsageError("give --script FILE or --tasks MODULE (one of them)")
    policy: Path | dict[str, Any]
    if tasks is not None:
        from hermes_envgen.testing.policy import tasks_policy

        policy = tasks_policy(tasks)
    else:
        assert script is not None  # one of the two, checked above
        policy = script
    serve_forever(StubServer(policy, faults=faults, announce=True, **options))
