"""Checks run with pytest, against a workspace that plants what steers pytest.

A ``pytest.py`` in the workspace won a ``python3 -m pytest`` check (the wrong answer paid 1.0 on
bwrap and local), and on local, where the checks were written inside the workspace, a
``conftest.py``, ``pytest.ini`` or ``pyproject.toml`` won even with ``-I``. ``verify_with_pytest``
runs the checks from their own directory, isolated, with their own ini file and no conftest
above them: each planted file changes nothing, and a right answer still passes.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from helpers.sandbox import BWRAP, LOCAL, make_manager, needs_bwrap

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.rewards import verify_in_sandbox, verify_with_pytest
from hermes_envgen.testing.reward_checks import TAMPER_COMMAND

# The check: answer.txt in the workspace holds 6.
CHECKS = {
    "test_answer.py": (
        "import os, pathlib\n\n\n"
        "def test_answer():\n"
        "    path = pathlib.Path(os.environ['WORKSPACE']) / 'answer.txt'\n"
        "    assert path.read_text().strip() == '6'\n"
    )
}

EXIT_0 = "import os\nos._exit(0)\n"
PASS_WITHOUT_RUNNING = {
    "pytest.py": EXIT_0,
    "conftest.py": EXIT_0,
    "pytest.ini": "[pytest]\naddopts = --collect-only -q\n",
    "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "--collect-only -q"\n',
    "pyproject.toml[tool.pytest]": '[tool.pytest]\naddopts = ["--collect-only", "-q"]\n',
}


def _bwrap_has_pytest() -> bool:
    try:
        found = subprocess.run(
            ["/usr/bin/python3", "-c", "import pytest"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0


BWRAP_PYTEST = pytest.param(
    "bwrap",
    id="bwrap",
    marks=[
        needs_bwrap,
        pytest.mark.skipif(
            not _bwrap_has_pytest(),
            reason="no pytest for /usr/bin/python3 (scripts/install-system-deps.sh installs "
            "python3-pytest)",
        ),
    ],
)
BACKENDS = [LOCAL, BWRAP_PYTEST]
assert BWRAP.values == BWRAP_PYTEST.values


def python_for(backend: str) -> str:
    # local runs this test's interpreter; bwrap sees only the host's /usr
    return sys.executable if backend == "local" else "/usr/bin/python3"


def run(backend, tmp_path, planted: dict[str, str], answer: str, check):
    manager = make_manager(tmp_path, backend, command_timeout=60)

    async def main():
        ctx = ToolContext("pytest-check", manager)
        await ctx.write_file("answer.txt", answer + "\n")
        for name, content in planted.items():
            name = name.partition("[")[0]
            await ctx.write_file(name, content)
            # beside the workspace too (the run's directory on local; read-only on bwrap)
            await ctx.terminal(f"cp {name} ../{name} 2>/dev/null; true")
        try:
            return await check(ctx)
        finally:
            await manager.close_all()

    return asyncio.run(asyncio.wait_for(main(), 120))


def safe(backend):
    return lambda ctx: verify_with_pytest(ctx, CHECKS, python=python_for(backend), timeout=60)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_workspace_pytest_py_wins_a_plain_python_m_pytest(backend, tmp_path):
    """The attack, as it was: what verify_with_pytest exists to stop."""
    python = python_for(backend)

    def plain(ctx):
        return verify_in_sandbox(ctx, CHECKS, f"{python} -m pytest -q {{checks}}", timeout=60)

    outcome = run(backend, tmp_path, {"pytest.py": EXIT_0}, "7", plain)
    assert outcome["exit_code"] == 0, outcome


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("planted", sorted(PASS_WITHOUT_RUNNING))
def test_no_planted_file_makes_a_wrong_answer_pass(backend, planted, tmp_path):
    outcome = run(backend, tmp_path, {planted: PASS_WITHOUT_RUNNING[planted]}, "7", safe(backend))
    assert outcome["exit_code"] == 1, outcome
    assert "1 failed" in outcome["output"], outcome


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_right_answer_passes_beside_all_of_them_and_the_tamper_probe(backend, tmp_path):
    planted = {name: content for name, content in PASS_WITHOUT_RUNNING.items() if "[" not in name}

    async def tamper_then_check(ctx):
        await ctx.terminal(TAMPER_COMMAND, timeout=30)
        return await safe(backend)(ctx)

    outcome = run(backend, tmp_path, planted, "6", tamper_then_check)
    assert outcome["exit_code"] == 0, outcome
    assert "1 passed" in outcome["output"], outcome


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_tamper_probe_defeats_a_plain_pytest_check_and_not_the_safe_one(backend, tmp_path):
    python = python_for(backend)

    async def tamper(ctx, check):
        await ctx.terminal(TAMPER_COMMAND, timeout=30)
        return await check(ctx)

    def plain(ctx):
        return verify_in_sandbox(ctx, CHECKS, f"{python} -m pytest -q {{checks}}", timeout=60)

    gamed = run(backend, tmp_path / "plain", {}, "7", lambda ctx: tamper(ctx, plain))
    held = run(backend, tmp_path / "safe", {}, "7", lambda ctx: tamper(ctx, safe(backend)))
    assert gamed["exit_code"] == 0, gamed
    assert held["exit_code"] == 1 and "1 failed" in held["output"], held


@pytest.mark.timeout(180)
@pytest.mark.parametrize("planted", ["conftest.py", "pytest.ini", "pyproject.toml"])
def test_on_local_the_checks_are_outside_the_workspace(planted, tmp_path):
    """Written inside the workspace, the checks fell under its conftest or ini, even with -I."""
    isolated = f"{sys.executable} -I -m pytest -q -p no:cacheprovider {{checks}}"
    manager = make_manager(tmp_path, "local", command_timeout=60)

    async def main():
        ctx = ToolContext("inside", manager)
        await ctx.write_file("answer.txt", "7\n")
        await ctx.write_file(planted, PASS_WITHOUT_RUNNING[planted])
        try:
            outcome = await verify_in_sandbox(ctx, CHECKS, isolated, timeout=60)
            inside = (await ctx.terminal("ls -a"))["output"].split()
            return outcome, inside
        finally:
            await manager.close_all()

    outcome, inside = asyncio.run(asyncio.wait_for(main(), 120))
    assert outcome["exit_code"] == 1 and "1 failed" in outcome["output"], outcome
    assert not [name for name in inside if name.startswith(".verify")]
