"""Requests to the model server: which API, how long to wait, what to retry, what went wrong.

``ModelClient`` sends every request an env makes to its model (chat turns, token-level turns,
judge calls) with one retry policy: faults that may pass (connection lost or refused, a
timeout, HTTP 408, 429 and 5xx, a malformed reply) are retried with backoff; a request that
cannot succeed (any other 4xx) is not. What failed comes back as an ``InferenceError`` whose
message says what happened: the URL, the HTTP status and the server's own message, a timeout
or a refused connection.

Which API the policy is sampled through (``inference_api``):

- ``chat``: OpenAI ``/v1/chat/completions``; the server parses tool calls (Phase 1).
- ``completions``: token ids through OpenAI ``/v1/completions`` with a token-id prompt, as
  stock ``vllm serve`` offers it (``logprobs`` with ``return_tokens_as_token_ids``); tool calls
  are parsed here (Phase 2).
- ``generate``: token ids through ``/generate``: Atropos's vLLM server, or SGLang's native API
  (Phase 2).
- ``auto``: ``chat`` for ``server_type`` openai/trl, ``generate`` for sglang, and for vllm
  whichever the server has (``/generate`` present: Atropos's server; absent: stock vLLM).

``check_model_server`` is the start-up check: one small request, retried for at most
``startup_wait`` seconds while the server may still be starting, then a ``ModelServerError``
(exit 2) with one line naming the URL, what came back and the likely fix.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import random
import socket
import sys
import time
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from hermes_envgen.runtime.errors import EnvConfigError, InferenceError, ModelServerError

logger = logging.getLogger(__name__)

INFERENCE_APIS = ("auto", "chat", "completions", "generate")

# Said when serve or process runs in chat mode: what that data lacks, and for which trainer.
CHAT_MODE_DATA = (
    "chat mode: the groups carry no inference_logprobs (a chat API returns text, not the "
    "sampled token ids), and atroposlib's GRPO trainer (example_trainer, atropos-grpo) cannot "
    "train without them; for that trainer sample in token mode (provider vllm or sglang, "
    "inference_api completions or generate)"
)

# The one message of the start-up check's chat request (a real request, answered in a token).
STARTUP_PROMPT = "Say OK."

# Seconds to set up a connection to a model server, whatever the request's timeout: a host
# gone dark (no refusal, packets dropped) then fails fast and another server is asked.
CONNECT_TIMEOUT = 10.0

# HTTP statuses that may succeed when asked again.
_RETRYABLE_STATUS = {408, 429}


@dataclass
class Endpoint:
    """One model server: where it is, the model it serves, how to reach it."""

    base_url: str
    model: str
    api_key: str = ""
    timeout: float = 300.0
    server_type: str = "openai"

    @property
    def root(self) -> str:
        """The server's root URL: ``base_url`` without a trailing ``/v1``."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @classmethod
    def of(cls, config: Any) -> Endpoint:
        """The endpoint of an atroposlib ``APIServerConfig`` (or any object with its fields)."""
        return cls(
            base_url=(getattr(config, "base_url", None) or "").rstrip("/"),
            model=getattr(config, "model_name", None) or "default",
            api_key=getattr(config, "api_key", None) or "",
            timeout=float(getattr(config, "timeout", None) or 300.0),
            server_type=getattr(config, "server_type", None) or "openai",
        )


def resolve_api(api: str, server_type: str) -> str:
    """The API ``api`` stands for on a server of ``server_type`` (``auto`` may stay for vllm)."""
    if api not in INFERENCE_APIS:
        raise ValueError(f"inference_api must be one of {', '.join(INFERENCE_APIS)}, not {api!r}")
    if api != "auto":
        return api
    if server_type == "sglang":
        return "generate"
    if server_type == "vllm":
        return "auto"  # detected on first use: /generate present or not
    return "chat"


def is_token_api(api: str, server_type: str) -> bool:
    """True when rollouts are sampled token-in, token-out (Phase 2) with this setting."""
    return resolve_api(api, server_type) != "chat"


