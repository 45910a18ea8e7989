"""Which backend a run gets: bwrap by default where it works, local only with a warning, never
as root unless opted in, and never with the run's own secrets in the agent's reach.

A rollout on local as root read ``OPENAI_API_KEY`` from ``/proc/<run pid>/environ`` and wrote
host files, and local was the generated default, with no warning.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import EXAMPLES
from helpers.sandbox import needs_bwrap

from hermes_envgen.runtime.env.config import HermesAgentEnvConfig
from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.sandbox.choice import choose_backend
from hermes_envgen.testing.runner import offline_environment

NOBODY = [shutil.which("setpriv") or "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to refuse it, and setpriv)")
LOCAL_WARNING = "warning: sandbox_backend is local"
ROOT_REFUSAL = "as root gives the agent this whole host"


def test_every_env_defaults_to_auto():
    assert HermesAgentEnvConfig().sandbox_backend == "auto"
    assert HermesAgentEnvConfig().sandbox_allow_unsafe_local is False


@needs_bwrap
def test_auto_is_bwrap_where_bwrap_works(caplog):
    assert choose_backend("auto") == "bwrap"
    assert LOCAL_WARNING not in caplog.text


@needs_root
def test_local_as_root_is_refused_unless_opted_in(caplog):
    with pytest.raises(EnvConfigError, match="sandbox_allow_unsafe_local true"):
        choose_backend("local")
    assert choose_backend("local", allow_unsafe_local=True) == "local"
    assert LOCAL_WARNING in caplog.text and "unisolated on this host as root" in caplog.text


def shared_directory() -> Path:
    """A directory the unprivileged user can use (pytest's tmp_path is root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix="hermes-envgen-choice-"))
    directory.chmod(0o777)
    return directory


def as_nobody(code: str, directory: Path, **env: str) -> subprocess.CompletedProcess:
    environment = offline_environment() | {"PYTHONPATH": str(EXAMPLES)} | env
    return subprocess.run(
        [*NOBODY, sys.executable, "-c", code],
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@needs_root
def test_auto_without_bwrap_falls_back_to_local_with_one_warning_line():
    directory = shared_directory()
    try:
        code = (
            "from hermes_envgen.runtime.sandbox.choice import choose_backend as c; print(c('auto'))"
        )
        no_bwrap = "/nonexistent"  # PATH without bwrap, as on a host without bubblewrap
        result = as_nobody(code, directory, PATH=no_bwrap)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "local"
    warnings = [line for line in result.stderr.splitlines() if LOCAL_WARNING in line]
    assert len(warnings) == 1, result.stderr
    assert "bwrap is not installed" in warnings[0] and "auto fell back" in warnings[0]
    assert "read and change its files" in warnings[0] and "train on bwrap or docker" in warnings[0]


@pytest.mark.slow
@needs_root
def test_the_env_as_root_on_local_exits_2_naming_the_setting(offline_tokenizer, tmp_path):
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "terminal_env.py"), "evaluate",
         "--openai.base_url", "http://127.0.0.1:9/v1", "--env.tokenizer_name",
         str(offline_tokenizer), "--env.sandbox_root", str(tmp_path / "sandboxes"),
         "--env.data_dir_to_save_evals", str(tmp_path / "evals"),
         "--env.sandbox_backend", "local"],
        env=offline_environment(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sandbox_backend local as root gives the agent"), last
    assert "--env.sandbox_allow_unsafe_local true" in last and "Traceback" not in result.stderr


# Run as an unprivileged user: the env (its secret in its environment) on local, and a command
# of the agent's that reads the env's /proc/<pid>/environ.
READ_THE_RUN = """
import asyncio, os, sys
from terminal_env import TerminalTaskEnv
from hermes_envgen.runtime import ToolContext
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
from hermes_envgen.testing import build_env

tokenizer, root, through_env = sys.argv[1], sys.argv[2], sys.argv[3] == "env"
if through_env:
    env = build_env(TerminalTaskEnv, "http://127.0.0.1:9/v1", tokenizer, root,
                    sandbox_backend="local")
    manager = env.sandboxes
else:
    manager = SandboxManager(SandboxSettings(backend="local", root=root))

async def main():
    ctx = ToolContext("reader", manager)
    out = await ctx.terminal(f"tr '\\\\0' '\\\\n' < /proc/{os.getpid()}/environ; echo exit=$?")
    print(out["output"])
    await manager.close_all()

asyncio.run(main())
"""


@pytest.mark.slow
@needs_root
@pytest.mark.parametrize("through_env", [True, False], ids=["env", "bare-manager"])
def test_a_local_command_cannot_read_the_runs_secrets(offline_tokenizer, through_env):
    directory = shared_directory()
    try:
        tokenizer = directory / "tokenizer"
        shutil.copytree(offline_tokenizer, tokenizer)
        os.system(f"chmod -R a+rX {tokenizer}")
        result = subprocess.run(
            [*NOBODY, sys.executable, "-c", READ_THE_RUN, str(tokenizer), str(directory / "w"),
             "env" if through_env else "manager"],
            cwd=directory,
            env=offline_environment()
            | {"PYTHONPATH": str(EXAMPLES), "OPENAI_API_KEY": "sk-run-secret-0123456789"},
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-3000:]
    if through_env:  # the env hides itself on local: the same user's commands are refused
        assert "sk-run-secret" not in result.stdout, result.stdout
        assert "Permission denied" in result.stdout and "exit=1" in result.stdout
        assert LOCAL_WARNING in result.stderr
    else:  # what it stops: a bare process of the same user is an open book
        assert "OPENAI_API_KEY=sk-run-secret-0123456789" in result.stdout
