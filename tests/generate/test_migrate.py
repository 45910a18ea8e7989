"""The rewrite of earlier releases' names that ``update`` runs after its merge (generate.migrate).

Only exact known old names change; what cannot be rewritten is said as ``file:line: what to
change``. The whole path (a v0.1.0 project updated, then run) is in test_release.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers.envgen import git

from hermes_envgen.generate import hooks, migrate
from hermes_envgen.generate.migrate import migrate_project, migrate_python, migrate_yaml

OLD_ENV = """\
from hermes_envgen.runtime import (
    AgentResult,
    HermesAgentBaseEnv,
    ToolError,
    REGISTRY,
    Rollout as Kept,
)
from hermes_envgen.runtime.chat_template import HERMES_TEMPLATE, render
from hermes_envgen.runtime.agent_loop import ToolError as Alias
from hermes_envgen.runtime.rewards import ask_judge, keyword_overlap
from mylib import ToolError as Theirs, terminal_timeout


class OldEnv(HermesAgentBaseEnv):
    def config_init(cls):
        # terminal_timeout in a comment stays as it is
        config = OldConfig(terminal_timeout=5, terminal_backend="local")
        flags = {"env.terminal_lifetime": 9, "--env.terminal_timeout": 1}
        other = "terminal_timeouts"
        return config.terminal_timeout, self.config.terminal_lifetime, flags, other

    def make_judge(self):
        return judge_client(self.model, "https://judge.example/v1")

    def errors(self, error: ToolError) -> list[ToolError]:
        return [error, keyword_overlap("a", "b"), self.model]
"""

NEW_ENV = """\
from hermes_envgen.runtime import (
    AgentResult,
    HermesAgentBaseEnv,
)
from hermes_envgen.runtime.loop.agent_loop import ToolError
from hermes_envgen.runtime.rollout import Rollout as Kept
from hermes_envgen.runtime.tools import REGISTRY
from hermes_envgen.runtime.chat.template_data import HERMES_TEMPLATE
from hermes_envgen.runtime.chat.template_render import render
from hermes_envgen.runtime.loop.agent_loop import ToolError as Alias
from hermes_envgen.runtime.rewards import ask_judge, keyword_overlap
from mylib import ToolError as Theirs, terminal_timeout


class OldEnv(HermesAgentBaseEnv):
    def config_init(cls):
        # terminal_timeout in a comment stays as it is
        config = OldConfig(sandbox_command_timeout=5, terminal_backend="local")
        flags = {"env.sandbox_idle_lifetime": 9, "--env.sandbox_command_timeout": 1}
        other = "terminal_timeouts"
        return config.sandbox_command_timeout, self.config.sandbox_idle_lifetime, flags, other

    def make_judge(self):
        return judge_client(self.policy, "https://judge.example/v1")

    def errors(self, error: ToolError) -> list[ToolError]:
        return [error, keyword_overlap("a", "b"), self.model]