class ModelClient:
    """Sends chat and token-level requests to the model server(s), retrying what may pass.

    Several endpoints (the ``openai:`` list of several servers) are used in turn, as
    atroposlib's ServerManager spreads requests over its servers. One that fails in a way that
    may pass (refused, timed out, 5xx, 429) is taken out for ``out_for`` seconds: the retry and
    the requests meanwhile go to the others; then it is back in, and the next request to it
    either succeeds or takes it out again. With every endpoint out, the one back soonest is
    used rather than none. ``chat_completion`` and
    ``tokens_and_logprobs_completion`` have the signatures of atroposlib's ServerManager, so
    the agent loop, the Phase 2 backend and the judge take either.
    """

    def __init__(
        self,
        endpoints: list[Endpoint],
        *,
        api: str = "auto",
        retries: int = 3,
        backoff: float = 1.0,
        out_for: float = 10.0,
    ) -> None:
        if not endpoints:
            raise ValueError("a ModelClient needs at least one endpoint")
        self.endpoints = endpoints
        self.api = resolve_api(api, endpoints[0].server_type)
        self.retries = retries
        self.backoff = backoff
        self.successes = 0
        self.last_success: float | None = None
        self.last_fatal: InferenceError | None = None  # the last request that cannot succeed
        self.fatal_streak = 0  # such requests since the last success
        self.out_for = out_for
        self._out_until = [0.0] * len(endpoints)  # monotonic time each endpoint is back in
        self._next = 0
        # SDK clients by event loop (they are loop-bound), then by (base URL, key, timeout)
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, str, float], Any]
        ] = weakref.WeakKeyDictionary()
        self._detect_lock: asyncio.Lock | None = None

    @classmethod
    def of(cls, server_configs: list[Any], **kwargs: Any) -> ModelClient:
        """A client of atroposlib ``APIServerConfig`` s (the env's servers, a judge's)."""
        return cls([Endpoint.of(c) for c in server_configs], **kwargs)

    @property
    def token_level(self) -> bool:
        """True when the policy is sampled token-in, token-out (Phase 2)."""
        return self.api != "chat"

    def hopeless(self) -> bool:
        """True when the last requests all failed in ways that asking again cannot mend."""
        return self.fatal_streak >= 2

    def _endpoint(self) -> Endpoint:
        """The next endpoint in turn that is in; with all out, the one back soonest."""
        now = time.monotonic()
        count = len(self.endpoints)
        order = [(self._next + k) % count for k in range(count)]
        chosen = next((i for i in order if self._out_until[i] <= now), None)
        if chosen is None:
            chosen = min(order, key=lambda i: self._out_until[i])
        self._next = chosen + 1
        return self.endpoints[chosen]

    def _take_out(self, endpoint: Endpoint, error: InferenceError) -> None:
        if len(self.endpoints) < 2:
            return  # nowhere else to go: the retries' backoff is the only wait
        index = self.endpoints.index(endpoint)
        if self._out_until[index] <= time.monotonic():
            logger.warning("%s is out for %g s: %s", endpoint.base_url, self.out_for, error)
        self._out_until[index] = time.monotonic() + self.out_for

    def _back_in(self, endpoint: Endpoint) -> None:
        index = self.endpoints.index(endpoint)
        if self._out_until[index]:
            self._out_until[index] = 0.0
            logger.warning("%s is back in", endpoint.base_url)

    # -- the two kinds of request --------------------------------------------------------------

    async def chat_completion(self, *, split: str = "train", **kwargs: Any) -> Any:
        """An OpenAI chat completion (the SDK's object); InferenceError when it fails."""
        del split

        async def attempt(endpoint: Endpoint) -> Any:
            url = f"{endpoint.base_url}/chat/completions"
            return url, lambda: self._chat_once(endpoint, url, {"model": endpoint.model, **kwargs})

        return await self._with_retries(attempt)

    async def tokens_and_logprobs_completion(
        self, *, input_ids: list[int], split: str = "train", **kwargs: Any
    ) -> tuple[list[int], list[list[int]], list[list[float]], list[str | None]]:
        """Token ids in; ``(prompt, [output ids], [logprobs], [finish reason])`` out."""
        del split
        parsers: dict[str, Any] = {}

        async def attempt(endpoint: Endpoint) -> Any:
            api = await self._token_api(endpoint)
            if api == "completions":
                url = f"{endpoint.base_url}/completions"
                body = _completions_body(endpoint, input_ids, kwargs)
                parsers[url] = _parse_completions
            else:
                url = f"{endpoint.root}/generate"
                body = _generate_body(endpoint, input_ids, kwargs)
                sglang = endpoint.server_type == "sglang"
                parsers[url] = _parse_sglang if sglang else _parse_generate
            return url, lambda: self._post_once(endpoint, url, body)

        url, data = await self._with_retries(attempt, with_url=True)
        try:
            outputs, logprobs, reasons = parsers[url](data)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise InferenceError(
                f"{url}: the reply is not in the form this API answers ({type(exc).__name__}: "
                f"{exc}); is inference_api right for this server?",
                url=url,
            ) from None
        return list(input_ids), outputs, logprobs, reasons

    # -- retries -------------------------------------------------------------------------------

    async def _with_retries(self, attempt: Any, with_url: bool = False) -> Any:
        """``attempt(endpoint)`` gives (url, once); each try goes to the next endpoint in."""
        for number in range(self.retries + 1):
            endpoint = self._endpoint()
            url = endpoint.base_url  # until the attempt names its URL
            try:
                url, once = await attempt(endpoint)
                result = await once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc if isinstance(exc, InferenceError) else describe_failure(exc, url)
                if not error.retryable:
                    self.last_fatal = error
                    self.fatal_streak += 1
                else:
                    self._take_out(endpoint, error)
                if not error.retryable or number == self.retries:
                    raise error from None
                delay = self.backoff * 2**number * (0.5 + random.random())
                logger.info("%s; retrying in %.1f s", error, delay)
                await asyncio.sleep(delay)
            else:
                self.successes += 1
                self.last_success = time.monotonic()
                self.fatal_streak = 0
                self._back_in(endpoint)
                return (url, result) if with_url else result
        raise AssertionError("unreachable")

    def _openai(self, endpoint: Endpoint) -> Any:
        """The SDK client of ``endpoint`` for the running event loop (clients are loop-bound)."""
        import openai

        loop = asyncio.get_running_loop()
        clients = self._clients.setdefault(loop, {})
        key = (endpoint.base_url, endpoint.api_key, endpoint.timeout)
        if key not in clients:
            clients[key] = openai.AsyncOpenAI(
                base_url=endpoint.base_url,
                api_key=endpoint.api_key or "EMPTY",
                # the SDK's own Timeout: httpx's before openai 3, httpx2's since (an httpx
                # one given to openai 3 became its every field, connect included)
                timeout=openai.Timeout(
                    endpoint.timeout, connect=min(CONNECT_TIMEOUT, endpoint.timeout)
                ),
                max_retries=0,  # retried here, by kind of failure
            )
        return clients[key]

    async def _chat_once(self, endpoint: Endpoint, url: str, kwargs: dict[str, Any]) -> Any:
        response = await self._openai(endpoint).chat.completions.create(**kwargs)
        if not getattr(response, "choices", None):
            raise InferenceError(f"{url}: the reply has no choices", url=url, retryable=True)
        return response

    async def _post_once(self, endpoint: Endpoint, url: str, body: dict[str, Any]) -> Any:
        timeout = aiohttp.ClientTimeout(
            total=endpoint.timeout, sock_connect=min(CONNECT_TIMEOUT, endpoint.timeout)
        )
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(url, json=body, headers=endpoint.headers()) as response,
        ):
            text = await response.text()
            if response.status >= 400:
                raise status_error(url, response.status, text)
        try:
            return json.loads(text)
        except ValueError:
            raise InferenceError(
                f"{url}: the reply is not JSON: {text[:120]!r}", url=url, retryable=True
            ) from None

    async def _token_api(self, endpoint: Endpoint) -> str:
        """``completions`` or ``generate``: the setting, or (auto) what the server has."""
        if self.api != "auto":
            return self.api
        if self._detect_lock is None:
            self._detect_lock = asyncio.Lock()
        async with self._detect_lock:
            if self.api == "auto":
                self.api = await detect_token_api(endpoint)
                logger.info("%s: token-level requests go to %s", endpoint.root, self.api)
        return self.api


