"""Does the reward pay for the task, and only for it? Gold and no-op replays, no model needed.

Each built-in task is rolled out twice through the env's real agent loop and sandbox, with the
stub server playing a scripted model: once replaying the task's gold solution (which must earn
a high reward), once answering at once without any tool (which must earn a low one). A reward
that pays for doing nothing, or fails to pay for the right solution, is found before training.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_envgen.testing.policy import GIVE_UP_ANSWER, anchored, gold_turns, judge_conversation

GOLD_THRESHOLD = 0.9
NOOP_THRESHOLD = 0.1


@dataclass
class SampleOutcome:
    """One task's gold and no-op rewards."""

    index: int
    prompt: str
    gold: float
    noop: float
    gold_error: str | None = None
    noop_error: str | None = None


@dataclass
class RewardCheckReport:
    """The outcome of every task, and which ones break the thresholds, with why."""

    outcomes: list[SampleOutcome] = field(default_factory=list)
    gold_threshold: float = GOLD_THRESHOLD
    noop_threshold: float = NOOP_THRESHOLD

    @property
    def gold_failures(self) -> list[str]:
        return [
            f"sample {o.index} ({o.prompt[:50]!r}): gold solution earned {o.gold:g}"
            + (f" ({o.gold_error})" if o.gold_error else "")
            for o in self.outcomes
            if o.gold < self.gold_threshold
        ]

    @property
    def noop_failures(self) -> list[str]:
        return [
            f"sample {o.index} ({o.prompt[:50]!r}): answering without tools earned {o.noop:g}"
            + (f" ({o.noop_error})" if o.noop_error else "")
            for o in self.outcomes
            if o.noop > self.noop_threshold
        ]

    def as_dict(self) -> dict:
        return {
            "gold_threshold": self.gold_threshold,
            "noop_threshold": self.noop_threshold,
            "outcomes": [vars(o) for o in self.outcomes],
        }


def gold_script(samples: list[dict]) -> dict:
    """A stub script that always replays the gold solution (and judges gold answers 1)."""
    conversations = []
    for sample in samples:
        conversations.append({"match": anchored(sample["prompt"]), "turns": gold_turns(sample)})
        conversations.append(judge_conversation(sample))
    return {"conversations": conversations, "default": {"turns": [{"content": '{"score": 0}'}]}}


def noop_script(samples: list[dict]) -> dict:
    """A stub script that answers every task at once, without any tool."""
    conversations = [
        {"match": anchored(s["prompt"]), "turns": [{"content": GIVE_UP_ANSWER}]} for s in samples
    ]
    return {"conversations": conversations, "default": {"turns": [{"content": '{"score": 0}'}]}}


def check_rewards(
    env_cls: type,
    samples: list[dict],
    tokenizer: str | Path,
    workdir: str | Path,
    *,
    gold_threshold: float = GOLD_THRESHOLD,
    noop_threshold: float = NOOP_THRESHOLD,
) -> RewardCheckReport:
    """Replay every sample's gold solution and a no-op through ``env_cls``; report rewards."""
    from hermes_envgen.testing.envs import build_env
    from hermes_envgen.testing.stub_server import StubServer

    report = RewardCheckReport(gold_threshold=gold_threshold, noop_threshold=noop_threshold)
    rewards: dict[str, list[tuple[float, str | None]]] = {}
    for kind, script in (("gold", gold_script(samples)), ("noop", noop_script(samples))):
        with StubServer(script) as stub:
            env = build_env(env_cls, stub.base_url, tokenizer, Path(workdir) / kind)
            rewards[kind] = asyncio.run(_score_each(env, samples))
    for index, sample in enumerate(samples):
        (gold, gold_error), (noop, noop_error) = rewards["gold"][index], rewards["noop"][index]
        report.outcomes.append(
            SampleOutcome(index, sample["prompt"], gold, noop, gold_error, noop_error)
        )
    return report


async def _score_each(env: Any, samples: list[dict]) -> list[tuple[float, str | None]]:
    await env.setup()
    results = []
    for sample in samples:
        rollout = await env.run_agent(sample, split="eval")
        error = rollout.reward_error or rollout.result.error
        if rollout.result.tool_errors:
            error = error or f"tool error: {rollout.result.tool_errors[0].error}"
        results.append((rollout.reward, error))
    return results
