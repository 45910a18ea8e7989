"""A generated ``openai_compatible`` env against a real third-party server: llama.cpp's.

llama-cpp-python's server (built from source by ``scripts/llama-server.sh``, cached after the
first build) serves SmolLM2-135M-Instruct on CPU; the tokenizer comes from the same GGUF file.
``process`` and ``evaluate`` run for real against it, bounded (two rollouts of two turns, short
turns); the groups must be valid and their trained spans decode exactly to what the server
returned, tool calls included (name and arguments; the test fails when no call was made).
Opt-in (``HERMES_ENVGEN_LLAMA=1``): ``scripts/test.sh`` no longer starts this server.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO, render_template
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat.trajectory import trained_runs, untrained_tool_calls
from hermes_envgen.testing.envs import read_eval_results, validate_groups
from hermes_envgen.testing.runner import offline_environment, run_env_mode

SCRIPT = REPO / "scripts" / "llama-server.sh"
END = "<|im_end|>"  # SmolLM2's end of turn
# The first build takes minutes on 2 cores (longer on a busy machine); later runs reuse it.
READY_TIMEOUT = float(os.environ.get("HERMES_ENVGEN_LLAMA_TIMEOUT", 3600))
MODE_TIMEOUT = 1800  # one process or evaluate run: a few short turns of a 135M model on CPU

# Off the test command's path: building llama-cpp-python takes 18-60 minutes on a fresh
# machine, and its chatml-function-calling format prompts calls unlike the Hermes format the
# training data uses. The real-server tests are tests/runtime/inference/test_vllm_server.py (a
# prebuilt wheel).
OPT_IN = os.environ.get("HERMES_ENVGEN_LLAMA") == "1" or "HERMES_ENVGEN_LLAMA_STATE" in os.environ

pytestmark = [
    pytest.mark.llama_server,
    pytest.mark.timeout(READY_TIMEOUT + MODE_TIMEOUT),
    pytest.mark.skipif(not OPT_IN, reason="llama.cpp's server is opt-in: HERMES_ENVGEN_LLAMA=1"),
]


def wait_for(state: Path, deadline: float) -> str:
    """The server's URL once ``state/url`` appears; skip/fail on ``state/failed``."""
    while time.monotonic() < deadline:
        if (state / "url").exists():
            return (state / "url").read_text().strip()
        if (state / "failed").exists():
            reason = (state / "failed").read_text().strip()
            if "cmake and a C++ compiler are needed" in reason:
                pytest.skip(f"llama.cpp's server cannot be built here: {reason}")
            pytest.fail(f"llama.cpp's server did not start: {reason}")
        time.sleep(2)
    pytest.fail(f"llama.cpp's server was not ready after {READY_TIMEOUT:g} s (see {state}/log)")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """(base URL, GGUF path) of a running llama.cpp server: CI's, or one started here."""
    shared = os.environ.get("HERMES_ENVGEN_LLAMA_STATE")
    if shared:
        state = Path(shared)
        url = wait_for(state, time.monotonic() + READY_TIMEOUT)
        yield url, (state / "model").read_text().strip().removeprefix("model=")
        return
    state = tmp_path_factory.mktemp("llama-state")
    try:
        subprocess.run(
            ["bash", str(SCRIPT), "start", str(state)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=READY_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], timeout=30)
        pytest.fail(f"llama.cpp's server was not ready after {READY_TIMEOUT:g} s")
    try:
        url = wait_for(state, time.monotonic() + 5)
        yield url, (state / "model").read_text().strip().removeprefix("model=")
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], timeout=30)


@pytest.fixture(scope="module")
def project(llama_server, tmp_path_factory):
    """A generated openai_compatible project pointed at the server, and the GGUF's tokenizer."""
    from hermes_envgen.devtools.gguf_tokenizer import tokenizer_from_gguf

    url, model = llama_server
    root = tmp_path_factory.mktemp("llama-project")
    tokenizer = tokenizer_from_gguf(model, root / "tokenizer")
    target = render_template(
        root / "llama-env",
        {
            "project_name": "llama-env",
            "provider": "openai_compatible",
            "model_name": "smollm2-135m",
            "base_url": url,
            "api_key_env": "LLAMA_API_KEY",
            "reward_pattern": "binary",
            "ci": False,
        },
    )
    return target, tokenizer