async def detect_token_api(endpoint: Endpoint) -> str:
    """``generate`` when the server has ``/generate`` (Atropos's vLLM server), else ``completions``.

    Stock ``vllm serve`` answers 404 there; Atropos's server answers an empty request with a
    validation error. A server that cannot be reached is reported as the InferenceError.
    """
    url = f"{endpoint.root}/generate"
    timeout = aiohttp.ClientTimeout(total=min(endpoint.timeout, 30.0))
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(url, json={}, headers=endpoint.headers()) as response,
        ):
            status = response.status
    except Exception as exc:
        raise describe_failure(exc, url) from None
    return "completions" if status in (404, 405) else "generate"


# -- request and reply forms ---------------------------------------------------------------------


def _sampling(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The sampling fields of a request (``n`` is always 1; ``tools`` is rendered already)."""
    body = {k: v for k, v in kwargs.items() if k not in ("model", "n", "tools", "tool_choice")}
    if "max_new_tokens" in body:
        body["max_tokens"] = body.pop("max_new_tokens")
    if "max_completion_tokens" in body:
        body["max_tokens"] = body.pop("max_completion_tokens")
    body.update(body.pop("extra_body", None) or {})
    return body


def _completions_body(
    endpoint: Endpoint, input_ids: list[int], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Stock vLLM's /v1/completions with a token-id prompt, token ids and logprobs returned."""
    return {
        "model": endpoint.model,
        "prompt": list(input_ids),
        **_sampling(kwargs),
        "n": 1,
        "logprobs": 0,  # the sampled token's logprob only
        # Tokens as "token_id:<id>": per request since vLLM 0.8 (vllm-project/vllm#14066);
        # older servers only with --return-tokens-as-token-ids.
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,  # vLLM >= 0.10.2: the ids in the choice; ignored before
        "skip_special_tokens": False,
    }


def _generate_body(
    endpoint: Endpoint, input_ids: list[int], kwargs: dict[str, Any]
) -> dict[str, Any]:
    sampling = _sampling(kwargs)
    if endpoint.server_type == "sglang":
        if "max_tokens" in sampling:
            sampling["max_new_tokens"] = sampling.pop("max_tokens")
        return {"input_ids": list(input_ids), "sampling_params": sampling, "return_logprob": True}
    return {"prompt": {"prompt_token_ids": list(input_ids)}, "logprobs": 0, **sampling, "n": 1}


# What a token-id request gives back: per completion its token ids, their logprobs, its
# finish reason.
_Outputs = tuple[list[list[int]], list[list[float]], list[str | None]]


def _parse_completions(data: dict[str, Any]) -> _Outputs:
    choice = data["choices"][0]
    logprobs = choice.get("logprobs") or {}
    tokens = logprobs.get("tokens")
    ids = choice.get("token_ids")
    if ids is None:
        if tokens is None:
            raise ValueError("no token ids: neither token_ids nor logprobs.tokens")
        ids = [int(str(t).removeprefix("token_id:")) for t in tokens]
    values = [float(v) if v is not None else 0.0 for v in logprobs.get("token_logprobs") or []]
    return [[int(t) for t in ids]], [values], [choice.get("finish_reason")]


def _parse_generate(data: dict[str, Any]) -> _Outputs:
    """Atropos's vLLM server: ``logprobs`` is ``[[{id: logprob}], ...]`` per completion."""
    positions = data["logprobs"][0]
    ids = [int(next(iter(p[0]))) for p in positions]
    values = [float(next(iter(p[0].values()))) for p in positions]
    return [ids], [values], [data["finish_reasons"][0]]


def _parse_sglang(data: Any) -> _Outputs:
    result = data[0] if isinstance(data, list) else data
    meta = result["meta_info"]
    triples = meta["output_token_logprobs"]
    reason = meta.get("finish_reason")
    reason = reason.get("type") if isinstance(reason, dict) else reason
    return [[int(t[1]) for t in triples]], [[float(t[0]) for t in triples]], [reason]


# -- what went wrong -----------------------------------------------------------------------------


def server_message(text: str) -> str:
    """The server's own words from an error body (OpenAI, FastAPI or plain text)."""
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:300] or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            for key in ("message", "detail", "msg"):
                if error.get(key):
                    return str(error[key])[:300]
        if isinstance(error, str):
            return error[:300]
        if data.get("detail"):
            return str(data["detail"])[:300]
    return json.dumps(data)[:300]


