"""``hermes-envgen new``: an updatable, committed project, or a one-line error and no leftovers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from helpers.envgen import (
    ANSI,
    PROMPT_STARTS,
    PUBLIC_URL,
    QUESTION,
    REPO,
    RunCli,
    answers_of,
    assert_one_line_error,
    git,
    spawn_new,
)

from hermes_envgen.generate.source import package_version


def test_new_with_defaults_renders_a_committed_updatable_project(
    run_cli: RunCli, tmp_path, checkout_tag: str
):
    result = run_cli("new", "demo-env", "--defaults")
    assert result.returncode == 0, result.stderr
    project = tmp_path / "demo-env"
    answers = answers_of(project)
    assert answers["_src_path"] == PUBLIC_URL
    # An untagged checkout records the commit it ran from, never a release version.
    head = git(REPO, "rev-parse", "HEAD").strip()
    assert checkout_tag.startswith(f"v{package_version()}+g{head[:12]}")
    assert answers["_commit"] == checkout_tag
    assert answers["project_name"] == "demo-env"
    log = git(project, "log", "--format=%s").splitlines()
    assert log == [f"Generate demo-env from hermes-envgen {checkout_tag}"]
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""
    assert "demo_env" in result.stdout and "pytest" in result.stdout
    # The closing message gives the README's set-up lines, the source of hermes-envgen included.
    readme = (project / "README.md").read_text()
    setup = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("  #")[0].strip() for line in setup.splitlines()]
    assert commands[1] == f"uv pip install -c constraints.txt {REPO}" and answers[
        "hermes_envgen_source"
    ] == str(REPO)
    printed = [line.strip() for line in result.stdout.splitlines()]
    assert printed[printed.index("cd demo-env") + 1 :][: len(commands)] == commands
    assert not (project / ".ruff_cache").exists()


def test_output_dir_and_data_answers(run_cli: RunCli, tmp_path):
    result = run_cli(
        "new", "math-agent", "--output-dir", "envs/new", "--defaults",
        "--data", "toolsets=terminal", "--data", "max_agent_turns=4",
        "--data", "description=Solves math with a shell",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    answers = answers_of(tmp_path / "envs" / "new" / "math-agent")
    assert answers["toolsets"] == ["terminal"]
    assert answers["max_agent_turns"] == 4
    assert answers["description"] == "Solves math with a shell"


def test_a_judge_project_without_a_judge_of_its_own_says_the_policy_grades_itself(
    run_cli: RunCli, tmp_path
):
    # The local server has no other model to judge with: no default, the user chooses.
    unanswered = run_cli("new", "unjudged-env", "--defaults", "--data", "reward_pattern=judge")
    assert unanswered.returncode == 2, unanswered.stderr
    assert "judge_base_url has no default for these answers" in unanswered.stderr
    assert "or 'policy' to let the policy grade its own answers" in unanswered.stderr
    result = run_cli(
        "new", "judged-env", "--defaults", "--data", "reward_pattern=judge",
        "--data", "judge_base_url=policy",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "warning: the judge is the policy's own server: the policy grades its own" in (
        result.stderr
    )
    assert "src/judged_env/env.py" in result.stderr
    separate = run_cli(
        "new", "judged-apart", "--defaults", "--data", "reward_pattern=judge",
        "--data", "judge_base_url=http://127.0.0.1:8001/v1", "--data", "judge_model=judge",
    )  # fmt: skip
    assert separate.returncode == 0, separate.stderr
    assert "policy grades its own" not in separate.stderr


def test_commits_without_a_git_identity(run_cli: RunCli, tmp_path):
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    result = run_cli("new", "demo-env", "--defaults", env={"GIT_CONFIG_GLOBAL": str(empty)})
    assert result.returncode == 0, result.stderr
    author = git(tmp_path / "demo-env", "log", "--format=%an")
    assert author.strip() == "hermes-envgen"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["new", "My_Env", "--defaults"], "invalid project_name 'My_Env': must start with"),
        (["new", "class", "--defaults"], "invalid project_name 'class'"),
        (["new", "x-env", "--defaults", "--data", "colour=blue"], "unknown question colour"),
        (
            ["new", "x-env", "--defaults", "--data", "provider=nope"],
            "invalid provider: 'nope' is not in ['atropos',",
        ),
        (
            ["new", "x-env", "--defaults", "--data", "package_name=1-bad pkg"],
            "package_name cannot be given in --data: derived from the project name",
        ),
        (
            ["new", "x-env", "--defaults", "--data", "class_name=Bad Class"],
            "class_name cannot be given in --data",
        ),
        (["new", "x-env", "--defaults", "--data", "max_agent_turns=0"], "max_agent_turns"),
        (["new", "x-env", "--defaults", "--data", "max_agent_turns=many"], "a whole number"),
        (["new", "x-env", "--defaults", "--data", "use_dataset=maybe"], "true or false"),
        (["new", "x-env", "--defaults", "--data", "no-equals-sign"], "KEY=VALUE"),
        (["new", "x-env"], "no terminal"),
        (["new", "x-env", "--data", "description=Answered"], "no terminal"),
        (["new", "x-env", "-o", "a/b", "--defaults", "--data", "group_size=1"], "group_size"),
        (
            ["new", "x-env", "--defaults", "--data", "provider=openrouter"],
            "model_name has no default for these answers: pass --data model_name=VALUE",
        ),
        (
            ["new", "x-env", "--defaults", "--data", "provider=vllm", "--data", "model_name="],
            "invalid model_name '': a model name is needed",
        ),
        (
            ["new", "x-env", "--defaults", "--data", "use_dataset=yes"],
            "dataset_name has no default",
        ),
    ],
)
def test_user_mistakes_exit_2_with_one_line_and_leave_nothing(
    run_cli: RunCli, tmp_path, args, fragment
):
    before = sorted(path.name for path in tmp_path.iterdir())
    result = run_cli(*args)
    assert_one_line_error(result, 2, fragment)
    assert sorted(path.name for path in tmp_path.iterdir()) == before


def test_unknown_data_key_names_the_valid_keys(run_cli: RunCli):
    result = run_cli("new", "x-env", "--defaults", "--data", "colour=blue")
    assert_one_line_error(result, 2, "valid keys:")
    for key in ("provider", "model_name", "reward_pattern", "toolsets"):
        assert key in result.stderr
    # derived from the project name, never asked: not an answer to offer
    assert "package_name" not in result.stderr and "class_name" not in result.stderr


def test_new_takes_a_path_as_copier_copy_does(run_cli: RunCli, tmp_path):
    # The last part names the project; a relative path starts at -o when given.
    result = run_cli("new", "./envs/path-env", "--defaults")
    assert result.returncode == 0, result.stderr
    project = tmp_path / "envs" / "path-env"
    assert answers_of(project)["project_name"] == "path-env"
    assert (project / "src" / "path_env" / "env.py").is_file()
    assert f"Made the directory {tmp_path / 'envs'} for it" in result.stdout
    result = run_cli("new", "more/other-env/", "-o", "out", "--defaults")
    assert result.returncode == 0, result.stderr
    assert answers_of(tmp_path / "out" / "more" / "other-env")["project_name"] == "other-env"
    for path in (".", "envs/.."):
        result = run_cli("new", path, "--defaults")
        assert_one_line_error(result, 2, "names no project: end the path with the project's name")


def test_a_file_in_the_way_is_named_as_a_file(run_cli: RunCli, tmp_path):
    (tmp_path / "demo-env").write_text("mine")
    result = run_cli("new", "demo-env", "--defaults")
    assert_one_line_error(result, 2, "demo-env exists and is a file: choose another name")
    result = run_cli("new", "other-env", "--defaults", "-o", "demo-env/sub")
    assert_one_line_error(result, 2, f"--output-dir: {tmp_path / 'demo-env'} is a file")
    assert (tmp_path / "demo-env").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-env"]


def test_a_missing_output_dir_is_made_and_said(run_cli: RunCli, tmp_path):
    result = run_cli("new", "demo-env", "--defaults", "-o", "new/deeper")
    assert result.returncode == 0, result.stderr
    assert f"Made the directory {tmp_path / 'new'} for it" in result.stdout
    assert (tmp_path / "new" / "deeper" / "demo-env" / ".copier-answers.yml").is_file()
    # an existing one is not mentioned
    result = run_cli("new", "next-env", "--defaults", "-o", "new")
    assert result.returncode == 0 and "Made the directory" not in result.stdout


def test_a_non_empty_target_is_refused_and_left_alone(run_cli: RunCli, tmp_path):
    target = tmp_path / "demo-env"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    result = run_cli("new", "demo-env", "--defaults")
    assert_one_line_error(result, 2, "already exists and is not empty")
    assert [path.name for path in target.iterdir()] == ["notes.txt"]


def test_an_empty_target_is_used(run_cli: RunCli, tmp_path):
    (tmp_path / "demo-env").mkdir()
    result = run_cli("new", "demo-env", "--defaults")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "demo-env" / ".copier-answers.yml").is_file()


def test_a_failing_hook_leaves_no_directory(run_cli: RunCli, tmp_path):
    # A git that fails to commit: the project is rendered, then the post-generation hook fails.
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    fake_git = fake_bin / "git"
    fake_git.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do\n'
        '  [ "$arg" = commit ] && { echo "fatal: cannot commit" >&2; exit 1; }\n'
        "done\n"
        f'exec {shutil.which("git")} "$@"\n'
    )
    fake_git.chmod(0o755)
    path = f"{fake_bin}{os.pathsep}{os.environ['PATH']}"
    result = run_cli("new", "demo-env", "--defaults", "-o", "out", env={"PATH": path})
    assert_one_line_error(result, 1, "post-generation step failed")
    assert not (tmp_path / "out").exists()


def _files(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(root).parts
    }


def test_hooks_leave_the_rendered_files_as_copier_wrote_them(
    run_cli: RunCli, tmp_path, cli_env, monkeypatch, checkout_tag: str
):
    # If ruff changed what copier rendered, later updates (which diff raw renders) would conflict
    # on every changed line: the template must render formatted, lint-clean code.
    from hermes_envgen.generate.origin import install_source
    from hermes_envgen.generate.source import git_redirect, template_source

    monkeypatch.setenv("HERMES_ENVGEN_CACHE_DIR", cli_env["HERMES_ENVGEN_CACHE_DIR"])
    bare = tmp_path / "bare" / "demo-env"
    command = [sys.executable, "-m", "copier", "copy", "--defaults", "--quiet", "--vcs-ref",
               checkout_tag, "--data", "project_name=demo-env", "--data",
               f"hermes_envgen_source={install_source()}", PUBLIC_URL, str(bare)]  # fmt: skip
    env = {**cli_env, **git_redirect(PUBLIC_URL, template_source())}
    copied = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert copied.returncode == 0, copied.stderr
    assert run_cli("new", "demo-env", "--defaults").returncode == 0
    generated, rendered = _files(tmp_path / "demo-env"), _files(bare)
    assert generated.keys() == rendered.keys()
    changed = [name for name in generated if generated[name] != rendered[name]]
    assert changed == [], f"ruff changed {changed}: fix the template so it renders them clean"


def test_prompts_on_a_terminal(tmp_path, cli_env, checkout_tag: str):
    child = spawn_new(tmp_path, cli_env, "demo-env")
    asked = []
    try:
        while child.expect([PROMPT_STARTS, pexpect.EOF]) == 0:
            child.expect(QUESTION, timeout=20)
            question = ANSI.sub("", child.match.group(1)).strip()
            asked.append(question)
            if question.startswith("One-line description"):
                child.send("\x15Typed at the prompt\r")  # Ctrl-U clears the pre-filled default
            elif question == "License":
                child.send("\x1b[B\r")  # arrow down: the second licence
            elif question.startswith("System prompt"):
                child.send("\x1b\r")  # Esc then Enter ends a multi-line answer
            else:
                child.send("\r")  # take the default
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
    assert any("inference provider" in question for question in asked), asked
    answers = answers_of(tmp_path / "demo-env")
    assert answers["description"] == "Typed at the prompt"
    assert answers["license"] == "Apache-2.0"
    assert answers["_commit"] == checkout_tag


def test_ctrl_c_at_a_prompt_aborts_cleanly(tmp_path, cli_env):
    child = spawn_new(tmp_path, cli_env, "demo-env", "-o", "out")
    try:
        child.expect(PROMPT_STARTS)
        child.expect(QUESTION, timeout=20)
        child.send("\x03")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 130
    assert "aborted" in child.before and "Traceback" not in child.before
    assert not (tmp_path / "out").exists()


def test_help_lists_new_and_update(run_cli: RunCli):
    result = run_cli("--help")
    assert result.returncode == 0
    assert "new" in result.stdout and "update" in result.stdout


@pytest.mark.parametrize(
    ("rendered", "committed"),
    [
        ("x = 1\n", "x = 1\n"),  # clean: checked only, never rewritten
        ("import os\nx=1\n", "x = 1\n"),  # a safe fix and a reformat, both committed
        ("import os\n\nx = 1\n", "x = 1\n"),  # a fix whose result the formatter changes
        ("x=1\n", "x = 1\n"),  # lint-clean, reformatted only
    ],
)
def test_the_post_generation_hook_commits_what_ruff_would_make_of_the_files(
    tmp_path, rendered, committed
):
    from hermes_envgen.generate import hooks

    project = tmp_path / "p"
    project.mkdir()
    (project / "a.py").write_text(rendered)
    hooks.load("post_gen_project").run(project, "p", "v0")
    assert (project / "a.py").read_text() == committed
    assert git(project, "show", "HEAD:a.py") == committed
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""


def test_the_post_generation_hook_reports_a_file_ruff_cannot_parse(tmp_path):
    from hermes_envgen.errors import HookError
    from hermes_envgen.generate import hooks

    project = tmp_path / "p"
    project.mkdir()
    (project / "a.py").write_text("x = (\n")
    with pytest.raises(HookError, match="ruff format"):
        hooks.load("post_gen_project").run(project, "p", "v0")


def test_the_first_commit_inside_a_repository_that_has_its_own_identity(tmp_path, monkeypatch):
    # The enclosing repository's user.name/email do not apply to the project's own repository:
    # its first commit gets the fallback identity, not "Author identity unknown".
    from hermes_envgen.generate import hooks

    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    outer = tmp_path / "outer"
    project = outer / "p"
    project.mkdir(parents=True)
    git(outer, "init", "--quiet")
    git(outer, "config", "user.name", "Outer")
    git(outer, "config", "user.email", "outer@example.com")
    (project / "a.py").write_text("x = 1\n")
    hooks.load("post_gen_project").run(project, "p", "v0")
    assert git(project, "log", "--format=%an").strip() == "hermes-envgen"


def test_a_failed_git_command_is_named_after_its_global_options():
    from hermes_envgen.errors import GitError
    from hermes_envgen.generate.git import run_git

    with pytest.raises(GitError, match=r"^git no-such-command failed: "):
        run_git("-c", "user.name=x", "no-such-command")


def test_new_says_when_a_provider_is_sampled_in_chat_mode(tmp_path):
    """Chat-mode data has no inference logprobs: new says so, for the GRPO trainer's sake."""

    def new(name: str, *data: str) -> str:
        pairs = [arg for pair in data for arg in ("--data", pair)]
        command = [sys.executable, "-m", "hermes_envgen", "new", name, "-o", str(tmp_path)]
        done = subprocess.run(
            [*command, "--defaults", *pairs], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert "warning: this provider is sampled in chat mode" in new(
        "chat-env", "provider=openrouter", "model_name=a/b"
    )
    assert "sampled in chat mode" not in new("token-env")
