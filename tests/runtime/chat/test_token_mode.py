"""Token mode: exact token ids and logprobs from vLLM/SGLang /generate, against the stub (HTTP)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from conftest import EXAMPLES
from helpers.token_server import END, GREETING_SCRIPT, token_server
from terminal_env import TASKS, TerminalTaskEnv
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat.template_render import with_arguments
from hermes_envgen.runtime.chat.token_mode import ExactTokensBackend, parse_failure, split_reasoning
from hermes_envgen.runtime.chat.trajectory import trained_runs
from hermes_envgen.runtime.loop.agent_loop import UNPARSED_TOOL, HermesAgentLoop
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.parsers import get_parser
from hermes_envgen.runtime.rollout import MASKED, MASKED_LOGPROB
from hermes_envgen.runtime.tools import REGISTRY
from hermes_envgen.testing import OfflineRun
from hermes_envgen.testing.envs import build_env
from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.script import Script
from hermes_envgen.testing.stub_server import FAKE_LOGPROB, StubServer, generated_text

TOOLS = REGISTRY.resolve(["terminal", "file"])
SCHEMAS = [t.schema for t in TOOLS]
NAMES = {t.name for t in TOOLS}
SERVER_TYPES = ["vllm", "sglang"]

BROKEN_CALL = "<tool_call>{bad json</tool_call>"


def post(url: str, body: dict) -> tuple[int, dict]:
    """POST JSON, return (status, decoded JSON body), errors included."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def expected_turns(script: dict, conversation: int) -> list[str]:
    """What the scripted model generates in each turn of a conversation, end token included."""
    parsed = Script.load(script).conversations[conversation]
    return [generated_text(turn) + END for turn in parsed.turns]


@pytest.fixture(scope="module")
def tokenizer(offline_tokenizer):
    return AutoTokenizer.from_pretrained(offline_tokenizer)


def run_loop(server, tokenizer, sandboxes, prompt, parser="hermes", **kwargs):
    """One Phase 2 rollout; returns (result, backend)."""

    async def main():
        backend = ExactTokensBackend(server, tokenizer, parser, default_max_tokens=512)
        ctx = ToolContext("task-p2", sandboxes)
        loop = HermesAgentLoop(
            server, SCHEMAS, NAMES, task_id="task-p2", tool_context=ctx, backend=backend, **kwargs
        )
        try:
            return await loop.run([{"role": "user", "content": prompt}]), backend
        finally:
            await ctx.cleanup()

    return asyncio.run(main())


# -- the stub's /generate ------------------------------------------------------------------


def generate_url(server: StubServer) -> str:
    return server.base_url.removesuffix("/v1") + "/generate"


def test_generate_vllm_form_encodes_the_script_and_continues_conversations(
    stub_server, offline_tokenizer, tokenizer
):
    server = stub_server(GREETING_SCRIPT, tokenizer=offline_tokenizer)
    prompt = tokenizer.encode("<|im_start|>user\ngreeting<|im_end|>\n<|im_start|>assistant\n")
    status, body = post(
        generate_url(server), {"prompt": {"prompt_token_ids": prompt}, "logprobs": 0, "n": 2}
    )
    assert status == 200 and body["finish_reasons"] == ["stop", "stop"]
    ids = [int(next(iter(item[0]))) for item in body["logprobs"][0]]
    assert tokenizer.decode(ids) == expected_turns(GREETING_SCRIPT, 0)[0]
    assert all(list(item[0].values()) == [FAKE_LOGPROB] for item in body["logprobs"][1])

    # A prompt extending what the stub generated continues that conversation, at its next turn.
    more = tokenizer.encode("\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n")
    status, body = post(
        generate_url(server),
        {"prompt": {"prompt_token_ids": prompt + ids + more}, "logprobs": 0, "max_tokens": 4},
    )
    ids = [int(next(iter(item[0]))) for item in body["logprobs"][0]]
    assert tokenizer.decode(ids) == expected_turns(GREETING_SCRIPT, 0)[1][:4]
    assert body["finish_reasons"] == ["length"]


