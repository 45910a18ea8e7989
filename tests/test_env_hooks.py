"""The turn hooks and make_loop on HermesAgentBaseEnv, in-process against the stub server:
what reaches the rollout, its record, the training group and the metrics."""

from __future__ import annotations

import asyncio

import pytest
from guess_number_env import GuessNumberEnv

from hermes_envgen.runtime import HermesAgentLoop, ModelClient, RolloutState
from hermes_envgen.runtime.records import Metric, metric
from hermes_envgen.testing.envs import build_env

SECRET_37 = {"secret": 37, "low": 1, "high": 100}
# Every player halves the range: 50, 25, 37 wins in three turns.
HALVING = {"conversations": [{"turns": [{"content": g} for g in ("50", "25", "37")]}]}


def test_the_hooks_reach_the_rollout_its_record_and_the_metrics(
    stub_server, offline_tokenizer, tmp_path
):
    env = build_env(GuessNumberEnv, stub_server(HALVING).base_url, offline_tokenizer, tmp_path)
    group, _ = asyncio.run(env.collect_trajectories(SECRET_37))
    assert group["scores"] == [1.0] * 4
    # The hints are in the conversation, between the guesses.
    assert [m["content"] for m in group["messages"][0][1:]] == [
        "I am thinking of a whole number from 1 to 100. Guess it.",
        "50",
        "Lower than 50.",
        "25",
        "Higher than 25.",
        "37",
    ]
    metrics = env._train_stats.metrics("train")
    assert metrics[metric("train", Metric.MEAN_TURN_REWARD)] == 1.0
    rollout = asyncio.run(env.run_agent(SECRET_37, split="eval"))
    record = rollout.record()
    assert record["turn_rewards"] == [1.0, 1.0, 1.0] and record["reward"] == 1.0
    assert rollout.result.metadata["board"]["guesses"] == [50, 25, 37]


def test_an_env_without_turn_rewards_reports_none(stub_server, offline_tokenizer, tmp_path):
    from terminal_env import TASKS, TerminalTaskEnv

    server = stub_server({"conversations": [{"turns": [{"content": "Done."}]}]})
    env = build_env(TerminalTaskEnv, server.base_url, offline_tokenizer, tmp_path)
    rollout = asyncio.run(env.run_agent(TASKS[0]))
    assert rollout.result.turn_rewards == [None] and rollout.result.finished_naturally
    asyncio.run(env.collect_trajectories(TASKS[0]))
    assert metric("train", Metric.MEAN_TURN_REWARD) not in env._train_stats.metrics("train")


def test_make_loop_gives_each_task_its_own_loop(stub_server, offline_tokenizer, tmp_path):
    made = []

    class FewTurns(GuessNumberEnv):
        def make_loop(self, item, ctx, **kwargs) -> HermesAgentLoop:
            loop = super().make_loop(item, ctx, **kwargs)
            loop.max_turns = item.get("max_turns", loop.max_turns)
            made.append((item, ctx.task_id, kwargs["split"], loop))
            return loop

    env = build_env(FewTurns, stub_server(HALVING).base_url, offline_tokenizer, tmp_path)
    short = asyncio.run(env.run_agent(SECRET_37 | {"max_turns": 2}, split="eval"))
    full = asyncio.run(env.run_agent(SECRET_37, split="eval"))
    assert short.result.turns_used == 2 and not short.result.finished_naturally
    assert short.reward == pytest.approx(0.2)  # lost, both guesses still possible
    assert full.result.turns_used == 3 and full.reward == 1.0
    (_, first_id, split, loop), (_, second_id, _, _) = made
    assert split == "eval" and first_id == short.task_id != second_id
    assert loop.hooks is env and loop.task == SECRET_37 | {"max_turns": 2}


def test_a_failing_hook_is_a_failure_named_by_the_hook(stub_server, offline_tokenizer, tmp_path):
    class Broken(GuessNumberEnv):
        async def turn_reward(self, state: RolloutState) -> float:
            raise RuntimeError("no board")

    env = build_env(Broken, stub_server(HALVING).base_url, offline_tokenizer, tmp_path)
    rollout = asyncio.run(env.run_agent(SECRET_37, split="eval"))
    assert rollout.failure == "turn_reward failed: RuntimeError: no board"
    assert rollout.record()["rollout_error"] == rollout.failure


def test_the_policy_client_keeps_its_old_name(stub_server, offline_tokenizer, tmp_path):
    env = build_env(GuessNumberEnv, stub_server(HALVING).base_url, offline_tokenizer, tmp_path)
    assert isinstance(env.policy, ModelClient)
    assert env.model is env.policy  # judge envs of earlier releases pass self.model
