"""Which backend a run's sandboxes use: ``auto`` picks the safe one this host has.

``auto`` (the default of every env) is bwrap where bubblewrap can start a sandbox here (and a
python3 under /usr is there for its anchor), else local with a one-line warning that says what
local does not protect. local as root gives the agent the host, so it refuses to start unless
``sandbox_allow_unsafe_local`` is set; on local the run's process is made non-dumpable, so the
agent's commands (the same user, not root) cannot read its environment (API keys) or memory
through ``/proc/<pid>``.
"""

from __future__ import annotations

import ctypes
import functools
import getpass
import logging
import os
import shutil
import subprocess

from hermes_envgen.runtime.errors import EnvConfigError, SandboxError

logger = logging.getLogger(__name__)

AUTO = "auto"
UNSAFE_LOCAL_SETTING = "sandbox_allow_unsafe_local"
_PR_SET_DUMPABLE = 4


@functools.cache
def bwrap_unusable() -> str | None:
    """Why bwrap cannot run sandboxes here, or None when it can (tried once per process)."""
    from hermes_envgen.runtime.sandbox.bwrap.anchor import sandbox_python

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed"
    try:
        sandbox_python()
    except SandboxError as exc:
        return str(exc)
    try:  # user namespaces may be off (sysctl, AppArmor): only a real start tells
        tried = subprocess.run(
            [
                bwrap,
                "--ro-bind",
                "/",
                "/",
                "--unshare-pid",
                "--die-with-parent",
                "/usr/bin/true",
            ],
            capture_output=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not start: {exc}"
    if tried.returncode != 0:
        why = (tried.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        return f"bwrap cannot start a sandbox here ({why})"
    return None


def choose_backend(name: str, allow_unsafe_local: bool = False) -> str:
    """The backend ``name`` stands for here; EnvConfigError for local as root, not opted in.

    Logs one warning line whenever the run's sandboxes will be local.
    """
    reason = ""
    if name == AUTO:
        unusable = bwrap_unusable()
        if unusable is None:
            return "bwrap"
        name, reason = "local", f" ({unusable}; sandbox_backend auto fell back to it)"
    if name != "local":
        return name
    if os.geteuid() == 0 and not allow_unsafe_local:
        raise EnvConfigError(
            f"sandbox_backend local{reason} as root gives the agent this whole host (every "
            "file, every process and its secrets): use bwrap or docker, or set "
            f"--env.{UNSAFE_LOCAL_SETTING} true on a machine you can lose"
        )
    logger.warning(
        "warning: sandbox_backend is local%s: the agent's commands run unisolated on this host "
        "as %s, able to read and change its files (checks and other runs included), reach the "
        "network and use any memory, disk or processes; train on bwrap or docker",
        reason,
        _user(),
    )
    return name


def hide_run_from_commands() -> bool:
    """Make this process non-dumpable: /proc/<pid>/environ, mem and fds become root's.

    The local backend's commands run as this process's user; without this they could read
    the run's API keys from its environment. Root's commands still can (local as root is
    refused unless opted in). Whether it took effect.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.geteuid()}"