def test_generate_sglang_form(stub_server, offline_tokenizer, tokenizer):
    server = stub_server(GREETING_SCRIPT, tokenizer=offline_tokenizer)
    prompt = tokenizer.encode("<|im_start|>user\ngreeting<|im_end|>\n<|im_start|>assistant\n")
    request = {"input_ids": prompt, "sampling_params": {"n": 1}, "return_logprob": True}
    status, body = post(generate_url(server), request)
    assert status == 200 and body["meta_info"]["finish_reason"]["type"] == "stop"
    ids = [item[1] for item in body["meta_info"]["output_token_logprobs"]]
    assert tokenizer.decode(ids) == expected_turns(GREETING_SCRIPT, 0)[0]
    request["sampling_params"] = {"n": 2}
    status, body = post(generate_url(server), request)
    assert isinstance(body, list) and len(body) == 2


def test_generate_defaults_to_the_offline_tokenizer_and_refuses_foreign_ids(stub_server, tokenizer):
    server = stub_server(GREETING_SCRIPT)  # no tokenizer given
    prompt = tokenizer.encode("<|im_start|>user\ngreeting<|im_end|>\n<|im_start|>assistant\n")
    status, body = post(generate_url(server), {"prompt": {"prompt_token_ids": prompt}})
    ids = [int(next(iter(item[0]))) for item in body["logprobs"][0]]
    assert status == 200 and tokenizer.decode(ids) == expected_turns(GREETING_SCRIPT, 0)[0]
    # Ids of another tokenizer (a real model's) are refused with the way out.
    status, body = post(generate_url(server), {"prompt": {"prompt_token_ids": [128000, 9906]}})
    assert status == 400 and "--tokenizer" in body["error"]["message"]


def test_the_stub_server_command_takes_a_tokenizer(offline_tokenizer, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(GREETING_SCRIPT))
    command = [sys.executable, "-m", "hermes_envgen", "stub-server", "--script", str(script)]
    command += ["--port", "0", "--tokenizer", str(offline_tokenizer)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, env=offline_environment()
    )
    try:
        line = process.stdout.readline()
        assert "listening on" in line, line
        base = line.split("listening on", 1)[1].strip().removesuffix("/v1")
        status, body = post(f"{base}/generate", {"prompt": {"prompt_token_ids": [65, 66]}})
        assert status == 200 and body["logprobs"][0]
    finally:
        process.terminate()
        process.wait(10)


# -- the backend, unit level ---------------------------------------------------------------


@pytest.mark.parametrize("kind", SERVER_TYPES)
def test_backend_keeps_every_turn_exactly_as_generated(
    kind, stub_server, offline_tokenizer, tokenizer, sandboxes
):
    stub = stub_server(GREETING_SCRIPT, tokenizer=offline_tokenizer)
    server = token_server(kind, stub.base_url, offline_tokenizer)
    result, backend = run_loop(server, tokenizer, sandboxes, "write greeting.txt")
    trace = backend.trace

    assert result.finished_naturally and result.turns_used == 2 and not result.tool_errors
    assert result.tool_calls == [
        {"name": "terminal", "arguments": '{"command": "echo hello > greeting.txt"}'}
    ]
    assert result.messages[-1]["content"] == "Wrote it."
    assert result.reasoning_per_turn == [None, "The file is there."]

    # Tokens, masks and logprobs align; trained positions carry the server's logprobs.
    assert len(trace.tokens) == len(trace.masks) == len(trace.logprobs)
    for token, mask, logprob in zip(trace.tokens, trace.masks, trace.logprobs):
        assert (mask, logprob) == ((token, FAKE_LOGPROB) if mask != MASKED else (MASKED, 1.0))
    # The trained tokens are exactly the generations, each ending in its end-of-turn token.
    assert [tokenizer.decode(run) for run in trained_runs(trace.tokens, trace.masks)] == (
        expected_turns(GREETING_SCRIPT, 0)
    )
    # Each request sent the trace so far: every turn extends the sequence the model saw.
    prompts = [
        r["prompt"]["prompt_token_ids"] if kind == "vllm" else r["input_ids"] for r in stub.requests
    ]
    assert len(prompts) == 2
    assert trace.tokens[: len(prompts[1])] == prompts[1]
    assert prompts[1][: len(prompts[0])] == prompts[0]
    # With a template that renders turns as the model wrote them, the trace is the template's
    # rendering of the whole conversation (up to the newline after the final end token).
    rendered = tokenizer.apply_chat_template(
        with_arguments(result.messages, raw=False), tools=SCHEMAS, tokenize=False
    )
    assert tokenizer.decode(trace.tokens) + "\n" == rendered


