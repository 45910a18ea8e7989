"""The turn hooks and make_loop on HermesAgentBaseEnv, in-process against the stub server:
what reaches the rollout, its record, the training group and the metrics."""

from __future__ import annotations

import asyncio
import json

import pytest
from guess_number_env import MAX_GUESSES, GuessNumberEnv

from hermes_envgen.runtime import AgentResult, HermesAgentLoop, RolloutState
from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.rollout import Metric, metric
from hermes_envgen.testing.envs import build_env

SECRET_37 = {"secret": 37, "low": 1, "high": 100, "player": ["50", "37"]}
# Every player halves the range: 50, 25, 37 wins in three turns.
HALVING = {"conversations": [{"turns": [{"content": g} for g in ("50", "25", "37")]}]}
WON_IN_3 = pytest.approx(1.0 - 0.5 * 2 / MAX_GUESSES)


def test_the_hooks_reach_the_rollout_its_record_and_the_metrics(
    stub_server, offline_tokenizer, tmp_path
):
    env = build_env(GuessNumberEnv, stub_server(HALVING).base_url, offline_tokenizer, tmp_path)
    group, _ = asyncio.run(env.collect_trajectories(SECRET_37))
    assert group["scores"] == [WON_IN_3] * 4
    # The hints are in the conversation, between the guesses.
    assert [m["content"] for m in group["messages"][0][1:]] == [
        "I am thinking of a whole number from 1 to 100. Guess it.",
        "50",
        "Lower than 50.",
        "25",
        "Higher than 25.",
        "37",
    ]  # and no hint after the winning guess: the stop rule came first
    metrics = env._train_stats.metrics("train")
    assert metrics[metric("train", Metric.MEAN_TURN_REWARD)] == 1.0
    rollout = asyncio.run(env.run_agent(SECRET_37, split="eval"))
    record = rollout.record()
    assert record["turn_rewards"] == [1.0, 1.0, 1.0] and record["reward"] == WON_IN_3
    # The board the hooks kept, typed: the hints it gave (none after the win).
    board = rollout.result.data
    assert (board.low, board.high, board.guesses) == (26, 49, [50, 25])


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
    assert short.reward == 0.0 and short.result.turn_rewards == [1.0, 1.0]  # lost
    assert full.result.turns_used == 3 and full.reward == WON_IN_3
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


def test_an_env_with_the_earlier_stop_rule_fails_at_start_up(
    stub_server, offline_tokenizer, tmp_path
):
    class OldGame(GuessNumberEnv):
        async def is_done(self, state: RolloutState) -> bool:
            return False

    with pytest.raises(EnvConfigError, match=r"^OldGame.is_done: the stop rule is now should_stop"):
        build_env(OldGame, stub_server(HALVING).base_url, offline_tokenizer, tmp_path)


# What an agent can send a game's hooks: a 5,000-digit number (past Python's int-parsing
# limit), a negative one, text, an empty reply, then the secret.
HOSTILE = {
    "conversations": [{"turns": [{"content": c} for c in ("9" * 5000, "-3", "forty", "", "37")]}]
}


def test_the_game_survives_what_an_agent_sends_its_hooks(stub_server, offline_tokenizer, tmp_path):
    env = build_env(GuessNumberEnv, stub_server(HOSTILE).base_url, offline_tokenizer, tmp_path)
    rollout = asyncio.run(env.run_agent(SECRET_37, split="eval"))
    assert rollout.failure is None and rollout.result.error is None
    assert rollout.result.turn_rewards == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert rollout.reward == pytest.approx(1.0 - 0.5 * 4 / MAX_GUESSES)


class PaysAnything(GuessNumberEnv):
    """A reward that pays whatever happened, and a hook the agent can break by saying "boom"."""

    def env_response(self, state: RolloutState) -> list[dict]:
        if "boom" in state.last_reply["content"]:
            raise ValueError("the agent broke the hook")
        return super().env_response(state)

    async def compute_reward(self, item, result: AgentResult, ctx) -> float:
        return 1.0


# Of the players of one game, handed out in turn: one says "boom" and breaks a hook.
BOOM = {"conversations": [{"turns": [{"content": "boom"}]}, {"turns": [{"content": "50"}]}]}


