"""Generate and update projects from the hermes-envgen copier template, offline.

Projects are rendered from the canonical public template URL pinned to the tag ``v{version}``
of the installed package, with git redirected (``url.<bundle>.insteadOf``) to a bundle of the
template's releases shipped in the wheel. Copier thus records the public URL and a real tag in
``.copier-answers.yml``: ``update`` is a true three-way merge with no network, and a plain
``copier update`` works online too.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from copier import run_copy, run_update
from copier.errors import InteractiveSessionError, InvalidTypeError, UserMessageError
from plumbum import ProcessExecutionError, local

from hermes_envgen import _bundle, hooks

DEFAULT_TEMPLATE_URL = "https://github.com/hermes-envgen/hermes-envgen.git"
TEMPLATE_URL_ENV = "HERMES_ENVGEN_TEMPLATE_URL"
# Where git really fetches the template from: a bundle file or a git repository (tests, forks).
TEMPLATE_SOURCE_ENV = "HERMES_ENVGEN_TEMPLATE_SOURCE"
CACHE_DIR_ENV = "HERMES_ENVGEN_CACHE_DIR"
ANSWERS_FILE = ".copier-answers.yml"
SHIPPED_BUNDLE = Path(__file__).with_name("_template") / "template.bundle"
MIN_GIT = (2, 31)  # GIT_CONFIG_COUNT/KEY/VALUE

Conflict = Literal["inline", "rej"]


class GeneratorError(Exception):
    """Generation or update failed; ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class UserError(GeneratorError):
    """A mistake the user can fix (bad name or answer, busy target, dirty project...)."""

    exit_code = 2


class UpdateConflictError(GeneratorError):
    """The update was applied, but some files need the user's hand to merge."""

    exit_code = 3

    def __init__(self, message: str, files: Sequence[str]) -> None:
        super().__init__(message)
        self.files = list(files)


@dataclass(frozen=True)
class NewProject:
    """What ``new_project`` made."""

    path: Path
    project_name: str
    package_name: str
    class_name: str
    template_version: str


@dataclass(frozen=True)
class UpdateResult:
    """What ``update_project`` did: from which template version to which."""

    path: Path
    from_version: str
    to_version: str
    changed: bool


# --- Where the template comes from ---------------------------------------------------------


def package_version() -> str:
    """The installed hermes-envgen version, which is also the template release it renders."""
    from hermes_envgen import __version__

    return __version__


def release_tag(version: str | None = None) -> str:
    """The template tag of a package version: ``v0.1.0`` for 0.1.0."""
    return f"v{version or package_version()}"


def template_url() -> str:
    """The public template URL recorded in projects (``HERMES_ENVGEN_TEMPLATE_URL`` overrides)."""
    return os.environ.get(TEMPLATE_URL_ENV) or DEFAULT_TEMPLATE_URL


def cache_dir() -> Path:
    """Where a source checkout keeps the bundles it builds from its working tree."""
    if override := os.environ.get(CACHE_DIR_ENV):
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hermes-envgen"


def _source_checkout() -> Path | None:
    """The repository root when running from a source checkout (editable install), else None."""
    root = Path(__file__).resolve().parents[2]
    if (root / "copier.yml").is_file() and (root / "template").is_dir():
        return root
    return None


def template_source() -> Path:
    """The bundle (or repository) git fetches the template from instead of the public URL."""
    if override := os.environ.get(TEMPLATE_SOURCE_ENV):
        source = Path(override).expanduser().resolve()
        if not source.exists():
            raise UserError(f"{TEMPLATE_SOURCE_ENV}={override} does not exist")
        return source
    if SHIPPED_BUNDLE.is_file():
        return SHIPPED_BUNDLE
    root = _source_checkout()
    if root is None:
        raise GeneratorError(
            f"this hermes-envgen installation has no template bundle ({SHIPPED_BUNDLE}); "
            "reinstall it from a wheel"
        )
    try:  # a source checkout: bundle the working tree, once per distinct content
        return _bundle.build_cached_bundle(root, package_version(), cache_dir())
    except _bundle.BundleError as exc:
        raise GeneratorError(str(exc)) from exc