def test_a_template_that_rewrites_old_turns_still_gives_one_exact_sequence(
    stub_server, offline_tokenizer, tmp_path, sandboxes
):
    # Like Qwen3: reasoning is rendered for the last message only, so a conversation's
    # rendering is not a prefix of its continuation's.
    rewriting = tmp_path / "rewriting-tokenizer"
    shutil.copytree(offline_tokenizer, rewriting)
    config = json.loads((rewriting / "tokenizer_config.json").read_text())
    condition = "message.get('reasoning_content')"
    assert condition in config["chat_template"]
    config["chat_template"] = config["chat_template"].replace(
        condition, condition + " and loop.last"
    )
    (rewriting / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = AutoTokenizer.from_pretrained(rewriting)
    script = {
        "conversations": [
            {
                "turns": [
                    {
                        "reasoning": "Look first.",
                        "tool_calls": [{"name": "terminal", "arguments": {"command": "ls"}}],
                    },
                    {"content": BROKEN_CALL, "reasoning": "Now write."},
                    {"content": "Done."},
                ]
            }
        ]
    }
    stub = stub_server(script, tokenizer=rewriting)
    result, backend = run_loop(
        token_server("vllm", stub.base_url, rewriting), tokenizer, sandboxes, "go"
    )
    assert result.finished_naturally and result.turns_used == 3
    assert [tokenizer.decode(t) for t in backend.trace.generated()] == expected_turns(script, 0)
    text = tokenizer.decode(backend.trace.tokens)
    # The tool result and the parse error follow their turns, each in its own masked piece.
    assert f"{END}\n<|im_start|>user\n<tool_response>\n" in text
    assert f"{END}\n<|im_start|>user\nError: " in text
    assert text.count("<|im_start|>assistant\n") == 3


def test_a_request_that_fails_leaves_the_trace_as_it_was(tokenizer):
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        async def tokens_and_logprobs_completion(self, **kwargs):
            self.calls += 1
            if self.calls == 1:
                raise ConnectionError("down")
            ids = tokenizer.encode("Hi." + END, add_special_tokens=False)
            return kwargs["input_ids"], [ids], [[-0.1] * len(ids)], ["stop"]

    backend = ExactTokensBackend(Flaky(), tokenizer, default_max_tokens=8)
    messages = [{"role": "user", "content": "hello"}]
    with pytest.raises(ConnectionError):
        asyncio.run(backend.complete(list(messages)))
    assert backend.trace.tokens == []
    turn = asyncio.run(backend.complete(list(messages), temperature=0.5))
    assert turn.content == "Hi." and turn.tool_calls == [] and turn.finish_reason == "stop"
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(backend.trace.tokens) == prompt + "Hi." + END


def test_reasoning_is_split_from_the_generated_text():
    assert split_reasoning("<think>plan</think>\nanswer") == ("plan", "answer")
    assert split_reasoning("plan</think>answer") == ("plan", "answer")
    assert split_reasoning("just an answer") == (None, "just an answer")


# -- parse failures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parser", "text", "fails"),
    [
        ("hermes", BROKEN_CALL, True),
        ("hermes", "<tool_call>\n", True),
        ("hermes", "No tool is needed; the answer is 4.", False),
        ("hermes", 'I would write {"name": "x"} but will not.', False),
        ("llama3_json", '{"name": "terminal", "parameters": {"command": ', True),
        ("llama3_json", "Use a dict like {a: 1} here.", False),
        ("mistral", "[TOOL_CALLS] [{oops", True),
        ("auto", BROKEN_CALL, True),
        ("auto", "plain prose", False),
    ],
)
def test_parse_failures_are_told_from_prose(parser, text, fails):
    instance = get_parser(parser)
    assert instance.parse(text)[1] is None
    assert (parse_failure(instance, text) is not None) is fails


