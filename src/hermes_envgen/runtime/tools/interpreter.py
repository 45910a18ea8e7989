"""The ``python`` toolset: a Python interpreter in the rollout's sandbox that keeps its state.

The interpreter (see ``interpreter_program``) runs in the sandbox (so the sandbox's user,
limits, network rules and environment apply on every backend), listening on a Unix socket in
the sandbox's ``/tmp``; it is started by the first call, which is a sandbox command (a small
client, run by the sandbox's ``python3``, that starts it, hands it the code and prints its
reply), and lives until the agent's processes are stopped or the sandbox closes. The host
then keeps a connection to that socket (``kept_channel``: local, bwrap, and docker through
its container's kept channel), and a call is one round trip on it (a timeout's interrupt and
a kill are commands); whenever that connection is gone, a call is a command as the first.

What the model gets back: stdout, stderr, the repr of a final expression, the traceback of
an exception, each capped; a notice when a call was interrupted by the timeout (state
kept), when the interpreter had to be killed, or when it had died since the last call and
this one ran in a fresh interpreter, so that the model knows its variables are gone.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shlex
import shutil
import tempfile
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

from hermes_envgen.runtime.errors import SandboxError, ToolExecutionError
from hermes_envgen.runtime.sandbox import Sandbox
from hermes_envgen.runtime.tools.kept_channel import Stream, connect_below, usable
from hermes_envgen.runtime.tools.programs import boot_argv
from hermes_envgen.runtime.tools.registry import tool

MAX_CODE_BYTES = 64_000  # a call's code travels in the command's argv (128 KiB per argument)
INTERRUPT_GRACE = 2.0  # the program's: SIGINT, then this long before the kill
COMMAND_SLACK = 15.0  # the sandbox command's timeout above the call's (start-up, the kill)
SERVICE = "python"  # the key of PythonSettings in a ToolContext's services
MAX_REPLY = 16 << 20  # bytes of a reply on the kept connection (capped outputs, escaped)


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
    stream: Stream | None = None  # the host's kept connection to it
    reached: tuple[str | None, bool] = (None, False)  # the sandbox as it was when connected

    def drop(self) -> None:
        """Forget the kept connection (it ended, or its next reply cannot be trusted)."""
        if self.stream is not None:
            self.stream[1].close()
            self.stream = None


_interpreters: weakref.WeakKeyDictionary[Sandbox, _Interpreter] = weakref.WeakKeyDictionary()


def _interpreter(sandbox: Sandbox, context: Any) -> _Interpreter:
    state = _interpreters.get(sandbox)
    if state is None:
        token = uuid.uuid4().hex
        local = sandbox.workdir != "/workspace"  # the local backend: the host's /tmp
        base = os.path.realpath(tempfile.gettempdir()) if local else "/tmp"
        state = _interpreters[sandbox] = _Interpreter(f"{base}/.hermes-python-{token}")
        if context is not None:
            context.add_cleanup(lambda: _forget(state, local))
    return state


async def _forget(state: _Interpreter, local: bool) -> None:
    """At the rollout's end: close the kept connection; on the local backend, whose /tmp is
    the host's, remove the socket's directory (the interpreter ends with the sandbox)."""
    state.drop()
    if local:
        await asyncio.to_thread(shutil.rmtree, state.directory, ignore_errors=True)


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
        reply = await _over_channel(sandbox, state, code, settings)
        if reply is None:  # no kept connection (yet): a command, which starts the interpreter
            reply = await _by_command(sandbox, state, code, settings)
            state.stream = await connect_below(sandbox, state.directory, MAX_REPLY)
            state.reached = (sandbox.host_root(), sandbox.verifying)
        answer = reply.get("reply")
        died = not isinstance(answer, dict)
        restarted = bool(reply.get("new_interpreter")) and state.started
        state.started = True  # from now on, a fresh interpreter is a restart to report
    fields = ("stdout", "stderr", "result", "error")
    out = {k: answer[k] for k in fields if answer.get(k)} if isinstance(answer, dict) else {}
    notice = _notice(bool(reply.get("timed_out")), died, settings.timeout, restarted)
    return ({"notice": notice} if notice else {}) | out


async def _by_command(
    sandbox: Sandbox, state: _Interpreter, code: str, settings: PythonSettings
) -> dict:
    """The client's reply to a call sent by a sandbox command (which starts the interpreter
    when none answers)."""
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
    return reply


async def _over_channel(
    sandbox: Sandbox, state: _Interpreter, code: str, settings: PythonSettings
) -> dict | None:
    """The reply to a call sent on the kept connection, as the client would print it; None
    when there is no connection to send it on (nothing ran).

    At the timeout the code is interrupted, and the interpreter killed if it does not answer
    within ``INTERRUPT_GRACE``; one that ends the connection (it died, or was killed by the
    agent) or answers garbage is killed and its reply is None: the next call starts anew.
    """
    now = (sandbox.host_root(), sandbox.verifying)
    if state.stream is not None and (not usable(state.stream) or state.reached != now):
        state.drop()  # it ended, or the sandbox restarted or ended the agent's processes
    if state.stream is None:
        return None
    reader, writer = state.stream
    request = code.encode("utf-8", "surrogateescape")
    try:
        writer.write(len(request).to_bytes(4, "big") + request)
        await writer.drain()
    except OSError:  # it had gone: nothing ran
        state.drop()
        return None
    timed_out = False
    try:
        try:
            answer = await _receive(reader, settings.timeout)
        except asyncio.TimeoutError:
            timed_out = True
            await _signal(sandbox, state, settings, "interrupt")
            try:
                answer = await _receive(reader, INTERRUPT_GRACE)
            except asyncio.TimeoutError:
                answer = None
        parsed = json.loads(answer) if answer is not None else None
        if answer is not None and not isinstance(parsed, dict):
            raise ValueError("not an object")
    except (ValueError, OSError):  # garbage on the socket: not an interpreter of ours
        parsed = None
    except asyncio.CancelledError:  # its reply would come to the next call: not this way
        state.drop()
        raise
    if parsed is None:
        state.drop()
        await _signal(sandbox, state, settings, "kill")
    return {"new_interpreter": False, "timed_out": timed_out, "reply": parsed}


async def _receive(reader: asyncio.StreamReader, timeout: float) -> bytes | None:
    """One length-prefixed reply within ``timeout`` seconds; None at the end of the stream."""
    try:
        header = await asyncio.wait_for(reader.readexactly(4), timeout)
        size = int.from_bytes(header, "big")
        if size > MAX_REPLY:
            raise ValueError(f"a reply of {size} bytes")
        return await asyncio.wait_for(reader.readexactly(size), COMMAND_SLACK)
    except asyncio.IncompleteReadError:
        return None


async def _signal(
    sandbox: Sandbox, state: _Interpreter, settings: PythonSettings, mode: str
) -> None:
    """Interrupt the interpreter's code, or kill it (``mode``), by a sandbox command."""
    argv = boot_argv(settings.command, "interpreter_program", mode, state.directory)
    with contextlib.suppress(SandboxError):  # a closed sandbox: nothing left to signal
        await sandbox.run(shlex.join(argv), timeout=COMMAND_SLACK)


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
