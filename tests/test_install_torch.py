"""scripts/install-torch-cpu.sh on a copy of the checkout: torch goes to .venv-torch/ whole or not
at all, a rerun repairs what an interrupted one left, and without a CPU build it says so and
leaves nothing behind.

It installs from the wheel directory pip's configuration names (CI machines have one with the
CPU build); without one the install tests skip, or fail where HERMES_ENVGEN_REQUIRE_TORCH=1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = "scripts/install-torch-cpu.sh"
SPEC = "torch==2.13.0+cpu"


def find_links() -> str:
    # Read as the script reads it: with the interpreter's pip (a venv made by uv has none).
    result = subprocess.run(
        ["python3", "-m", "pip", "config", "get", "global.find-links"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.stdout.strip() if result.returncode == 0 else ""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The script in a directory of its own, beside this checkout's venv."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / SCRIPT, root / SCRIPT)
    (root / ".venv").symlink_to(REPO / ".venv")
    return root


def install(root: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", SCRIPT],
        cwd=root,
        env={**os.environ, **extra},
        capture_output=True,
        text=True,
        timeout=600,
    )


def require_a_cpu_build() -> None:
    links = find_links()
    if links and any(p.name.startswith("torch-") for p in Path(links).glob("*.whl")):
        return
    why = "pip's configuration names no wheel directory with a CPU build of torch"
    if os.environ.get("HERMES_ENVGEN_REQUIRE_TORCH") == "1":
        pytest.fail(f"HERMES_ENVGEN_REQUIRE_TORCH=1 but {why}", pytrace=False)
    pytest.skip(why)


@pytest.mark.slow
def test_an_interrupted_install_is_redone_and_a_complete_one_kept(checkout):
    require_a_cpu_build()
    # What a run killed mid-way leaves: its partial directory, and a target without the marker
    # (made by hand, or by an older script that installed in place).
    (checkout / ".venv-torch.partial" / "torch").mkdir(parents=True)
    (checkout / ".venv-torch").mkdir()
    (checkout / ".venv-torch" / "stale.py").write_text("raise SystemExit('stale')\n")

    result = install(checkout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"torch: installed {SPEC} into .venv-torch/" in result.stdout
    target = checkout / ".venv-torch"
    assert (target / ".complete").read_text().strip() == SPEC
    assert not (target / "stale.py").exists()
    assert not (checkout / ".venv-torch.partial").exists()
    probe = f"import sys; sys.path.append({str(target)!r}); import torch; print(torch.__version__)"
    version = subprocess.run(
        [str(checkout / ".venv/bin/python"), "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    assert version == SPEC.split("==")[1]

    marker = (target / ".complete").stat().st_mtime_ns
    again = install(checkout)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    assert (target / ".complete").stat().st_mtime_ns == marker  # not installed again


@pytest.mark.slow
def test_without_a_cpu_build_it_says_so_and_leaves_nothing(checkout, tmp_path):
    # No wheel directory in pip's configuration, and an index that refuses at once: nothing
    # of the network is reached.
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = http://127.0.0.1:9/simple\nretries = 0\n")
    result = install(checkout, PIP_CONFIG_FILE=str(config), PIP_FIND_LINKS="")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr.startswith(f"notice: no CPU build of torch ({SPEC}) to be had here")
    assert not (checkout / ".venv-torch").exists()
    assert not (checkout / ".venv-torch.partial").exists()