@pytest.mark.parametrize("kind", SERVER_TYPES)
def test_a_call_that_does_not_parse_is_a_tool_error_and_the_loop_goes_on(
    kind, stub_server, offline_tokenizer, tokenizer, sandboxes
):
    script = {"conversations": [{"turns": [{"content": BROKEN_CALL}, {"content": "Sorry."}]}]}
    stub = stub_server(script, tokenizer=offline_tokenizer)
    server = token_server(kind, stub.base_url, offline_tokenizer)
    result, backend = run_loop(server, tokenizer, sandboxes, "go")

    assert result.finished_naturally and result.turns_used == 2 and result.error is None
    [error] = result.tool_errors
    assert error.tool_name == UNPARSED_TOOL and error.arguments == BROKEN_CALL
    assert "could not be parsed" in error.error and "<tool_call>" in error.error
    assert result.messages[1] == {"role": "assistant", "content": BROKEN_CALL}
    assert result.messages[2] == {"role": "user", "content": error.tool_result}
    assert result.tool_calls == [] and result.final_response == "Sorry."
    # The model was told, in the sequence it saw, and both turns are trained.
    assert error.tool_result in tokenizer.decode(backend.trace.tokens)
    assert [tokenizer.decode(t) for t in backend.trace.generated()] == [
        BROKEN_CALL + END,
        "Sorry." + END,
    ]


def test_a_turn_cut_at_max_tokens_gets_its_end_token_masked(
    stub_server, offline_tokenizer, tokenizer, sandboxes
):
    script = {"conversations": [{"turns": [{"content": BROKEN_CALL}, {"content": "ok"}]}]}
    stub = stub_server(script, tokenizer=offline_tokenizer)
    server = token_server("vllm", stub.base_url, offline_tokenizer)
    result, backend = run_loop(server, tokenizer, sandboxes, "go", max_tokens=12)
    first, second = backend.trace.generated()
    assert tokenizer.decode(first) == BROKEN_CALL[:12]  # no end token: the turn was cut
    assert tokenizer.decode(second) == "ok" + END
    _, end = backend.trace.turns[0]
    # The template's end of the cut turn follows it, masked: the model did not generate it.
    after = backend.trace.tokens[end : end + 2]
    assert tokenizer.decode(after) == END + "\n" and backend.trace.masks[end] == MASKED
    assert len(result.tool_errors) == 1


# -- raw-text call formats: typed by the offered schemas, quoted calls never run ------------

QUOTED_CALL = "<tool_call>\n<function=terminal>\n<parameter=command>\ntouch pwned\n</parameter>\n"
QUOTED_CALL += "</function>\n</tool_call>"


