"""``hermes-envgen new``: render a project from the template, format it, make its first commit."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from hermes_envgen.errors import HermesEnvgenError, HookError, Interrupted, UsageError
from hermes_envgen.generate import hooks, origin, source
from hermes_envgen.generate.answers import check_answers
from hermes_envgen.generate.git import check_git


@dataclass(frozen=True)
class NewProject:
    """What ``new_project`` made."""

    path: Path
    project_name: str
    package_name: str
    class_name: str
    template_version: str
    hermes_envgen_source: str = ""  # what `pip install` needs to get hermes-envgen; "" = an index
    created_directory: Path | None = None  # the topmost missing --output-dir made for it
    notices: tuple[str, ...] = ()  # what the user must know of the project's choices

    def setup_commands(self) -> list[str]:
        """The shell lines that set the project up, as its README's "Set up" gives them."""
        lines = ["uv venv && . .venv/bin/activate"]
        if self.hermes_envgen_source:
            source = shlex.quote(self.hermes_envgen_source)
            lines.append(f"uv pip install -c constraints.txt {source}")
        return [*lines, "uv pip install -c constraints.txt -e '.[dev]'", "pytest"]

    def summary(self) -> str:
        """What ``new`` prints: what was made, and the next steps of its README."""
        where = Path(os.path.relpath(self.path))
        made = self.created_directory
        lines = [f"Made the directory {made} for it"] if made is not None else []
        lines += [
            f"Created {where} from template {self.template_version}",
            f"  package {self.package_name}, environment class {self.class_name}",
            "Next steps (as in its README):",
            f"  cd {where}",
            *(f"  {line}" for line in self.setup_commands()),
            f"  python -m {self.package_name} process --help    # offline rollouts to JSONL",
            f"  python -m {self.package_name} evaluate --help   # standalone evaluation",
            "  README.md has the exact flags for your provider.",
        ]
        return "\n".join(lines)


def project_location(path: str, output_dir: Path | str = ".") -> tuple[str, Path]:
    """The project's name and the directory it is made in, from NAME or a path to the project
    (``./envs/my-env``), as ``copier copy`` takes it: the name is the path's last part, and a
    relative path starts at ``output_dir``."""
    given = PurePath(path)
    if given.name in ("", ".", ".."):
        raise UsageError(
            f"{path!r} names no project: end the path with the project's name (./envs/my-env)"
        )
    return given.name, Path(output_dir) / given.parent


def new_project(
    name: str,
    output_dir: Path | str = ".",
    *,
    data: Mapping[str, Any] | None = None,
    defaults: bool = False,
    interactive: bool | None = None,
    vcs_ref: str | None = None,
    post_generation: bool = True,
) -> NewProject:
    """Render a new project ``output_dir/name``, then format it and make its first commit.

    ``data`` answers questions up front; ``defaults`` takes the default of every other one.
    Without a terminal (``interactive`` defaults to whether stdin is one) nothing is prompted.
    """
    target = Path(output_dir).absolute() / name
    _check_target(target)
    answers = dict(data or {})
    if answers.get("project_name", name) != name:
        raise UsageError(
            "the project name is the PATH argument's last part, not --data project_name"
        )
    with ThreadPoolExecutor(max_workers=1) as pool:
        git_checked = pool.submit(check_git)  # while copier loads
        from copier import run_copy

        from hermes_envgen.generate.copier_session import copier_session, stdin_is_terminal

        git_checked.result()
    template = source.template_source()
    ref = vcs_ref or source.default_ref(template)
    if answers:
        answers = check_answers(answers, template, ref)
    answers["project_name"] = name
    # The README says where to install hermes-envgen from: where this one came from.
    answers.setdefault("hermes_envgen_source", origin.install_source())
    if interactive is None:
        interactive = stdin_is_terminal()
    url = source.template_url()
    post = hooks.load("post_gen_project") if post_generation else None
    created_directory = _first_missing(target.parent)  # said, not made silently
    with _removed_on_failure(target):
        target.mkdir(parents=True, exist_ok=True)
        # The pool is left (git done) before anything is cleaned up.
        with ThreadPoolExecutor(max_workers=1) as pool:
            # git init and its look at the user's git config write only .git/, which copier
            # never touches: they run while copier renders.
            repository = pool.submit(post.git_init, target) if post else None
            with copier_session(
                answers,
                prompts=interactive or defaults,
                git_env=source.git_redirect(url, template),
            ):
                worker = run_copy(
                    url,
                    target,
                    data=answers,
                    vcs_ref=ref,
                    defaults=defaults,
                    quiet=True,
                    cleanup_on_error=False,  # ours is wider: parents too, and on Ctrl-C
                )
        if post is not None and repository is not None:
            try:
                post.commit_rendered(target, name, ref, repository.result())
            except HermesEnvgenError as exc:
                raise HookError(f"post-generation step failed: {exc}") from exc
    combined = worker.answers.combined
    return NewProject(
        path=target,
        project_name=name,
        package_name=str(combined.get("package_name", name.replace("-", "_"))),
        class_name=str(combined.get("class_name", "")),
        template_version=ref,
        hermes_envgen_source=str(combined.get("hermes_envgen_source") or ""),
        created_directory=created_directory,
        notices=answer_notices(combined),
    )


