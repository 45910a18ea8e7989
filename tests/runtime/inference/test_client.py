"""Real inference servers: stock vLLM in both phases, errors that say what happened, fail-fast
start-up, no retry of requests that cannot succeed, a judge of its own."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import EXAMPLES
from terminal_env import TASKS, TerminalTaskEnv
from transformers import AutoTokenizer

from hermes_envgen.devtools.check import FAIL, PASS, WARN, _evaluate_row, _reward_range_check
from hermes_envgen.runtime.chat.trajectory import MASKED, trained_runs
from hermes_envgen.runtime.errors import EnvConfigError, InferenceError, ModelServerError
from hermes_envgen.runtime.inference import (
    Endpoint,
    ModelClient,
    check_model_server,
    judge_client,
    same_server,
)
from hermes_envgen.runtime.inference.wire import read_completions
from hermes_envgen.runtime.loop.agent_loop import _reasoning_of
from hermes_envgen.runtime.rewards import ask_judge
from hermes_envgen.runtime.rollout import MASKED_LOGPROB
from hermes_envgen.testing.envs import build_env
from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.script import Script
from hermes_envgen.testing.stub_server import FAKE_LOGPROB, Faults, generated_text

END = "<|im_end|>"
SCRIPT = {
    "conversations": [
        {
            "match": "greeting",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "terminal", "arguments": {"command": "echo hello > greeting.txt"}}
                    ]
                },
                {"content": "Wrote it."},
            ],
        }
    ]
}


@pytest.fixture(scope="module")
def tokenizer(offline_tokenizer):
    return AutoTokenizer.from_pretrained(offline_tokenizer)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- provider=vllm against stock `vllm serve` ---------------------------------------------------


def test_vllm_env_runs_phase_1_against_a_server_with_only_the_openai_api(
    stub_server, offline_tokenizer, tmp_path
):
    stub = stub_server(SCRIPT, generate=False)  # no /generate: stock vllm serve
    env = build_env(
        TerminalTaskEnv,
        stub.base_url,
        offline_tokenizer,
        tmp_path,
        server_overrides={"server_type": "vllm"},
        inference_api="chat",
        tool_choice="auto",
        group_size=2,
    )
    group, _ = asyncio.run(env.collect_trajectories(TASKS[0]))
    assert group is not None and group["scores"] == [1.0, 1.0]
    assert all("messages" in r and r["tool_choice"] == "auto" for r in stub.requests)


def test_vllm_env_gets_exact_tokens_from_stock_vllm_completions(
    stub_server, offline_tokenizer, tokenizer, tmp_path
):
    stub = stub_server(SCRIPT, tokenizer=offline_tokenizer, generate=False)
    env = build_env(
        TerminalTaskEnv,
        stub.base_url,
        offline_tokenizer,
        tmp_path,
        server_overrides={"server_type": "vllm"},  # inference_api auto: /generate is absent
        group_size=2,
    )
    group, _ = asyncio.run(env.collect_trajectories(TASKS[0]))
    assert env.policy.api == "completions"
    expected = [generated_text(t) + END for t in Script.load(SCRIPT).conversations[0].turns]
    for tokens, masks, logprobs in zip(
        group["tokens"], group["masks"], group["inference_logprobs"]
    ):
        assert [tokenizer.decode(run) for run in trained_runs(tokens, masks)] == expected
        assert all((lp == FAKE_LOGPROB) == (m != MASKED) for lp, m in zip(logprobs, masks))
        assert all(lp == MASKED_LOGPROB for lp, m in zip(logprobs, masks) if m == MASKED)
    assert group["scores"] == [1.0, 1.0]
    token_requests = [r for r in stub.requests if isinstance(r.get("prompt"), list)]
    assert len(token_requests) == 4 and all(
        r["return_tokens_as_token_ids"] and r["logprobs"] == 0 and "messages" not in r
        for r in token_requests
    )


def test_completions_reply_without_token_ids_is_read_from_the_logprob_tokens():
    reply = {
        "choices": [
            {
                "text": "Hi",
                "finish_reason": "stop",
                "logprobs": {"tokens": ["token_id:72", "token_id:105"], "token_logprobs": [-1, -2]},
            }
        ]
    }
    assert read_completions(reply) == ([[72, 105]], [[-1.0, -2.0]], ["stop"])


# -- what is retried, and what an error says ----------------------------------------------------


def test_a_request_that_cannot_succeed_is_sent_once_and_says_why(stub_server):
    stub = stub_server(SCRIPT, faults=Faults(status=400))
    client = ModelClient([Endpoint(stub.base_url, "stub-model")], api="chat", backoff=0.01)
    with pytest.raises(InferenceError) as caught:
        asyncio.run(client.chat_completion(messages=[{"role": "user", "content": "greeting"}]))
    assert len(stub.requests) == 1
    message = str(caught.value)
    assert message == f"HTTP 400 from {stub.base_url}/chat/completions: injected HTTP 400"
    assert not caught.value.retryable and client.hopeless() is False


def test_a_fault_that_may_pass_is_retried(stub_server):
    stub = stub_server(SCRIPT, faults=Faults(status=503))
    client = ModelClient([Endpoint(stub.base_url, "stub-model")], api="chat", backoff=0.01)
    with pytest.raises(InferenceError, match="HTTP 503"):
        asyncio.run(client.chat_completion(messages=[{"role": "user", "content": "greeting"}]))
    assert len(stub.requests) == client.retries + 1 == 4


def test_a_refused_connection_names_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = ModelClient([Endpoint(url, "m")], api="chat", retries=0)
    with pytest.raises(InferenceError, match=r"cannot connect \(connection refused\)") as caught:
        asyncio.run(client.chat_completion(messages=[{"role": "user", "content": "hi"}]))
    assert url in str(caught.value)


# -- start-up: fail fast, one line, exit 2 -------------------------------------------------------


def run_example(mode: str, flags: dict, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    args = [sys.executable, str(EXAMPLES / "terminal_env.py"), mode]
    for name, value in flags.items():
        args += [f"--{name}", str(value)]
    return subprocess.run(
        args,
        cwd=cwd,
        env=offline_environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_line(completed: subprocess.CompletedProcess) -> str:
    return completed.stderr.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["refused", "dns", "404", "401", "hang"])
def test_a_model_server_that_fails_every_request_stops_the_run_at_once(
    failure, stub_server, offline_tokenizer, tmp_path
):
    if failure == "refused":
        base_url, expected = f"http://127.0.0.1:{free_port()}/v1", "cannot connect"
    elif failure == "dns":  # .invalid never resolves (RFC 2606): no network needed
        base_url = "http://no-such-model-server.invalid:9001/v1"
        expected = "(the host name does not resolve); is the host name in --openai.base_url right?"
    elif failure == "404":
        stub = stub_server(SCRIPT)
        base_url, expected = stub.base_url.removesuffix("/v1") + "/wrong/v1", "HTTP 404"
    elif failure == "401":
        stub = stub_server(SCRIPT, faults=Faults(status=401))
        base_url, expected = stub.base_url, "HTTP 401"
    else:
        stub = stub_server(SCRIPT, faults=Faults(hang_rate=1.0))
        base_url, expected = stub.base_url, "no reply before the timeout"
    started = time.monotonic()
    completed = run_example(
        "evaluate",
        {
            "openai.base_url": base_url,
            "openai.timeout": 1,
            "env.startup_wait": 3,
            "env.tokenizer_name": offline_tokenizer,
            "env.data_dir_to_save_evals": tmp_path / "eval",
            "env.sandbox_root": tmp_path / "sandboxes",
            "openai.api_key": "sk-test",  # a host that is not this one needs a key
        },
        cwd=tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    # At once: the start-up wait (3 s) and the env's start, which takes most of a minute on a
    # busy machine; a run that went on asking would take many times the timeout per task.
    assert time.monotonic() - started < 120
    line = last_line(completed)
    assert line.startswith("error: the model server does not answer: "), line
    assert expected in line and base_url in line
    assert "Traceback" not in completed.stderr
    # Nothing half-written: atroposlib's dump of the settings, and no result file.
    assert {p.name for p in (tmp_path / "eval").glob("*")} <= {"evaluate_config.yaml"}
    leftovers = list((tmp_path / "sandboxes").rglob("hermes-envgen/*"))
    assert leftovers == []


@pytest.mark.slow
def test_a_server_that_is_still_starting_is_waited_for_with_a_progress_line(
    stub_server, offline_tokenizer, tmp_path
):
    # As vLLM loading its model: the port refuses connections for a while, then answers.
    port = free_port()
    args = [sys.executable, str(EXAMPLES / "terminal_env.py"), "evaluate"]
    flags = {
        "openai.base_url": f"http://127.0.0.1:{port}/v1",
        "env.startup_wait": 60,
        "env.eval_size": 1,
        "env.tokenizer_name": offline_tokenizer,
        "env.data_dir_to_save_evals": tmp_path / "eval",
        "env.sandbox_root": tmp_path / "sandboxes",
    }
    for name, value in flags.items():
        args += [f"--{name}", str(value)]
    process = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=offline_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    try:
        # The server comes up only once the env has said that it waits for it.
        for line in process.stderr:
            seen.append(line.rstrip("\n"))
            if line.startswith("waiting for the model server"):
                break
        stub_server(SCRIPT, port=port)
        _, rest = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, ("\n".join(seen) + rest)[-3000:]
    waiting = [line for line in seen if line.startswith("waiting for the model server")]
    assert waiting, "\n".join(seen)[-3000:]
    assert (
        f"http://127.0.0.1:{port}/v1" in waiting[0] and "of 60 (--env.startup_wait)" in waiting[0]
    )
    assert "connection refused" in waiting[0]
    assert (tmp_path / "eval" / "metrics.json").exists()


@pytest.mark.slow
def test_a_server_that_never_comes_up_is_named_after_the_bounded_wait(offline_tokenizer, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    completed = run_example(
        "evaluate",
        {
            "openai.base_url": url,
            "env.startup_wait": 5,
            "env.tokenizer_name": offline_tokenizer,
            "env.sandbox_root": tmp_path / "sandboxes",
        },
        cwd=tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert time.monotonic() - started < 120  # the 5 s wait and the env's start, however busy
    lines = completed.stderr.strip().splitlines()
    assert any(line.startswith(f"waiting for the model server at {url}: ") for line in lines)
    assert lines[-1].startswith(f"error: the model server does not answer: {url}/")
    assert " s: --env.startup_wait) " in lines[-1], lines[-1]
    assert lines[-1].endswith(f"(asked from {socket.gethostname()})"), lines[-1]


@pytest.mark.slow
def test_serve_refuses_a_model_url_that_is_the_rollout_server(offline_tokenizer, tmp_path):
    completed = run_example(
        "serve",
        {
            "openai.base_url": "http://127.0.0.1:8000/v1",
            "env.rollout_server_url": "http://localhost:8000",
            "env.tokenizer_name": offline_tokenizer,
        },
        cwd=tmp_path,
        timeout=60,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    line = last_line(completed)
    assert "is the rollout server's (run-api" in line and "9001" in line, line


def test_a_rollout_server_where_the_model_should_be_is_named(stub_server):
    stub = stub_server(SCRIPT)  # stands in for run-api: no chat endpoint under this path
    root = stub.base_url.removesuffix("/v1")
    client = ModelClient([Endpoint(f"{root}/v1/nothing", "m")], api="chat")
    expected = r"HTTP 404 .*that is the rollout server \(run-api\)"
    with pytest.raises(ModelServerError, match=expected):
        asyncio.run(check_model_server(client, startup_wait=1, rollout_server_url=root))


def test_same_server_treats_every_local_name_alike():
    assert same_server("http://127.0.0.1:8000/v1", "http://localhost:8000")
    assert same_server("http://0.0.0.0:8000", "http://localhost:8000/")
    assert not same_server("http://localhost:9001/v1", "http://localhost:8000")


@pytest.mark.slow
def test_evaluate_where_every_rollout_fails_exits_2_with_the_cause(
    stub_server, offline_tokenizer, tmp_path
):
    # The start-up request is answered, every later one is refused with HTTP 400.
    stub = stub_server(SCRIPT, faults=Faults(status=400, status_after=1))
    completed = run_example(
        "evaluate",
        {
            "openai.base_url": stub.base_url,
            "env.extra_body": '{"top_k": 7}',
            "env.tokenizer_name": offline_tokenizer,
            "env.data_dir_to_save_evals": tmp_path / "eval",
            "env.sandbox_root": tmp_path / "sandboxes",
        },
        cwd=tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    line = last_line(completed)
    assert line.startswith("error: no rollout could be measured: all "), line
    assert "HTTP 400" in line and "injected HTTP 400" in line
    failures = [json.loads(x) for x in (tmp_path / "eval/failures.jsonl").read_text().splitlines()]
    assert failures and all("HTTP 400 from" in f["failure"] for f in failures)
    # One request per rollout: a 400 is not asked again. extra_body came from the command line.
    assert len(stub.requests) == 1 + len(failures)
    assert all(r.get("top_k") == 7 for r in stub.requests[1:])


@pytest.mark.slow
def test_process_stops_when_every_request_fails_for_good(stub_server, offline_tokenizer, tmp_path):
    stub = stub_server(SCRIPT, faults=Faults(status=403, status_after=1))
    completed = run_example(
        "process",
        {
            "openai.base_url": stub.base_url,
            "env.tokenizer_name": offline_tokenizer,
            "env.total_steps": 2,
            "env.data_path_to_save_groups": tmp_path / "groups.jsonl",
            "env.sandbox_root": tmp_path / "sandboxes",
        },
        cwd=tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert last_line(completed).startswith("error: every request fails: HTTP 403 from ")
    assert len(stub.requests) < 20
    assert not (tmp_path / "groups.jsonl").exists()  # no group was written: no file


@pytest.mark.slow
def test_process_against_a_refused_port_leaves_no_groups_file(offline_tokenizer, tmp_path):
    completed = run_example(
        "process",
        {
            "openai.base_url": f"http://127.0.0.1:{free_port()}/v1",
            "env.startup_wait": 1,
            "env.tokenizer_name": offline_tokenizer,
            "env.data_path_to_save_groups": tmp_path / "groups.jsonl",
            "env.sandbox_root": tmp_path / "sandboxes",
        },
        cwd=tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert "cannot connect (connection refused)" in last_line(completed)
    assert not (tmp_path / "groups.jsonl").exists()


@pytest.mark.slow
def test_extra_body_that_is_not_json_is_refused_in_one_line(offline_tokenizer, tmp_path):
    completed = run_example(
        "evaluate",
        {"env.extra_body": '{"tool_choice": auto}', "env.tokenizer_name": offline_tokenizer},
        cwd=tmp_path,
        timeout=60,
    )
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    assert last_line(completed).startswith("error: env.extra_body: Invalid JSON: ")


# -- the judge ----------------------------------------------------------------------------------


def test_the_judge_can_have_an_endpoint_of_its_own(stub_server, monkeypatch):
    policy = stub_server(SCRIPT)
    judge = stub_server({"conversations": [{"turns": [{"content": '{"score": 0.25}'}]}]})
    client = ModelClient([Endpoint(policy.base_url, "policy")], api="chat")
    assert judge_client(client) is client  # default: the policy's own server
    monkeypatch.setenv("JUDGE_KEY", "secret")
    own = judge_client(client, judge.base_url, "judge-model", "JUDGE_KEY")
    verdict = asyncio.run(ask_judge(own, "task", "answer", "reference"))
    assert verdict.score == 0.25
    assert policy.requests == [] and judge.requests[0]["model"] == "judge-model"


# The example env with a judge of its own at $JUDGE_URL (the reward stays the example's).
JUDGED_ENV = """
import os

