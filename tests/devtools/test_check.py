"""``hermes-envgen check`` on generated projects, broken ones, and things that are not envs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TRAINERS_DIRECTORY, render_template
from helpers.check import rows, run_check

from hermes_envgen.runtime.sandbox import procfs

# A whole check is several env subprocesses (run_check allows 600 s, the own-judge one 900 s):
# on a busy machine they took 220-290 s beside another, near pytest-timeout's default 300 s.
pytestmark = pytest.mark.timeout(1000)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    target = tmp_path_factory.mktemp("check") / "ready-env"
    return render_template(target, {"project_name": "ready-env"})


def variant(project, tmp_path, old: str, new: str):
    copy = tmp_path / "variant"
    shutil.copytree(project, copy)
    env_file = copy / "src/ready_env/env.py"
    text = env_file.read_text()
    assert old in text
    env_file.write_text(text.replace(old, new))
    return copy


@pytest.mark.slow
def test_a_generated_project_is_ready(project):
    result = run_check(str(project))
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(rows(result).values()) == {"PASS"}
    assert len(rows(result)) == 21 and "ready to train" in result.stdout
    # each door, driven through its own adapter, pays what process pays and nothing for nothing
    for door in ("trl", "openenv", "verifiers"):
        if door == "openenv" and not TRAINERS_DIRECTORY.is_dir():
            continue  # openenv-core is not installed (scripts/install-trainers.sh): a WARN
        assert rows(result)[f"door {door}: parity"] == "PASS", result.stdout
    assert result.stdout.count("pays all 24 gold solutions what process pays") == 3
    assert rows(result)["token fidelity"] == "PASS"  # the atropos provider samples token ids
    assert rows(result)["tool calls in training data"] == "PASS"
    assert rows(result)["trainer-ready"] == "PASS"  # token mode: logprobs on every token
    assert "all 24 samples earn >= 0.9" in result.stdout


@pytest.mark.slow
def test_a_judge_of_its_own_is_played_by_the_stub(tmp_path):
    # Its judge_base_url answers nothing offline: check points the judge at the stub, as the
    # policy, instead of timing out on a judge that refuses every connection.
    data = {
        "project_name": "own-judge",
        "provider": "vllm",
        "model_name": "Qwen/Qwen2.5-1.5B-Instruct",
        "vllm_server": "generate",
        "reward_pattern": "judge",
        "judge_base_url": "http://127.0.0.1:8080/v1",
        "judge_model": "judge-model",
        "judge_api_key_env": "JUDGE_API_KEY",
    }
    project = render_template(tmp_path / "own-judge", data)
    result = run_check(str(project), timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(rows(result).values()) <= {"PASS", "WARN"}, result.stdout
    assert rows(result)["gold solutions"] == "PASS" and "ready to train" in result.stdout


@pytest.mark.slow
def test_a_reward_that_pays_for_nothing_fails(project, tmp_path):
    broken = variant(
        project,
        tmp_path,
        'passed = outcome["exit_code"] == 0',
        "passed = True  # a bug: every rollout passes",
    )
    result = run_check(str(broken), trainers=False)
    assert result.returncode == 1
    table = rows(result)
    assert table["reward range"] == "FAIL" and table["no-op"] == "FAIL"
    assert table["gold solutions"] == "PASS"
    # through the doors too; a door whose library is missing warns, naming the extra
    assert table["door trl: parity"] == table["door verifiers: parity"] == "FAIL"
    assert "through TRL's environment_factory: task 0: no-op earned 1" in result.stdout
    assert table["door openenv: parity"] == "WARN"
    assert "pip install 'hermes-envgen[openenv]'" in result.stdout
    assert "every reward is the same" in result.stdout
    assert "sample 0 (" in result.stdout and "answering without tools earned 1" in result.stdout


@pytest.mark.slow
def test_a_reward_the_agent_can_tamper_with_fails(project, tmp_path):
    broken = variant(
        project,
        tmp_path,
        'CHECK_COMMAND = "/bin/bash {checks}/check.sh"',
        # a bug: the check's bash comes from a PATH the workspace's bin/ comes first in
        'CHECK_COMMAND = "PATH=$PWD/bin:$PATH; bash {checks}/check.sh"',
    )
    result = run_check(str(broken))
    assert result.returncode == 1
    table = rows(result)
    assert table["reward tampering"] == "FAIL", result.stdout
    assert table["gold solutions"] == "PASS" and table["no-op"] == "PASS"
    assert "tampering with the checks earned 1" in result.stdout


# The multi_signal reward as it was: correctness found the reference anywhere in the reply,
# and tool usage paid whatever the answer.
OLD_MULTI_SIGNAL = """        from hermes_envgen.runtime.rewards import answer_matches

        correct = answer_matches(result.final_response, item["answer"])
        signals = {
            "correctness": float(correct),
            "tool_usage": tool_usage_score(result, EXPECTED_TOOLS),
            "efficiency": efficiency_score(result, self.config.max_agent_turns) if correct else 0.0,
        }