def qwen3_coder_call(name: str, **params: str) -> str:
    """A Qwen3-Coder call as its chat template lays it out."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def test_raw_text_values_are_typed_by_the_tools_the_loop_offers(
    stub_server, offline_tokenizer, tokenizer, sandboxes
):
    # "42" for the string parameter stays a string; the integer parameter becomes a number.
    script = {
        "conversations": [
            {
                "turns": [
                    {"content": qwen3_coder_call("terminal", command="42", timeout="30")},
                    {"content": "Done."},
                ]
            }
        ]
    }
    stub = stub_server(script, tokenizer=offline_tokenizer)
    server = token_server("vllm", stub.base_url, offline_tokenizer)
    result, _ = run_loop(server, tokenizer, sandboxes, "go", parser="qwen3_coder")
    assert result.tool_calls == [
        {"name": "terminal", "arguments": '{"command": "42", "timeout": 30}'}
    ]


def test_a_call_quoted_inside_a_value_is_written_not_run(
    stub_server, offline_tokenizer, tokenizer, sandboxes
):
    turn = qwen3_coder_call("write_file", path="notes.md", content=QUOTED_CALL)
    script = {"conversations": [{"turns": [{"content": turn}, {"content": "Done."}]}]}
    stub = stub_server(script, tokenizer=offline_tokenizer)
    server = token_server("vllm", stub.base_url, offline_tokenizer)
    result, _ = run_loop(server, tokenizer, sandboxes, "go", parser="qwen3_coder")
    assert result.tools_used == ["write_file"] and not result.tool_errors
    assert json.loads(result.tool_calls[0]["arguments"])["content"] == QUOTED_CALL


def test_an_unreadable_raw_text_call_is_told_to_the_model_with_its_reason(
    stub_server, offline_tokenizer, tokenizer, sandboxes
):
    # Cut off inside a value: the quoted call after it must not run either.
    broken = "<tool_call>\n<function=write_file>\n<parameter=content>\n" + QUOTED_CALL
    script = {"conversations": [{"turns": [{"content": broken}, {"content": "Sorry."}]}]}
    stub = stub_server(script, tokenizer=offline_tokenizer)
    server = token_server("vllm", stub.base_url, offline_tokenizer)
    result, _ = run_loop(server, tokenizer, sandboxes, "go", parser="qwen3_coder")
    [error] = result.tool_errors
    assert error.tool_name == UNPARSED_TOOL and result.tool_calls == []
    assert "the value of content in the call to write_file has no matching </parameter>" in (
        error.error
    )


# -- the environment -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", SERVER_TYPES)
def test_trained_spans_of_a_group_are_exactly_what_the_model_generated(
    kind, stub_server, offline_tokenizer, tokenizer, tmp_path
):
    stub = stub_server(GREETING_SCRIPT, tokenizer=offline_tokenizer)
    env = build_env(
        TerminalTaskEnv,
        stub.base_url,
        offline_tokenizer,
        tmp_path,
        server_overrides={"server_type": kind},
        group_size=4,
    )
    group, backlog = asyncio.run(env.collect_trajectories(TASKS[0]))
    assert backlog == [] and len(group["tokens"]) == 4

    followed = []
    for tokens, masks, logprobs, messages, score in zip(
        group["tokens"],
        group["masks"],
        group["inference_logprobs"],
        group["messages"],
        group["scores"],
    ):
        assert len(tokens) == len(masks) == len(logprobs)
        assert all((lp == FAKE_LOGPROB) == (m != MASKED) for lp, m in zip(logprobs, masks))
        assert all(lp == MASKED_LOGPROB for lp, m in zip(logprobs, masks) if m == MASKED)
        spans = [tokenizer.decode(run) for run in trained_runs(tokens, masks)]
        first = next(m for m in messages if m["role"] == "assistant")
        conversation = 0 if first["tool_calls"][0]["function"]["name"] == "terminal" else 1
        assert spans == expected_turns(GREETING_SCRIPT, conversation)
        assert score == (1.0 if conversation == 0 else 0.0)
        followed.append(conversation)
    assert sorted(followed) == [0, 0, 1, 1]


@pytest.mark.slow
@pytest.mark.parametrize("kind", SERVER_TYPES)
def test_process_writes_groups_with_real_tokens_and_logprobs(
    kind, stub_server, offline_tokenizer, tokenizer, tmp_path
):
    stub = stub_server(EXAMPLES / "stub_script.yaml", tokenizer=offline_tokenizer)
    out = tmp_path / "data" / "groups.jsonl"
    run = OfflineRun(
        EXAMPLES / "terminal_env.py",
        stub.base_url,
        offline_tokenizer,
        tmp_path,
        health_check=None,
        server_flags={"server_type": kind},
    )
    groups = run.process(groups=3, output=out)
    assert {len(group["scores"]) for group in groups} == {4}
    assert len(groups) == 3
    scores = []
    for group in groups:
        assert len(group["inference_logprobs"]) == len(group["tokens"])
        for tokens, masks, logprobs in zip(
            group["tokens"], group["masks"], group["inference_logprobs"]
        ):
            assert len(logprobs) == len(tokens)
            assert all((lp == FAKE_LOGPROB) == (m != MASKED) for lp, m in zip(logprobs, masks))
            for run in trained_runs(tokens, masks):
                assert tokenizer.decode(run).endswith(END)
        scores += group["scores"]
    assert set(scores) == {0.0, 1.0}
    # Every request was a token-level one: nothing went through the chat endpoint (vllm's
    # auto-detection of /generate posts an empty body first).
    assert stub.requests and all(
        ("input_ids" if kind == "sglang" else "prompt") in r for r in stub.requests if r
    )