def status_error(url: str, status: int, body: str) -> InferenceError:
    """The InferenceError of an HTTP error reply."""
    retryable = status in _RETRYABLE_STATUS or status >= 500
    return InferenceError(
        f"HTTP {status} from {url}: {server_message(body)}",
        url=url,
        status=status,
        retryable=retryable,
    )


def describe_failure(exc: BaseException, url: str) -> InferenceError:
    """An InferenceError saying what ``exc`` (from the SDK, aiohttp, tenacity) means."""
    import openai

    cause = exc
    last_attempt = getattr(exc, "last_attempt", None)  # tenacity's RetryError
    if last_attempt is not None and last_attempt.exception() is not None:
        cause = last_attempt.exception()
    if isinstance(cause, InferenceError):
        return cause
    if isinstance(cause, openai.APIStatusError):
        url = str(getattr(cause.request, "url", url) or url)
        body = cause.body if cause.body is not None else cause.message
        text = json.dumps(body) if not isinstance(body, str) else body
        return status_error(url, cause.status_code, text)
    if isinstance(cause, (openai.APITimeoutError, asyncio.TimeoutError)):
        return InferenceError(f"{url}: no reply before the timeout", url=url, retryable=True)
    if isinstance(cause, openai.APIConnectionError):
        reason = _root_cause(cause)
        return InferenceError(f"{url}: cannot connect ({reason})", url=url, retryable=True)
    if isinstance(cause, aiohttp.ClientResponseError):
        return status_error(url, cause.status, cause.message)
    if isinstance(cause, (aiohttp.ClientConnectionError, OSError)):
        return InferenceError(
            f"{url}: cannot connect ({_root_cause(cause)})", url=url, retryable=True
        )
    if isinstance(cause, (ValueError, KeyError, TypeError, IndexError)):
        return InferenceError(
            f"{url}: malformed reply ({type(cause).__name__}: {cause})", url=url, retryable=True
        )
    return InferenceError(f"{url}: {type(cause).__name__}: {cause}", url=url, retryable=False)


