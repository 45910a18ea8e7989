"""Running copier for hermes-envgen: git redirected, no prompts without a terminal, and its
errors turned into ours with one-line messages.
"""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr
from typing import Any

from copier.errors import InteractiveSessionError, InvalidTypeError, UserMessageError
from plumbum import ProcessExecutionError, local

from hermes_envgen.errors import GitError, UsageError
from hermes_envgen.generate.git import one_line

# copier's words for a bad answer (pinned by tests/generate/test_copier_session.py).
_VALIDATION_ERROR = re.compile(r"Validation error for question '(\w+)': (.*)")
_REQUIRED = re.compile(r'Question "(\w+)" is required')
_INVALID_CHOICE = re.compile(r"Invalid choice for '(\w+)': (.*)")


def stdin_is_terminal() -> bool:
    """Whether copier can prompt: stdin is a terminal."""
    try:
        return os.isatty(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):
        return False


@contextmanager
def copier_session(
    data: Mapping[str, Any], *, prompts: bool, git_env: Mapping[str, str]
) -> Iterator[None]:
    """Run copier inside: ``git_env`` set for its git, stdin closed unless ``prompts``."""
    with (
        _translate_errors(data),
        _no_prompts(not prompts),
        _typed_answer_messages(),
        local.env(**git_env),
    ):
        yield


# What VALUE may be, for a question whose default some answers leave out.
_REQUIRED_HINTS = {
    "judge_base_url": "the judge's URL, or 'policy' to let the policy grade its own answers",
}


def answer_error(exc: Exception, data: Mapping[str, Any]) -> UsageError | None:
    """Copier's ValueError for a bad answer or version, as one line naming what is wrong.

    None for any other ValueError: copier raises plain ValueErrors for its bugs and a
    template's too, and those must surface as bugs, not as the user's mistake.
    """
    message = one_line(str(exc))
    if found := _VALIDATION_ERROR.match(message):
        key, reason = found.groups()
        given = f" {data[key]!r}" if key in data else ""
        return UsageError(f"invalid {key}{given}: {reason}")
    if required := _REQUIRED.match(message):
        key = required[1]
        hint = f" ({_REQUIRED_HINTS[key]})" if key in _REQUIRED_HINTS else ""
        return UsageError(f"{key} has no default for these answers: pass --data {key}=VALUE{hint}")
    if choice := _INVALID_CHOICE.match(message):
        key, reason = choice.groups()
        return UsageError(f"invalid {key}: {reason}")
    if message.startswith("Unknown revision: "):  # a ref the template repository lacks
        return UsageError(f"template version not found: {message}")
    return None


@contextmanager
def _translate_errors(data: Mapping[str, Any]) -> Iterator[None]:
    """Turn copier's exceptions that mean a user mistake into ours, with one-line messages."""
    try:
        yield
    except InteractiveSessionError as exc:
        raise UsageError(
            "no terminal to ask the questions on: pass --defaults, and --data KEY=VALUE "
            "for the answers to set"
        ) from exc
    except UserMessageError as exc:
        raise UsageError(one_line(str(exc))) from exc
    except InvalidTypeError as exc:  # also copier's word for a question of a type it lacks
        if not str(exc).startswith("Invalid answer "):
            raise
        raise UsageError(one_line(str(exc))) from exc
    except ProcessExecutionError as exc:
        detail = one_line(exc.stderr or str(exc))
        if "invalid reference" in detail:  # a version the template source does not hold
            raise UsageError(f"template version not found: {detail}") from exc
        raise GitError(f"git failed: {detail}") from exc
    except ValueError as exc:  # copier words bad answers as plain ValueErrors
        error = answer_error(exc, data)
        if error is None:
            raise
        raise error from exc


# What a typed question's answer must be, said where copier's prompt says only "Invalid input".
_EXPECTED = {"int": "a whole number", "float": "a number", "json": "JSON", "yaml": "YAML"}


@contextmanager
def _typed_answer_messages() -> Iterator[None]:
    """On a terminal, an answer of the wrong type says what is expected, not "Invalid input".

    copier's prompt validator says only that when the answer does not parse (an empty field
    of an int question, say); its other messages (the question's own validator) stay as they
    are. Wraps copier's Question for the session only; a copier without it is left alone.
    """
    from copier import _user_data

    question = getattr(_user_data, "Question", None)
    original = getattr(question, "get_questionary_structure", None)
    if question is None or original is None:
        yield
        return

    def structure(self: Any) -> dict[str, Any]:
        result = original(self)
        validate, expected = result.get("validate"), _EXPECTED.get(self.get_type_name())
        if validate is not None and expected is not None:

            def said(answer: str) -> Any:
                verdict = validate(answer)
                return (
                    f"expected {expected}, not {answer!r}"
                    if verdict == "Invalid input"
                    else verdict
                )

            result["validate"] = said
        return result

    question.get_questionary_structure = structure
    try:
        yield
    finally:
        question.get_questionary_structure = original


@contextmanager
def _no_prompts(enabled: bool) -> Iterator[None]:
    """Point stdin at /dev/null, so copier fails at once instead of prompting a non-terminal."""
    if not enabled:
        yield
        return
    saved = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    captured = io.StringIO()
    try:
        os.dup2(devnull, 0)
        with redirect_stderr(captured):
            yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(devnull)
        # Pass everything on but prompt_toolkit's notice, which would only repeat our message.
        for line in captured.getvalue().splitlines(keepends=True):
            if not line.startswith("Warning: Input is not a terminal"):
                sys.stderr.write(line)
