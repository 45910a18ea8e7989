"""The start-up check: is each model server there, and does it answer as the env will ask?

``check_model_server`` sends each endpoint one small request, asked again for at most
``startup_wait`` seconds while the server may still be starting, then raises a
``ModelServerError`` (exit 2) with one line naming the URL, what came back and the likely fix.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from typing import Any

import aiohttp

from hermes_envgen.runtime.errors import (
    InferenceError,
    MalformedReply,
    ModelServerError,
    NotFound,
)
from hermes_envgen.runtime.inference.client import ModelClient
from hermes_envgen.runtime.inference.endpoint import Endpoint
from hermes_envgen.runtime.inference.hints import fix_hint

# The one message of the start-up check's chat request (a real request, answered in a token).
STARTUP_PROMPT = "Say OK."

# Seconds between two start-up requests to a server that is not up yet.
_PAUSE = 2.0


async def check_model_server(
    client: ModelClient,
    *,
    tools: list[dict] | None = None,
    tool_choice: str | None = None,
    extra_body: dict | None = None,
    startup_wait: float = 30.0,
    rollout_server_url: str | None = None,
    judge: bool = False,
) -> None:
    """Send each endpoint one small request; ModelServerError (one line) when it cannot succeed.

    A refused connection, a timeout or a 5xx is asked again for ``startup_wait`` seconds
    (a server may be loading its model); a 4xx or a reply in the wrong form fails at once.
    ``judge``: the client is the judge's, and the error names the judge's settings.
    """
    for endpoint in client.endpoints:
        started = time.monotonic()
        deadline = started + startup_wait
        progress = _WaitProgress(endpoint.base_url, startup_wait, "judge" if judge else "model")
        while True:
            try:
                await _startup_request(client, endpoint, tools, tool_choice, extra_body, deadline)
                progress.done()
                break
            except InferenceError as exc:
                # A server that is still starting refuses, times out or says 5xx; one that
                # answers in the wrong form is up, and waiting will not change its form.
                starting = exc.retryable and not isinstance(exc, MalformedReply)
                if starting and time.monotonic() + _PAUSE < deadline:
                    progress.waiting(exc, time.monotonic() - started)
                    await asyncio.sleep(_PAUSE)
                    continue
                progress.done()
                waited = time.monotonic() - started
                after = f" (waited {waited:.0f} s: --env.startup_wait)" if waited >= 2 else ""
                served = await served_models(endpoint) if isinstance(exc, NotFound) else None
                fix = fix_hint(
                    exc, endpoint, judge=judge, rollout_server_url=rollout_server_url, served=served
                )
                if judge:
                    raise ModelServerError(
                        f"the judge does not answer: {exc}; {fix}{after}"
                    ) from None
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
    timeout = aiohttp.ClientTimeout(total=min(endpoint.timeout, 10.0))
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=endpoint.headers()) as response,
        ):
            data = await response.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):  # no list: the fix says less
        return None
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    names = [str(m["id"]) for m in entries if isinstance(m, dict) and "id" in m]
    return names or None


async def _startup_request(
    client: ModelClient,
    endpoint: Endpoint,
    tools: list[dict] | None,
    tool_choice: str | None,
    extra_body: dict | None,
    deadline: float,
) -> None:
    """One request to ``endpoint`` as a rollout makes it, asked once, within the deadline."""
    timeout = max(1.0, min(endpoint.timeout, deadline - time.monotonic()))
    once = Endpoint(
        endpoint.base_url, endpoint.model, endpoint.api_key, timeout, endpoint.server_type
    )
    asker = ModelClient([once], api=client.api, retries=0)
    if asker.token_mode:
        api = await asker._token_api(asker.endpoints[0])
        client.api = api if client.api == "auto" else client.api
        await asker.tokens_and_logprobs_completion(input_ids=[0], max_tokens=1, temperature=0.0)
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
    await asker.chat_completion(**kwargs)
