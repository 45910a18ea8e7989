"""The names earlier releases' projects use, rewritten after ``update``'s merge.

The runtime keeps no aliases of names it gave up: ``update`` rewrites them in the project's
tracked Python and YAML files, and only these exact old names (a table below per kind). What it
cannot rewrite safely it leaves as it is and says, as ``file:line: what to change``.
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from hermes_envgen.generate import hooks
from hermes_envgen.generate.git import run_git

RUNTIME = "hermes_envgen.runtime"
CHAT_TEMPLATE = f"{RUNTIME}.chat_template"

# Names ``hermes_envgen.runtime`` exported before its API was cut to ``__all__`` (0.1.0): each
# still lives in its module, from which the rewritten import takes it.
MOVED = {
    "ToolError": "loop.agent_loop",  # the Hermes skill's name of ToolErrorRecord, kept there
    "Rollout": "rollout",
    "RolloutRecord": "rollout",
    "SandboxError": "errors",
    "ToolExecutionError": "errors",
    "InferenceError": "errors",
    "ModelServerError": "errors",
    "answer_matches": "rewards",
    "normalize_answer": "rewards",
    "Tool": "tools",
    "ToolRegistry": "tools",
    "REGISTRY": "tools",
    "SandboxManager": "sandbox",
    "SandboxSettings": "sandbox",
    "tokenize_conversation": "chat.trajectory",
}

# Modules of the runtime that moved into the packages named after their jobs (0.2): an import
# from the old path is rewritten to the new one. Paths relative to hermes_envgen.runtime; a
# package (evaluation) moves with its modules.
MOVED_MODULES = {
    "base_env": "env.base_env",
    "config": "env.config",
    "env_cli": "env.cli",
    "env_tasks": "env.tasks",
    "env_overrides": "env.overrides",
    "datasets": "env.datasets",
    "sync_bridge": "loop.sync_bridge",
    "delivery": "env.delivery",
    "serve_log": "env.serve_log",
    "agent_loop": "loop.agent_loop",
    "tool_context": "loop.tool_context",
    "tasks": "rollout",
    "records": "rollout",
    "token_trace": "rollout",
    "template_check": "chat.template_check",
    "template_data": "chat.template_data",
    "template_render": "chat.template_render",
    "trajectory": "chat.trajectory",
    "exact_tokens": "chat.token_mode",
    "progress": "rollouts.progress",
    "evaluation.progress": "rollouts.progress",
    "evaluation": "rollouts.evaluation",
    "rollout_view": "rollouts.rollout_view",
    "run_glance": "rollouts.run_glance",
    "token_view": "rollouts.token_view",
    "session": "doors.session",
    "sandbox.bwrap": "sandbox.bwrap.backend",
    "sandbox.anchor": "sandbox.bwrap.anchor",
    "sandbox.pool": "sandbox.bwrap.pool",
    "sandbox.docker": "sandbox.docker.backend",
    "sandbox.docker_channel": "sandbox.docker.channel",
    "sandbox.docker_engine": "sandbox.docker.engine",
    "sandbox.docker_pool": "sandbox.docker.pool",
    "sandbox.docker_shell": "sandbox.docker.shell",
}
MOVED_PACKAGES = {"evaluation"}
# Names that left their module for another one when it moved (old module, name): new module.
LEFT_MODULE = {
    **{
        ("agent_loop", name): "rollout"
        for name in (
            "AgentResult",
            "AssistantTurn",
            "RolloutState",
            "TaskT",
            "StateT",
            "ToolErrorRecord",
        )
    },
    **{
        ("records", name): "rollouts.records"
        for name in ("SAMPLES_FILE", "FAILURES_FILE", "SETTINGS_FILE", "METRICS_FILE")
    },
    ("exact_tokens", "TokenTrace"): "rollout",
    ("exact_tokens", "MASKED_LOGPROB"): "rollout",
    ("trajectory", "MASKED"): "rollout",
    ("rollout_view", "RolloutCard"): "rollouts.rollout_card",
}


def _new_module(module: str, name: str) -> str | None:
    """Where ``name``, imported from the runtime's ``module`` (a path it left), now lives."""
    old = module.removeprefix(f"{RUNTIME}.")
    if not module.startswith(f"{RUNTIME}.") or old in MOVED_MODULES.values():
        return None
    for moved, new in MOVED_MODULES.items():  # the module itself, or the package it is in
        if old == moved or (moved in MOVED_PACKAGES and old.startswith(f"{moved}.")):
            new_module = LEFT_MODULE.get((old, name), new + old.removeprefix(moved))
            return f"{RUNTIME}.{new_module}"
    return None


