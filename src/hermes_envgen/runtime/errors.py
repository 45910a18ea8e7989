"""The runtime's errors, on the root of ``hermes_envgen.errors``.

Configuration mistakes are ``EnvConfigError`` (also ``ValueError``): an env stops at start-up
with one line saying what to change. Errors during a rollout never escape it: they become tool
errors the model is told about, or a rollout failure with its reason.
"""

from __future__ import annotations

from hermes_envgen.errors import HermesEnvgenError, UsageError


class EnvConfigError(UsageError, ValueError):
    """A setting or input of the env is wrong; the message says what to change."""


class DatasetError(EnvConfigError):
    """The task dataset cannot be loaded or is empty."""


class UnknownParserError(EnvConfigError):
    """``tool_call_parser`` names no registered parser."""


class UnknownToolError(EnvConfigError):
    """A toolset or tool name that is not registered."""


class ResumeError(EnvConfigError):
    """An evaluation cannot resume: its earlier run used other settings."""


class ToolExecutionError(HermesEnvgenError):
    """A tool call cannot run (bad arguments, a failure inside the tool); told to the model."""


class SandboxError(HermesEnvgenError):
    """A sandbox operation failed (cannot start, path refused, engine gone)."""


class SandboxUnavailable(SandboxError):
    """The sandbox cannot be started at all (no engine, no image...): nothing can run in it."""


class PathOutsideWorkspace(SandboxError):
    """A path that leaves the task's workspace; refused."""


class FileTooLarge(SandboxError):
    """A workspace file larger than the host reads into its memory; refused, unread."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(
            f"{path} is larger than {limit} bytes, more than the host reads of a workspace file"
        )


class ChatTemplateError(HermesEnvgenError):
    """The tokenizer's chat template cannot render the conversation as training data needs."""


class GenerationPromptNotContinued(ChatTemplateError):
    """The template renders a finished reply that does not continue its generation prompt."""


class InferenceError(HermesEnvgenError):
    """A request to the model server failed; the message says what came back (status, words).

    Each kind of failure is a subclass, raised where the reply (or its absence) is read:
    ``retryable`` is the kind's (True for faults that may pass: a refused or lost connection,
    a timeout, HTTP 408, 429 and 5xx, a malformed reply), unless the raiser says otherwise.
    """

    retryable_kind = False

    def __init__(
        self,
        message: str,
        *,
        url: str,
        status: int | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.retryable = self.retryable_kind if retryable is None else retryable


class RequestRefused(InferenceError):
    """HTTP 4xx (but 401, 403, 404, 408, 429): the server refuses the request as it is made."""


class ContextOverflow(RequestRefused):
    """HTTP 400 saying the prompt and the tokens asked for exceed the model's context."""


class AuthRefused(InferenceError):
    """HTTP 401 or 403: the API key is missing, wrong or not allowed this model."""


class NotFound(InferenceError):
    """HTTP 404: no such endpoint at that URL."""


class ModelNotFound(NotFound):
    """HTTP 404 whose message is about the model: the server serves no model of that name."""


class Unreachable(InferenceError):
    """No connection: refused, reset, or lost before the reply."""

    retryable_kind = True


class UnknownHost(Unreachable):
    """The server's host name does not resolve."""


class NoReplyInTime(InferenceError):
    """Connected, but no (whole) reply before the request's timeout."""

    retryable_kind = True


class ServerError(InferenceError):
    """HTTP 5xx, 408 or 429: the server failed or is busy; asking again may succeed."""

    retryable_kind = True


class MalformedReply(InferenceError):
    """A reply the server sent that lacks what its API promises (not JSON, no choices...)."""

    retryable_kind = True


class ModelServerError(EnvConfigError):
    """The model server cannot serve the run (down, wrong URL, key or model); exit 2."""


class RolloutServerLost(HermesEnvgenError):
    """run-api stopped answering during serve (its trainer exited, say): the run ends; exit 1."""


class RolloutServerError(EnvConfigError):
    """Serve mode's run-api (the rollout server) cannot be reached at start-up; exit 2."""


class NothingMeasured(HermesEnvgenError):
    """An evaluation in which every rollout failed: there is no score to report."""

    exit_code = 2


class DoorUnavailable(EnvConfigError):
    """A trainer's library that a door needs is missing or at a version it does not support;
    or the env cannot be offered through that door (the message says why)."""
