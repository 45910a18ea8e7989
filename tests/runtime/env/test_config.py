"""The env settings' other names: the Hermes skill's work for good, without a warning; the
names this project gave some before renaming them are refused at start-up with the new name
(``hermes-envgen update`` rewrites them in a project)."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import yaml
from conftest import EXAMPLES
from pydantic import ValidationError

from hermes_envgen.runtime import EnvConfigError, HermesAgentEnvConfig
from hermes_envgen.runtime.env import config as config_module
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
