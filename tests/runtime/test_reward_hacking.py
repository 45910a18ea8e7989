"""Generated envs against an agent that games the reward instead of solving the task."""

from __future__ import annotations

import asyncio
import importlib
import shutil
import sys

import pytest
from conftest import render_template

from hermes_envgen.testing.envs import build_env
from hermes_envgen.testing.policy import anchored, gold_turns

# Leaves a wrong answer, then tries to make any check pass: fake bash/test/sed/pytest on a PATH
# it sets up, passing check scripts wherever one might look, and hidden check dirs removed.
TAMPER = (
    "echo 41 > answer.txt; mkdir -p bin .verify; "
    "for tool in bash sh test sed pytest cat; do printf '#!/bin/sh\\nexit 0\\n' > bin/$tool; done; "
    "chmod +x bin/*; echo 'export PATH=$HOME/bin:$PATH' >> .bashrc; "
    "printf 'exit 0\\n' > check.sh; cp check.sh .verify/check.sh; rm -rf .verify-*; "
    "export PATH=$HOME/bin:$PATH; echo done"
)

# Leaves a wrong answer and, running on after the rollout, a loop that turns every check it
# finds into ``exit 0``; plants a Python user site whose usercustomize exits 0 as well.
TAMPER_LATER = (
    "echo 41 > answer.txt; printf '%s\\n' 'while :; do for d in .verify-* /verify-*; do"
    ' printf "exit 0\\n" > $d/check.sh 2>/dev/null; done; sleep 0.01; done\' > loop.sh;'
    " (setsid nohup bash loop.sh > /dev/null 2>&1 &);"
    ' site=$(python3 -c "import site; print(site.getusersitepackages())");'
    ' mkdir -p "$site"; printf "import os\\nos._exit(0)\\n" > "$site/usercustomize.py"; echo done'
)
BACKENDS = [
    "local",
    pytest.param("bwrap", marks=pytest.mark.skipif(not shutil.which("bwrap"), reason="no bwrap")),
]


@pytest.fixture(scope="module")
def binary_env(tmp_path_factory):
    target = render_template(
        tmp_path_factory.mktemp("hacking") / "hack-env",
        {"project_name": "hack-env", "reward_pattern": "binary"},
    )
    sys.path.insert(0, str(target / "src"))
    try:
        module = importlib.import_module("hack_env")
        yield module.HackEnv, importlib.import_module("hack_env.samples").SAMPLES
    finally:
        sys.path.remove(str(target / "src"))


def reward_of(env_cls, sample, turns, stub_server, tokenizer, tmp_path, **overrides) -> float:
    stub = stub_server({"conversations": [{"match": anchored(sample["prompt"]), "turns": turns}]})
    env = build_env(env_cls, stub.base_url, tokenizer, tmp_path, **overrides)

    async def main():
        await env.setup()
        return await env.run_agent(sample, split="eval")

    rollout = asyncio.run(main())
    assert rollout.reward_error is None, rollout.reward_error
    return rollout.reward


def test_the_gold_solution_passes(binary_env, stub_server, offline_tokenizer, tmp_path):
    env_cls, samples = binary_env
    assert (
        reward_of(
            env_cls, samples[0], gold_turns(samples[0]), stub_server, offline_tokenizer, tmp_path
        )
        == 1.0
    )


def test_tampering_with_checks_and_path_scores_zero(
    binary_env, stub_server, offline_tokenizer, tmp_path
):
    env_cls, samples = binary_env
    turns = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": TAMPER}}]},
        {"content": samples[0]["gold_answer"]},  # and claims the right answer in its reply
    ]
    assert reward_of(env_cls, samples[0], turns, stub_server, offline_tokenizer, tmp_path) == 0.0


def test_deleting_the_answer_file_scores_zero(binary_env, stub_server, offline_tokenizer, tmp_path):
    env_cls, samples = binary_env
    turns = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": samples[0]["solution"]}}]},
        {"tool_calls": [{"name": "terminal", "arguments": {"command": "rm -f answer.txt"}}]},
        {"content": samples[0]["gold_answer"]},
    ]
    assert reward_of(env_cls, samples[0], turns, stub_server, offline_tokenizer, tmp_path) == 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_processes_left_running_and_a_planted_user_site_score_zero(
    binary_env, stub_server, offline_tokenizer, tmp_path, backend
):
    env_cls, samples = binary_env
    turns = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": TAMPER_LATER}}]},
        {"content": samples[0]["gold_answer"]},
    ]
    reward = reward_of(
        env_cls,
        samples[0],
        turns,
        stub_server,
        offline_tokenizer,
        tmp_path,
        sandbox_backend=backend,
        sandbox_allow_unsafe_local=backend == "local",  # as root only when opted in
    )
    assert reward == 0.0