def _root_cause(exc: BaseException) -> str:
    """What the connection failure was: 'connection refused', the host does not resolve, ..."""
    chain = [exc]
    while (inner := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 20:
        chain.append(inner)
    for error in chain:
        if isinstance(error, socket.gaierror) or "Name or service not known" in str(error):
            return "the host name does not resolve"
        if isinstance(error, ConnectionRefusedError) or getattr(error, "errno", None) == (
            errno.ECONNREFUSED
        ):
            return "connection refused"
    text = str(chain[-1]) or type(chain[-1]).__name__
    if "Connection refused" in text or "Connect call failed" in text:
        return "connection refused"
    return " ".join(text.split())[:200]


# -- the start-up check --------------------------------------------------------------------------


async def check_model_server(
    client: ModelClient,
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | None = None,
    extra_body: dict[str, Any] | None = None,
    startup_wait: float = 30.0,
    rollout_server_url: str | None = None,
    judge: bool = False,
) -> None:
    """Send each endpoint one small request; ModelServerError (one line) when it cannot succeed.

    A refused connection, a timeout or a 5xx is asked again for ``startup_wait`` seconds
    (a server may be loading its model); a 4xx fails at once. ``judge``: the client is the
    judge's, and the error names the judge's settings.
    """
    for endpoint in client.endpoints:
        started = time.monotonic()
        deadline = started + startup_wait
        progress = _WaitProgress(endpoint.base_url, startup_wait, "judge" if judge else "model")
        while True:
            try:
                await _probe(client, endpoint, tools, tool_choice, extra_body, deadline)
                progress.done()
                break
            except InferenceError as exc:
                if exc.retryable and time.monotonic() + 2 < deadline:
                    progress.waiting(exc, time.monotonic() - started)
                    await asyncio.sleep(2)
                    continue
                progress.done()
                waited = time.monotonic() - started
                after = f" (waited {waited:.0f} s: --env.startup_wait)" if waited >= 2 else ""
                served = await served_models(endpoint) if exc.status == 404 else None
                if judge:
                    fix = likely_judge_fix(exc, endpoint, served)
                    message = f"the judge does not answer: {exc}; {fix}{after}"
                    raise ModelServerError(message) from None
                fix = likely_fix(exc, endpoint, rollout_server_url, served)
                raise ModelServerError(
                    f"the model server does not answer: {exc}; {fix}{after} "
                    f"(asked from {socket.gethostname()})"
                ) from None


class _WaitProgress:
    """The line that says the start-up check is waiting (a server may take minutes to load).

    On a terminal one line, rewritten in place; elsewhere a line when the wait starts and one
    every 30 s, so that a log shows the run is waiting and for what.
    """

    EVERY = 30.0

    def __init__(self, url: str, limit: float, what: str) -> None:
        self.url, self.limit, self.what = url, limit, what
        self.tty = sys.stderr.isatty()
        self.shown_at: float | None = None

    def waiting(self, error: InferenceError, elapsed: float) -> None:
        if not self.tty and self.shown_at is not None and elapsed - self.shown_at < self.EVERY:
            return
        reason = str(error).removeprefix(f"{error.url}: ") if error.url else str(error)
        line = (
            f"waiting for the {self.what} server at {self.url}: {elapsed:.0f} s of "
            f"{self.limit:g} (--env.startup_wait); {reason}"
        )
        sys.stderr.write(f"\r\033[K{line}" if self.tty else f"{line}\n")
        sys.stderr.flush()
        self.shown_at = elapsed

    def done(self) -> None:
        if self.tty and self.shown_at is not None:
            sys.stderr.write("\n")
            sys.stderr.flush()


async def served_models(endpoint: Endpoint) -> list[str] | None:
    """The model names the server lists at ``/v1/models`` (None when it lists none)."""
    url = f"{endpoint.base_url}/models"
    try:
        timeout = aiohttp.ClientTimeout(total=min(endpoint.timeout, 10.0))
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=endpoint.headers()) as response,
        ):
            data = await response.json(content_type=None)
        names = [str(m["id"]) for m in data["data"]]
    except Exception:  # a server without the list: the fix says what it can
        return None
    return names or None