"""


def test_old_names_are_rewritten_and_the_rest_is_said_by_line():
    new, notes = migrate_python(OLD_ENV)
    assert new == NEW_ENV
    assert [(line, note.split(" ", 1)[0]) for line, note in notes] == [
        (11, "keyword_overlap"),  # lines of the rewritten file
        (27, "keyword_overlap"),
        (27, "self.model"),
    ]
    assert "Reward(0.0, failure=...)" in notes[0][1]
    assert migrate_python(new) == (new, notes)  # a second run changes nothing


def test_every_rewritten_name_is_where_the_rewrite_imports_it_and_the_old_ones_are_gone():
    import importlib
    import importlib.util

    import hermes_envgen.runtime as runtime
    from hermes_envgen.runtime import HermesAgentEnvConfig

    for name, module in migrate.MOVED.items():
        assert hasattr(importlib.import_module(f"{migrate.RUNTIME}.{module}"), name), name
        assert name not in runtime.__all__
    for module, names in migrate.CHAT_TEMPLATE_NAMES.items():
        imported = importlib.import_module(f"{migrate.RUNTIME}.{module}")
        assert [name for name in names if not hasattr(imported, name)] == []
    assert importlib.util.find_spec(migrate.CHAT_TEMPLATE) is None
    for old, (modules, _) in migrate.REMOVED.items():
        for module in modules - {migrate.CHAT_TEMPLATE}:
            # an old path that moved since: the name is gone from its new module too
            moved = migrate._new_module(module, old) or module
            assert not hasattr(importlib.import_module(moved), old), (module, old)
    for old, new in migrate.SETTINGS.items():
        assert new in HermesAgentEnvConfig.model_fields and old not in dir(HermesAgentEnvConfig)


def test_each_moved_module_left_its_old_path_and_holds_what_the_rewrite_imports_from_it():
    import importlib
    import importlib.util

    for old, new in migrate.MOVED_MODULES.items():
        try:
            spec = importlib.util.find_spec(f"{migrate.RUNTIME}.{old}")
        except ModuleNotFoundError:  # its package is gone too (evaluation)
            spec = None
        # gone, or a package of that name now (sandbox.bwrap holds the backend and its anchor)
        assert spec is None or spec.submodule_search_locations, old
        importlib.import_module(f"{migrate.RUNTIME}.{new}")
    for (old, name), new in migrate.LEFT_MODULE.items():
        assert hasattr(importlib.import_module(f"{migrate.RUNTIME}.{new}"), name), (old, name)


def test_imports_of_moved_modules_are_rewritten_name_by_name():
    old = (
        "from hermes_envgen.runtime.datasets import load_items, split_train_eval\n"
        "from hermes_envgen.runtime.agent_loop import AgentResult, HermesAgentLoop\n"
        "from hermes_envgen.runtime.evaluation.stats import wilson_interval\n"
        "from hermes_envgen.runtime.records import SAMPLES_FILE, Metric\n"
        "from hermes_envgen.runtime.rollout import Task\n"
    )
    new, notes = migrate_python(old)
    assert new == (
        "from hermes_envgen.runtime.datasets import load_items\n"
        "from hermes_envgen.runtime.env.datasets import split_train_eval\n"
        "from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop\n"
        "from hermes_envgen.runtime.rollout import AgentResult\n"
        "from hermes_envgen.runtime.rollouts.evaluation.stats import wilson_interval\n"
        "from hermes_envgen.runtime.rollout import Metric\n"
        "from hermes_envgen.runtime.rollouts.records import SAMPLES_FILE\n"
        "from hermes_envgen.runtime.rollout import Task\n"
    )
    assert [line for line, _ in notes] == [1]  # load_items: removed, said
    assert migrate_python(new)[0] == new


def test_a_users_own_function_of_a_removed_name_is_not_said():
    text = "def keyword_overlap(a, b):\n    return 1.0\n\n\nkeyword_overlap('a', 'b')\n"
    assert migrate_python(text) == (text, [])


def test_an_import_sharing_its_line_is_said_not_rewritten():
    text = "import os; from hermes_envgen.runtime import REGISTRY\n"
    new, notes = migrate_python(text)
    assert new == text
    assert notes == [(1, "import REGISTRY from hermes_envgen.runtime.tools instead")]


def test_a_file_that_is_not_python_is_said_and_left_alone():
    text = "<<<<<<< before updating\nx = 1\n"
    assert migrate_python(text) == (text, [(1, "not valid Python (merge markers?): not migrated")])


def test_config_keys_are_renamed_and_nothing_else():
    text = (
        "env:\n  terminal_backend: local\n  terminal_timeout: 60\n"
        "  terminal_lifetime : 9\n  note: terminal_timeout\n# terminal_timeout: 1\n"
    )
    assert migrate_yaml(text) == (
        "env:\n  terminal_backend: local\n  sandbox_command_timeout: 60\n"
        "  sandbox_idle_lifetime : 9\n  note: terminal_timeout\n# terminal_timeout: 1\n"
    )


def test_a_project_is_rewritten_in_its_tracked_files_with_its_imports_sorted(tmp_path: Path):
    project = tmp_path / "old-env"
    (project / "src" / "old_env").mkdir(parents=True)
    (project / "configs").mkdir()
    env_py = project / "src" / "old_env" / "env.py"
    env_py.write_text(OLD_ENV)
    (project / "configs" / "default.yaml").write_text("env:\n  terminal_timeout: 60\n")
    (project / "pyproject.toml").write_text(
        '[tool.ruff]\nline-length = 100\n[tool.ruff.lint]\nselect = ["I"]\n'
    )
    git(project, "init", "--quiet")
    git(project, "add", "--all")
    (project / "untracked.py").write_text("from hermes_envgen.runtime import REGISTRY\n")

    migration = migrate_project(project)
    assert migration.rewritten == ["configs/default.yaml", "src/old_env/env.py"]
    text = env_py.read_text()
    line = text.splitlines().index(
        "from hermes_envgen.runtime.rewards import ask_judge, keyword_overlap"
    )
    assert migration.to_change[0].startswith(f"src/old_env/env.py:{line + 1}: keyword_overlap")
    assert len(migration.to_change) == 3
    assert (project / "configs" / "default.yaml").read_text() == (
        "env:\n  sandbox_command_timeout: 60\n"
    )
    assert "from hermes_envgen.runtime import REGISTRY" in (project / "untracked.py").read_text()
    # ruff put the rewritten imports in order: the project's own `ruff check` passes
    assert "from hermes_envgen.runtime.tools import REGISTRY" in text
    ruff = hooks.load("post_gen_project").find_ruff() or "ruff"
    sorted_imports = subprocess.run(
        [ruff, "check", "--select", "I", "--quiet", str(env_py)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sorted_imports.returncode == 0, sorted_imports.stdout
    assert migrate_project(project).rewritten == []
