"""Run an env's CLI modes (process, evaluate, serve) as subprocesses, offline and bounded."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from hermes_envgen.errors import EnvRunFailed

# Tests never reach the network: hub look-ups fail at once and W&B stays off.
OFFLINE_ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
}
GRACE_SECONDS = 30.0  # for an interrupted or timed-out env to remove its sandboxes


def offline_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The current environment with the offline switches set."""
    return {**os.environ, **OFFLINE_ENVIRONMENT, **(extra or {})}


def run_env_mode(
    target: str | Path,
    mode: str,
    *args: str,
    flags: dict[str, object] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 180.0,
    python: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run an env's mode offline; fail with its output if it fails or runs past ``timeout``.

    ``target`` is the env's file (``python FILE MODE ARGS``) or its module (``python -m``);
    ``flags`` such as ``{"env.total_steps": 1}`` become ``--env.total_steps 1``.
    """
    is_file = isinstance(target, Path) or str(target).endswith(".py")
    entry = [str(target)] if is_file else ["-m", str(target)]
    for name, value in (flags or {}).items():
        args += (f"--{name}", str(value).lower() if isinstance(value, bool) else str(value))
    command: Sequence[str] = [python or sys.executable, *entry, mode, *args]
    # Its own process group: a terminal's Ctrl-C reaches the env once, forwarded from here,
    # so that the env's cleanup (sandboxes, mounts) is not cut short by a second signal.
    with interrupts_held() as held:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=offline_environment(extra_env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a group of its own (process_group=0 is Python 3.11+)
        )
    with process:
        try:
            if held:
                raise KeyboardInterrupt
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stdout, stderr = stop_gracefully(process, signal.SIGTERM)
            raise EnvRunFailed(
                f"{mode} ran past {timeout:g} s\n--- stdout\n{stdout[-4000:]}"
                f"\n--- stderr\n{stderr[-4000:]}"
            ) from None
        except BaseException:  # KeyboardInterrupt above all: the env removes its sandboxes
            stop_gracefully(process, signal.SIGINT)
            raise
    if process.returncode != 0:
        raise EnvRunFailed(
            f"{mode} exited {process.returncode}\n--- stdout\n{stdout[-4000:]}"
            f"\n--- stderr\n{stderr[-6000:]}"
        )
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@contextlib.contextmanager
def interrupts_held() -> Iterator[list[int]]:
    """Hold a Ctrl-C (SIGINT) that arrives inside the block; yields the list it is held in.

    For the start of a child process: a KeyboardInterrupt raised inside ``Popen`` after its fork
    returns no handle, and the child runs on with nothing left to stop it. The caller checks
    the list once it has the handle, and stops the child itself. Only the main thread is ever
    interrupted (and may set a handler); another thread's block holds nothing. A handler other
    than Python's default is left alone.
    """
    held: list[int] = []
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield held
        return
    signal.signal(signal.SIGINT, lambda signum, _frame: held.append(signum))
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def stop_gracefully(process: subprocess.Popen, signum: int) -> tuple[str, str]:
    """Signal the env's process group, give it ``GRACE_SECONDS`` to clean up, then kill it.

    Returns what it wrote meanwhile. The process has exited (and is reaped) on return.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
    try:
        return process.communicate(timeout=GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return process.communicate()
