"""Requests to the model server: which API, how long to wait, what to retry, what went wrong.

One module per job:

- ``endpoint``: where a server is, which API (``inference_api``) the policy is sampled through.
- ``client``: ``ModelClient``, every request an env makes, retried by the kind of its failure.
- ``wire``: the token-mode wire formats (stock vLLM's completions, Atropos's ``/generate``,
  SGLang's), request bodies and reply readers.
- ``failures``: the typed ``InferenceError`` of an HTTP error reply or a transport failure.
- ``startup``: ``check_model_server``, the start-up check.
- ``hints``: what to change for each kind of failure, one table.
- ``judge``: ``judge_client``, the judge's client.
"""

from hermes_envgen.runtime.inference.client import ModelClient, detect_token_api
from hermes_envgen.runtime.inference.endpoint import (
    CHAT_MODE_DATA,
    CONNECT_TIMEOUT,
    INFERENCE_APIS,
    Endpoint,
    is_token_api,
    resolve_api,
)
from hermes_envgen.runtime.inference.failures import (
    server_message,
    status_error,
    transport_failure,
)
from hermes_envgen.runtime.inference.hints import HINTS, fix_hint
from hermes_envgen.runtime.inference.judge import judge_client
from hermes_envgen.runtime.inference.startup import (
    STARTUP_PROMPT,
    check_model_server,
    served_models,
)
from hermes_envgen.runtime.urls import is_local, same_server

__all__ = [
    "CHAT_MODE_DATA",
    "CONNECT_TIMEOUT",
    "HINTS",
    "INFERENCE_APIS",
    "STARTUP_PROMPT",
    "Endpoint",
    "ModelClient",
    "check_model_server",
    "detect_token_api",
    "fix_hint",
    "is_local",
    "is_token_api",
    "judge_client",
    "resolve_api",
    "same_server",
    "served_models",
    "server_message",
    "status_error",
    "transport_failure",
]
