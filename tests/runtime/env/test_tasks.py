"""Where an env's tasks come from (EnvTasks): its dataset, or its built-in tasks.

A configured dataset that cannot be loaded stops the run with one line naming it and the cause
(exit 2): a mistyped or private name must not train on the samples unnoticed. The samples stand
in only when no dataset is configured, or when ``dataset_fallback`` asks for it (said at
start-up). Offline (HF_DATASETS_OFFLINE=1, as every test here) the hub cannot be reached, which
is what a mistyped name meets too.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_envgen.runtime.env.datasets import DataSettings, configured_tasks
from hermes_envgen.runtime.errors import DatasetError
from hermes_envgen.testing import OfflineRun, build_env, offline_environment, scripted_policy

MISTYPED = "example-org/terminal-tassks"

ENV_FILE = """
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from hermes_envgen.runtime import HermesAgentBaseEnv, HermesAgentEnvConfig, Reward

SAMPLES = [
    {"prompt": "Say yes.", "answer": "yes", "solution": "echo yes", "gold_answer": "yes"},
    {"prompt": "Say no.", "answer": "no", "solution": "echo no", "gold_answer": "no"},
]


class DatasetEnv(HermesAgentBaseEnv):
    name = "dataset_env"
    samples = SAMPLES

    @classmethod
    def config_init(cls):
        config = HermesAgentEnvConfig(
            group_size=2, enabled_toolsets=["terminal"], tokenizer_name="none", eval_size=1
        )
        return config, [APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="m")]

    def format_prompt(self, item):
        return item["prompt"]

    async def compute_reward(self, item, result, ctx):
        return Reward(float(item["answer"] in (result.final_response or "")))


if __name__ == "__main__":
    DatasetEnv.cli()
"""

SAMPLES = [{"prompt": "Say yes.", "answer": "yes"}, {"prompt": "Say no.", "answer": "no"}]


def test_no_dataset_means_the_built_in_samples():
    tasks, source = configured_tasks(DataSettings(), samples=SAMPLES)
    assert tasks == SAMPLES and source == "built-in tasks"


def test_a_dataset_that_cannot_be_loaded_is_an_error_naming_it_and_the_cause():
    with pytest.raises(DatasetError) as raised:
        configured_tasks(DataSettings(MISTYPED), samples=SAMPLES)
    message = str(raised.value)
    assert "\n" not in message
    assert f"dataset {MISTYPED} (split train) could not be loaded: ConnectionError" in message
    assert "--env.dataset_fallback true" in message
    assert raised.value.exit_code == 2


def test_the_samples_stand_in_for_a_dataset_only_when_asked(caplog):
    with caplog.at_level(logging.WARNING):
        tasks, source = configured_tasks(DataSettings(MISTYPED, fallback=True), samples=SAMPLES)
    assert tasks == SAMPLES and MISTYPED in source
    assert f"dataset {MISTYPED} could not be loaded" in caplog.text


def test_no_dataset_and_no_samples_is_an_error():
    with pytest.raises(DatasetError, match="no dataset is configured"):
        configured_tasks(DataSettings(), samples=[])


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    path = tmp_path / "dataset_env.py"
    path.write_text(textwrap.dedent(ENV_FILE))
    return path


def test_setup_splits_the_tasks_and_get_next_item_cycles_them(
    env_file, stub_server, offline_tokenizer, tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(env_file.parent))
    from dataset_env import DatasetEnv

    server = stub_server(scripted_policy(DatasetEnv.samples))
    env = build_env(DatasetEnv, server.base_url, offline_tokenizer, tmp_path / "run")
    asyncio.run(env.setup())
    assert len(env.train_items) == 1 and len(env.eval_items) == 1
    drawn = [asyncio.run(env.get_next_item()) for _ in range(3)]
    assert drawn == env.train_items * 3
    assert env.task_source == "built-in tasks"
    # A dataset asked for in the test kit is loaded for real: offline, that stops setup.
    env = build_env(
        DatasetEnv, server.base_url, offline_tokenizer, tmp_path / "ds", dataset_name=MISTYPED
    )
    with pytest.raises(DatasetError, match=MISTYPED):
        asyncio.run(env.setup())


def _process(env_file: Path, base_url: str, tokenizer: Path, workdir: Path, **env_flags):
    """``python dataset_env.py process`` for one group against ``base_url``, offline."""
    run = OfflineRun(env_file, base_url, tokenizer, workdir, env_flags=env_flags)
    flags = run.flags() | {
        "env.total_steps": 1,
        "env.data_path_to_save_groups": workdir / "groups.jsonl",
    }
    args = [arg for name, value in flags.items() for arg in (f"--{name}", str(value).lower())]
    return subprocess.run(
        [sys.executable, str(env_file), "process", *args],
        cwd=workdir,
        env=offline_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_a_mistyped_dataset_stops_the_run_in_one_line(
    env_file, stub_server, offline_tokenizer, tmp_path
):
    server = stub_server({"default": {"turns": [{"content": "nothing to do"}]}})
    result = _process(env_file, server.base_url, offline_tokenizer, tmp_path, dataset_name=MISTYPED)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-4000:]
    assert f"dataset {MISTYPED} (split train) could not be loaded" in errors[0]
    assert "Couldn't reach" in errors[0]
    assert not (tmp_path / "groups.jsonl").exists()  # nothing trained, nothing written


@pytest.mark.slow
def test_the_fallback_asked_for_is_said_and_trains_on_the_samples(
    env_file, stub_server, offline_tokenizer, tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(env_file.parent))
    from dataset_env import DatasetEnv

    server = stub_server(scripted_policy(DatasetEnv.samples))
    result = _process(
        env_file,
        server.base_url,
        offline_tokenizer,
        tmp_path,
        dataset_name=MISTYPED,
        dataset_fallback=True,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"dataset_fallback is on: if {MISTYPED} cannot be loaded" in output
    assert f"dataset {MISTYPED} could not be loaded" in output
    assert "1 training and 1 evaluation tasks from built-in tasks" in output
    assert (tmp_path / "groups.jsonl").read_text().count("\n") == 1
