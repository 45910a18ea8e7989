"""Evaluation: k samples per item, pass@k, 95% intervals, failures apart, resume after a kill.

``MixEnv`` is judged by an LLM judge, and the stub plays both the agent and the judge: per
item a fixed mix of solved, wrong, half-right and judge-failing rollouts (the judge answers the
last one with text that is not strict JSON), so every metric can be checked against a hand
computation. Run as a script (``python tests/runtime/rollouts/test_evaluation.py evaluate ...``)
this file is the env's CLI, for the kill-and-resume test.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from rich.console import Console

from hermes_envgen.runtime import (
    AgentResult,
    HermesAgentBaseEnv,
    HermesAgentEnvConfig,
    Reward,
    ToolContext,
    ToolErrorRecord,
)
from hermes_envgen.runtime.env.base_env import EnvConfigError, Rollout, RolloutStats
from hermes_envgen.runtime.inference import STARTUP_PROMPT
from hermes_envgen.runtime.rewards import JUDGE_PROMPT_HEADER, ask_judge
from hermes_envgen.runtime.rollout import EVAL, TRAIN, Metric, is_declared, metric
from hermes_envgen.runtime.rollouts.evaluation import (
    SampleJournal,
    normal_interval,
    pass_at_k,
    pass_hat_k,
    plan_eval,
    summarize,
    wilson_interval,
)
from hermes_envgen.runtime.rollouts.progress import RunProgress
from hermes_envgen.testing.envs import build_env, read_eval_results
from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.stub_server import Faults

ALPHA = {"prompt": "Task alpha: what is six times seven?", "answer": "42"}
BETA = {"prompt": "Task beta: name the capital of France.", "answer": "Paris"}
GAMMA = {"prompt": "Task gamma: what colour is a clear sky?", "answer": "blue"}
DELTA = {"prompt": "Task delta: how many legs has a spider?", "answer": "8"}
ITEMS = [ALPHA, BETA, GAMMA, DELTA]
K = 3

# What the scripted agent does (turns), and what the judge says of its answer.
SOLVE = [
    {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo working"}}]},
    {"content": "ANSWER-RIGHT"},
]  # 2 turns, 1 tool call, judged 1
WRONG = [{"content": "ANSWER-WRONG"}]  # 1 turn, judged 0
TOOL_ERROR = [
    {"tool_calls": [{"name": "no_such_tool", "arguments": {}}]},
    {"content": "ANSWER-WRONG"},
]  # 2 turns, 1 tool call that fails, judged 0
HALF = [{"content": "ANSWER-HALF"}]  # 1 turn, judged 0.5
GARBLED = [{"content": "ANSWER-GARBLED Paris"}]  # the judge's reply is not JSON: a failure
# Per item, the k conversations its samples get (handed out in turn).
MIX = {
    "alpha": [SOLVE, SOLVE, WRONG],
    "beta": [TOOL_ERROR, HALF, GARBLED],
    "gamma": [SOLVE, SOLVE, SOLVE],
    "delta": [WRONG, WRONG, WRONG],
}
JUDGE = {"ANSWER-RIGHT": '{"score": 1}', "ANSWER-WRONG": '{"score": 0}'}
JUDGE |= {"ANSWER-HALF": '{"score": 0.5}', "ANSWER-GARBLED": "Score: 1 (looks right to me)"}


def mix_script() -> dict:
    conversations = [
        {"match": rf"\ATask {name}:", "turns": turns}
        for name, rollouts in MIX.items()
        for turns in rollouts
    ]
    for answer, reply in JUDGE.items():
        conversations.append(
            {
                "match": rf"\A{re.escape(JUDGE_PROMPT_HEADER)}.*<candidate_answer>\"{answer}",
                "turns": [{"content": reply}],
            }
        )
    return {"conversations": conversations}


class MixEnv(HermesAgentBaseEnv):
    """Four short questions, judged by an LLM judge that fails on one answer."""

    name = "eval_mix"
    env_config_cls = HermesAgentEnvConfig

    @classmethod
    def config_init(cls) -> tuple[HermesAgentEnvConfig, list[APIServerConfig]]:
        config = HermesAgentEnvConfig(
            group_size=K,
            max_agent_turns=4,
            enabled_toolsets=["terminal"],
            use_wandb=False,
            eval_samples_per_item=K,
            data_dir_to_save_evals="eval_results/eval_mix",
        )
        server = APIServerConfig(
            base_url="http://localhost:8000/v1", model_name="stub-model", health_check=False
        )
        return config, [server]

    async def setup(self) -> None:
        self.items = list(ITEMS)

    async def get_next_item(self) -> dict:
        return self.items[0]

    def format_prompt(self, item: dict) -> str:
        return item["prompt"]

    async def compute_reward(self, item: dict, result: AgentResult, ctx: ToolContext) -> Reward:
        answer = result.final_response
        verdict = await ask_judge(self.server, item["prompt"], answer, item["answer"], retries=1)
        if verdict.failed:  # no guess: a failed judge pays nothing
            return Reward(
                0.0,
                counts={"judge_failures": 1.0},
                failure=f"judge failed: {verdict.error}",
            )
        return Reward(verdict.score, counts={"judge_failures": 0.0})

    async def evaluate(self, *args, **kwargs) -> None:
        await self.run_eval(self.items)


def make_env(base_url: str, tokenizer: Path, tmp_path: Path, **overrides) -> MixEnv:
    return build_env(MixEnv, base_url, tokenizer, tmp_path, **overrides)


def evaluate(env: MixEnv) -> dict[str, float]:
    async def main() -> dict[str, float]:
        await env.setup()
        return await env.run_eval(env.items)

    return asyncio.run(main())


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def first_turns(requests: list[dict]) -> list[dict]:
    """The agent requests that start a rollout (tools offered, no assistant turn yet)."""
    return [
        r
        for r in requests
        if r.get("tools")
        and not any(m.get("role") == "assistant" for m in r["messages"])
        and r["messages"][0]["content"] != STARTUP_PROMPT  # the start-up check, no rollout
    ]


# -- the statistics, against published and hand-computed values -----------------------------


def test_pass_at_k_and_pass_hat_k_are_the_unbiased_estimators():
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 3, 3) == 1.0  # C(2,3) = 0
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)  # pass@1 is the share that passed
    assert pass_hat_k(5, 4, 2) == pytest.approx(6 / 10)  # C(4,2)/C(5,2)
    assert pass_hat_k(3, 2, 3) == 0.0 and pass_hat_k(3, 3, 3) == 1.0
    with pytest.raises(ValueError, match="at least 3 samples"):
        pass_at_k(2, 1, 3)


def test_intervals_match_published_values():
    # Wilson score intervals for 5/10, 0/10, 10/10 (Newcombe 1998, method 3).
    assert wilson_interval(0.5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0.0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(1.0, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    # 1, 2, 3: mean 2, sd 1, so 2 ± 1.96/sqrt(3)
    assert normal_interval([1.0, 2.0, 3.0]) == pytest.approx((0.8684, 3.1316), abs=1e-4)
    assert normal_interval([2.0]) is None


def test_keys_are_stable_across_orderings_and_repeats_get_their_own():
    keys = {t.item_key for t in plan_eval(ITEMS, 1)}
    assert keys == {t.item_key for t in plan_eval(list(reversed(ITEMS)), 1)}
    tasks = plan_eval([ALPHA, dict(ALPHA)], 2)
    assert [t.key for t in tasks][:2] == [f"{tasks[0].item_key}#0", f"{tasks[0].item_key}#1"]
    assert len({t.key for t in tasks}) == 4


def _record(item: str, reward: float | None, **fields) -> dict:
    calls = [{"id": "c", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]
    return {
        "item_key": item,
        "reward": reward,
        "failure": None if reward is not None else "judge failed",
        "turns_used": 2,
        "finished_naturally": True,
        "messages": [{"role": "assistant", "content": "", "tool_calls": calls}],
        "tool_errors": [],
        "reward_counts": {Metric.REWARD_ERRORS: 0.0, Metric.JUDGE_FAILURES: 0.0},
        **fields,
    }


def test_every_metric_key_is_declared_in_records():
    # Every name evaluation and the training metrics write is one records declares (an env's
    # own reward signals aside), so that view, check and generated tests read them by name.
    records = [_record(item, r) for item in "ab" for r in (1.0, 0.0, 0.5)]
    records += [_record("b", None, turns_used=3), _record("c", 1.0, rollout_error="cut")]
    metrics = summarize(records, samples_per_item=3, pass_threshold=1.0)
    assert metric(EVAL, Metric.pass_at(3)) in metrics and metric(EVAL, Metric.pass_hat(3))
    assert Metric.ci_high(metric(EVAL, Metric.MEAN_TURNS)) in metrics
    assert [name for name in metrics if not is_declared(name)] == []

    stats = RolloutStats()
    result = AgentResult(records[0]["messages"], turns_used=1)
    for reward in (1.0, 0.0):
        stats.add(Rollout("item", result, reward, "task", counts={Metric.REWARD_ERRORS: 1.0}))
    train = stats.metrics(TRAIN)
    assert train[metric(TRAIN, Metric.TOOL_CALLS_PER_ROLLOUT)] == 1.0
    assert [name for name in train if not is_declared(name)] == []
    assert not is_declared("eval/accuracy") and not is_declared("test/mean_reward")
    assert not is_declared("eval/pass@0") and not is_declared("eval/mean_reward_items")


def both_splits(rollouts: list[Rollout]) -> tuple[dict[str, float], dict[str, float]]:
    """The train/ metrics of these rollouts, and the eval/ ones of their records (3 samples of
    alpha and of beta)."""
    stats = RolloutStats()
    for rollout in rollouts:
        stats.add(rollout)
    by_item: dict[str, list] = {"alpha": [], "beta": []}
    for task in plan_eval(["alpha", "beta"], samples_per_item=3):
        by_item[task.item].append(task)
    records = [r.record() | by_item[r.item].pop(0).identity() for r in rollouts]
    return stats.metrics(TRAIN), summarize(records, samples_per_item=3, pass_threshold=1.0)


def test_training_and_evaluation_have_one_mean_reward():
    # The same rollouts give train/ and eval/mean_reward alike: each item weighs the same
    # (alpha has 3 samples, beta 2), and a failure (beta's failed judge) counts at the
    # failure score (0.0) in both: breaking the judge never raises the mean.
    result = AgentResult([{"role": "assistant", "content": "done"}], turns_used=1)
    judged = [("alpha", 1.0, None), ("alpha", 1.0, None), ("alpha", 0.0, None)]
    judged += [("beta", 0.5, None), ("beta", 0.0, "judge failed: not strict JSON")]
    rollouts = [
        Rollout(item, result, r, f"t{i}", failure=why) for i, (item, r, why) in enumerate(judged)
    ]
    trained, evaluated = both_splits(rollouts)
    expected = (2 / 3 + 0.25) / 2
    assert trained[metric(TRAIN, Metric.MEAN_REWARD)] == pytest.approx(expected)
    assert evaluated[metric(EVAL, Metric.MEAN_REWARD)] == pytest.approx(expected)


def test_a_window_of_failures_has_the_failure_score_as_its_mean_reward():
    stats = RolloutStats()
    result = AgentResult([{"role": "assistant", "content": "done"}], turns_used=1)
    stats.add(Rollout("alpha", result, 0.0, "t", failure="judge failed: timeout"))
    trained = stats.metrics(TRAIN)
    assert trained[metric(TRAIN, Metric.MEAN_REWARD)] == 0.0
    assert trained[metric(TRAIN, Metric.FAILURES)] == 1.0
    assert trained[metric(TRAIN, Metric.FAILURE_RATE)] == 1.0
    assert metric(TRAIN, Metric.MEAN_TURNS) not in trained


def test_training_and_evaluation_count_a_failed_rollout_in_the_same_metrics():
    # One definition for both splits: a failed rollout (here the server gave up after 9 turns
    # of wasted tool calls, every turn scored 0) is counted in failures, failure_rate and
    # rollout_errors, in mean_reward at its stand-in score, and in no other mean or rate;
    # rollouts counts the measured ones.
    def result(turns: int, calls: int, turn_rewards: list, error: str | None = None):
        call = {"id": "c", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}
        messages = [{"role": "assistant", "content": "", "tool_calls": [call]}] * calls
        messages = [*messages, {"role": "assistant", "content": "done"}]
        errors = [ToolErrorRecord(1, "terminal", "{}", "boom", "Error: boom")] * (calls // 2)
        return AgentResult(
            messages,
            turns_used=turns,
            finished_naturally=error is None,
            tool_errors=errors,
            error=error,
            turn_rewards=turn_rewards,
        )

    measured = [
        ("alpha", result(2, 2, [1.0, None]), 1.0, {"style": 1.0}),
        ("alpha", result(3, 1, [0.5, 0.5, 1.0]), 0.5, {"style": 0.5}),
        ("beta", result(1, 0, [None]), 0.0, {"style": 0.0}),
        ("beta", result(2, 4, [0.0, 1.0]), 1.0, {"style": 1.0}),
    ]
    rollouts = [
        Rollout(item, res, reward, f"t{i}", signals=signals)
        for i, (item, res, reward, signals) in enumerate(measured)
    ]
    cut = result(9, 9, [0.0] * 9, error="the model server gave up")
    rollouts.append(
        Rollout("beta", cut, 0.0, "t9", signals={"style": 0.0}, failure="inference failed")
    )
    trained, evaluated = both_splits(rollouts)
    expected = {
        Metric.ROLLOUTS: 4.0,
        Metric.FAILURES: 1.0,
        Metric.FAILURE_RATE: 1 / 5,
        Metric.ROLLOUT_ERRORS: 1.0,
        Metric.MEAN_REWARD: (0.75 + 1 / 3) / 2,  # beta: 0, 1 and the failure's 0
        Metric.MEAN_TURNS: 2.0,  # (2 + 3 + 1 + 2) / 4, and per item (2.5 + 1.5) / 2
        Metric.MEAN_TURN_REWARD: 4.0 / 6,  # the measured rollouts' 6 scored turns
        Metric.TOOL_CALLS_PER_ROLLOUT: 7 / 4,
        Metric.TOOL_ERRORS_PER_ROLLOUT: 3 / 4,
        Metric.TOOL_ERROR_RATE: 3 / 7,
        Metric.FINISHED_NATURALLY_RATE: 1.0,
        "style": 2.5 / 4,
    }
    assert {name: trained[metric(TRAIN, name)] for name in expected} == pytest.approx(expected)
    assert {name: evaluated[metric(EVAL, name)] for name in expected} == pytest.approx(expected)


# -- the whole evaluation on the stub --------------------------------------------------------


def test_every_metric_matches_a_hand_computation(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(mix_script())
    env = make_env(server.base_url, offline_tokenizer, tmp_path)
    metrics = evaluate(env)

    # Rewards per item; beta's judge-failing rollout counts at the failure score (0):
    #   alpha [1, 1, 0]  beta [0, 0.5, 0]  gamma [1, 1, 1]  delta [0, 0, 0]
    mean_reward = (2 / 3 + 0.5 / 3 + 1 + 0) / 4  # 0.458333: each item weighs the same
    pass1 = (2 / 3 + 0 / 3 + 1 + 0) / 4  # 0.416667: only a full score passes
    pass3 = (1 + 0 + 1 + 0) / 4
    pass_hat3 = (0 + 0 + 1 + 0) / 4
    item_turns = [(2 + 2 + 1) / 3, (2 + 1) / 2, 2, 1]
    mean_turns = sum(item_turns) / 4  # 1.541667
    sd_turns = math.sqrt(sum((t - mean_turns) ** 2 for t in item_turns) / 3)
    expected = {
        "eval/items": 4,
        "eval/samples_per_item": 3,
        "eval/rollouts": 11,
        "eval/failures": 1,
        "eval/failure_rate": 1 / 12,
        "eval/judge_failures": 1,
        "eval/reward_errors": 0,
        "eval/rollout_errors": 0,
        "eval/mean_reward": mean_reward,
        "eval/pass@1": pass1,
        "eval/pass@3": pass3,
        "eval/pass^3": pass_hat3,
        "eval/pass@3_items": 4,
        "eval/mean_turns": mean_turns,
        "eval/mean_turns_ci_low": mean_turns - 1.959964 * sd_turns / 2,
        "eval/mean_turns_ci_high": mean_turns + 1.959964 * sd_turns / 2,
        "eval/tool_error_rate": 1 / 6,  # 6 tool calls (alpha 2, beta 1, gamma 3), 1 failed
        "eval/tool_calls_per_rollout": 6 / 11,
        "eval/tool_errors_per_rollout": 1 / 11,
        "eval/finished_naturally_rate": 1.0,
    }
    for name, units, value in [
        ("mean_reward", 4, mean_reward),
        ("pass@1", 4, pass1),
        ("pass@3", 4, pass3),
        ("pass^3", 4, pass_hat3),
        ("tool_error_rate", 6, 1 / 6),
    ]:
        low, high = wilson_interval(value, units)
        expected[f"eval/{name}_ci_low"], expected[f"eval/{name}_ci_high"] = low, high
        assert low <= value < high
    assert metrics == pytest.approx(expected, abs=1e-6)

    eval_dir = tmp_path / "eval"
    saved, samples = read_eval_results(eval_dir)
    assert saved == pytest.approx(expected, abs=1e-6)
    assert len(samples) == 11 and all(s["failure"] is None for s in samples)
    assert sorted(s["reward"] for s in samples) == [0] * 5 + [0.5] + [1] * 5
    (failure,) = read_jsonl(eval_dir / "failures.jsonl")
    assert failure["failure"].startswith("judge failed: judge reply is not strict JSON")
    assert "Score: 1" in failure["failure"]
    assert failure["reward"] is None, "a failure carries no score, not even the stand-in"
    assert failure["final_response"] == "ANSWER-GARBLED Paris"
    keys = [r["key"] for r in [*samples, failure]]
    assert sorted(keys) == sorted(t.key for t in plan_eval(ITEMS, K))
    judge_calls = [r for r in server.requests if not r.get("tools")]
    assert len(judge_calls) == 12 + 1  # one per rollout, and the retry of the failed one
    assert env._train_stats.rewards == [], "evaluation stayed out of the training buffers"


def test_metrics_json_records_what_the_run_was(stub_server, offline_tokenizer, tmp_path):
    from hermes_envgen import __version__

    server = stub_server(mix_script())
    evaluate(make_env(server.base_url, offline_tokenizer, tmp_path, eval_samples_per_item=1))
    general = json.loads((tmp_path / "eval" / "metrics.json").read_text())["config_general"]
    assert general["model_name"] == "stub-model"
    assert general["hermes_envgen_version"] == __version__
    assert general["env"] == "eval_mix"
    assert general["env_version"] is None  # this test module is no installed distribution
    assert general["template_version"] is None  # and not a generated project
    assert general["provider"] == {"base_url": server.base_url, "server_type": "openai"}
    assert general["tool_call_parser"] == "hermes"
    assert general["seed"] == 0  # the base settings' default (EnvTasks: the worker's order)
    assert general["evaluation"]["samples_per_item"] == 1
    assert general["evaluation"]["pass_threshold"] == 1.0
    assert "Wilson" in general["evaluation"]["confidence_intervals"]
    assert general["env_config"]["eval_samples_per_item"] == 1
    assert general["env_config"]["max_agent_turns"] == 4
    assert general["generation_parameters"]["samples_per_item"] == 1


def test_reruns_without_resume_keep_every_earlier_run(stub_server, offline_tokenizer, tmp_path):
    # Two reruns: the second used to overwrite samples.jsonl.bak, the first run's results.
    server = stub_server(mix_script())
    eval_dir = tmp_path / "eval"
    runs = []
    for _ in range(3):
        evaluate(make_env(server.base_url, offline_tokenizer, tmp_path))
        runs.append({p.name: p.read_bytes() for p in eval_dir.iterdir() if p.is_file()})
    earlier = eval_dir / "earlier-runs"
    assert sorted(p.name for p in earlier.iterdir()) == ["1", "2"]
    for number, run in ((1, runs[0]), (2, runs[1])):
        kept = earlier / str(number)
        for name in ("samples.jsonl", "failures.jsonl", "eval_settings.json"):
            assert (kept / name).read_bytes() == run[name], (number, name)
        assert (kept / "metrics.json").exists()
    assert not list(eval_dir.glob("*.bak"))
    assert (
        len(read_jsonl(eval_dir / "samples.jsonl")) + len(read_jsonl(eval_dir / "failures.jsonl"))
        == len(ITEMS) * K
    ), "the new run's files hold the new run only"


def _journal_record(key: str, text: str = "plain") -> dict:
    return {"key": key, "item_key": key, "sample_index": 0, "reward": 1.0, "note": text}


def test_resume_terminates_a_last_record_that_has_no_newline(tmp_path):
    (tmp_path / "samples.jsonl").write_text(json.dumps(_journal_record("a")))  # killed before \n
    journal = SampleJournal(tmp_path, {}, resume=True)
    journal.append(_journal_record("b"))
    journal.close()
    assert [r["key"] for r in read_jsonl(tmp_path / "samples.jsonl")] == ["a", "b"]
    reread = SampleJournal(tmp_path, {}, resume=True)
    assert set(reread.records) == {"a", "b"}


def test_resume_drops_a_record_cut_inside_a_utf8_character(tmp_path):
    whole = json.dumps(_journal_record("a", "ok"), ensure_ascii=False).encode() + b"\n"
    cut = json.dumps(_journal_record("b", "caf\u00e9 \U0001f600"), ensure_ascii=False).encode()
    (tmp_path / "samples.jsonl").write_bytes(whole + cut[: cut.index("\U0001f600".encode()) + 2])
    journal = SampleJournal(tmp_path, {}, resume=True)
    assert set(journal.records) == {"a"}
    journal.append(_journal_record("c"))
    journal.close()
    assert [r["key"] for r in read_jsonl(tmp_path / "samples.jsonl")] == ["a", "c"]


def test_a_line_separator_inside_a_record_does_not_split_it(tmp_path):
    journal = SampleJournal(tmp_path, {}, resume=False)
    journal.append(_journal_record("a", "one\u2028two\u2029three"))
    journal.close()
    reread = SampleJournal(tmp_path, {}, resume=True)
    assert set(reread.records) == {"a"}
    line = (tmp_path / "samples.jsonl").read_bytes().split(b"\n")[0]
    assert json.loads(line)["note"] == "one\u2028two\u2029three"


def test_resuming_a_finished_run_runs_nothing(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(mix_script())
    before = evaluate(make_env(server.base_url, offline_tokenizer, tmp_path))
    requests = len(server.requests)
    after = evaluate(make_env(server.base_url, offline_tokenizer, tmp_path, resume=True))
    assert len(server.requests) == requests
    assert after == before


def test_resuming_keeps_records_with_line_separators_in_their_text(
    stub_server, offline_tokenizer, tmp_path
):
    # U+2028 stays raw in the JSON lines: a reader that splits at it drops the record and reruns.
    server = stub_server(mix_script())
    prompt = "Agent \u2028 with a line separator 😀"
    before = evaluate(make_env(server.base_url, offline_tokenizer, tmp_path, system_prompt=prompt))
    requests = len(server.requests)
    after = evaluate(
        make_env(server.base_url, offline_tokenizer, tmp_path, system_prompt=prompt, resume=True)
    )
    assert len(server.requests) == requests
    assert after == before


def test_resume_refuses_other_settings(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(mix_script())
    evaluate(make_env(server.base_url, offline_tokenizer, tmp_path))
    env = build_env(
        MixEnv,
        server.base_url,
        offline_tokenizer,
        tmp_path,
        server_overrides={"model_name": "another-model"},
        resume=True,
    )
    with pytest.raises(EnvConfigError, match=r"other settings \(model_name\)"):
        evaluate(env)


def test_resume_without_a_directory_is_a_config_error(offline_tokenizer, tmp_path):
    env = make_env("http://127.0.0.1:9/v1", offline_tokenizer, tmp_path, resume=True)
    env.config.data_dir_to_save_evals = None
    with pytest.raises(EnvConfigError, match="data_dir_to_save_evals"):
        evaluate(env)


def test_a_failed_judge_pays_nothing_in_training(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(mix_script())
    env = make_env(server.base_url, offline_tokenizer, tmp_path)

    async def main():
        await env.setup()
        return await env.collect_trajectories(BETA)

    group, _ = asyncio.run(main())
    # tool error + wrong: 0; half: 0.5; garbled (it names "Paris"): the judge failed, so 0
    assert sorted(group["scores"]) == [0.0, 0.0, 0.5]
    metrics = env._train_stats.metrics("train")
    assert metrics["train/judge_failures"] == 1.0 and metrics["train/failures"] == 1.0


def test_an_empty_eval_still_saves_metrics(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(mix_script())
    env = make_env(server.base_url, offline_tokenizer, tmp_path)

    async def main():
        return await env.run_eval([])

    metrics = asyncio.run(main())
    assert metrics["eval/rollouts"] == 0 and metrics["eval/failures"] == 0
    assert (tmp_path / "eval" / "metrics.json").exists()


def test_summarize_counts_a_failure_at_the_failure_score_in_the_reward_metrics_only():
    # An agent that breaks its judge or a hook on a task it cannot solve gains nothing.
    records = [
        {"key": "a#0", "item_key": "a", "reward": 1.0, "turns_used": 3, "tool_calls": 2},
        {"key": "a#1", "item_key": "a", "reward": None, "turns_used": 9, "failure": "x"},
    ]
    metrics = summarize(records, 2, 1.0)
    assert metrics["eval/mean_reward"] == 0.5 and metrics["eval/mean_turns"] == 3
    assert metrics["eval/pass@1"] == 0.5 and metrics["eval/pass@2_items"] == 1
    assert metrics["eval/pass@2"] == 1.0 and metrics["eval/pass^2"] == 0.0
    assert metrics["eval/failures"] == 1 and metrics["eval/rollouts"] == 1
    assert metrics["eval/failure_rate"] == 0.5
    set_by_the_env = summarize(records, 2, 1.0, failure_score=0.25)
    assert set_by_the_env["eval/mean_reward"] == 0.625


def test_the_journal_keeps_a_summary_in_memory_and_the_conversation_in_the_file(tmp_path):
    record = _journal_record("a") | {
        "messages": [{"role": "user", "content": "x" * 100_000}],
        "tool_errors": [{"tool_result": "y" * 10_000}],
        "tool_calls": 3,
    }
    journal = SampleJournal(tmp_path, {}, resume=False)
    journal.append(record)
    journal.close()
    for reread in (journal, SampleJournal(tmp_path, {}, resume=True)):
        kept = reread.records["a"]
        assert "messages" not in kept and len(json.dumps(kept)) < 1000
        assert (kept["tool_calls"], kept["tool_errors"], kept["reward"]) == (3, 1, 1.0)
    assert read_jsonl(tmp_path / "samples.jsonl")[0]["messages"] == record["messages"]


def _fixed_script(items: list[dict]) -> dict:
    """Each item always gets the same conversation: outcomes do not depend on the order."""
    outcomes = [SOLVE, WRONG, TOOL_ERROR, HALF, GARBLED]
    script = mix_script()
    script["conversations"] = [
        {"match": rf"\ATask {i}:", "turns": outcomes[i % len(outcomes)]} for i in range(len(items))
    ] + [c for c in script["conversations"] if "candidate_answer" in c["match"]]
    return script


def test_a_run_resumed_at_half_has_the_metrics_of_an_uninterrupted_run(
    stub_server, offline_tokenizer, tmp_path
):
    items = [{"prompt": f"Task {i}: question {i}?", "answer": "Paris"} for i in range(12)]
    server = stub_server(_fixed_script(items))
    settings = {"eval_samples_per_item": 4, "max_eval_workers": 3}
    whole = asyncio.run(
        make_env(server.base_url, offline_tokenizer, tmp_path / "whole", **settings).run_eval(items)
    )

    halves = tmp_path / "halves"

    async def first_half() -> None:
        env = make_env(server.base_url, offline_tokenizer, halves, **settings)
        run = asyncio.create_task(env.run_eval(items))
        while (
            _count_lines(halves / "eval" / "samples.jsonl")
            + _count_lines(halves / "eval" / "failures.jsonl")
            < len(items) * 2
        ):
            await asyncio.sleep(0.01)
        run.cancel()  # stopped mid-run, rollouts in flight
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(first_half())
    assert not (halves / "eval" / "metrics.json").exists()
    resumed = asyncio.run(
        make_env(server.base_url, offline_tokenizer, halves, resume=True, **settings).run_eval(
            items
        )
    )
    assert whole["eval/rollouts"] + whole["eval/failures"] == len(items) * 4
    assert resumed == whole


# -- resume after a kill, as a subprocess ----------------------------------------------------


@pytest.mark.slow
def test_a_killed_evaluate_resumes_without_rerunning_finished_rollouts(
    stub_server, offline_tokenizer, tmp_path
):
    server = stub_server(mix_script(), faults=Faults(latency=0.15))
    eval_dir = tmp_path / "eval"
    command = [
        sys.executable,
        str(Path(__file__)),
        "evaluate",
        "--openai.base_url",
        server.base_url,
        "--env.tokenizer_name",
        str(offline_tokenizer),
        "--env.data_dir_to_save_evals",
        str(eval_dir),
        "--env.sandbox_root",
        str(tmp_path / "sandboxes"),
        "--env.max_eval_workers",
        "1",  # one rollout at a time: the kill lands mid-run
    ]
    env = offline_environment()
    samples, failures = eval_dir / "samples.jsonl", eval_dir / "failures.jsonl"

    def saved() -> int:
        return len(read_jsonl(samples)) + len(read_jsonl(failures))

    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    try:
        while _count_lines(samples) + _count_lines(failures) < 4:
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no samples written within 120 s"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        process.stderr.close()
    assert not (eval_dir / "metrics.json").exists(), "the first run was killed before the end"
    before = {p: p.read_text() for p in (samples, failures) if p.exists()}
    finished = saved()
    assert 4 <= finished < len(ITEMS) * K, "the kill landed mid-run"
    requests_before = len(server.requests)

    completed = subprocess.run(
        [*command, "--env.resume", "true"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    started_again = first_turns(server.requests[requests_before:])
    assert len(started_again) == len(ITEMS) * K - finished, "a finished rollout ran again"
    for path, text in before.items():  # what was saved is kept as it was
        assert path.read_text().startswith(text)
    metrics, scored = read_eval_results(eval_dir)
    records = scored + read_jsonl(failures)
    assert sorted(r["key"] for r in records) == sorted(t.key for t in plan_eval(ITEMS, K))
    assert metrics["eval/rollouts"] + metrics["eval/failures"] == len(ITEMS) * K
    assert metrics == pytest.approx(summarize(records, K, 1.0), abs=1e-9)


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


# -- progress --------------------------------------------------------------------------------


def test_progress_is_quiet_off_a_terminal():
    stream = io.StringIO()
    progress = RunProgress("evaluate", 3, "rollouts", console=Console(file=stream))
    progress.record(1.0, tool_errors=2)
    progress.advance()
    progress.close()
    assert not progress.enabled and stream.getvalue() == ""
    assert progress.stats().startswith("mean reward 1.000 · tool errors 2")


def test_progress_shows_counts_reward_errors_and_rate_on_a_terminal():
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=140)
    progress = RunProgress("evaluate", 4, "rollouts", completed=1, console=console)
    progress.record(1.0, tool_errors=1)
    progress.record(None)
    progress.advance(3)  # done: the bar closes itself
    text = stream.getvalue()
    assert not progress.enabled
    for part in ("evaluate", "4/4", "mean reward 1.000", "tool errors 1", "failures 1", "/s"):
        assert part in text


def test_process_mode_moves_a_bar_per_group(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(mix_script())
    env = make_env(server.base_url, offline_tokenizer, tmp_path)
    stream = io.StringIO()
    env.process_mode, env.n_groups_to_process = True, 1
    env._progress = RunProgress(
        "process", 1, "groups", console=Console(file=stream, force_terminal=True, width=140)
    )

    async def main():
        await env.setup()
        return await env.collect_trajectories(GAMMA)

    asyncio.run(main())
    assert "1/1" in stream.getvalue() and "mean reward 1.000" in stream.getvalue()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    MixEnv.cli()
