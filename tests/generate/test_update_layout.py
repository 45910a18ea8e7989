"""``hermes-envgen update`` brings a project of an earlier layout to this one.

The template repository is built here: VERSION_TAG holds the template of PREVIOUS_COMMIT (the
env that wrote its own dataset settings, setup, get_next_item, evaluate and wandb_log in full),
NEW_TAG the working tree's (the same methods, each a short body on the runtime's building
blocks). A project made from the first, edited as a user would, is updated to the second: the
edits survive, the methods take their new bodies, and the project's tests pass on this runtime
(before the update they could not: its setup called load_items, which the runtime no longer
keeps for it). The project names a dataset, which offline cannot load:
its tests run on the built-in tasks either way.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers.envgen import NEW_TAG, REPO, VERSION_TAG, RunCli, git

from hermes_envgen.generate import bundle as template_bundle
from hermes_envgen.testing import offline_environment

pytestmark = pytest.mark.timeout(900)

# The last commit whose template wrote the task code into every env.py.
PREVIOUS_COMMIT = "4635021867f76631f116ced77400bff4b2b81acd"

USER_LINE = '        await ctx.write_file("NOTES.md", "Check your answer twice.\\n")'
USER_DEPENDENCY = '    "numpy>=1.26",  # the user\'s own\n'
USER_README_LINE = "Our team's notes on this env are in NOTES.md."
USER_SAMPLE = """    {
        "prompt": "How many lines does colours.txt have?",
        "files": {"colours.txt": "red\\ngreen\\nblue\\n"},
        "answer": "3",
        "solution": "wc -l < colours.txt | tee answer.txt",
        "gold_answer": "colours.txt has 3 lines.",
    },
"""


def _commit_and_tag(repo: Path, tag: str) -> None:
    git(repo, "add", "--all")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", tag)
    git(repo, "tag", tag)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle of a template repository: VERSION_TAG the old layout, NEW_TAG this one."""
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{PREVIOUS_COMMIT}^{{commit}}"], cwd=REPO, timeout=60
    )
    if known.returncode != 0:
        pytest.skip(f"this clone lacks commit {PREVIOUS_COMMIT} (a shallow clone?)")
    repo = tmp_path_factory.mktemp("layouts")
    git(repo, "init", "--quiet")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", PREVIOUS_COMMIT, "copier.yml", "template"],
        cwd=REPO,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(repo, filter="data")
    _commit_and_tag(repo, VERSION_TAG)
    for relpath in ["copier.yml", *template_bundle.template_paths(repo)]:
        (repo / relpath).unlink(missing_ok=True)
    for relpath in template_bundle.template_paths(REPO):
        (repo / relpath).parent.mkdir(parents=True, exist_ok=True)
        (repo / relpath).write_bytes((REPO / relpath).read_bytes())
    _commit_and_tag(repo, NEW_TAG)
    return template_bundle.build_bundle(repo, NEW_TAG[1:], repo.parent / "layouts.bundle")


@pytest.fixture
def cli_env(cli_env: dict[str, str], layouts: Path) -> dict[str, str]:
    return {**cli_env, "HERMES_ENVGEN_TEMPLATE_SOURCE": str(layouts)}


def _assert_own_tests_pass(project: Path) -> None:
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=offline_environment({"PYTHONPATH": str(project / "src")}),
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-3000:]


@pytest.mark.slow
def test_update_brings_the_slim_env_and_keeps_the_users_edits(run_cli: RunCli, tmp_path: Path):
    dataset = ["--data", "use_dataset=true", "--data", "dataset_name=example-org/terminal-tasks"]
    made = run_cli("new", "demo-env", "--defaults", "--data", "ci=false", *dataset)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "demo-env"
    env_py = project / "src" / "demo_env" / "env.py"
    assert "load_items(" in env_py.read_text()  # the old layout
    # The user's edits: one more line in prepare_sandbox, one more built-in task.
    text = env_py.read_text()
    anchor = "            await ctx.write_file(path, content)\n"
    assert text.count(anchor) == 1
    env_py.write_text(text.replace(anchor, anchor + USER_LINE + "\n"))
    samples = project / "src" / "demo_env" / "samples.py"
    samples.write_text(samples.read_text().replace("SAMPLES = [\n", "SAMPLES = [\n" + USER_SAMPLE))
    # and where the update adds the doors: a dependency of the user's, a line of the README
    pyproject, readme = project / "pyproject.toml", project / "README.md"
    dependency = '    "atroposlib==0.4.0",\n'
    assert pyproject.read_text().count(dependency) == 1
    pyproject.write_text(pyproject.read_text().replace(dependency, dependency + USER_DEPENDENCY))
    title, rest = readme.read_text().split("\n", 1)
    readme.write_text(f"{title}\n\n{USER_README_LINE}\n{rest}")
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "-m", "User edits")

    updated = run_cli("update", str(project), "--vcs-ref", NEW_TAG, timeout=300)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert git(project, "ls-files", "--unmerged") == ""
    assert not list(project.rglob("*.rej"))
    text = env_py.read_text()
    assert "<<<<<<<" not in text and USER_LINE in text
    assert USER_SAMPLE in samples.read_text()
    # The seven methods, each a short body on the runtime's building blocks.
    assert "tasks = self.load_tasks(SAMPLES)" in text and "await self.run_eval(" in text
    assert "load_items(" not in text and "item: Task" in text
    assert 'dataset_name="example-org/terminal-tasks"' in text
    assert len(text.splitlines()) < 165  # 160, and the dataset's four settings
    # The doors to other trainers come in (an extra, a module and a test each, a README
    # section each), beside the user's edits.
    assert (project / "src" / "demo_env" / "trl_environment.py").is_file()
    assert (project / "src" / "demo_env" / "openenv_server.py").is_file()
    assert (project / "tests" / "test_doors.py").is_file()
    extras = pyproject.read_text()
    assert USER_DEPENDENCY in extras
    assert 'trl = ["hermes-envgen[trl]~=0.1"]' in extras and "openenv = [" in extras
    readme_text = readme.read_text()
    assert USER_README_LINE in readme_text
    assert "### TRL" in readme_text and "### OpenEnv" in readme_text
    _assert_own_tests_pass(project)  # test_doors.py's TRL test among them