async def _probe(
    client: ModelClient,
    endpoint: Endpoint,
    tools: list[dict[str, Any]] | None,
    tool_choice: str | None,
    extra_body: dict[str, Any] | None,
    deadline: float,
) -> None:
    timeout = max(1.0, min(endpoint.timeout, deadline - time.monotonic()))
    once = Endpoint(
        endpoint.base_url, endpoint.model, endpoint.api_key, timeout, endpoint.server_type
    )
    probe = ModelClient([once], api=client.api, retries=0)
    if probe.token_level:
        api = await probe._token_api(probe.endpoints[0])
        client.api = api if client.api == "auto" else client.api
        await probe.tokens_and_logprobs_completion(input_ids=[0], max_tokens=1, temperature=0.0)
        return
    kwargs: dict[str, Any] = {
        "messages": [{"role": "user", "content": STARTUP_PROMPT}],
        "max_tokens": 1,
        "temperature": 0.0,
    }
    if tools:
        kwargs["tools"] = tools
        if tool_choice:
            kwargs["tool_choice"] = tool_choice
    if extra_body:
        kwargs["extra_body"] = extra_body
    await probe.chat_completion(**kwargs)


def likely_fix(
    error: InferenceError,
    endpoint: Endpoint,
    rollout_server_url: str | None,
    served: list[str] | None = None,
) -> str:
    """What to change, judging by what came back (and the names the server serves, if known)."""
    if error.status in (401, 403):
        return "check the API key (the env reads it from the environment; see .env.example)"
    if error.status == 404:
        if rollout_server_url and same_server(endpoint.base_url, rollout_server_url):
            return "that is the rollout server (run-api), not a model server: set --openai.base_url"
        if served and endpoint.model not in served:
            return f"it serves {_names(served)}, not {endpoint.model!r} (--openai.model_name)"
        if "model" in str(error).lower():
            return f"is {endpoint.model!r} the model the server serves? (--openai.model_name)"
        return (
            "no such endpoint there: is --openai.base_url the model server's, ending in /v1, "
            "and --env.inference_api right for it?"
        )
    if error.status is not None and 400 <= error.status < 500:
        return "the server refuses the request as the env makes it: see its message"
    if "does not resolve" in str(error):
        return "is the host name in --openai.base_url right?"
    if "cannot connect" in str(error):
        return "is the model server running, and is --openai.base_url its address?"
    if "timeout" in str(error):
        return "the server is up but does not answer in time: is it loaded? (--openai.timeout)"
    return "see the server's log"