from terminal_env import TerminalTaskEnv

from hermes_envgen.runtime import Reward, ask_judge, judge_client


class JudgedEnv(TerminalTaskEnv):
    def make_judge(self):
        return judge_client(self.policy, os.environ["JUDGE_URL"], "judge-model", "JUDGE_KEY")

    async def compute_reward(self, item, result, ctx):
        verdict = await ask_judge(self.judge, "task", result.final_response or "-", "ref")
        return Reward(0.0, failure=verdict.error) if verdict.failed else verdict.score


if __name__ == "__main__":
    JudgedEnv.cli()
"""


def run_judged_env(mode: str, judge_url: str, flags: dict, cwd) -> subprocess.CompletedProcess:
    script = cwd / "judged_env.py"
    script.write_text(JUDGED_ENV)
    return subprocess.run(
        [sys.executable, str(script), mode, *(f"--{k}={v}" for k, v in flags.items())],
        cwd=cwd,
        env=offline_environment(
            {
                "JUDGE_URL": judge_url,
                "JUDGE_KEY": "",
                "PYTHONPATH": f"{EXAMPLES}:{os.environ.get('PYTHONPATH', '')}",
            }
        ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_a_judge_that_refuses_the_key_stops_the_run_at_start(
    stub_server, offline_tokenizer, tmp_path
):
    policy = stub_server(SCRIPT)
    judge = stub_server(SCRIPT, faults=Faults(status=401))
    completed = run_judged_env(
        "process",
        judge.base_url,
        {
            "openai.base_url": policy.base_url,
            "env.tokenizer_name": offline_tokenizer,
            "env.total_steps": 1,
            "env.data_path_to_save_groups": tmp_path / "groups.jsonl",
            "env.sandbox_root": tmp_path / "sandboxes",
        },
        tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr
    line = last_line(completed)
    assert line.startswith(f"error: the judge does not answer: HTTP 401 from {judge.base_url}")
    assert line.endswith("check the judge's API key (the variable --env.judge_api_key_env names)")
    assert len(judge.requests) == 1 and len(policy.requests) == 1  # the start-up requests only
    assert not (tmp_path / "groups.jsonl").exists()


@pytest.mark.slow
def test_a_judge_that_fails_every_request_later_stops_the_run(
    stub_server, offline_tokenizer, tmp_path
):
    policy = stub_server(SCRIPT)
    judge = stub_server(SCRIPT, faults=Faults(status=403, status_after=1))
    completed = run_judged_env(
        "process",
        judge.base_url,
        {
            "openai.base_url": policy.base_url,
            "env.tokenizer_name": offline_tokenizer,
            "env.group_size": 2,
            "env.total_steps": 3,
            "env.data_path_to_save_groups": tmp_path / "groups.jsonl",
            "env.sandbox_root": tmp_path / "sandboxes",
        },
        tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    line = last_line(completed)
    assert line.startswith(f"error: every judge request fails: HTTP 403 from {judge.base_url}")
    assert len(judge.requests) < 10
    assert not (tmp_path / "groups.jsonl").exists()


@pytest.mark.slow
def test_a_judge_on_a_policy_server_with_only_generate_is_refused_at_start(
    stub_server, offline_tokenizer, tmp_path
):
    # Atropos's vLLM API server: /generate for the policy, no chat API for the judge.
    policy = stub_server(SCRIPT, openai_api=False)
    completed = run_judged_env(
        "evaluate",
        "",  # no judge_base_url: the judge is the policy's server
        {
            "openai.base_url": policy.base_url,
            "openai.server_type": "vllm",
            "env.inference_api": "generate",
            "env.tokenizer_name": offline_tokenizer,
            "env.data_dir_to_save_evals": tmp_path / "eval",
            "env.sandbox_root": tmp_path / "sandboxes",
        },
        tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    line = last_line(completed)
    assert line.startswith(
        f"error: the judge does not answer: HTTP 404 from {policy.base_url}/chat/completions"
    ), line
    assert line.endswith("(a policy server with only /generate cannot judge)")
    assert len(policy.requests) == 1  # the policy's start-up request, on /generate


@pytest.mark.slow
def test_a_remote_judge_without_a_key_stops_process_mode_with_no_groups_file(
    offline_tokenizer, tmp_path
):
    completed = run_judged_env(
        "process",
        "https://judge.example/v1",  # not this machine: a key is needed, and none is set
        {
            "env.tokenizer_name": offline_tokenizer,
            "env.data_path_to_save_groups": tmp_path / "groups.jsonl",
        },
        tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    line = last_line(completed)
    expected = "error: no API key for the judge at https://judge.example/v1: $JUDGE_KEY is empty"
    assert line == expected
    assert not (tmp_path / "groups.jsonl").exists()


def test_a_remote_judge_without_a_key_or_model_is_refused(monkeypatch):
    client = ModelClient([Endpoint("http://localhost:1/v1", "policy")], api="chat")
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with pytest.raises(EnvConfigError, match=r"\$NO_SUCH_KEY is empty"):
        judge_client(client, "https://judge.example/v1", "m", "NO_SUCH_KEY")
    with pytest.raises(EnvConfigError, match="set judge_model"):
        judge_client(client, "https://judge.example/v1", None, None)


def test_openrouter_reasoning_details_are_read_as_reasoning():
    message = {
        "content": "4",
        "reasoning_details": [
            {"type": "reasoning.text", "text": "2 + 2"},
            {"type": "reasoning.summary", "summary": "is 4"},
        ],
    }
    assert _reasoning_of(message) == "2 + 2\nis 4"


# -- check tells the truth ------------------------------------------------------------------------


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_check_counts_failed_eval_rollouts_and_names_the_cause(tmp_path):
    sample = {"reward": 1.0, "tools_used": ["terminal"]}
    write_jsonl(tmp_path / "samples.jsonl", [sample] * 18)
    write_jsonl(tmp_path / "failures.jsonl", [{"failure": "inference failed: HTTP 400 x"}] * 2)
    row, scores = _evaluate_row(tmp_path, None)
    assert row.status == WARN and len(scores) == 18
    assert row.reason.startswith("18 rollouts scored, 18 used tools, 2 failed (first: inference")


def test_check_gives_the_cause_when_every_eval_rollout_failed(tmp_path):
    write_jsonl(tmp_path / "failures.jsonl", [{"failure": "inference failed: HTTP 404 y"}] * 3)
    row, scores = _evaluate_row(tmp_path, "error: no rollout could be measured")
    assert row.status == FAIL and scores == []
    assert row.reason == "every rollout failed (3): inference failed: HTTP 404 y"


def test_check_does_not_blame_missing_gold_solutions_for_a_real_model():
    row = _reward_range_check([0.0, 0.0], scripted=False, real=True)
    assert row.status == WARN
    assert row.reason == (
        "0.0 for all: every reward of the real model is the same "
        "(the gold and no-op rows check the reward itself)"
    )
    assert _reward_range_check([0.0, 1.0], scripted=False, real=True).status == PASS


def test_check_refuses_extra_body_that_is_not_a_json_object(tmp_path):
    command = [sys.executable, "-m", "hermes_envgen", "check", str(tmp_path)]
    completed = subprocess.run(
        [*command, "--base-url", "http://127.0.0.1:9/v1", "--extra-body", "[1, 2]"],
        env=offline_environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip() == "error: --extra-body must be a JSON object, not '[1, 2]'"