"""


@pytest.mark.slow
def test_a_reward_that_pays_a_shotgun_or_a_tool_touch_fails(tmp_path):
    project = render_template(
        tmp_path / "ms-env", {"project_name": "ms-env", "reward_pattern": "multi_signal"}
    )
    env_file = project / "src/ms_env/env.py"
    text = env_file.read_text()
    start = text.index("        correct = answer_is(")
    end = text.index("        weights = {", start)
    env_file.write_text(text[:start] + OLD_MULTI_SIGNAL + text[end:])
    result = run_check(str(project))
    assert result.returncode == 1, result.stdout
    table = rows(result)
    assert table["shotgun answer"] == "FAIL" and table["tool touch, then give up"] == "FAIL"
    assert table["gold solutions"] == "PASS" and table["no-op"] == "PASS"
    assert "a shotgun list of candidates earned 0.9" in result.stdout
    assert "running a tool and giving up earned 0.2" in result.stdout


# The multi_signal correctness of the release before: answer.txt or the reply, either counted.
TWO_SHOTS = """        written = await read_answer_file(ctx)
        correct = any(answer_is(text, item["answer"]) for text in (written, result.final_response))
"""


@pytest.mark.slow
def test_a_reward_that_takes_either_of_two_answers_fails(tmp_path):
    # A wrong answer.txt followed by the right reply earned 0.978: two shots per rollout.
    project = render_template(
        tmp_path / "two-env", {"project_name": "two-env", "reward_pattern": "multi_signal"}
    )
    env_file = project / "src/two_env/env.py"
    text = env_file.read_text()
    one_answer = '        correct = answer_is(await read_answer_file(ctx), item["answer"])\n'
    assert one_answer in text
    env_file.write_text(text.replace(one_answer, TWO_SHOTS))
    result = run_check(str(project))
    assert result.returncode == 1, result.stdout
    table = rows(result)
    assert table["two shots"] == "FAIL", result.stdout
    assert table["gold solutions"] == table["shotgun answer"] == table["no-op"] == "PASS"
    assert "two shots (a wrong answer.txt and the right reply" in result.stdout


@pytest.mark.slow
def test_a_judge_that_follows_an_injection_fails(tmp_path, stub_server):
    obedient = stub_server(
        {
            "conversations": [
                {"match": "Ignore previous instructions", "turns": [{"content": '{"score": 1}'}]}
            ],
            "default": {"turns": [{"content": '{"score": 0}'}]},
        }
    )
    project = render_template(
        tmp_path / "judged-env",
        {
            "project_name": "judged-env",
            "reward_pattern": "judge",
            "judge_base_url": obedient.base_url,
            "judge_model": "judge",
        },
    )
    result = run_check(str(project))
    assert result.returncode == 1, result.stdout
    table = rows(result)
    assert table["judge injection"] == "FAIL", result.stdout
    assert f"the judge at {obedient.base_url} scored an answer that tells it" in result.stdout


@pytest.mark.slow
def test_a_bare_server_config_and_a_written_key_fail(project, tmp_path):
    broken = variant(
        project,
        tmp_path,
        "return config, [server]",
        "server.api_key = 'sk-abcdefghijklmnopqrstuvwxyz123456'\n        return config, server",
    )
    result = run_check(str(broken))
    assert result.returncode == 1
    table = rows(result)
    assert table["config_init"] == "FAIL" and table["no API key in code"] == "FAIL"


@pytest.mark.slow
def test_chat_mode_data_is_not_ready_for_the_grpo_trainer(tmp_path):
    project = render_template(
        tmp_path / "chat-env",
        {
            "project_name": "chat-env",
            "provider": "openai_compatible",
            "model_name": "some-model",
            "base_url": "http://127.0.0.1:1/v1",
            "api_key_env": "SOME_KEY",
        },
    )
    result = run_check(str(project))
    assert result.returncode == 1
    assert rows(result)["trainer-ready"] == "FAIL"
    assert rows(result)["process"] == "PASS" and rows(result)["evaluate"] == "PASS"
    assert "no inference_logprobs: chat mode" in result.stdout
    assert "not ready: trainer-ready failed" in result.stderr


def test_an_unknown_trainer_exits_2(tmp_path):
    result = run_check(str(tmp_path), "--trainer", "ppo")
    assert result.returncode == 2
    assert "--trainer must be one of grpo, none, not 'ppo'" in result.stderr


def test_not_an_env_project_exits_2(tmp_path):
    result = run_check(str(tmp_path))
    assert result.returncode == 2
    assert "is not an env project" in result.stderr and "Traceback" not in result.stderr


def test_an_env_that_fails_to_import_exits_2(tmp_path):
    (tmp_path / "env.py").write_text("import no_such_module_here\n")
    result = run_check(str(tmp_path))
    assert result.returncode == 2
    assert "could not be imported: ModuleNotFoundError" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_an_interrupted_check_leaves_nothing_running(project, tmp_path):
    """A SIGINT to the CLI alone (a supervisor's, not the terminal's to the whole group) while
    process runs and the replays run beside it: exit 130 at once, every env process gone."""
    # A reward that takes 10 s: the replays take minutes, so waiting them out cannot pass.
    anchor = '        checks = item.get("checks") or {'
    slow = variant(project, tmp_path, anchor, "        await asyncio.sleep(10)\n" + anchor)
    env_file = slow / "src/ready_env/env.py"
    env_file.write_text("import asyncio\n" + env_file.read_text())
    check = subprocess.Popen(
        [sys.executable, "-m", "hermes_envgen", "check", str(slow)],
        env={**os.environ, "TMPDIR": str(tmp_path)},  # check's work directory goes here
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        said = []
        for line in check.stdout:
            said.append(line)
            if "running process" in line:  # the replays were started just before
                break
        assert said and "running process" in said[-1], "".join(said)
        # Once process mode's env process runs and the CLI waits for it: a signal while the
        # CLI is still starting it is a race of its own, not what this test is about.
        deadline = time.monotonic() + 120
        while not any(b"\0process\0" in cmdline(pid) for pid in procfs.working_in(str(tmp_path))):
            assert time.monotonic() < deadline, "process mode did not start"
            time.sleep(0.05)
        time.sleep(1)
        check.send_signal(signal.SIGINT)
        check.wait(timeout=60)
    finally:
        if check.poll() is None:
            os.killpg(check.pid, signal.SIGKILL)
            check.wait()
    assert check.returncode == 130
    # The env processes run in the project (describe, replays) and in the work directory, both
    # under tmp_path.
    left = procfs.working_in(str(tmp_path))
    assert left == [], [cmdline(pid) for pid in left]


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return b""


@pytest.mark.slow
def test_a_port_in_use_exits_2(project, stub_server):
    busy = stub_server({"conversations": [{"turns": [{"content": "x"}]}]})
    result = run_check(str(project), "--port", str(busy.port))
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{busy.port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_the_checks_run_against_a_real_endpoint(project, stub_server, offline_tokenizer):
    """A separately running OpenAI-compatible server stands in for the user's endpoint."""
    import importlib

    sys.path.insert(0, str(project / "src"))
    try:
        samples = importlib.import_module("ready_env.samples").SAMPLES
    finally:
        sys.path.remove(str(project / "src"))
    from hermes_envgen.testing.policy import scripted_policy

    endpoint = stub_server(scripted_policy(samples))
    result = run_check(
        str(project),
        "--base-url",
        endpoint.base_url,
        "--model",
        "my-model",
        "--server-type",
        "openai",
        "--tokenizer",
        str(offline_tokenizer),
        "--extra-body",
        '{"top_k": 3}',
        "--tool-choice",
        "auto",
        "--trainer",
        "none",  # a chat-mode endpoint: no inference logprobs (its own test above)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert rows(result)["process"] == "PASS" and rows(result)["evaluate"] == "PASS"
    assert any(r.get("model") == "my-model" for r in endpoint.requests)
    # The provider settings reach every request the env makes, the start-up check's too.
    assert endpoint.requests and all(r.get("top_k") == 3 for r in endpoint.requests)
    with_tools = [r for r in endpoint.requests if r.get("tools")]
    assert with_tools and all(r.get("tool_choice") == "auto" for r in with_tools)


def row_reason(result, name: str) -> str:
    for line in result.stdout.splitlines():
        status, _, rest = line.partition("  ")
        if status in ("PASS", "FAIL", "WARN") and rest.strip().startswith(name + "  "):
            return rest.strip()[len(name) :].strip()
    raise AssertionError(f"no row {name!r} in {result.stdout}")


@pytest.mark.slow
def test_the_process_and_evaluate_budgets_are_bounded_by_flags(
    project, stub_server, offline_tokenizer
):
    """A slow real server: --group-size, --max-turns and --eval-size bound what check asks of it."""
    import importlib

    sys.path.insert(0, str(project / "src"))
    try:
        samples = importlib.import_module("ready_env.samples").SAMPLES
    finally:
        sys.path.remove(str(project / "src"))
    from hermes_envgen.testing.policy import scripted_policy

    endpoint = stub_server(scripted_policy(samples))
    flags = ["--base-url", endpoint.base_url, "--model", "m", "--tokenizer", str(offline_tokenizer)]
    bounded = ["--group-size", "2", "--max-turns", "2", "--eval-size", "2"]
    result = run_check(str(project), *flags, *bounded)
    assert row_reason(result, "process") == "2 sequences, valid", result.stdout + result.stderr
    assert row_reason(result, "evaluate").startswith("2 rollouts scored"), result.stdout
    # The project samples in token mode: each request's prompt is the conversation so far as
    # token ids (/generate or /v1/completions), ending in the generation prompt's assistant
    # header. The second turn was asked and no third: at most one earlier assistant message.
    sampled = [assistant_headers(endpoint, r["prompt"]) for r in endpoint.requests if "prompt" in r]
    assert sampled and max(sampled) == 2, sampled


def assistant_headers(endpoint, prompt) -> int:
    """How many ChatML assistant headers a token-mode prompt (ids, or vLLM's dict) holds."""
    ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else prompt
    text = ids if isinstance(ids, str) else endpoint.tokenizer.decode(ids)
    return text.count("<|im_start|>assistant")


@pytest.mark.slow
def test_a_mode_past_its_budget_says_which_budget_ran_out(project, stub_server, offline_tokenizer):
    from hermes_envgen.testing.stub_server import Faults

    # A model that calls a tool every turn, 2 s a reply: 40 turns cannot fit in 10 s. Each mode
    # waits out its whole budget, so the budget is small; the replays after them run under it
    # too, and on a busy machine may run past it: their rows fail then, the table still prints.
    forever = {"turns": [{"tool_calls": [{"name": "terminal", "arguments": {"command": "true"}}]}]}
    slow = stub_server({"conversations": [forever]}, Faults(latency=2))
    flags = ["--base-url", slow.base_url, "--model", "m", "--tokenizer", str(offline_tokenizer)]
    result = run_check(str(project), *flags, "--timeout", "10", "--max-turns", "40")
    assert result.returncode == 1, result.stdout + result.stderr
    process = row_reason(result, "process")
    assert process.startswith("ran past its 10 s budget (--timeout) with one group of 8 "), process
    assert "of up to 40 turns: bound it with --group-size and --max-turns" in process
    evaluate = row_reason(result, "evaluate")
    assert "ran past its 10 s budget (--timeout) with " in evaluate, evaluate
    assert "bound it with --eval-size and --max-turns" in evaluate
