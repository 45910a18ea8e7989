"""Run an env's CLI modes (process, evaluate, serve) as subprocesses, offline and bounded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
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
    try:
        completed = subprocess.run(
            command,
            cwd=cwd,
            env=offline_environment(extra_env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"")[-4000:], (exc.stderr or b"")[-4000:]
        raise EnvRunFailed(f"{mode} ran past {timeout:g} s\n{output}") from None
    if completed.returncode != 0:
        raise EnvRunFailed(
            f"{mode} exited {completed.returncode}\n--- stdout\n{completed.stdout[-4000:]}"
            f"\n--- stderr\n{completed.stderr[-6000:]}"
        )
    return completed