@cache
def _check_git() -> None:
    """Fail clearly when git is missing or too old for the environment-only redirection."""
    try:
        output = subprocess.run(
            ["git", "version"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise GeneratorError("git is needed to generate and update projects") from exc
    found = re.search(r"(\d+)\.(\d+)", output)
    if found and (int(found[1]), int(found[2])) < MIN_GIT:
        need = ".".join(map(str, MIN_GIT))
        raise GeneratorError(f"git >= {need} is needed, found {output.strip()}")


def git_redirect(url: str, source: Path) -> dict[str, str]:
    """Environment variables that make git fetch ``url`` from ``source`` (appended to any set)."""
    # plumbum snapshots os.environ at import, so read (and later set) its copy.
    index = int(local.env.get("GIT_CONFIG_COUNT", "0") or 0)
    return {
        "GIT_CONFIG_COUNT": str(index + 1),
        f"GIT_CONFIG_KEY_{index}": f"url.{source}.insteadOf",
        f"GIT_CONFIG_VALUE_{index}": url,
    }


def _git_output(*args: str, cwd: Path | None = None) -> str:
    """Run git; its stdout, or GeneratorError with git's message."""
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise GeneratorError(f"git {args[0]} failed: {_one_line(result.stderr)}")
    return result.stdout


def template_versions(source: Path) -> list[str]:
    """The release tags ``vX.Y.Z`` the template source holds, oldest first."""
    listing = _git_output("ls-remote", "--tags", "--refs", str(source))
    tags = [line.rsplit("refs/tags/", 1)[-1] for line in listing.splitlines()]
    return sorted((tag for tag in tags if _bundle.is_release_tag(tag)), key=_bundle.version_key)


def _check_versions(source: Path, *refs: str) -> None:
    """Refuse release tags the source does not hold, before copier fails on them obscurely."""
    available = template_versions(source)
    for ref in refs:
        if _bundle.is_release_tag(ref) and ref not in available:
            raise UserError(
                f"template version {ref} is unknown here (known: {', '.join(available)}): "
                "pass --vcs-ref with a known one, or upgrade hermes-envgen"
            )


def template_questions(source: Path, ref: str) -> dict[str, dict[str, Any]]:
    """The questions of ``copier.yml`` at ``ref`` of the template source, by name."""
    with tempfile.TemporaryDirectory(prefix="hermes-envgen.") as tmp:
        _git_output("init", "--quiet", "--bare", tmp)
        try:
            _git_output("--git-dir", tmp, "fetch", "--quiet", "--no-tags", str(source), ref)
        except GeneratorError as exc:
            raise UserError(f"template version {ref} not found in {source}") from exc
        text = _git_output("--git-dir", tmp, "show", "FETCH_HEAD:copier.yml")
    config = yaml.safe_load(text) or {}
    return {
        name: spec if isinstance(spec, dict) else {"default": spec}
        for name, spec in config.items()
        if not name.startswith("_")
    }


# --- Answers ---------------------------------------------------------------------------------


def parse_data_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` as a dict of raw strings (copier casts them per question type)."""
    data: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--data takes KEY=VALUE, got {pair!r}")
        data[key.strip()] = value
    return data


def _parse_list(key: str, value: str) -> list[Any]:
    """A multiple-choice answer: a YAML list (``[a, b]``) or the shell-friendly ``a,b``."""
    if not value.lstrip().startswith("["):
        return [item.strip() for item in value.split(",") if item.strip()]
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = None
    if not isinstance(parsed, list):
        raise UserError(f"invalid {key} {value!r}: expected a list such as [a, b] or a,b")
    return parsed


BOOL_WORDS = frozenset({"y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0"})


def _question_type(spec: Mapping[str, Any]) -> str:
    """A question's type as copier infers it: declared, else from its default's Python type."""
    if "type" in spec:
        return str(spec["type"])
    inferred = {bool: "bool", int: "int", float: "float", str: "str"}
    return inferred.get(type(spec.get("default")), "yaml")


def _check_scalar(key: str, value: str, kind: str) -> None:
    """Refuse a raw value copier would cast badly (int("abc")) or silently (bool("maybe"))."""
    expected = {"int": "a whole number", "float": "a number", "bool": "true or false"}
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
        elif kind == "bool" and value.strip().lower() not in BOOL_WORDS:
            raise ValueError(value)
    except ValueError:
        raise UserError(f"invalid {key} {value!r}: expected {expected[kind]}") from None


def check_answers(
    data: Mapping[str, Any], questions: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Refuse unknown keys and ill-typed values; turn ``a,b`` into a list for multiselects."""
    unknown = sorted(set(data) - set(questions))
    if unknown:
        raise UserError(
            f"unknown question {', '.join(unknown)} in --data; valid keys: {', '.join(questions)}"
        )
    checked = dict(data)
    for key, value in data.items():
        if not isinstance(value, str):
            continue  # typed by a Python caller already
        spec = questions[key]
        if spec.get("multiselect"):
            checked[key] = _parse_list(key, value)
        elif (kind := _question_type(spec)) in {"int", "float", "bool"}:
            _check_scalar(key, value, kind)
    return checked


# --- Errors and clean-up ---------------------------------------------------------------------


def _one_line(text: str) -> str:
    """Whitespace collapsed, so that a message prints on one line."""
    return " ".join(str(text).split())


def _answer_error(exc: Exception, data: Mapping[str, Any]) -> UserError:
    """Copier's ValueError for a bad answer, as a one-line message naming the question."""
    message = _one_line(str(exc))
    found = re.match(r"Validation error for question '(\w+)': (.*)", message)
    if found:
        key, reason = found.groups()
        given = f" {data[key]!r}" if key in data else ""
        message = f"invalid {key}{given}: {reason}"
    return UserError(message)


@contextmanager
def _translate_errors(data: Mapping[str, Any]) -> Iterator[None]:
    """Turn copier's exceptions into GeneratorErrors with messages fit for one line."""
    try:
        yield
    except InteractiveSessionError as exc:
        raise UserError(
            "no terminal to ask the questions on: pass --defaults, and --data KEY=VALUE "
            "for the answers to set"
        ) from exc
    except UserMessageError as exc:
        raise UserError(_one_line(str(exc))) from exc
    except ProcessExecutionError as exc:
        detail = _one_line(exc.stderr or str(exc))
        if "invalid reference" in detail:  # a version the template source does not hold
            raise UserError(f"template version not found: {detail}") from exc
        raise GeneratorError(f"git failed: {detail}") from exc
    except (ValueError, InvalidTypeError) as exc:  # copier's bad answers are plain ValueErrors
        if "Unknown revision" in str(exc):
            raise UserError(f"template version not found: {_one_line(str(exc))}") from exc
        raise _answer_error(exc, data) from exc


@contextmanager
def _no_prompts(enabled: bool) -> Iterator[None]:
    """Point stdin at /dev/null, so copier fails at once instead of prompting a non-terminal."""
    if not enabled:
        yield
        return
    saved = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    captured = io.StringIO()
    try:
        os.dup2(devnull, 0)
        with redirect_stderr(captured):
            yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(devnull)
        # Pass everything on but prompt_toolkit's notice, which would only repeat our message.
        for line in captured.getvalue().splitlines(keepends=True):
            if not line.startswith("Warning: Input is not a terminal"):
                sys.stderr.write(line)


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
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        elif target.is_dir():  # it existed empty: empty it again
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        raise


def _stdin_is_terminal() -> bool:
    """Whether copier can prompt: stdin is a terminal."""
    try:
        return os.isatty(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):
        return False


# --- new -----------------------------------------------------------------------------------


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
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserError(
            f"{target} already exists and is not empty: choose another name or --output-dir"
        )
    answers = dict(data or {})
    if answers.get("project_name", name) != name:
        raise UserError("the project name is the NAME argument, not --data project_name")
    _check_git()
    source = template_source()
    ref = vcs_ref or release_tag()
    if answers:
        answers = check_answers(answers, template_questions(source, ref))
    answers["project_name"] = name
    if interactive is None:
        interactive = _stdin_is_terminal()
    with _removed_on_failure(target):
        with (
            _translate_errors(answers),
            _no_prompts(not interactive and not defaults),
            local.env(**git_redirect(template_url(), source)),
        ):
            worker = run_copy(
                template_url(),
                target,
                data=answers,
                vcs_ref=ref,
                defaults=defaults,
                quiet=True,
                cleanup_on_error=False,  # ours is wider: parents too, and on Ctrl-C
            )
        if post_generation:
            try:
                hooks.run_post_generation(target, name, ref)
            except hooks.HookError as exc:
                raise GeneratorError(f"post-generation step failed: {exc}") from exc
    combined = worker.answers.combined
    return NewProject(
        path=target,
        project_name=name,
        package_name=str(combined.get("package_name", name.replace("-", "_"))),
        class_name=str(combined.get("class_name", "")),
        template_version=ref,
    )


# --- update --------------------------------------------------------------------------------


def _read_answers(project: Path) -> dict[str, Any]:
    """The answers file of a generated project, or UserError saying why it is not one."""
    path = project / ANSWERS_FILE
    if not path.is_file():
        raise UserError(
            f"{project} is not a generated project (no {ANSWERS_FILE}): run update in the "
            "project's directory or pass its path"
        )
    try:
        answers = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{path} is not valid YAML: {_one_line(str(exc))}") from exc
    if not answers.get("_src_path") or not answers.get("_commit"):
        raise UserError(
            f"{path} records no template source and version (_src_path, _commit), "
            "so this project cannot be updated"
        )
    return answers


def _check_clean_repository(project: Path) -> None:
    """Refuse a project outside git or with uncommitted changes: the merge needs a clean base."""
    probe = subprocess.run(
        ["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        raise UserError(f"{project} is not in a git repository: commit the project to git first")
    if probe.stdout.strip():
        count = len(probe.stdout.splitlines())
        raise UserError(
            f"{project} has uncommitted changes ({count} path(s), see `git status`): "
            "commit or stash them, then update again"
        )


def conflicted_files(project: Path, conflict: Conflict) -> list[str]:
    """The files an update left for the user to merge (unmerged paths, or ``.rej`` files)."""
    if conflict == "inline":
        listing = _git_output("ls-files", "--unmerged", "-z", cwd=project)
        entries = (entry.split("\t", 1)[-1] for entry in listing.split("\0") if entry)
    else:  # untracked and ignored .rej files alike
        listing = _git_output("ls-files", "--others", "-z", "--", "*.rej", cwd=project)
        entries = (entry for entry in listing.split("\0") if entry)
    return sorted(set(entries))


def update_project(
    path: Path | str = ".",
    *,
    vcs_ref: str | None = None,
    data: Mapping[str, Any] | None = None,
    defaults: bool = False,
    conflict: Conflict = "inline",
    interactive: bool | None = None,
) -> UpdateResult:
    """Three-way merge a generated project up to template ``vcs_ref`` (default ``v{version}``).

    Only questions the project has no answer for are asked (or defaulted with ``defaults``).
    Raises UpdateConflictError, after applying the update, when files need a manual merge.
    """
    project = Path(path).absolute()
    answers = _read_answers(project)
    _check_git()
    _check_clean_repository(project)
    old, src = str(answers["_commit"]), str(answers["_src_path"])
    target = vcs_ref or release_tag()
    changes = dict(data or {})
    if old == target and not changes:
        return UpdateResult(project, old, target, changed=False)
    redirect: dict[str, str] = {}
    if src == template_url():  # ours: fetch it from the bundle; anything else as recorded
        source = template_source()
        _check_versions(source, old, target)
        redirect = git_redirect(src, source)
        if changes:
            changes = check_answers(changes, template_questions(source, target))
    if interactive is None:
        interactive = _stdin_is_terminal()
    with (
        _translate_errors(changes),
        _no_prompts(not interactive and not defaults),
        local.env(**redirect),
    ):
        run_update(
            project,
            data=changes,
            vcs_ref=target,
            defaults=defaults,
            skip_answered=True,  # ask only what the new template version added
            overwrite=True,
            conflict=conflict,
            quiet=True,
        )
    files = conflicted_files(project, conflict)
    if files:
        how = (
            "resolve the <<<<<<< before updating / >>>>>>> after updating markers"
            if conflict == "inline"
            else "merge each .rej file into its file by hand and delete it"
        )
        raise UpdateConflictError(
            f"updated {project.name} from {old} to {target} with conflicts in "
            f"{', '.join(files)}: {how}, then commit",
            files,
        )
    return UpdateResult(project, old, target, changed=True)
