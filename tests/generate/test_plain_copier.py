"""The docs' plain-copier route (docs/how-to/generate.md): the hooks as scripts around a plain
``copier copy``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from helpers.envgen import REPO

PAGE = (REPO / "docs" / "how-to" / "generate.md").read_text(encoding="utf-8")
SECTION = PAGE.split("## Using the template with plain copier", 1)[-1]
HOOKS = REPO / "hooks"


def _section_script() -> str:
    """The section's commands, run against this checkout (HEAD: its working tree)."""
    (block,) = re.findall(r"```bash\n(.*?)```", SECTION.split("\n## ", 1)[0], re.DOTALL)
    script = re.sub(r"^TEMPLATE=\S+", f"TEMPLATE={REPO}", block, flags=re.MULTILINE)
    # Without a release tag copier renders HEAD anyway; with one it would take the tag.
    return script.replace("copier copy ", "copier copy --vcs-ref HEAD ")


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        args,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def test_the_docs_section_renders_checks_and_commits_a_project(tmp_path, cli_env):
    env = cli_env | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{cli_env['PATH']}"}
    result = _run(["bash", "-euo", "pipefail", "-c", _section_script()], tmp_path, env)
    assert result.returncode == 0, result.stdout + result.stderr
    answers = json.loads((tmp_path / "answers.json").read_text())
    assert answers["toolsets"] == ["terminal", "file"] and answers["provider"] == "openrouter"
    project = tmp_path / "my-env"
    assert (project / "src" / "my_env" / "env.py").is_file()
    log = _run(["git", "log", "--format=%s"], project, env).stdout.splitlines()
    assert len(log) == 1 and log[0].startswith("Generate my-env from hermes-envgen "), log
    assert "(version unknown)" not in log[0]
    assert _run(["git", "status", "--porcelain"], project, env).stdout == ""


def test_the_hooks_refuse_bad_input_in_one_line(tmp_path, cli_env):
    pre = _run(
        [
            sys.executable,
            str(HOOKS / "pre_gen_project.py"),
            str(REPO / "copier.yml"),
            "group_size=many",
        ],
        tmp_path,
        cli_env,
    )
    assert pre.returncode == 2 and pre.stdout == ""
    assert pre.stderr == "error: invalid group_size 'many': expected a whole number\n"
    post = _run(
        [sys.executable, str(HOOKS / "post_gen_project.py"), "no-such-dir"], tmp_path, cli_env
    )
    assert post.returncode == 2
    assert post.stderr == "usage: post_gen_project.py PROJECT_DIR\n"
