"""The env settings' renamed names: the old ones still work for a release, with one warning."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import yaml
from conftest import EXAMPLES

from hermes_envgen.runtime import HermesAgentEnvConfig
from hermes_envgen.runtime import config as config_module
from hermes_envgen.testing.runner import offline_environment


@pytest.fixture(autouse=True)
def warn_afresh(monkeypatch):
    monkeypatch.setattr(config_module, "_warned", set())


def test_old_names_set_the_new_settings_with_one_warning_each_but_the_skills(caplog):
    # terminal_backend is the Hermes skill's name: it works for good, without a warning.
    with caplog.at_level(logging.WARNING):
        config = HermesAgentEnvConfig(
            terminal_backend="bwrap", terminal_timeout=5, terminal_lifetime=9
        )
        HermesAgentEnvConfig(terminal_backend="bwrap")  # said once per process
    assert (config.sandbox_backend, config.sandbox_command_timeout) == ("bwrap", 5)
    assert config.sandbox_idle_lifetime == 9 and config.terminal_timeout == 5
    assert config.sandbox_settings().command_timeout == 5
    assert caplog.messages == [
        f"warning: {old} is deprecated, use {new} (the old name goes in the next release)"
        for old, new in config_module.RENAMED_SETTINGS.items()
        if old != "terminal_backend"
    ]
    assert config.terminal_backend == "bwrap"
    assert "terminal_backend" not in config.model_dump()


def test_a_new_name_set_on_purpose_beats_an_old_one_in_the_same_merge():
    # atroposlib merges class defaults < config file < flags into one dict.
    defaults = HermesAgentEnvConfig().model_dump()
    from_file = HermesAgentEnvConfig(**defaults | {"terminal_backend": "bwrap"})
    assert from_file.sandbox_backend == "bwrap"
    flag_over_file = {"terminal_backend": "bwrap", "sandbox_backend": "docker"}
    assert HermesAgentEnvConfig(**defaults | flag_over_file).sandbox_backend == "docker"


def test_renamed_flags_keep_their_values():
    args = ["process", "--env.terminal_backend", "bwrap", "--env.terminal_timeout=5", "--x"]
    assert config_module.renamed_flags(args) == [
        "process",
        "--env.sandbox_backend",
        "bwrap",
        "--env.sandbox_command_timeout=5",
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