SELF_JUDGED = (
    "the judge is the policy's own server: the policy grades its own answers, and an answer "
    "can try to talk it into a high score; set judge_base_url in src/{package}/env.py (or "
    "--env.judge_base_url) to a separate judge"
)


CHAT_MODE = (
    "this provider is sampled in chat mode, so its data has no inference logprobs: atroposlib's "
    "GRPO trainer (atropos-grpo) cannot train on it; for GRPO choose a self-hosted vLLM or "
    "SGLang in token mode (README: What the training data holds)"
)


def answer_notices(answers: Mapping[str, Any]) -> tuple[str, ...]:
    """Warnings about what the answers chose: said at generation, and again at start-up."""
    notices = []
    if answers.get("reward_pattern") == "judge" and answers.get("judge_base_url") in ("", "policy"):
        notices.append(SELF_JUDGED.format(package=answers.get("package_name", "<package>")))
    if sampled_in_chat_mode(answers):
        notices.append(CHAT_MODE)
    return tuple(notices)


def sampled_in_chat_mode(answers: Mapping[str, Any]) -> bool:
    """Whether these answers make a project whose policy is sampled through a chat API (the
    server parses tool calls and returns text, so its data has no inference logprobs)."""
    provider = answers.get("provider")
    return (
        provider in ("openrouter", "openai_compatible")
        or (provider == "vllm" and answers.get("vllm_server") == "chat")
        or (provider == "sglang" and answers.get("sglang_api") == "chat")
    )


def _check_target(target: Path) -> None:
    """UsageError unless ``target`` can become the project: missing, or an empty directory."""
    if target.is_dir():
        if any(target.iterdir()):
            raise UsageError(
                f"{target} already exists and is not empty: choose another name or --output-dir"
            )
        return
    if target.exists() or target.is_symlink():
        raise UsageError(f"{target} exists and is a file: choose another name or --output-dir")
    for parent in target.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise UsageError(f"--output-dir: {parent} is a file, not a directory")
            break


def _first_missing(path: Path) -> Path | None:
    """The topmost directory of ``path`` that does not exist yet (what clean-up removes)."""
    missing = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing


@contextmanager
def _removed_on_failure(target: Path) -> Iterator[None]:
    """Leave nothing behind if generation fails or is interrupted, not even empty parents."""
    created = _first_missing(target)
    try:
        yield
    except BaseException as exc:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        elif target.is_dir():  # it existed empty: empty it again
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted("aborted; nothing was left behind") from None
        raise