# Names gone for good, the modules they were imported from, and what to do instead.
REMOVED = {
    "keyword_overlap": (
        {RUNTIME, f"{RUNTIME}.rewards"},
        "keyword_overlap was removed (it paid wrong answers that share a word with the "
        "reference): score a failed judge Reward(0.0, failure=...) as the judge pattern's "
        "compute_reward does",
    ),
    "load_items": (
        {RUNTIME, f"{RUNTIME}.datasets"},
        "load_items was removed: load the tasks with `tasks = self.load_tasks(SAMPLES)` (the "
        "rows of --env.dataset_name, else SAMPLES) and split them with "
        "`self.train_items, self.eval_items = self.split_tasks(tasks)`",
    ),
    "EarlierTurnsRewritten": (
        {f"{RUNTIME}.errors", f"{RUNTIME}.trajectory", CHAT_TEMPLATE},
        "EarlierTurnsRewritten was removed: it was never raised (each turn is trained as "
        "generated), so code that catches it can go",
    ),
}

# The module whose names moved to three modules of their own, one job each (below).
CHAT_TEMPLATE_NAMES = {
    "chat.template_check": [
        "ChatTemplateDropsToolCalls",
        "check_tool_calls_rendered",
        "prepare_chat_template",
    ],
    "chat.template_data": [
        "BUILTIN_TEMPLATES",
        "CHATML_TOOLS_TEMPLATE",
        "HERMES_TEMPLATE",
        "resolve_chat_template",
    ],
    "chat.template_render": [
        "AS_GIVEN",
        "NAMED",
        "SHORT",
        "as_sent",
        "call_id_style",
        "encode",
        "end_marker",
        "for_template",
        "render",
        "renders_raw_arguments",
        "set_template_kwargs",
        "short_call_id",
        "template_kwargs",
        "text_after_turn",
        "with_arguments",
        "with_call_ids",
    ],
}
CHAT_TEMPLATE_MODULE = {
    name: module for module, names in CHAT_TEMPLATE_NAMES.items() for name in names
}

# Settings renamed after 0.1: keys of a config file, keyword arguments, attributes and flag names.
SETTINGS = {
    "terminal_timeout": "sandbox_command_timeout",
    "terminal_lifetime": "sandbox_idle_lifetime",
}
SETTING_KEY = re.compile(
    rf"^(?P<indent>[ \t]*(?:- )?)(?P<name>{'|'.join(SETTINGS)})(?P<rest>[ \t]*:)", re.MULTILINE
)

LINE_LENGTH = 100  # the generated project's ruff line length


@dataclass
class Migration:
    """What :func:`migrate_project` did: the files it rewrote, the lines left to the user."""

    rewritten: list[str] = field(default_factory=list)
    to_change: list[str] = field(default_factory=list)  # "path:line: what to change"


def migrate_project(project: Path) -> Migration:
    """Rewrite the old names in ``project``'s tracked ``*.py``, ``*.yaml`` and ``*.yml`` files."""
    migration = Migration()
    listing = run_git("ls-files", "-z", "--", "*.py", "*.yaml", "*.yml", cwd=project)
    names = [
        name
        for name in sorted(entry for entry in listing.split("\0") if entry)
        if not name.endswith(".copier-answers.yml") and (project / name).is_file()
    ]
    for name in names:
        text = _read(project / name)
        new = migrate_python(text)[0] if name.endswith(".py") else migrate_yaml(text)
        if new != text:
            (project / name).write_text(new, encoding="utf-8", errors="surrogateescape")
            migration.rewritten.append(name)
    _sort_imports(project, [name for name in migration.rewritten if name.endswith(".py")])
    for name in names:  # the lines as the user finds them, imports sorted
        if name.endswith(".py"):
            notes = migrate_python(_read(project / name))[1]
            migration.to_change += [f"{name}:{line}: {note}" for line, note in notes]
    return migration


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="surrogateescape")


