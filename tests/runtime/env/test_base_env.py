"""HermesAgentBaseEnv in-process against the stub server: groups, rewards, cleanup, metrics."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess

import pytest
from atroposlib.envs.base import BaseEnv
from helpers.envs import GREETING, make_env
from terminal_env import TerminalTaskEnv
from transformers import AutoTokenizer

from hermes_envgen.runtime import HermesAgentEnvConfig
from hermes_envgen.runtime.chat.trajectory import MASKED
from hermes_envgen.runtime.sandbox.docker.engine import RUN_LABEL, run_label
from hermes_envgen.runtime.tools import UnknownToolError

SCRIPT = {
    "conversations": [
        {
            "match": "greeting",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "terminal", "arguments": {"command": "echo hello > greeting.txt"}}
                    ]
                },
                {"content": "Wrote it."},
            ],
        },
        {
            "match": "greeting",
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "write_file",
                            "arguments": {"path": "greeting.txt", "content": "bye"},
                        }
                    ]
                },
                {"content": "Done."},
            ],
        },
    ]
}


def sandbox_dirs(tmp_path):
    """The workspaces left in the runs' directories (a live run keeps its own, empty)."""
    return [p for p in (tmp_path / "sandboxes" / "hermes-envgen").glob("*/*") if p.is_dir()]


