"""What a failed request means: the typed ``InferenceError`` of each way a request can fail.

HTTP error replies are read once, here (``status_error``); the transport's exceptions (the
OpenAI SDK's, aiohttp's, the socket's) are mapped by ``transport_failure``. Anything else is
not a failure of the server and is left to surface as what it is.
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket

import aiohttp

from hermes_envgen.runtime.errors import (
    AuthRefused,
    ContextOverflow,
    InferenceError,
    MalformedReply,
    ModelNotFound,
    NoReplyInTime,
    NotFound,
    RequestRefused,
    ServerError,
    UnknownHost,
    Unreachable,
)

# HTTP statuses below 500 that may succeed when asked again.
_RETRYABLE_STATUS = {408, 429}

# What servers say when the prompt and the tokens asked for exceed the model's context:
# vLLM ("maximum context length"), OpenAI's code, SGLang ("longer than the model's context
# length"), llama.cpp ("exceeds the available context size").
_CONTEXT_WORDS = ("context length", "context_length_exceeded", "context size")


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
    """The InferenceError of an HTTP error reply, of the kind its status (and words) say."""
    words = server_message(body)
    kind: type[InferenceError]
    if status in (401, 403):
        kind = AuthRefused
    elif status == 404:
        kind = ModelNotFound if "model" in words.lower() else NotFound
    elif status in _RETRYABLE_STATUS or status >= 500:
        kind = ServerError
    elif 400 <= status < 500:
        lowered = words.lower()
        kind = ContextOverflow if any(w in lowered for w in _CONTEXT_WORDS) else RequestRefused
    else:
        kind = InferenceError
    return kind(f"HTTP {status} from {url}: {words}", url=url, status=status)


def not_json(url: str, text: str) -> MalformedReply:
    """A reply whose body is not JSON (cut off, or an HTML page from a proxy)."""
    return MalformedReply(f"{url}: the reply is not JSON: {text[:120]!r}", url=url)


def transport_failure(exc: BaseException, url: str) -> InferenceError | None:
    """The InferenceError ``exc`` (from the SDK, aiohttp, tenacity, a socket) stands for.

    None when ``exc`` is no failure of the request (a TypeError of ours, say): the caller
    re-raises it unchanged.
    """
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
        return NoReplyInTime(f"{url}: no reply before the timeout", url=url)
    if isinstance(cause, openai.APIResponseValidationError):
        return MalformedReply(f"{url}: malformed reply ({cause.message})", url=url)
    if isinstance(cause, json.JSONDecodeError):  # the SDK read a body that is not JSON
        return MalformedReply(f"{url}: malformed reply (not JSON: {cause})", url=url)
    if isinstance(cause, aiohttp.ClientResponseError):
        return status_error(url, cause.status, cause.message)
    if isinstance(cause, (openai.APIConnectionError, aiohttp.ClientError, OSError)):
        reason = _root_cause(cause)
        kind = UnknownHost if reason == _DOES_NOT_RESOLVE else Unreachable
        return kind(f"{url}: cannot connect ({reason})", url=url)
    return None


_DOES_NOT_RESOLVE = "the host name does not resolve"


def _root_cause(exc: BaseException) -> str:
    """What the connection failure was: 'connection refused', the host does not resolve, ..."""
    chain = [exc]
    while (inner := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 20:
        chain.append(inner)
    for error in chain:
        if isinstance(error, socket.gaierror) or "Name or service not known" in str(error):
            return _DOES_NOT_RESOLVE
        if isinstance(error, ConnectionRefusedError) or getattr(error, "errno", None) == (
            errno.ECONNREFUSED
        ):
            return "connection refused"
    text = str(chain[-1]) or type(chain[-1]).__name__
    if "Connection refused" in text or "Connect call failed" in text:
        return "connection refused"
    return " ".join(text.split())[:200]
