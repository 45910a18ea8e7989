"""A rollout's wall-clock budget (max_rollout_seconds): an agent that waits forever is ended,
recorded as timed out, scored, and its sandbox removed, on every backend."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from helpers.sandbox import (
    BWRAP,
    DOCKER,
    LOCAL,
    docker_test_image,
    processes_running,
    sleep_mark,
    sleep_needle,
)
from terminal_env import TASKS, TerminalTaskEnv

from hermes_envgen.testing.envs import build_env

GREETING = TASKS[0]
BUDGET = 2.0


def sleeper(first: str, second: str) -> dict:
    """The agent asks for a day and runs sleeps the operator's 300 s limit allows: only the
    rollout's budget can end it (each turn repeats the last)."""
    calls = [
        {
            "name": "terminal",
            "arguments": {"command": f"sleep {first}; echo woke", "timeout": 86400},
        },
        {"name": "terminal", "arguments": {"command": f"sleep {second}"}},
    ]
    return {"conversations": [{"match": "greeting", "turns": [{"tool_calls": calls}]}]}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", [LOCAL, BWRAP, DOCKER])
def test_a_rollout_past_its_budget_is_ended_recorded_and_cleaned(
    backend, stub_server, offline_tokenizer, tmp_path
):
    # The sleeps carry this run's own mark: it finds its commands among every process of the
    # host, where the other backends' runs (other test workers) and other work run their own.
    marks = sleep_mark(299), sleep_mark(298)
    server = stub_server(sleeper(*marks))
    overrides = {"sandbox_image": docker_test_image()} if backend == "docker" else {}
    if backend == "local":  # local as root is refused unless opted in
        overrides["sandbox_allow_unsafe_local"] = True
    env = build_env(
        TerminalTaskEnv,
        server.base_url,
        offline_tokenizer,
        tmp_path,
        sandbox_backend=backend,
        sandbox_command_timeout=300.0,
        max_rollout_seconds=BUDGET,
        max_eval_workers=2,
        **overrides,
    )

    async def main():
        await env.setup()
        started = time.monotonic()
        await env.run_eval([GREETING, GREETING])
        took = time.monotonic() - started
        await env.sandboxes.close_all()
        return took

    took = asyncio.run(main())
    samples = [
        json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()
    ]
    # Two rollouts side by side, each ended at 2 s; starting a sandbox and scoring take the
    # rest (a docker container: a second or two, much more on a busy machine). Without the
    # budget the first sleep alone takes 299 s: the ceiling is generous and still tells.
    assert took < BUDGET + 120, f"the evaluation took {took:.1f} s"
    assert len(samples) == 2
    for sample in samples:
        assert sample["timed_out"] is True
        assert sample["reward"] == 0.0  # measured as it stood: greeting.txt was never written
        assert sample["failure"] is None and not sample["finished_naturally"]
        messages = sample["messages"]
        calls = messages[-3]["tool_calls"]
        answers = {m["tool_call_id"]: m["content"] for m in messages[-2:]}
        assert set(answers) == {call["id"] for call in calls}
        assert all("budget" in answer for answer in answers.values())
    assert not processes_running(*map(sleep_needle, marks)), "a command outlived its rollout"
    workspaces = tmp_path / "sandboxes" / "hermes-envgen"
    assert not [p for p in workspaces.glob("*/*") if p.is_dir()], "a workspace was left"
