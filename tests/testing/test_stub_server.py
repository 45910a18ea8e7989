"""The stub server over real HTTP: endpoints, scripts, and injected faults."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest

from hermes_envgen.errors import StubServerError
from hermes_envgen.testing.script import Script, ScriptError
from hermes_envgen.testing.stub_server import Faults, StubServer

SCRIPT = {
    "model": "scripted",
    "conversations": [
        {
            "match": "weather",
            "turns": [
                {
                    "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
                    "reasoning": "I should look it up.",
                },
                {"content": "It is sunny."},
            ],
        },
        {"turns": [{"content": "first in order"}]},
        {"turns": [{"content": "second in order"}]},
    ],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def post(url: str, body: dict, timeout: float = 10) -> tuple[int, dict | str]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read().decode(), exc.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def chat(server: StubServer, messages: list[dict], **extra) -> tuple[int, dict | str]:
    return post(f"{server.base_url}/chat/completions", {"messages": messages, **extra})


def test_health_and_models(stub_server):
    server = stub_server(SCRIPT)
    with urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/health") as response:
        assert json.loads(response.read()) == {"status": "ok", "requests": 0}
    with urllib.request.urlopen(server.base_url + "/models") as response:
        assert json.loads(response.read())["data"][0]["id"] == "scripted"


def test_tool_calls_follow_the_script_turn_by_turn(stub_server):
    server = stub_server(SCRIPT)
    messages = [{"role": "user", "content": "what is the weather?"}]
    status, body = chat(server, messages, tools=TOOLS)
    assert status == 200
    message = body["choices"][0]["message"]
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert message["reasoning_content"] == "I should look it up."
    (call,) = message["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]
    status, body = chat(server, messages, tools=TOOLS)
    assert body["choices"][0]["message"]["content"] == "It is sunny."
    assert body["choices"][0]["finish_reason"] == "stop"


def test_a_streamed_chat_completion_is_server_sent_events_the_openai_client_reads(stub_server):
    """stream: true answers text/event-stream chunks (role, content and tool-call deltas, the
    finish reason, the usage asked for, [DONE]) that OpenAI's own client puts back together."""
    import openai

    server = stub_server(SCRIPT)
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(
            {
                "messages": [{"role": "user", "content": "what is the weather?"}],
                "tools": TOOLS,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = [line for line in response.read().decode().split("\n\n") if line]
    assert all(event.startswith("data: ") for event in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    argument_pieces = [
        d["tool_calls"][0]["function"]["arguments"]
        for c in chunks[:-1]
        for d in [c["choices"][0]["delta"]]
        if "tool_calls" in d
    ]
    assert len(argument_pieces) > 2  # the arguments arrive in pieces, after the name

    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "what is the weather?"}]
    with client.chat.completions.stream(model="scripted", messages=messages, tools=TOOLS) as s:
        first = s.get_final_completion().choices[0]
    assert first.finish_reason == "tool_calls"
    (call,) = first.message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Paris"}')
    messages += [
        first.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    with client.chat.completions.stream(model="scripted", messages=messages, tools=TOOLS) as s:
        second = s.get_final_completion().choices[0]
    assert (second.message.content, second.finish_reason) == ("It is sunny.", "stop")


def test_without_tools_the_calls_come_back_as_text(stub_server):
    server = stub_server(SCRIPT)
    _, body = chat(server, [{"role": "user", "content": "weather"}])
    message = body["choices"][0]["message"]
    assert "tool_calls" not in message
    assert '<tool_call>\n{"name": "get_weather"' in message["content"]


def test_unmatched_conversations_are_handed_out_in_order(stub_server):
    server = stub_server(SCRIPT)
    answers = [
        chat(server, [{"role": "user", "content": "hi"}])[1]["choices"][0]["message"]["content"]
        for _ in range(3)
    ]
    assert answers == ["first in order", "second in order", "first in order"]


def test_a_conversation_in_words_continues_by_what_it_said(stub_server):
    # No call id marks these conversations: between their turns a simulated user speaks.
    server = stub_server(
        {
            "conversations": [
                {"match": "game", "turns": [{"content": "10"}, {"content": "5"}]},
                {"match": "game", "turns": [{"content": "90"}, {"content": "99"}]},
            ]
        }
    )
    openings = [chat(server, [{"role": "user", "content": "game"}])[1] for _ in range(2)]
    said = [body["choices"][0]["message"]["content"] for body in openings]
    assert said == ["10", "90"]
    for first, second in (("90", "99"), ("10", "5"), ("90", "99")):
        messages = [
            {"role": "user", "content": "game"},
            {"role": "assistant", "content": first},
            {"role": "user", "content": "Lower."},
        ]
        assert chat(server, messages)[1]["choices"][0]["message"]["content"] == second


def test_n_greater_than_one_returns_n_choices(stub_server):
    server = stub_server(SCRIPT)
    _, body = chat(server, [{"role": "user", "content": "weather"}], tools=TOOLS, n=3)
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    ids = {c["message"]["tool_calls"][0]["id"] for c in body["choices"]}
    assert len(ids) == 3


def test_completions_endpoint_renders_raw_text(stub_server):
    server = stub_server(SCRIPT)
    prompt = "<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n"
    status, body = post(f"{server.base_url}/completions", {"prompt": prompt})
    assert status == 200
    assert body["choices"][0]["text"].startswith("<tool_call>")


def test_requests_are_recorded(stub_server):
    server = stub_server(SCRIPT)
    chat(server, [{"role": "user", "content": "weather"}], temperature=0.0)
    assert server.requests[-1]["temperature"] == 0.0


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ({}, "no conversations"),
        ({"conversations": [{"turns": []}]}, "conversations[0].turns: expected a non-empty list"),
        ({"conversations": [{"turns": [{}]}]}, "needs 'content' or 'tool_calls'"),
        ({"conversations": [{"turns": [{"tool_calls": [{}]}]}]}, "tool_calls[0]"),
        ({"conversations": [{"match": "(", "turns": [{"content": "x"}]}]}, "invalid regular"),
        ({"conversation": []}, "unknown key(s) conversation"),
    ],
)
def test_malformed_scripts_name_the_problem(script, problem):
    with pytest.raises(ScriptError, match=re.escape(problem)):
        Script.load(script)


