"""The wheel, built from a tree with no git, ships the template bundle and py.typed; installed
fresh, it generates a project offline, and the project's README set-up, followed verbatim in a
fresh venv, installs it (hermes-envgen from that wheel) and passes its own tests.

uv installs offline (UV_OFFLINE=1) from the cache that scripts/setup.sh filled: the project's
constraints.txt pins the versions uv.lock has, so every package is there (about a minute; pip
from the index took 2-3 minutes per venv).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from helpers.envgen import NOT_SOURCE, PUBLIC_URL, REPO, VERSION_TAG
from packaging.requirements import Requirement

from hermes_envgen.generate import bundle as template_bundle
from hermes_envgen.testing.runner import OFFLINE_ENVIRONMENT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

# On PATH, or the one the lock pins inside this venv (scripts/setup.sh).
UV = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))

BUNDLE = "hermes_envgen/_template/template.bundle"


def run(command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """Run a step; fail the test with its output if it fails."""
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kwargs
    )
    assert result.returncode == 0, f"{command}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def _install_env(uv_dir: Path) -> dict[str, str]:
    """The environment for uv: this process's, uv on PATH, no source on the path."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    for key in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_INDEX"):
        env.pop(key, None)  # the installed wheel is under test, not a checkout
    env.update(UV_OFFLINE="1", UV_COMPILE_BYTECODE="0", PATH=f"{uv_dir}:{env['PATH']}")
    return env


def _pins(constraints: str) -> dict[str, str]:
    """``{name: version}`` of constraints.txt's lines that apply to this interpreter."""
    pins = {}
    for line in constraints.splitlines():
        if line and not line.startswith("#"):
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate():
                (pin,) = requirement.specifier
                pins[requirement.name.lower()] = pin.version
    return pins


@pytest.mark.skipif(UV is None, reason="needs uv (scripts/setup.sh installs it)")
def test_wheel_without_git_tags_generates_offline_and_the_project_tests_pass(
    tmp_path: Path, cli_env: dict[str, str]
):
    uv_dir = tmp_path / "uv-bin"  # uv alone on PATH, not this venv's other tools
    uv_dir.mkdir()
    (uv_dir / "uv").symlink_to(UV)
    install_env = _install_env(uv_dir)
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE, symlinks=True)
    assert not (source / ".git").exists()
    dist = tmp_path / "dist"
    run([UV, "build", "--wheel", "--out-dir", str(dist), str(source)], 900, env=install_env)
    (wheel,) = dist.glob("hermes_envgen-*.whl")

    with zipfile.ZipFile(wheel) as archive:
        assert BUNDLE in archive.namelist()
        # PEP 561: type checkers read the package's own annotations
        assert "hermes_envgen/py.typed" in archive.namelist()
        bundle = tmp_path / "template.bundle"
        bundle.write_bytes(archive.read(BUNDLE))
    # No git, no release tag: the working tree is labelled by its content, never as a release.
    (tag,) = template_bundle.bundle_tags(bundle)
    assert tag.startswith(f"{VERSION_TAG}+tree."), tag

    venv = tmp_path / "venv"
    run([UV, "venv", "--quiet", "--python", sys.executable, str(venv)], 300, env=install_env)
    constraints_file = str(REPO / "template" / "constraints.txt")
    # With the generator's extra, as a user who makes projects installs it.
    run([UV, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
         "-c", constraints_file, f"hermes-envgen[generator] @ {wheel.as_uri()}"], 900,
        env=install_env)  # fmt: skip

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
    assert f"uv pip install -c constraints.txt {wheel}" in setup
    followed = run(
        ["bash", "-euo", "pipefail", "-c", setup],
        1800,
        cwd=project,
        env={**install_env, **OFFLINE_ENVIRONMENT},
    )
    assert " passed" in followed.stdout
    python = str(project / ".venv" / "bin" / "python")
    probe = (
        "import hermes_envgen, importlib.metadata as m, json;"
        "print(hermes_envgen.__file__);"
        "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"
    )
    installed = run([python, "-c", probe], 60, env=install_env).stdout.splitlines()
    assert str(project / ".venv") in installed[0]  # the wheel under test, not another copy
    # The project installed at the versions it was made with: its constraints.txt, which are
    # this checkout's uv.lock (tests/test_setup_script.py checks that they agree).
    versions = json.loads(installed[1])
    pinned = _pins((project / "constraints.txt").read_text())
    checked = {name: versions[name] for name in pinned if name in versions}
    assert {"atroposlib", "transformers", "pytest", "ruff"} <= checked.keys()
    assert checked == {name: pinned[name] for name in checked}