def test_a_group_is_a_valid_scored_data_group(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(SCRIPT)
    seen_tasks = []

    class Recording(TerminalTaskEnv):
        async def prepare_sandbox(self, item, ctx):
            seen_tasks.append(ctx.task_id)

    env = make_env(server.base_url, offline_tokenizer, tmp_path, Recording)

    async def main():
        await env.setup()
        return await env.collect_trajectories(GREETING)

    group, backlog = asyncio.run(main())
    assert backlog == []
    assert sorted(group["scores"]) == [0.0, 0.0, 1.0, 1.0]
    assert len(group["tokens"]) == len(group["masks"]) == len(group["messages"]) == 4
    tokenizer = AutoTokenizer.from_pretrained(offline_tokenizer)
    for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
        assert len(tokens) == len(masks) and all(isinstance(t, int) for t in tokens)
        trained = tokenizer.decode([t for t, m in zip(tokens, masks) if m != MASKED])
        assert trained.endswith(messages[-1]["content"] + "<|im_end|>")
    assert len(set(seen_tasks)) == 4  # one sandbox per rollout
    assert sandbox_dirs(tmp_path) == [] and len(env.sandboxes) == 0


def test_a_non_ascii_system_prompt_reaches_the_model_intact(
    stub_server, offline_tokenizer, tmp_path
):
    # Emoji, CJK and U+2028: a prompt of a generated env once failed every request to encode.
    prompt = 'You are 😀 an agent.\n中文 \u2028 🧪 \\ "quoted"'
    server = stub_server(SCRIPT)
    env = make_env(server.base_url, offline_tokenizer, tmp_path, system_prompt=prompt)

    async def main():
        await env.setup()
        return await env.collect_trajectories(GREETING)

    group, _ = asyncio.run(main())
    assert sorted(group["scores"]) == [0.0, 0.0, 1.0, 1.0]
    systems = [request["messages"][0] for request in server.requests]
    assert systems and all(m == {"role": "system", "content": prompt} for m in systems)


def test_a_system_prompt_no_request_can_carry_is_refused_at_start():
    with pytest.raises(ValueError, match="system_prompt has a lone surrogate at character 4"):
        HermesAgentEnvConfig(system_prompt="Hi! \ud83d")


def test_a_failing_reward_scores_zero_and_spares_the_group(
    stub_server, offline_tokenizer, tmp_path, caplog
):
    server = stub_server(SCRIPT)

    class Flaky(TerminalTaskEnv):
        async def compute_reward(self, item, result, ctx):
            if result.final_response == "Done.":
                raise RuntimeError("checker crashed")
            return await super().compute_reward(item, result, ctx)

    env = make_env(server.base_url, offline_tokenizer, tmp_path, Flaky)

    async def main():
        await env.setup()
        return await env.collect_trajectories(GREETING)

    group, _ = asyncio.run(main())
    assert sorted(group["scores"]) == [0.0, 0.0, 1.0, 1.0]
    metrics = env._train_stats.metrics("train")
    assert metrics["train/reward_errors"] == 2.0
    assert "checker crashed" in caplog.text and "greeting.txt" in caplog.text  # logged with item
    assert sandbox_dirs(tmp_path) == []


def test_evaluation_runs_the_full_loop_and_stays_out_of_training_buffers(
    stub_server, offline_tokenizer, tmp_path
):
    server = stub_server(SCRIPT)
    env = make_env(server.base_url, offline_tokenizer, tmp_path)

    async def main():
        await env.setup()
        return await env.run_eval([GREETING, GREETING])

    metrics = asyncio.run(main())
    assert metrics["eval/mean_reward"] == 0.5
    assert metrics["eval/tool_calls_per_rollout"] == 1.0
    assert env._train_stats.rewards == []
    assert all(r["temperature"] == 0.0 for r in server.requests)
    assert all(r["tools"] for r in server.requests)
    saved = json.loads((tmp_path / "evals" / "metrics.json").read_text())
    assert saved["results"]["all"]["eval/mean_reward"] == 0.5
    samples = [
        json.loads(line) for line in (tmp_path / "evals" / "samples.jsonl").read_text().splitlines()
    ]
    assert sorted(s["reward"] for s in samples) == [0.0, 1.0]
    assert samples[0]["messages"][0]["role"] == "system"
    assert sandbox_dirs(tmp_path) == []


def test_wandb_log_adds_metrics_and_calls_super(
    stub_server, offline_tokenizer, tmp_path, monkeypatch
):
    server = stub_server(SCRIPT)
    env = make_env(server.base_url, offline_tokenizer, tmp_path)
    logged = []

    async def record(self, metrics=None):
        logged.append(metrics)

    monkeypatch.setattr(BaseEnv, "wandb_log", record)

    async def main():
        await env.setup()
        await env.collect_trajectories(GREETING)
        await env.run_eval([GREETING])
        await env.wandb_log({"custom": 1.0})

    asyncio.run(main())
    (metrics,) = logged
    assert metrics["custom"] == 1.0
    assert metrics["train/mean_reward"] == 0.5 and metrics["train/rollouts"] == 4.0
    assert "eval/mean_reward" in metrics
    assert env._train_stats.rewards == []  # flushed


@pytest.mark.slow
def test_a_dead_server_drops_the_group_instead_of_crashing(offline_tokenizer, tmp_path):
    env = make_env("http://127.0.0.1:9/v1", offline_tokenizer, tmp_path)
    env.config.max_agent_turns = 1

    async def main():
        await env.setup()
        return await env.collect_trajectories(GREETING)

    # atroposlib's own retries make this take a few seconds at most
    assert asyncio.run(asyncio.wait_for(main(), 120)) == (None, [])
    assert env._train_stats.rollout_errors == 4


def docker_engine_answers() -> bool:
    """Whether a Docker engine answers here (the docker tests' image is then named too)."""
    if not os.environ.get("HERMES_ENVGEN_TEST_DOCKER_IMAGE"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.parametrize(
    ("docker_host", "image", "expected"),
    [
        ("unix:///nonexistent/docker.sock", "debian:bookworm", "no Docker engine answers"),
        pytest.param(
            None,
            "hermes-envgen-test-missing:nope",
            "image 'hermes-envgen-test-missing:nope' is not on the engine",
            # skipped without, failed when docker is required (conftest.pytest_runtest_setup)
            marks=pytest.mark.docker(
                unavailable=None if docker_engine_answers() else "no Docker engine and test image"
            ),
        ),
    ],
    ids=["no-engine", "missing-image"],
)
def test_a_sandbox_that_cannot_start_scores_zero_and_spares_the_group(
    stub_server, offline_tokenizer, tmp_path, caplog, monkeypatch, docker_host, image, expected
):
    if docker_host is not None:
        monkeypatch.setenv("DOCKER_HOST", docker_host)
    server = stub_server(SCRIPT)
    env = make_env(
        server.base_url,
        offline_tokenizer,
        tmp_path,
        sandbox_backend="docker",
        sandbox_image=image,
    )

    async def main():
        await env.setup()
        rollout = await env.run_agent(GREETING)
        return rollout, await env.collect_trajectories(GREETING)

    # Earlier tests' unclosed OpenAI clients, collected while this loop runs, would each
    # schedule on it the close of a connection of their own closed loop, and asyncio logs that
    # failure with a traceback: collect them now, while no loop runs.
    gc.collect()
    rollout, group = asyncio.run(asyncio.wait_for(main(), 120))
    assert rollout.reward == 0.0 and expected in rollout.reward_error
    assert rollout.failure.startswith("sandbox failed: docker backend:")
    assert group == (None, [])  # no rollout reached the model: the group is dropped, no crash
    assert env._train_stats.metrics("train")["train/reward_errors"] == 4.0
    assert server.requests == []  # the model was never asked
    assert caplog.text.count(expected) == 1  # logged once, not once per rollout
    assert "Traceback" not in caplog.text
    assert sandbox_dirs(tmp_path) == [] and len(env.sandboxes) == 0
    if docker_host is None:
        # this run's containers only: tests on the other worker make and remove their own
        run = f"label={RUN_LABEL}={run_label(env.sandboxes.root)}"
        left = subprocess.run(
            ["docker", "ps", "--all", "--quiet", "--filter", run],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert left.stdout.strip() == ""


def test_an_unknown_toolset_fails_at_startup(offline_tokenizer, tmp_path):
    with pytest.raises(UnknownToolError, match="valid toolsets: file, python, terminal"):
        make_env("http://127.0.0.1:9/v1", offline_tokenizer, tmp_path, enabled_toolsets=["webb"])


def test_wandb_name_defaults_to_the_env_name(offline_tokenizer, tmp_path):
    env = make_env("http://127.0.0.1:9/v1", offline_tokenizer, tmp_path)
    assert env.config.wandb_name == "terminal_tasks"


def test_config_fields_are_described():
    for name, field in HermesAgentEnvConfig.model_fields.items():
        assert field.description, f"{name} has no description"
