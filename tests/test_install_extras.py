"""A node that only runs an env installs the runtime alone: no generator, no toolset's extra.

hermes-envgen from this checkout goes into a fresh venv with none of its extras (uv, offline,
from the cache scripts/setup.sh filled, at the lock's versions: template/constraints.txt).
There the runtime and the test kit import, an env runs in process mode against the stub, an
env whose toolset lacks its library stops at start-up in one line naming the extra, and the
generator's commands say which extra they need.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from hermes_envgen.testing import validate_groups
from hermes_envgen.testing.runner import OFFLINE_ENVIRONMENT

UV = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(UV is None, reason="needs uv (scripts/setup.sh installs it)"),
]

# What the extras install (pyproject.toml's generator, file, web and mcp): none may be there.
EXTRAS_LIBRARIES = ("copier", "re2", "bm25s", "lxml", "mcp")
PROBE = """
import importlib, importlib.util, json, sys
import hermes_envgen.runtime as runtime, hermes_envgen.testing as testing
names = [(m, n) for m in (runtime, testing) for n in m.__all__]
unresolved = [f"{m.__name__}.{n}" for m, n in names if getattr(m, n, None) is None]
extras = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None]
print(json.dumps({"unresolved": unresolved, "installed": extras}))
"""


def run(command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        **kwargs,
    )  # fmt: skip


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    """A fresh venv holding hermes-envgen from this checkout and no extra of it."""
    where = tmp_path_factory.mktemp("bare")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(UV_OFFLINE="1", UV_COMPILE_BYTECODE="0")
    venv = where / "venv"
    made = run([UV, "venv", "--quiet", "--python", sys.executable, str(venv)], 120, env=env)
    assert made.returncode == 0, made.stderr
    constraints = str(REPO / "template" / "constraints.txt")
    python = str(venv / "bin" / "python")
    installed = run([UV, "pip", "install", "--quiet", "--python", python, "-c", constraints,
                     str(REPO)], 600, env=env)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


def bare_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **OFFLINE_ENVIRONMENT}


def test_the_runtime_and_the_test_kit_import_without_any_extra(bare_venv):
    probe = run([str(bare_venv / "bin" / "python"), "-c", PROBE, *EXTRAS_LIBRARIES], 300,
                env=bare_env(), cwd=bare_venv)  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert json.loads(probe.stdout.splitlines()[-1]) == {"unresolved": [], "installed": []}


def test_the_generator_commands_name_their_extra(bare_venv, tmp_path):
    made = run([str(bare_venv / "bin" / "hermes-envgen"), "new", "my-env", "--defaults"], 120,
               env=bare_env(), cwd=tmp_path)  # fmt: skip
    assert made.returncode == 2
    assert made.stderr.strip() == "error: new needs copier: pip install 'hermes-envgen[generator]'"
    assert not (tmp_path / "my-env").exists()


def test_an_env_runs_in_process_mode_and_a_toolset_without_its_library_stops_it(
    bare_venv, stub_server, offline_tokenizer, tmp_path
):
    stub = stub_server(REPO / "examples" / "stub_script.yaml")
    python = str(bare_venv / "bin" / "python")
    env_file = str(REPO / "examples" / "terminal_env.py")
    flags = ["--openai.base_url", stub.base_url, "--env.tokenizer_name", str(offline_tokenizer),
             "--env.total_steps", "1", "--env.use_wandb", "false",
             "--env.data_path_to_save_groups", str(tmp_path / "groups.jsonl")]  # fmt: skip

    # The example enables terminal and file; file's search_files needs re2 (the file extra).
    refused = run([python, env_file, "process", *flags], 180, env=bare_env(), cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: the file toolset needs re2, which is not installed: "
        "pip install 'hermes-envgen[file]' (or take file out of enabled_toolsets)"
    )
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "groups.jsonl").exists()  # stopped before any rollout

    config = tmp_path / "terminal-only.yaml"
    config.write_text("env:\n  enabled_toolsets: [terminal]\n")
    ran = run([python, env_file, "process", "--config", str(config), *flags], 180,
              env=bare_env(), cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    groups = validate_groups(tmp_path / "groups.jsonl", group_size=4)
    assert any(score > 0 for score in groups[0]["scores"])  # the scripted solutions were paid
