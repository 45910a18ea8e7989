"""What to change when the start-up request fails: one table, keyed by the kind of failure.

Each kind has a line for the policy's model server and one for the judge's (their settings
have other names). A kind without a line of its own takes its parent's (``ModelNotFound``
falls back to ``NotFound``, every kind at last to ``InferenceError``).
"""

from __future__ import annotations

from dataclasses import dataclass

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
from hermes_envgen.runtime.inference.endpoint import Endpoint
from hermes_envgen.runtime.urls import same_server


@dataclass(frozen=True)
class Hint:
    """What to change, for the policy's server and for the judge's."""

    model: str
    judge: str


HINTS: dict[type[InferenceError], Hint] = {
    AuthRefused: Hint(
        "check the API key (the env reads it from the environment; see .env.example)",
        "check the judge's API key (the variable --env.judge_api_key_env names)",
    ),
    NotFound: Hint(
        "no such endpoint there: is --openai.base_url the model server's, ending in /v1, "
        "and --env.inference_api right for it?",
        "no chat API there: point --env.judge_base_url at an OpenAI-compatible API ending "
        "in /v1 (a policy server with only /generate cannot judge)",
    ),
    ModelNotFound: Hint(
        "is {model!r} the model the server serves? (--openai.model_name)",
        "is {model!r} the judge's model there? (--env.judge_model)",
    ),
    ContextOverflow: Hint(
        "the prompt and the tokens asked for exceed the model's context: lower "
        "--env.max_tokens_per_turn or --env.max_agent_turns, or serve a longer context",
        "the judge's prompt exceeds its model's context: shorten the answer it is shown",
    ),
    RequestRefused: Hint(
        "the server refuses the request as the env makes it: see its message",
        "the judge's server refuses the request: see its message",
    ),
    UnknownHost: Hint(
        "is the host name in --openai.base_url right?",
        "is the host name in --env.judge_base_url right?",
    ),
    Unreachable: Hint(
        "is the model server running, and is --openai.base_url its address?",
        "is the judge's server running, and is --env.judge_base_url its address?",
    ),
    NoReplyInTime: Hint(
        "the server is up but does not answer in time: is it loaded? (--openai.timeout)",
        "the judge's server is up but does not answer in time: is it loaded?",
    ),
    MalformedReply: Hint(
        "the server answers, but not in the form --env.inference_api expects: is it right for "
        "this server?",
        "the judge's server answers, but not as an OpenAI-compatible chat API: is "
        "--env.judge_base_url one?",
    ),
    ServerError: Hint("see the server's log", "see the judge server's log"),
    InferenceError: Hint("see the server's log", "see the judge server's log"),
}


def fix_hint(
    error: InferenceError,
    endpoint: Endpoint,
    *,
    judge: bool = False,
    rollout_server_url: str | None = None,
    served: list[str] | None = None,
) -> str:
    """What to change, judging by the kind of ``error`` (and the names the server serves)."""
    if isinstance(error, NotFound):
        if not judge and rollout_server_url and same_server(endpoint.base_url, rollout_server_url):
            return "that is the rollout server (run-api), not a model server: set --openai.base_url"
        if served and endpoint.model not in served:
            flag = "--env.judge_model" if judge else "--openai.model_name"
            return f"it serves {_names(served)}, not {endpoint.model!r} ({flag})"
    hint = next(HINTS[kind] for kind in type(error).__mro__ if kind in HINTS)
    return (hint.judge if judge else hint.model).format(model=endpoint.model)


def _names(served: list[str]) -> str:
    """The served model names for one line: the first few, and how many more."""
    shown = ", ".join(repr(name) for name in served[:5])
    return shown + (f" and {len(served) - 5} more" if len(served) > 5 else "")
