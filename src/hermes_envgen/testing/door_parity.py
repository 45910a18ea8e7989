"""Does a door pay what Atropos pays? The gold, no-op and tampering replays through a session.

Every door to another trainer (TRL's ``environment_factory``, the OpenEnv server) runs the
env's tasks as :class:`EnvSession` s: the trainer's model calls the tools, the session runs them
in the task's sandbox and scores the transcript with ``compute_reward``. Here each built-in
task's gold solution is replayed both ways, by the env's own loop as ``process`` runs it
(the stub server playing the scripted model) and call by call through a session, and the two
rewards must be equal; a no-op answer and tampering with the checks, through a session, must
earn no more than the no-op threshold.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_envgen.runtime.doors.session import EnvSession, EnvSessions
from hermes_envgen.testing.policy import GIVE_UP_ANSWER, gold_turns
from hermes_envgen.testing.reward_checks import HOSTILE_REPLIES, TAMPER_COMMAND, gold_script
from hermes_envgen.testing.thresholds import NOOP_THRESHOLD

GIVE_UP = [{"content": GIVE_UP_ANSWER}]
TAMPER = [{"tool_calls": [{"name": "terminal", "arguments": {"command": TAMPER_COMMAND}}]}]
# An env without tools is tampered with through its turn hooks, as check's replays do.
TAMPER_HOOKS = [{"content": reply} for reply in HOSTILE_REPLIES]


@dataclass
class DoorParityReport:
    """Per built-in task: the gold reward through ``process``'s loop and through a session,
    and the no-op and tampering rewards through a session."""

    noop_threshold: float = NOOP_THRESHOLD
    atropos_gold: list[float] = field(default_factory=list)
    session_gold: list[float] = field(default_factory=list)
    session_noop: list[float] = field(default_factory=list)
    session_tamper: list[float] = field(default_factory=list)

    @property
    def gold_mismatches(self) -> list[str]:
        """The tasks whose gold solution a session pays otherwise than the env's loop."""
        pairs = zip(self.atropos_gold, self.session_gold)
        return [
            f"task {i}: process {a:g}, session {s:g}"
            for i, (a, s) in enumerate(pairs)
            if abs(a - s) > 1e-9
        ]

    @property
    def paid_for_nothing(self) -> list[str]:
        """The tasks where answering at once or tampering earned more than the threshold."""
        found = []
        for kind, rewards in (("no-op", self.session_noop), ("tampering", self.session_tamper)):
            found += [
                f"task {i}: {kind} earned {r:g}"
                for i, r in enumerate(rewards)
                if r > self.noop_threshold
            ]
        return found

    def as_dict(self) -> dict[str, Any]:
        return {
            "atropos_gold": self.atropos_gold,
            "session_gold": self.session_gold,
            "session_noop": self.session_noop,
            "session_tamper": self.session_tamper,
            "gold_mismatches": self.gold_mismatches,
            "paid_for_nothing": self.paid_for_nothing,
        }


async def replay_in_session(session: EnvSession, turns: list[dict[str, Any]]) -> float:
    """Play ``turns`` (the stub script's form) as a trainer's model would, through ``session``:
    each call run in its sandbox, the env's hooks asked after each turn; the reward."""
    transcript = [dict(m) for m in session.messages]
    for number, turn in enumerate(turns, start=1):
        calls: list[dict[str, Any]] = [
            {"id": f"call_{number}_{k}", "type": "function", "function": dict(call)}
            for k, call in enumerate(turn.get("tool_calls") or [])
        ]
        reply: dict[str, Any] = {"role": "assistant", "content": turn.get("content", "")}
        if calls:
            reply["tool_calls"] = calls
        transcript.append(reply)
        for call in calls:
            output = await session.call_tool(
                call["function"]["name"], call["function"]["arguments"], turn=number
            )
            transcript.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        ended = await session.end_turn(transcript)
        transcript += ended.added
        if ended.done:
            break
    return (await session.score(transcript)).score


def door_parity(
    env_cls: type[Any],
    samples: list[dict[str, Any]],
    tokenizer: str | Path,
    workdir: str | Path,
    *,
    noop_threshold: float = NOOP_THRESHOLD,
    atropos_gold: list[float] | None = None,
) -> DoorParityReport:
    """Replay every sample's gold solution through ``process``'s loop and through a session;
    a no-op and tampering through a session (see the module's docstring). ``atropos_gold``:
    the loop's gold rewards, when the caller has them already (check's replays)."""
    from hermes_envgen.testing.envs import build_env, offers_tools, with_prompts
    from hermes_envgen.testing.stub_server import StubServer

    report = DoorParityReport(noop_threshold=noop_threshold)
    # Tampering on bwrap where it is installed, as the replays of check do.
    backend: dict[str, Any] = {"sandbox_backend": "bwrap"} if shutil.which("bwrap") else {}
    tamper = TAMPER + GIVE_UP if offers_tools(env_cls) else TAMPER_HOOKS
    # The stub finds each task's conversation by the prompt the env makes of it (a game's
    # tasks carry none); the loop and the sessions get the tasks themselves.
    with StubServer(gold_script(with_prompts(env_cls, samples))) as stub:
        env = build_env(env_cls, stub.base_url, tokenizer, Path(workdir), **backend)

        slots = asyncio.Semaphore(4)  # a few at once, as the replays of check run

        async def through_session(sessions: EnvSessions, sample: Any, turns: Any) -> float:
            async with slots:
                session = await sessions.open(sample, split="eval")
                try:
                    return await replay_in_session(session, turns)
                finally:
                    await sessions.close(session.task_id)

        async def through_loop(sample: Any) -> float:
            async with slots:
                return (await env.run_agent(sample, split="eval")).reward

        async def replay() -> None:
            if atropos_gold is not None:
                report.atropos_gold += atropos_gold
            else:
                report.atropos_gold += await asyncio.gather(*(through_loop(s) for s in samples))
            sessions = EnvSessions(env)
            try:
                for turns, rewards in (
                    (gold_turns, report.session_gold),
                    (lambda _: GIVE_UP, report.session_noop),
                    (lambda _: tamper, report.session_tamper),
                ):
                    rewards += await asyncio.gather(
                        *(through_session(sessions, s, turns(s)) for s in samples)
                    )
            finally:
                await sessions.close_all()

        asyncio.run(replay())
    return report
