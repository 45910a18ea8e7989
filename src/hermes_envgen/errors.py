"""The errors hermes-envgen raises on purpose, and the exit code each one means.

Every error class derives from ``HermesEnvgenError`` and carries ``exit_code``; one function,
:func:`exit_code`, turns an error that stops a command into its code, and :func:`report` says
it in one line: ``hermes-envgen``'s commands, the env's command line and the generation hooks
all use them. Errors of the runtime (the part generated envs import) live in
``hermes_envgen.runtime.errors`` on the same root.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


class HermesEnvgenError(Exception):
    """Root of hermes-envgen's errors: something failed that is not the user's mistake."""

    exit_code = 1


class UsageError(HermesEnvgenError):
    """A mistake the user can fix: a bad name, answer, path or flag, a busy target."""

    exit_code = 2


class Interrupted(HermesEnvgenError):
    """The user pressed Ctrl-C; the message says what was cleaned up."""

    exit_code = 130


class GitError(HermesEnvgenError):
    """git is missing, too old, or one of its commands failed (the message has git's words)."""


class TemplateSourceError(HermesEnvgenError):
    """The template's releases cannot be found or bundled (no bundle, no template, bad version)."""


class HookError(HermesEnvgenError):
    """A generation hook (formatting, the first commit) failed."""


class UpdateConflictError(HermesEnvgenError):
    """The update was applied, but some files need the user's hand to merge."""

    exit_code = 3

    def __init__(self, message: str, files: Sequence[str]) -> None:
        super().__init__(message)
        self.files = list(files)


class CheckError(UsageError):
    """``check`` cannot run at all: not an env, does not import, port taken."""


class ViewError(UsageError, ValueError):
    """A file ``view`` cannot render: missing, empty, not rollouts."""


class ScriptError(UsageError, ValueError):
    """A stub-server script that cannot be used; the message names the place."""


class StubServerError(UsageError):
    """A stub server that cannot be set up: faults out of range, a port taken, no tokenizer."""


class TrainerError(HermesEnvgenError):
    """run-api or the minimal trainer failed: did not start, went away, sent no batch in time."""


class NoBatchInTime(TrainerError, TimeoutError):
    """run-api sent no batch within the timeout (also a TimeoutError, as callers expect)."""


class GGUFTokenizerError(UsageError):
    """A GGUF file that yields no tokenizer: missing, not GGUF, or of a kind not supported."""


class EnvRunFailed(HermesEnvgenError, AssertionError):
    """An env mode exited non-zero or ran past its timeout; the message carries its output.

    Also an AssertionError, so that pytest reports it as a test failure with that output.
    """


def exit_code(error: BaseException) -> int:
    """The exit code a command ends with when ``error`` stops it: the one place codes are chosen.

    hermes-envgen's errors carry theirs (1 a failure, 2 a user mistake, 3 update conflicts,
    130 Ctrl-C); Ctrl-C itself is 130; anything else a command reports (an OSError in a hook)
    is a failure, 1. ``tests/test_architecture.py`` finds a second place that chooses codes.
    """
    if isinstance(error, HermesEnvgenError):
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return Interrupted.exit_code
    return HermesEnvgenError.exit_code


def report(error: BaseException) -> int:
    """Say ``error`` in one line on stderr (``error: ...``); the exit code it means."""
    print(f"error: {error}", file=sys.stderr)
    return exit_code(error)
