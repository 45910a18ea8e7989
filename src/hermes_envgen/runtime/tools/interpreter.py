"""The ``python`` toolset: a Python interpreter in the rollout's sandbox that keeps its state.

Each call is one sandbox command (so the sandbox's user, limits, network rules and
environment apply on every backend): a small client, run by the sandbox's ``python3``,
hands the code to the rollout's interpreter over a Unix socket in the sandbox's ``/tmp``
and prints its reply. The interpreter itself (see ``interpreter_program``) is started by the
first call and lives until the agent's processes are stopped or the sandbox closes.

What the model gets back: stdout, stderr, the repr of a final expression, the traceback of
an exception, each capped; a notice when a call was interrupted by the timeout (state
kept), when the interpreter had to be killed, or when it had died since the last call and
this one ran in a fresh interpreter, so that the model knows its variables are gone.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
import shutil
import tempfile
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

from hermes_envgen.runtime.errors import ToolExecutionError
from hermes_envgen.runtime.sandbox import Sandbox
from hermes_envgen.runtime.tools.programs import boot_argv
from hermes_envgen.runtime.tools.registry import tool

MAX_CODE_BYTES = 64_000  # a call's code travels in the command's argv (128 KiB per argument)
INTERRUPT_GRACE = 2.0  # the program's: SIGINT, then this long before the kill
COMMAND_SLACK = 15.0  # the sandbox command's timeout above the call's (start-up, the kill)
SERVICE = "python"  # the key of PythonSettings in a ToolContext's services


@dataclass
class PythonSettings:
    """How the ``python`` tool runs code; from the env config (``python_*`` settings)."""

    timeout: float = 30.0  # seconds per call before the code is interrupted
    max_output_bytes: int = 32_000  # of stdout and of stderr, each, per call
    command: str = "python3"  # the sandbox's Python


@dataclass
class _Interpreter:
    """The host's memory of one sandbox's interpreter."""

    directory: str  # its socket's directory, as the sandbox sees it
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one call at a time
    started: bool = False  # a call has run: a fresh interpreter now means a restart


_interpreters: weakref.WeakKeyDictionary[Sandbox, _Interpreter] = weakref.WeakKeyDictionary()


def _interpreter(sandbox: Sandbox, context: Any) -> _Interpreter:
    state = _interpreters.get(sandbox)
    if state is None:
        token = uuid.uuid4().hex
        local = sandbox.workdir != "/workspace"  # the local backend: the host's /tmp
        base = tempfile.gettempdir() if local else "/tmp"
        state = _interpreters[sandbox] = _Interpreter(f"{base}/.hermes-python-{token}")
        if local and context is not None:  # the sandbox's /tmp is the host's: clean it up
            context.add_cleanup(lambda: asyncio.to_thread(_remove, state.directory))
    return state


def _remove(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def python_command(settings: PythonSettings, directory: str, code: str) -> str:
    """The sandbox command of one call."""
    encoded = base64.b64encode(code.encode("utf-8", "surrogateescape")).decode("ascii")
    argv = boot_argv(settings.command, "interpreter_program", "client", directory,
                     f"{settings.timeout:g}", str(settings.max_output_bytes), encoded)  # fmt: skip
    return shlex.join(argv)


async def run_python(
    sandbox: Sandbox, code: str, settings: PythonSettings, context: Any = None
) -> dict[str, str]:
    """Run ``code`` in the sandbox's interpreter; the reply's fields that have something."""
    if len(code.encode("utf-8", "surrogateescape")) > MAX_CODE_BYTES:
        raise ToolExecutionError(
            f"python: the code is longer than {MAX_CODE_BYTES} bytes; write it to a file "
            "and run it with exec(open(path).read())"
        )
    state = _interpreter(sandbox, context)
    async with state.lock:
        result = await sandbox.run(
            python_command(settings, state.directory, code),
            timeout=settings.timeout + INTERRUPT_GRACE + COMMAND_SLACK,
        )
        reply = _reply(result.output)
        if reply is None:
            detail = result.output.strip()[-800:] or "no output"
            raise ToolExecutionError(
                f"python: the interpreter could not be reached (exit {result.exit_code}): {detail}"
            )
        if "failed" in reply:
            raise ToolExecutionError(f"python: {reply['failed']}")
        answer = reply.get("reply")
        died = not isinstance(answer, dict)
        restarted = bool(reply.get("new_interpreter")) and state.started
        state.started = True  # from now on, a fresh interpreter is a restart to report
    fields = ("stdout", "stderr", "result", "error")
    out = {k: answer[k] for k in fields if answer.get(k)} if isinstance(answer, dict) else {}
    notice = _notice(bool(reply.get("timed_out")), died, settings.timeout, restarted)
    return ({"notice": notice} if notice else {}) | out


def _reply(output: str) -> dict | None:
    """The client's JSON line (its last line of output), or None."""
    lines = output.strip().splitlines()
    if not lines:
        return None
    try:
        reply = json.loads(lines[-1])
    except ValueError:
        return None
    return reply if isinstance(reply, dict) else None


def _notice(timed_out: bool, died: bool, timeout: float, restarted: bool) -> str:
    notes = []
    if restarted:
        notes.append(
            "the interpreter had stopped since the last call (it exited, was killed or ran out "
            "of memory); this call ran in a new one: earlier variables and imports are gone"
        )
    if timed_out and not died:
        notes.append(f"interrupted after {timeout:g} s (KeyboardInterrupt); the state is kept")
    elif died:
        cause = f"did not stop {timeout:g} s in" if timed_out else "died"
        notes.append(
            f"the code {cause}: the interpreter was killed; the next call starts a new one, "
            "without the variables and imports of earlier calls"
        )
    return "; ".join(notes)


@tool(toolset="python")
async def python(code: str, *, sandbox: Sandbox, context: Any) -> str:
    """Run Python code in a persistent interpreter in your workspace; variables, imports and
    functions are kept from one call to the next, and a final expression's value is returned.

    Args:
        code: Python statements to run, as in a notebook cell.
    """
    settings = context.service(SERVICE, PythonSettings) if context is not None else None
    reply = await run_python(sandbox, code, settings or PythonSettings(), context)
    return json.dumps(reply, ensure_ascii=False) if reply else "(no output)"