def _sort_imports(project: Path, files: list[str]) -> None:
    """Put the rewritten imports in the order the project's ruff wants them (its isort rules
    alone: nothing else of the user's code is touched).

    Best effort: the files run either way; without ruff, or where it fails, the project's own
    ``ruff check`` says what is left.
    """
    ruff = hooks.load("post_gen_project").find_ruff()
    if not files or ruff is None:
        return
    subprocess.run(
        [ruff, "check", "--select", "I", "--fix", "--quiet", "--no-cache", "--", *files],
        cwd=project,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def migrate_yaml(text: str) -> str:
    """A config file with the renamed settings' keys given their new names."""
    return SETTING_KEY.sub(lambda m: f"{m['indent']}{SETTINGS[m['name']]}{m['rest']}", text)


@dataclass(frozen=True)
class _Edit:
    """Replace lines ``first``..``last`` (1-based), or a span of one line, with ``text``."""

    line: int
    start: int  # character offsets in the line; -1: whole lines first..last
    end: int
    text: str
    last: int = 0


def migrate_python(text: str) -> tuple[str, list[tuple[int, str]]]:
    """The module with the old names rewritten, and its lines to change by hand."""
    new, notes = _rewrite_python(text)
    return (new, notes) if new == text else (new, _rewrite_python(new)[1])


def _rewrite_python(text: str) -> tuple[str, list[tuple[int, str]]]:
    """The module with the old names rewritten, and the lines (of ``text``) to change by hand."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        return text, [(exc.lineno or 1, "not valid Python (merge markers?): not migrated")]
    lines = text.splitlines(keepends=True)
    edits: list[_Edit] = []
    notes: list[tuple[int, str]] = []
    removed_here: dict[str, str] = {}  # names gone for good, imported here: each use is said
    uses_runtime = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            uses_runtime |= node.module.startswith(RUNTIME)
            _migrate_import(node, lines, edits, notes, removed_here)
    passed_policy: set[int] = set()  # the self.model nodes rewritten as judge_client's argument
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in removed_here:
            notes.append((node.lineno, removed_here[node.id]))
        elif isinstance(node, ast.keyword) and node.arg in SETTINGS:
            start = _column(lines, node.lineno, node.col_offset)
            edits.append(_Edit(node.lineno, start, start + len(node.arg), SETTINGS[node.arg]))
        elif isinstance(node, ast.Attribute) and node.attr in SETTINGS:
            line = node.end_lineno or node.lineno
            end = _column(lines, line, node.end_col_offset or 0)
            edits.append(_Edit(line, end - len(node.attr), end, SETTINGS[node.attr]))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            new = _setting_string(node.value)
            if new is not None and node.lineno == node.end_lineno:
                span = _span(lines, node, "")
                quoted = lines[node.lineno - 1][span.start : span.end]
                edits.append(replace(span, text=quoted.replace(node.value, new)))
        elif _is_judge_client_of_self_model(node):
            assert isinstance(node, ast.Call)
            passed_policy.add(id(node.args[0]))
            edits.append(_span(lines, node.args[0], "self.policy"))
    said = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and _is_self_model(node)
        and id(node) not in passed_policy
    ]
    if uses_runtime:
        notes += [
            (node.lineno, "self.model is now self.policy (the env's client)") for node in said
        ]
    return _apply(lines, edits), sorted(set(notes))


def _migrate_import(
    node: ast.ImportFrom,
    lines: list[str],
    edits: list[_Edit],
    notes: list[tuple[int, str]],
    removed_here: dict[str, str],
) -> None:
    """One ``from MODULE import ...`` statement, its old names imported from where they are."""
    module = node.module or ""
    kept: list[str] = []
    moved: dict[str, list[str]] = {}
    for alias in node.names:
        name, suffix = alias.name, f" as {alias.asname}" if alias.asname else ""
        if module == RUNTIME and name in MOVED:
            moved.setdefault(f"{RUNTIME}.{MOVED[name]}", []).append(name + suffix)
        elif module == CHAT_TEMPLATE and name in CHAT_TEMPLATE_MODULE:
            moved.setdefault(f"{RUNTIME}.{CHAT_TEMPLATE_MODULE[name]}", []).append(name + suffix)
        elif _new_module(module, name) and not (name in REMOVED and module in REMOVED[name][0]):
            moved.setdefault(_new_module(module, name) or "", []).append(name + suffix)
        else:
            if name in REMOVED and module in REMOVED[name][0]:
                notes.append((node.lineno, REMOVED[name][1]))
                removed_here[alias.asname or name] = REMOVED[name][1]
            kept.append(name + suffix)
    if not moved:
        return
    first, last = node.lineno, node.end_lineno or node.lineno
    before = lines[first - 1][: _column(lines, first, node.col_offset)]
    after = lines[last - 1][_column(lines, last, node.end_col_offset or 0) :]
    if before.strip() or after.strip():  # shares its lines with other code: said, not rewritten
        names = ", ".join(sorted(n for group in moved.values() for n in group))
        notes.append((first, f"import {names} from {', '.join(sorted(moved))} instead"))
        return
    statements = [_import_statement(module, kept, before, first != last)] if kept else []
    statements += [_import_statement(t, moved[t], before, False) for t in sorted(moved)]
    edits.append(_Edit(first, -1, -1, "".join(statements), last))


def _import_statement(module: str, names: list[str], indent: str, multiline: bool) -> str:
    """``from module import names`` as ruff formats it: on one line if it fits."""
    one_line = f"{indent}from {module} import {', '.join(names)}\n"
    if not multiline and len(one_line) <= LINE_LENGTH + 1:
        return one_line
    body = "".join(f"{indent}    {name},\n" for name in names)
    return f"{indent}from {module} import (\n{body}{indent})\n"


def _is_judge_client_of_self_model(node: ast.AST) -> bool:
    """``judge_client(self.model, ...)``: the template's judge before ``self.policy``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "judge_client"
        and bool(node.args)
        and _is_self_model(node.args[0])
    )


