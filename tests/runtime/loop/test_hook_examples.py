"""The example envs built on the turn hooks (a simulated user, a game with state), in their real
``process`` and ``evaluate`` modes: subprocesses with timeouts, against the stub server."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES
from guess_number_env import MAX_GUESSES
from helpers.token_server import END
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat.trajectory import MASKED, trained_runs
from hermes_envgen.testing import OfflineRun
from hermes_envgen.testing.stub_server import FAKE_LOGPROB

USER_ENV = EXAMPLES / "user_simulator_env.py"
USER_SCRIPT = EXAMPLES / "user_simulator_script.yaml"
GAME_ENV = EXAMPLES / "guess_number_env.py"
GAME_SCRIPT = EXAMPLES / "guess_number_script.yaml"
# A game won at the third guess (the win pays less the more guesses it took); a lost one.
WON_SCORE = 1.0 - 0.5 * 2 / MAX_GUESSES
WON = pytest.approx(WON_SCORE)
LOST = 0.0


def spoken(messages: list[dict], role: str) -> list[str]:
    return [m["content"] for m in messages if m["role"] == role]


@pytest.mark.slow
def test_user_simulator_process_trains_the_agent_only(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(USER_SCRIPT)
    run = OfflineRun(USER_ENV, server.base_url, offline_tokenizer, tmp_path, health_check=None)
    groups = run.process(groups=2, group_size=4)
    tokenizer = AutoTokenizer.from_pretrained(offline_tokenizer)
    for group in groups:
        assert sorted(group["scores"]) == [0.0, 0.0, 1.0, 1.0]
        for tokens, masks, messages, score in zip(
            group["tokens"], group["masks"], group["messages"], group["scores"]
        ):
            customer = spoken(messages, "user")[1:]  # after the task itself
            agent = spoken(messages, "assistant")
            assert customer, "the simulated customer replied"
            if score == 1.0:  # it answered each question, then was helped and left
                assert customer[-1] == "That did it, thank you!"
                assert len(agent) == len(customer)
            else:  # never asked anything: out of patience after three replies
                assert customer[-1] == "This is going nowhere. Bye." and len(agent) == 3
            trained = tokenizer.decode([t for t, m in zip(tokens, masks) if m != MASKED])
            assert all(text in trained for text in agent)
            assert not any(text in trained for text in customer), "the env's text is masked"


@pytest.mark.slow
def test_user_simulator_evaluate_saves_the_customers_verdicts(
    stub_server, offline_tokenizer, tmp_path
):
    server = stub_server(USER_SCRIPT)
    run = OfflineRun(USER_ENV, server.base_url, offline_tokenizer, tmp_path, health_check=None)
    metrics, samples = run.evaluate(env__eval_samples_per_item=2)
    assert metrics["eval/rollouts"] == 4.0 and metrics["eval/mean_reward"] == 0.5
    assert sorted(s["reward"] for s in samples) == [0.0, 0.0, 1.0, 1.0]
    assert all(s["finished_naturally"] for s in samples)  # the customer left: finish()
    helped = [s for s in samples if s["reward"] == 1.0]
    assert all(s["messages"][-1]["content"] == "That did it, thank you!" for s in helped)


@pytest.mark.slow
def test_guess_number_process_rewards_turns_and_wins(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(GAME_SCRIPT)
    run = OfflineRun(GAME_ENV, server.base_url, offline_tokenizer, tmp_path, health_check=None)
    groups = run.process(groups=2, group_size=4)
    tokenizer = AutoTokenizer.from_pretrained(offline_tokenizer)
    for group in groups:
        assert sorted(group["scores"]) == [LOST, LOST, WON, WON]
        for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
            hints = spoken(messages, "user")[1:]
            assert hints and all(h.startswith(("Higher", "Lower", "That is not")) for h in hints)
            trained = tokenizer.decode([t for t, m in zip(tokens, masks) if m != MASKED])
            assert not any(hint in trained for hint in hints), "the game's hints are masked"


@pytest.mark.slow
def test_guess_number_evaluate_records_each_turns_reward(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(GAME_SCRIPT)
    run = OfflineRun(GAME_ENV, server.base_url, offline_tokenizer, tmp_path, health_check=None)
    metrics, samples = run.evaluate(env__eval_samples_per_item=2)
    assert metrics["eval/rollouts"] == 4.0
    won = [s for s in samples if s["reward"] == WON]
    assert len(won) == 2 and all(s["turn_rewards"] == [1.0, 1.0, 1.0] for s in won)
    assert all(s["turns_used"] == 3 and s["finished_naturally"] for s in won)  # should_stop
    assert all(s["messages"][-1]["role"] == "assistant" for s in won)  # no hint after a win
    # A shaped reward: every win passes at the env's eval_pass_threshold (0.5).
    assert metrics["eval/pass@1"] == 0.5
    assert metrics["eval/mean_reward"] == pytest.approx(WON_SCORE / 2)
    lost = [s for s in samples if s["reward"] != WON]
    assert len(lost) == 2 and all(s["reward"] == LOST for s in lost)
    assert all(s["turns_used"] == 7 and not s["finished_naturally"] for s in lost)
    assert all(s["turn_rewards"] == [1.0] + [0.0] * 6 for s in lost)
    assert metrics["eval/mean_turn_reward"] == pytest.approx((3 + 3 + 1 + 1) / (3 + 3 + 7 + 7))


@pytest.mark.slow
def test_guess_number_in_token_mode_trains_exactly_the_guesses(
    stub_server, offline_tokenizer, tmp_path
):
    stub = stub_server(GAME_SCRIPT, tokenizer=offline_tokenizer)
    run = OfflineRun(
        GAME_ENV,
        stub.base_url,
        offline_tokenizer,
        tmp_path,
        health_check=None,
        server_flags={"server_type": "vllm"},
    )
    (group,) = run.process(groups=1, group_size=4)
    tokenizer = AutoTokenizer.from_pretrained(offline_tokenizer)
    spans = []
    for tokens, masks, logprobs in zip(
        group["tokens"], group["masks"], group["inference_logprobs"]
    ):
        assert all((lp == FAKE_LOGPROB) == (m != MASKED) for lp, m in zip(logprobs, masks))
        spans.append([tokenizer.decode(run) for run in trained_runs(tokens, masks)])
        assert "Lower than " in tokenizer.decode(tokens)  # the env's hint, in the prompt
    won = [g + END for g in ("50", "25", "37")]
    lost = [g + END for g in ("90", "95", "99", "99", "99", "99", "99")]
    assert sorted(spans) == sorted([won, won, lost, lost])