def run_mode(root: Path, tokenizer: Path, mode: str, flags: dict) -> None:
    """Run a mode of the generated env, bounded: two turns of at most 48 tokens."""
    run_env_mode(
        "llama_env",
        mode,
        flags={
            "env.tokenizer_name": tokenizer,
            # SmolLM2's own template is plain ChatML, which drops tool calls: the env refuses
            # it at start-up; the training data is rendered in the Hermes format instead.
            "env.chat_template": "hermes",
            "env.max_agent_turns": 2,
            "env.max_tokens_per_turn": 48,
            "env.sandbox_root": root / "sandboxes",
            "env.startup_wait": 120,
            "openai.timeout": 600,
            **flags,
        },
        cwd=root,
        timeout=MODE_TIMEOUT,
        extra_env={"PYTHONPATH": f"{root / 'src'}:{offline_environment().get('PYTHONPATH', '')}"},
    )


def hermes_turn(reply: dict) -> str:
    """An assistant turn as the Hermes template renders it, arguments as the server gave them."""
    parts = [reply["content"]] if reply.get("content") else []
    for call in reply.get("tool_calls") or []:
        function = call["function"]
        call_json = f'{{"name": "{function["name"]}", "arguments": {function["arguments"]}}}'
        parts.append(f"<tool_call>\n{call_json}\n</tool_call>")
    return "\n".join(parts) + END


def test_process_against_llama_cpp_writes_groups_whose_trained_spans_are_the_replies(project):
    from hermes_envgen.devtools.check import PASS, trained_tool_calls_check

    root, tokenizer_dir = project
    out = root / "groups.jsonl"
    run_mode(
        root,
        tokenizer_dir,
        "process",
        {"env.total_steps": 1, "env.group_size": 2, "env.data_path_to_save_groups": out},
    )
    (group,) = validate_groups(out, group_size=2)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    calls = 0
    for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
        replies = [m for m in messages if m["role"] == "assistant"]
        spans = [tokenizer.decode(run) for run in trained_runs(tokens, masks)]
        assert len(spans) == len(replies) >= 1, (spans, replies)
        # Each turn trains exactly what the server returned: the text, and each call with its
        # name and its arguments as the server's text (the Hermes template prints them as given).
        assert spans == [hermes_turn(reply) for reply in replies]
        assert untrained_tool_calls(messages, spans) == []
        calls += sum(len(reply.get("tool_calls") or []) for reply in replies)
    # With tool_choice auto, llama.cpp's server picks between a call and a message greedily
    # (temperature 0): SmolLM2 calls a tool on the generated env's task. Without a call this
    # test would not cover the tool-call turns it is about.
    assert calls >= 1, json.dumps(group["messages"])[:1000]
    row = trained_tool_calls_check([group], str(tokenizer_dir))
    assert (row.status, row.reason) == (
        PASS,
        f"all {calls} tool calls trained (name and arguments)",
    )


def test_evaluate_against_llama_cpp_measures_every_rollout(project):
    root, tokenizer_dir = project
    eval_dir = root / "eval"
    run_mode(
        root,
        tokenizer_dir,
        "evaluate",
        {"env.eval_size": 1, "env.data_dir_to_save_evals": eval_dir},
    )
    metrics, samples = read_eval_results(eval_dir)
    assert samples and metrics["eval/rollouts"] == len(samples)
    assert metrics["eval/failures"] == 0
    assert (
        not (eval_dir / "failures.jsonl").exists()
        or not (eval_dir / "failures.jsonl").read_text().strip()
    )
    assert all(s["final_response"] or s["tool_calls"] for s in samples), json.dumps(samples)[:500]
