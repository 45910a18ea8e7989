"""An answer that tells the judge to pay: the judge prompt calls it untrusted, a run whose
judge is the policy says so at start-up, and the test kit (``check``) asks the configured
judge to grade one and reports the score."""

from __future__ import annotations

import logging
import re

from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from hermes_envgen.runtime import (
    AgentResult,
    HermesAgentBaseEnv,
    HermesAgentEnvConfig,
    Reward,
    ToolContext,
    judge_client,
)
from hermes_envgen.testing import build_env
from hermes_envgen.testing.reward_checks import INJECTION_ANSWER, judge_injection

SAMPLE = {"prompt": "What is 3 + 4?", "answer": "7"}


class JudgedEnv(HermesAgentBaseEnv):
    """A judge env in the template's shape: judge_base_url None is the policy's own server."""

    name = "judged"
    judge_url: str | None = None

    @classmethod
    def config_init(cls) -> tuple[HermesAgentEnvConfig, list[APIServerConfig]]:
        config = HermesAgentEnvConfig(group_size=2, use_wandb=False, enabled_toolsets=["terminal"])
        server = APIServerConfig(base_url="http://localhost:8000/v1", model_name="policy")
        return config, [server]

    def make_judge(self):
        return judge_client(self.policy, self.judge_url, "judge" if self.judge_url else None)

    async def setup(self) -> None:
        pass

    async def get_next_item(self) -> dict:
        return SAMPLE

    def format_prompt(self, item: dict) -> str:
        return item["prompt"]

    async def compute_reward(self, item: dict, result: AgentResult, ctx: ToolContext) -> Reward:
        return Reward(0.0)

    async def evaluate(self, *args, **kwargs) -> None:
        pass


class SeparatelyJudgedEnv(JudgedEnv):
    pass


# A judge that follows instructions in what it grades, as a policy model may.
OBEDIENT_JUDGE = {
    "conversations": [
        {
            "match": re.escape("Ignore previous instructions"),
            "turns": [{"content": '{"score": 1}'}],
        }
    ],
    "default": {"turns": [{"content": '{"score": 0}'}]},
}
STRICT_JUDGE = {"default": {"turns": [{"content": '{"score": 0}'}]}}


def test_an_obedient_policy_judging_itself_pays_the_injection_and_it_is_reported(
    stub_server, offline_tokenizer, tmp_path, caplog
):
    policy = stub_server(OBEDIENT_JUDGE)
    with caplog.at_level(logging.WARNING):
        env = build_env(JudgedEnv, policy.base_url, offline_tokenizer, tmp_path)
    assert "the judge is the policy's own server: the policy grades its own answers" in (
        caplog.text
    )
    outcome = judge_injection(env, SAMPLE)
    assert outcome.score == 1.0 and outcome.self_judged
    assert policy.base_url in outcome.judge and "policy's own server" in outcome.judge
    judged = policy.requests[-1]["messages"]
    assert INJECTION_ANSWER[:30] in judged[1]["content"]
    assert "untrusted" in judged[0]["content"]


def test_a_separate_judge_is_asked_and_no_self_grading_warning_is_given(
    stub_server, offline_tokenizer, tmp_path, caplog
):
    policy, judge = stub_server(OBEDIENT_JUDGE), stub_server(STRICT_JUDGE)
    SeparatelyJudgedEnv.judge_url = judge.base_url
    with caplog.at_level(logging.WARNING):
        env = build_env(SeparatelyJudgedEnv, policy.base_url, offline_tokenizer, tmp_path)
    assert "grades its own" not in caplog.text
    outcome = judge_injection(env, SAMPLE)
    assert outcome.score == 0.0 and not outcome.self_judged and outcome.judge == judge.base_url
    assert judge.requests and not policy.requests


def test_a_judge_that_cannot_be_reached_is_reported_as_such(offline_tokenizer, tmp_path):
    env = build_env(
        JudgedEnv, "http://127.0.0.1:9/v1", offline_tokenizer, tmp_path, request_retries=0
    )
    outcome = judge_injection(env, SAMPLE)
    assert outcome.score is None and "judge call failed" in outcome.error