def test_a_script_file_that_is_not_yaml_is_refused(tmp_path):
    path = tmp_path / "script.yaml"
    path.write_text("conversations: [unclosed")
    with pytest.raises(ScriptError, match="not valid YAML"):
        Script.load(path)


def test_error_rate_one_answers_500(stub_server):
    server = stub_server(SCRIPT, faults=Faults(error_rate=1.0))
    status, body = chat(server, [{"role": "user", "content": "hi"}])
    assert status == 500 and body["error"]["message"] == "injected server error"


def test_malformed_bodies(stub_server):
    server = stub_server(SCRIPT, faults=Faults(malformed_rate=1.0))
    status, body = chat(server, [{"role": "user", "content": "hi"}])
    assert status == 200 and isinstance(body, str)


def test_dropped_connections(stub_server):
    server = stub_server(SCRIPT, faults=Faults(drop_rate=1.0))
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        chat(server, [{"role": "user", "content": "hi"}])


def test_hanging_requests_hang_until_the_client_gives_up(stub_server):
    server = stub_server(SCRIPT, faults=Faults(hang_rate=1.0))
    start = time.monotonic()
    with pytest.raises((TimeoutError, urllib.error.URLError, OSError)):
        post(
            f"{server.base_url}/chat/completions",
            {"messages": [{"role": "user", "content": "x"}]},
            timeout=0.5,
        )
    assert time.monotonic() - start < 20  # the client gave up; the server would hang forever


def test_latency_is_added(stub_server):
    server = stub_server(SCRIPT, faults=Faults(latency=0.3))
    start = time.monotonic()
    chat(server, [{"role": "user", "content": "hi"}])
    assert time.monotonic() - start >= 0.3


def test_fault_rates_are_validated():
    with pytest.raises(StubServerError, match="error_rate must be between 0 and 1"):
        Faults(error_rate=2)


def test_port_in_use_is_a_clear_error(stub_server):
    server = stub_server(SCRIPT)
    with pytest.raises(StubServerError, match=f"cannot listen on 127.0.0.1:{server.port}"):
        StubServer(SCRIPT, port=server.port).start()