def _is_self_model(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "model"
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and isinstance(node.ctx, ast.Load)
    )


def _setting_string(value: str) -> str | None:
    """A string naming a renamed setting (``terminal_timeout``, ``env.…``, ``--env.…``), renamed."""
    for prefix in ("", "env.", "--env."):
        old = value.removeprefix(prefix)
        if value.startswith(prefix) and old in SETTINGS:
            return prefix + SETTINGS[old]
    return None


def _column(lines: list[str], line: int, byte_offset: int) -> int:
    """The character offset of an AST node's UTF-8 byte offset in its line."""
    return len(lines[line - 1].encode("utf-8")[:byte_offset].decode("utf-8", "replace"))


def _span(lines: list[str], node: ast.expr, text: str) -> _Edit:
    """An edit replacing a one-line expression ``node`` with ``text``."""
    start = _column(lines, node.lineno, node.col_offset)
    end = _column(lines, node.end_lineno or node.lineno, node.end_col_offset or 0)
    return _Edit(node.lineno, start, end, text)


def _apply(lines: list[str], edits: list[_Edit]) -> str:
    """The lines with ``edits`` made, from the last to the first (offsets stay right)."""
    out = list(lines)
    for edit in sorted(set(edits), key=lambda e: (e.line, e.start), reverse=True):
        if edit.start < 0:
            out[edit.line - 1 : edit.last] = [edit.text]
        else:
            line = out[edit.line - 1]
            out[edit.line - 1] = line[: edit.start] + edit.text + line[edit.end :]
    return "".join(out)