def likely_judge_fix(
    error: InferenceError, endpoint: Endpoint, served: list[str] | None = None
) -> str:
    """What to change in the judge's settings, judging by what came back."""
    if error.status in (401, 403):
        return "check the judge's API key (the variable --env.judge_api_key_env names)"
    if error.status == 404:
        if served and endpoint.model not in served:
            return f"it serves {_names(served)}, not {endpoint.model!r} (--env.judge_model)"
        if "model" in str(error).lower():
            return f"is {endpoint.model!r} the judge's model there? (--env.judge_model)"
        return (
            "no chat API there: point --env.judge_base_url at an OpenAI-compatible API ending "
            "in /v1 (a policy server with only /generate cannot judge)"
        )
    if error.status is not None and 400 <= error.status < 500:
        return "the judge's server refuses the request: see its message"
    if "cannot connect" in str(error):
        return "is the judge's server running, and is --env.judge_base_url its address?"
    return "see the judge server's log"


def _names(served: list[str]) -> str:
    """The served model names for one line: the first few, and how many more."""
    shown = ", ".join(repr(name) for name in served[:5])
    return shown + (f" and {len(served) - 5} more" if len(served) > 5 else "")


def same_server(url: str, other: str) -> bool:
    """True when two URLs name the same host and port (localhost, 127.0.0.1 and 0.0.0.0 alike)."""

    return _host_port(url) == _host_port(other)


def _host_port(url: str) -> tuple[str, int | None]:
    """(host, port) of a URL, every name of this machine as 'localhost'."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = (parts.hostname or "").lower()
    if host in ("localhost", "0.0.0.0", "::1", "::") or host.startswith("127."):
        host = "localhost"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    return host, port


def judge_client(
    policy: ModelClient,
    base_url: str | None = None,
    model: str | None = None,
    api_key_env: str | None = None,
    *,
    timeout: float = 120.0,
) -> ModelClient:
    """The judge's client: its own endpoint when ``base_url`` is set, else the policy's server.

    The key is read from the environment variable ``api_key_env``; EnvConfigError (one line)
    when the endpoint is incomplete or a remote judge has no key.
    """
    if not base_url:
        return policy
    if not model:
        raise EnvConfigError(f"judge_base_url is {base_url}: set judge_model to its model name")
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    if not key and not is_local(base_url):
        where = f"${api_key_env} is empty" if api_key_env else "judge_api_key_env is not set"
        raise EnvConfigError(f"no API key for the judge at {base_url}: {where}")
    endpoint = Endpoint(base_url.rstrip("/"), model, key, timeout, "openai")
    return ModelClient([endpoint], api="chat", retries=policy.retries)


def is_local(url: str) -> bool:
    """True for a URL on this machine (localhost, 127.x, 0.0.0.0, ::1)."""
    return _host_port(url)[0] == "localhost"