def test_training_never_pays_a_failure_more_than_the_failure_score(
    stub_server, offline_tokenizer, tmp_path
):
    env = build_env(PaysAnything, stub_server(BOOM).base_url, offline_tokenizer, tmp_path)
    group, _ = asyncio.run(env.collect_trajectories(SECRET_37))
    assert sorted(group["scores"]) == [0.0, 0.0, 1.0, 1.0]  # the broken ones score 0, not 1
    metrics = env._train_stats.metrics("train")
    assert metrics["train/failures"] == 2.0 and metrics["train/failure_rate"] == 0.5
    assert metrics["train/mean_reward"] == 0.5


def test_evaluation_counts_a_broken_hook_at_the_failure_score(
    stub_server, offline_tokenizer, tmp_path, capfd
):
    env = build_env(
        PaysAnything,
        stub_server(BOOM).base_url,
        offline_tokenizer,
        tmp_path,
        eval_samples_per_item=2,
        eval_pass_threshold=1.0,
        failure_score=0.25,
    )
    metrics = asyncio.run(env.run_eval([SECRET_37]))
    # Breaking the hook did not pay: the failure counts, at 0.25, in every headline metric.
    assert metrics["eval/mean_reward"] == pytest.approx(0.625)
    assert metrics["eval/pass@1"] == 0.5 and metrics["eval/pass@2"] == 1.0
    assert metrics["eval/pass^2"] == 0.0
    assert metrics["eval/failures"] == 1.0 and metrics["eval/failure_rate"] == 0.5
    assert metrics["eval/rollouts"] == 1.0  # the measured ones
    (failure,) = [
        json.loads(line) for line in (tmp_path / "eval" / "failures.jsonl").read_text().splitlines()
    ]
    assert failure["failure"] == "env_response failed: ValueError: the agent broke the hook"
    said = capfd.readouterr().err
    assert "warning: 1 of 2 rollouts failed (eval/failure_rate 0.50), each counted at " in said
    assert "failure_score 0.25; the first: env_response failed" in said


class HalvingPlayer(GuessNumberEnv):
    """An env that carries its tasks' scripted player: halving the range until it wins."""

    def gold_player(self, item: dict) -> list[str | dict]:
        low, high, moves = item["low"], item["high"], []
        while True:
            guess = (low + high) // 2
            moves.append(str(guess))
            if guess == item["secret"]:
                return moves
            low, high = (guess + 1, high) if guess < item["secret"] else (low, guess - 1)


@pytest.mark.slow
def test_the_reward_checks_replay_the_player_an_env_carries(offline_tokenizer, tmp_path):
    from hermes_envgen.testing.envs import with_prompts
    from hermes_envgen.testing.reward_checks import check_rewards

    tasks = [{"secret": 37, "low": 1, "high": 100}]  # no prompt, no player of its own
    (task,) = with_prompts(HalvingPlayer, tasks)
    assert task["prompt"] == "I am thinking of a whole number from 1 to 100. Guess it."
    assert task["player"] == ["50", "25", "37"]
    report = check_rewards(HalvingPlayer, tasks, offline_tokenizer, tmp_path, gold_threshold=0.8)
    (outcome,) = report.outcomes
    assert outcome.gold == WON_IN_3 and outcome.noop == outcome.shotgun == outcome.tamper == 0.0
    assert report.broken_failures == [] and report.gold_failures == []


def test_a_reward_of_the_wrong_shape_is_a_failure_naming_it(
    stub_server, offline_tokenizer, tmp_path
):
    class TextReward(GuessNumberEnv):
        async def compute_reward(self, item, result, ctx):  # a number as text
            return "1.0"

    env = build_env(TextReward, stub_server(HALVING).base_url, offline_tokenizer, tmp_path)
    rollout = asyncio.run(env.run_agent(SECRET_37, split="eval"))
    assert rollout.failure == "compute_reward failed: it returned '1.0', not a number or a Reward"
    assert (
        rollout.reward == 0.0
        and rollout.reward_error == "it returned '1.0', not a number or a Reward"
    )
