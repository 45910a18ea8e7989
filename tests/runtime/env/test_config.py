"""The env settings' other names: the Hermes skill's work for good, without a warning; the
names this project gave some before renaming them are refused at start-up with the new name
(``hermes-envgen update`` rewrites them in a project)."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
from dataclasses import fields, replace

import pytest
import yaml
from conftest import EXAMPLES
from pydantic import ValidationError

from hermes_envgen.runtime import EnvConfigError, HermesAgentEnvConfig
from hermes_envgen.runtime.env import config as config_module
from hermes_envgen.runtime.env.datasets import DataSettings
from hermes_envgen.runtime.loop.agent_loop import LoopSettings, LoopSettingsByName
from hermes_envgen.runtime.rollouts.evaluation.settings import EvalSettings
from hermes_envgen.testing.runner import offline_environment


def test_the_skills_name_sets_the_setting_without_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        config = HermesAgentEnvConfig(terminal_backend="bwrap")
    assert config.sandbox_backend == config.terminal_backend == "bwrap"
    assert caplog.messages == []
    assert "terminal_backend" not in config.model_dump()


@pytest.mark.parametrize(("old", "new"), sorted(config_module.RENAMED_SETTINGS.items()))
def test_a_renamed_settings_old_name_is_refused_with_its_new_one(old, new):
    with pytest.raises(ValidationError, match=f"{old} is now called {new}: rename it"):
        HermesAgentEnvConfig(**{old: 5})
    with pytest.raises(EnvConfigError, match=f"--env.{old} is now called {new}"):
        config_module.skill_flags(["process", f"--env.{old}=5"])


def test_a_new_name_set_on_purpose_beats_an_old_one_in_the_same_merge():
    # atroposlib merges class defaults < config file < flags into one dict.
    defaults = HermesAgentEnvConfig().model_dump()
    from_file = HermesAgentEnvConfig(**defaults | {"terminal_backend": "bwrap"})
    assert from_file.sandbox_backend == "bwrap"
    flag_over_file = {"terminal_backend": "bwrap", "sandbox_backend": "docker"}
    assert HermesAgentEnvConfig(**defaults | flag_over_file).sandbox_backend == "docker"


def test_the_skills_flag_keeps_its_value():
    args = ["process", "--env.terminal_backend", "bwrap", "--env.terminal_backend=local", "--x"]
    assert config_module.skill_flags(args) == [
        "process",
        "--env.sandbox_backend",
        "bwrap",
        "--env.sandbox_backend=local",
        "--x",
    ]


def run_example(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "terminal_env.py"), "process", *args],
        cwd=cwd,
        env=offline_environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize("source", ["flag", "config file"])
def test_an_old_name_reaches_the_env_from_a_flag_or_a_config_file(
    offline_tokenizer, tmp_path, source
):
    # An unknown backend stops the env at start-up, naming the value it was given.
    args = [
        "--env.tokenizer_name",
        str(offline_tokenizer),
        "--openai.base_url",
        "http://127.0.0.1:9/v1",
    ]
    if source == "flag":
        args += ["--env.terminal_backend", "vm"]
    else:
        (tmp_path / "old.yaml").write_text(yaml.safe_dump({"env": {"terminal_backend": "vm"}}))
        args += ["--config", str(tmp_path / "old.yaml")]
    completed = run_example(*args, cwd=tmp_path)
    assert completed.returncode == 2, completed.stderr[-3000:]
    lines = completed.stderr.strip().splitlines()
    assert lines[-1].startswith("error: unknown sandbox_backend 'vm'; valid backends: local"), lines
    # terminal_backend is the Hermes skill's name for it: no warning
    assert [line for line in lines if "deprecated" in line] == []
    assert "Traceback" not in completed.stderr


@pytest.mark.slow
def test_a_new_flag_beats_an_old_name_in_the_config_file(offline_tokenizer, tmp_path):
    (tmp_path / "old.yaml").write_text(yaml.safe_dump({"env": {"terminal_backend": "vm"}}))
    completed = run_example(
        "--config",
        str(tmp_path / "old.yaml"),
        "--env.sandbox_backend",
        "vm2",
        "--env.tokenizer_name",
        str(offline_tokenizer),
        "--openai.base_url",
        "http://127.0.0.1:9/v1",
        cwd=tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert "error: unknown sandbox_backend 'vm2'" in completed.stderr.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("source", ["flag", "config file"])
def test_a_renamed_setting_stops_the_env_in_one_line(offline_tokenizer, tmp_path, source):
    args = ["--env.tokenizer_name", str(offline_tokenizer)]
    if source == "flag":
        args += ["--env.terminal_timeout", "5"]
    else:
        (tmp_path / "old.yaml").write_text(yaml.safe_dump({"env": {"terminal_timeout": 5}}))
        args += ["--config", str(tmp_path / "old.yaml")]
    completed = run_example(*args, "--openai.base_url", "http://127.0.0.1:9/v1", cwd=tmp_path)
    assert completed.returncode == 2, completed.stderr[-3000:]
    last = completed.stderr.strip().splitlines()[-1]
    assert "terminal_timeout is now called sandbox_command_timeout: rename it" in last, last
    assert "Traceback" not in completed.stderr


# -- the settings' groups, each made from the flat --env. flags by one method of the config ---


def test_the_command_line_reaches_each_settings_group(offline_tokenizer, tmp_path, monkeypatch):
    """Through atroposlib's own parse (flags and a config file), into the groups the env hands
    whole to its loop, its tasks, its tools, its evaluation and its sandboxes."""
    from terminal_env import TASKS, TerminalTaskEnv

    from hermes_envgen.runtime import ToolContext

    made = []

    class Recording(TerminalTaskEnv):
        async def process_manager(self):  # the env as the command line made it, not run
            ctx = ToolContext("task-flags", self.sandboxes, self.tool_registry, self.tool_services)
            made.append(
                (
                    self,
                    self.make_loop(
                        TASKS[0], ctx, split="train", temperature=0.25, tools=self._resolve_tools()
                    ),
                )
            )

    (tmp_path / "run.yaml").write_text(
        yaml.safe_dump({"env": {"max_tool_output_chars": 500, "disabled_toolsets": ["web"]}})
    )
    flags = {
        "tokenizer_name": str(offline_tokenizer),
        "sandbox_root": str(tmp_path / "sandboxes"),
        "use_wandb": "false",
        "max_agent_turns": "3",
        "max_tokens_per_turn": "64",
        "max_rollout_seconds": "42",
        "extra_body": '{"top_k": 20}',
        "tool_choice": "required",
        "eval_temperature": "0.5",
        "eval_samples_per_item": "4",
        "eval_pass_threshold": "0.75",
        "max_eval_workers": "2",
        "data_dir_to_save_evals": str(tmp_path / "evals"),
        "dataset_split": "test",
        "prompt_field": "question",
        "eval_size": "5",
        "split_seed": "7",
        "web_timeout": "7",
        "python_timeout": "9",
        "sandbox_cpus": "0.5",
    }
    argv = ["env.py", "process", "--config", str(tmp_path / "run.yaml")]
    argv += [part for name, value in flags.items() for part in (f"--env.{name}", value)]
    argv += ["--openai.base_url", "http://127.0.0.1:9/v1", "--openai.model_name", "m"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.chdir(tmp_path)
    sigterm = signal.getsignal(signal.SIGTERM)  # the env's command line takes SIGTERM over
    try:
        with pytest.raises(SystemExit) as exited:
            Recording.cli()
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert exited.value.code == 0 and made, exited.value
    env, loop = made[0]
    try:
        assert loop.settings == LoopSettings(
            max_turns=3,
            temperature=0.25,
            max_tokens=64,
            extra_body={"top_k": 20},
            max_tool_output_chars=500,  # from the config file
            max_parallel_tools=8,
            request_retries=0,  # the policy's client retries, by kind
            tool_choice="required",
            max_seconds=42.0,
        )
        assert loop.max_turns == 3 and loop.max_seconds == 42.0  # read by name on the loop
        config = env.config
        assert config.loop_settings("eval").temperature == 0.5
        assert config.loop_settings("train").temperature == config.agent_temperature
        assert config.data_settings() == DataSettings(
            dataset_name=None,
            dataset_split="test",
            prompt_field="question",
            eval_size=5,
            split_seed=7,
        )
        tools = config.tool_settings()
        assert tools.disabled_toolsets == ["web"]
        assert (tools.web.timeout, tools.python.timeout) == (7.0, 9.0)
        assert config.evaluation_settings() == EvalSettings(
            save_dir=str(tmp_path / "evals"),
            samples_per_item=4,
            pass_threshold=0.75,
            temperature=0.5,
            workers=2,
        )
        assert config.sandbox_settings().cpus == 0.5
    finally:
        asyncio.run(env.sandboxes.close_all())


def test_the_loop_keywords_of_the_skill_set_fields_of_its_settings():
    from hermes_envgen.runtime import HermesAgentLoop

    base = LoopSettings(max_turns=9, max_seconds=60.0)
    loop = HermesAgentLoop(
        None, [], [], settings=base, max_turns=4, temperature=0.0, max_tokens=32, extra_body={}
    )
    assert loop.settings == replace(
        base, max_turns=4, temperature=0.0, max_tokens=32, extra_body={}
    )
    loop.max_seconds = 5.0  # a make_loop override changes one setting by its name
    assert loop.settings.max_seconds == 5.0 and base.max_seconds == 60.0
    assert HermesAgentLoop(None, [], []).settings == LoopSettings()
    with pytest.raises(TypeError, match="max_turn"):
        HermesAgentLoop(None, [], [], max_turn=4)  # a misspelt setting is refused


def test_every_loop_setting_is_a_keyword_of_the_loop():
    assert set(LoopSettingsByName.__annotations__) == {f.name for f in fields(LoopSettings)}
