"""``ModelClient``: every request an env makes to its model, with one retry policy.

Chat turns, token-mode turns and judge calls go through it. Faults that may pass (connection
lost or refused, a timeout, HTTP 408, 429 and 5xx, a malformed reply) are retried with
backoff; a request that cannot succeed (any other 4xx) is not. What failed comes back as the
``InferenceError`` subclass of its kind (see ``failures``), whose message says what happened:
the URL, the HTTP status and the server's own message, a timeout or a refused connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from hermes_envgen.runtime.errors import InferenceError, MalformedReply
from hermes_envgen.runtime.inference.endpoint import CONNECT_TIMEOUT, Endpoint, resolve_api
from hermes_envgen.runtime.inference.failures import not_json, status_error, transport_failure
from hermes_envgen.runtime.inference.wire import (
    completions_body,
    generate_body,
    reader_of,
)
from hermes_envgen.runtime.retries import with_retries

logger = logging.getLogger(__name__)

# SDK clients per endpoint, each with its own connection pool, taken in turn. httpx's pool
# looks over every connection it holds on each request and each response (an idle one is
# polled), so one pool under 256 rollouts at once cost the env more CPU than their sandboxes'
# commands; several smaller pools divide that.
CLIENT_SHARDS = 8
# what the SDK's create() takes beside the body: passed as request options, not sent
REQUEST_OPTIONS = ("extra_body", "extra_headers", "extra_query", "timeout")


class ModelClient:
    """Sends chat and token-mode requests to the model server(s), retrying what may pass.

    Several endpoints (the ``openai:`` list of several servers) are used in turn, as
    atroposlib's ServerManager spreads requests over its servers. One that fails in a way that
    may pass (refused, timed out, 5xx, 429) is taken out for ``out_for`` seconds: the retry and
    the requests meanwhile go to the others; then it is back in, and the next request to it
    either succeeds or takes it out again. With every endpoint out, the one back soonest is
    used rather than none. ``chat_completion`` and
    ``tokens_and_logprobs_completion`` have the signatures of atroposlib's ServerManager, so
    the agent loop, the token-mode backend and the judge take either.
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
        # SDK clients by event loop (they are loop-bound), then by (base URL, key, timeout, shard)
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, str, float, int], Any]
        ] = weakref.WeakKeyDictionary()
        self._shard = 0  # the shard of the next chat request
        self._detect_lock: asyncio.Lock | None = None

    @classmethod
    def of(cls, server_configs: list[Any], **kwargs: Any) -> ModelClient:
        """A client of atroposlib ``APIServerConfig`` s (the env's servers, a judge's)."""
        return cls([Endpoint.of(c) for c in server_configs], **kwargs)

    @property
    def token_mode(self) -> bool:
        """True when the policy is sampled token-in, token-out (token mode)."""
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

        async def once(endpoint: Endpoint) -> tuple[str, Awaitable[Any]]:
            url = f"{endpoint.base_url}/chat/completions"
            return url, self._chat_once(endpoint, url, {"model": endpoint.model, **kwargs})

        return await self._with_retries(once)

    async def tokens_and_logprobs_completion(
        self, *, input_ids: list[int], split: str = "train", **kwargs: Any
    ) -> tuple[list[int], list[list[int]], list[list[float]], list[str | None]]:
        """Token ids in; ``(prompt, [output ids], [logprobs], [finish reason])`` out."""
        del split

        async def once(endpoint: Endpoint) -> tuple[str, Awaitable[Any]]:
            api = await self._token_api(endpoint)
            if api == "completions":
                url = f"{endpoint.base_url}/completions"
                body = completions_body(endpoint, input_ids, kwargs)
            else:
                url = f"{endpoint.root}/generate"
                body = generate_body(endpoint, input_ids, kwargs)
            read = reader_of(api, endpoint.server_type)
            return url, self._post_once(endpoint, url, body, read)

        outputs, logprobs, reasons = await self._with_retries(once)
        return list(input_ids), outputs, logprobs, reasons

    # -- retries -------------------------------------------------------------------------------

    async def _with_retries(
        self, once: Callable[[Endpoint], Awaitable[tuple[str, Awaitable[Any]]]]
    ) -> Any:
        """``once(endpoint)`` gives (url, the request); each try goes to the next endpoint in."""

        async def attempt(number: int) -> Any:
            del number
            endpoint = self._endpoint()
            url = endpoint.base_url  # until the attempt names its URL
            try:
                url, request = await once(endpoint)
                result = await request
            except Exception as exc:
                error = transport_failure(exc, url)
                if error is None:  # not the server's failure: a bug surfaces as one
                    raise
                if error.retryable:
                    self._take_out(endpoint, error)
                else:
                    self.last_fatal = error
                    self.fatal_streak += 1
                raise error from None
            self.successes += 1
            self.last_success = time.monotonic()
            self.fatal_streak = 0
            self._back_in(endpoint)
            return result

        return await with_retries(
            attempt,
            retries=self.retries,
            backoff=self.backoff,
            may_pass=lambda exc: isinstance(exc, InferenceError) and exc.retryable,
            jitter=True,
            what="model request failed",
        )

    def _openai(self, endpoint: Endpoint) -> Any:
        """An SDK client of ``endpoint`` for the running event loop (clients are loop-bound),
        the next of its ``CLIENT_SHARDS`` in turn."""
        import openai

        loop = asyncio.get_running_loop()
        clients = self._clients.setdefault(loop, {})
        self._shard = (self._shard + 1) % CLIENT_SHARDS
        key = (endpoint.base_url, endpoint.api_key, endpoint.timeout, self._shard)
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
        from openai.types.chat import ChatCompletion

        # Posted as it is, not through create(): create() walks the whole request (every
        # message, every tool schema) against its types before sending it, about 1 ms a turn
        # on the env's one thread, to rename fields that chat requests do not have. The SDK
        # still serialises it (its models included), authenticates it and parses the reply.
        body = {key: value for key, value in kwargs.items() if key not in REQUEST_OPTIONS}
        given = {key: kwargs[key] for key in REQUEST_OPTIONS if kwargs.get(key) is not None}
        options = {"extra_json": given.get("extra_body"), "headers": given.get("extra_headers"),
                   "params": given.get("extra_query"), "timeout": given.get("timeout")}  # fmt: skip
        response = await self._openai(endpoint).post(
            "/chat/completions",
            cast_to=ChatCompletion,
            body=body,
            options={key: value for key, value in options.items() if value is not None},
        )
        if not getattr(response, "choices", None):
            raise MalformedReply(f"{url}: the reply has no choices", url=url)
        return response

    async def _post_once(
        self, endpoint: Endpoint, url: str, body: dict[str, Any], read: Callable[[Any, str], Any]
    ) -> Any:
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
            data = json.loads(text)
        except ValueError:
            raise not_json(url, text) from None
        return read(data, url)

    async def _token_api(self, endpoint: Endpoint) -> str:
        """``completions`` or ``generate``: the setting, or (auto) what the server has."""
        if self.api != "auto":
            return self.api
        if self._detect_lock is None:
            self._detect_lock = asyncio.Lock()
        async with self._detect_lock:
            if self.api == "auto":
                self.api = await detect_token_api(endpoint)
                logger.info("%s: token-mode requests go to %s", endpoint.root, self.api)
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
        error = transport_failure(exc, url)
        if error is None:
            raise
        raise error from None
    return "completions" if status in (404, 405) else "generate"
