"""The wheel, built from a tree with no git, ships the template bundle; installed fresh, it
generates a project offline, and the project's README set-up, followed verbatim in a fresh venv,
installs it (hermes-envgen from that wheel) and passes its own tests.

Slow: the fresh venv installs atroposlib and friends from the package index (2-3 minutes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from hermes_envgen.generate import bundle as template_bundle
from hermes_envgen.testing.runner import OFFLINE_ENVIRONMENT

from .envgen_helpers import NOT_SOURCE, PUBLIC_URL, REPO, VERSION_TAG

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

BUNDLE = "hermes_envgen/_template/template.bundle"


def run(command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """Run a step; fail the test with its output if it fails."""
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kwargs
    )
    assert result.returncode == 0, f"{command}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def _online_env() -> dict[str, str]:
    """The environment for pip: this process's, with the network allowed, no source on the path."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    for key in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_INDEX"):
        env.pop(key, None)  # the installed wheel is under test, not a checkout
    return env


def test_wheel_without_git_tags_generates_offline_and_the_project_tests_pass(
    tmp_path: Path, cli_env: dict[str, str]
):
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE, symlinks=True)
    assert not (source / ".git").exists()
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(source)], 900,
        env=_online_env())  # fmt: skip
    (wheel,) = dist.glob("hermes_envgen-*.whl")

    with zipfile.ZipFile(wheel) as archive:
        assert BUNDLE in archive.namelist()
        bundle = tmp_path / "template.bundle"
        bundle.write_bytes(archive.read(BUNDLE))
    # No git, no release tag: the working tree is labelled by its content, never as a release.
    (tag,) = template_bundle.bundle_tags(bundle)
    assert tag.startswith(f"{VERSION_TAG}+tree."), tag

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], 300)
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "--quiet", str(wheel)], 900, env=_online_env())

    # Generation with the network cut: git may only open local paths, HTTP goes nowhere.
    work = tmp_path / "work"
    work.mkdir()
    offline = {**cli_env, "PIP_NO_INDEX": "1"}
    offline.pop("HERMES_ENVGEN_CACHE_DIR")  # the shipped bundle must be enough
    offline.pop("PYTHONPATH", None)  # the installed wheel runs, not a checkout
    run([str(venv / "bin" / "hermes-envgen"), "new", "demo-env", "--defaults"], 300,
        cwd=work, env=offline)  # fmt: skip
    project = work / "demo-env"
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert (answers["_src_path"], answers["_commit"]) == (PUBLIC_URL, tag)

    # The README's set-up block, verbatim, in a fresh venv of the project's own: it installs
    # hermes-envgen from the wheel `new` ran from (on no index), the project, then runs pytest.
    readme = (project / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert f"pip install {wheel}" in setup
    followed = run(
        ["bash", "-euo", "pipefail", "-c", setup],
        1800,
        cwd=project,
        env={**_online_env(), **OFFLINE_ENVIRONMENT, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert " passed" in followed.stdout
    python = str(project / ".venv" / "bin" / "python")
    installed = run([python, "-c", "import hermes_envgen; print(hermes_envgen.__file__)"], 60,
                    env=_online_env())  # fmt: skip
    assert str(project / ".venv") in installed.stdout  # the wheel under test, not another copy
