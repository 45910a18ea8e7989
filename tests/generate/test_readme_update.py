"""The generated README's Updating block, as written, after a real ``hermes-envgen update``.

A project made from the test template repository's VERSION_TAG with hermes-envgen from this
checkout (``hermes_envgen_source``: a source directory, as ``new`` run from a checkout
answers) is set up by its README's set-up block in a fresh venv (uv, offline, from the cache
scripts/setup.sh filled; its ``pytest`` line is left to tests/generate/test_wheel.py, which
runs the whole block), updated to NEW_TAG by a real copier update, and then the Updating
block runs in the venv the set-up activated: hermes-envgen is reinstalled from where it came
from and the project with it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.envgen import NEW_TAG, REPO, VERSION_TAG, RunCli, TemplateRelease

from hermes_envgen.testing.runner import OFFLINE_ENVIRONMENT

UV = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(UV is None, reason="needs uv (scripts/setup.sh installs it)"),
]


def block_of(readme: str, section: str) -> str:
    text = readme.split(section, 1)[1]
    return text.split("```bash\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def cli_env(cli_env: dict[str, str], release: TemplateRelease) -> dict[str, str]:
    return {**cli_env, "HERMES_ENVGEN_TEMPLATE_SOURCE": str(release.bundle)}


def test_the_updating_block_runs_as_written_after_a_real_update(
    run_cli: RunCli, tmp_path: Path, cli_env: dict[str, str]
):
    made = run_cli("new", "demo-env", "--defaults", "--data", f"hermes_envgen_source={REPO}")
    assert made.returncode == 0, made.stderr
    project = tmp_path / "demo-env"
    uv_dir = tmp_path / "uv-bin"  # uv alone on PATH, not this venv's other tools
    uv_dir.mkdir()
    (uv_dir / "uv").symlink_to(UV)
    user = {k: v for k, v in cli_env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    user.update(OFFLINE_ENVIRONMENT, UV_OFFLINE="1", PATH=f"{uv_dir}:{os.environ['PATH']}")
    user.pop("PIP_NO_INDEX", None)

    def as_written(script: str, timeout: float = 900) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=project,
            env=user,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, f"{script}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        return result

    setup = block_of((project / "README.md").read_text(), "## Set up")
    assert f"uv pip install -c constraints.txt {REPO}" in setup
    lines = [line for line in setup.splitlines() if not re.match(r"pytest\b", line)]
    assert len(lines) == len(setup.splitlines()) - 1
    as_written("\n".join(lines))

    updated = run_cli("update", str(project), "--vcs-ref", NEW_TAG, timeout=300)
    assert updated.returncode == 0, updated.stderr
    assert f"{VERSION_TAG} to {NEW_TAG}" in updated.stdout
    updating = block_of((project / "README.md").read_text(), "## Updating")
    assert f"uv pip install --force-reinstall --no-deps {REPO}" in updating
    # In the shell the set-up left: its venv active.
    followed = as_written(". .venv/bin/activate\n" + updating)
    assert "hermes-envgen" in followed.stderr + followed.stdout  # uv names what it reinstalled
    probe = "import demo_env, hermes_envgen; print(hermes_envgen.__file__)"
    where = as_written(f".venv/bin/python -c {probe!r}", timeout=120).stdout.strip()
    assert where.startswith(str(project / ".venv")), where  # the reinstalled copy, not a checkout
