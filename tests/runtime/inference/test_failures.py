"""Each way a model request fails is its own InferenceError kind, raised where the reply is read;
one hint table says what to change for each; a bug of ours surfaces as the bug, not retried."""

from __future__ import annotations

import asyncio
import re
import socket

import pytest

from hermes_envgen.runtime.errors import (
    AuthRefused,
    ContextOverflow,
    InferenceError,
    MalformedReply,
    ModelNotFound,
    NoReplyInTime,
    NotFound,
    RequestRefused,
    ServerError,
    UnknownHost,
    Unreachable,
)
from hermes_envgen.runtime.inference import HINTS, Endpoint, ModelClient, fix_hint, status_error
from hermes_envgen.runtime.inference.wire import read_completions, read_generate, read_sglang
from hermes_envgen.runtime.urls import is_local, same_server
from hermes_envgen.testing.stub_server import Faults

SCRIPT = {"conversations": [{"turns": [{"content": "ok"}]}]}
MESSAGES = [{"role": "user", "content": "hi"}]

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def chat(client: ModelClient, messages: list[dict] = MESSAGES):
    return asyncio.run(client.chat_completion(messages=messages))


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (400, RequestRefused, False),
        (401, AuthRefused, False),
        (403, AuthRefused, False),
        (404, NotFound, False),
        (422, RequestRefused, False),
        (429, ServerError, True),
        (500, ServerError, True),
        (503, ServerError, True),
    ],
)
def test_each_http_status_is_raised_as_its_kind(stub_server, status, kind, retryable):
    stub = stub_server(SCRIPT, faults=Faults(status=status))
    client = ModelClient([Endpoint(stub.base_url, "m")], api="chat", retries=2, backoff=0.01)
    with pytest.raises(InferenceError) as caught:
        chat(client)
    assert type(caught.value) is kind and caught.value.retryable is retryable
    assert caught.value.status == status
    assert str(caught.value) == f"HTTP {status} from {stub.base_url}/chat/completions: " + (
        f"injected HTTP {status}"
    )
    assert len(stub.requests) == (3 if retryable else 1)


def test_the_servers_words_make_the_finer_kinds():
    vllm = '{"message": "This model\'s maximum context length is 4096 tokens.", "code": 400}'
    assert type(status_error("u", 400, vllm)) is ContextOverflow
    assert type(status_error("u", 404, "Not Found")) is NotFound
    missing = status_error("u", 404, '{"error": {"message": "The model `x` does not exist."}}')
    assert type(missing) is ModelNotFound and not missing.retryable


def test_a_refused_connection_is_unreachable_and_retried():
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = ModelClient([Endpoint(url, "m")], api="chat", retries=1, backoff=0.01)
    with pytest.raises(Unreachable, match=r"cannot connect \(connection refused\)") as caught:
        chat(client)
    assert type(caught.value) is Unreachable and caught.value.retryable


def test_a_host_that_does_not_resolve_is_its_own_kind():
    client = ModelClient([Endpoint("http://no-such-host.invalid:9/v1", "m")], api="chat", retries=0)
    with pytest.raises(UnknownHost, match="the host name does not resolve"):
        chat(client)


def test_a_server_that_does_not_answer_in_time(stub_server):
    stub = stub_server(SCRIPT, faults=Faults(hang_rate=1.0))
    client = ModelClient([Endpoint(stub.base_url, "m", timeout=0.5)], api="chat", retries=0)
    with pytest.raises(NoReplyInTime, match="no reply before the timeout"):
        chat(client)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_reply_that_is_not_json_is_malformed_and_retried(stub_server, api):
    stub = stub_server(SCRIPT, faults=Faults(malformed_rate=1.0), generate=False)
    client = ModelClient([Endpoint(stub.base_url, "m")], api=api, retries=2, backoff=0.01)
    with pytest.raises(MalformedReply) as caught:
        if api == "chat":
            chat(client)
        else:
            asyncio.run(client.tokens_and_logprobs_completion(input_ids=[1, 2], max_tokens=4))
    assert caught.value.retryable and len(stub.requests) == 3
    assert client.fatal_streak == 0  # may pass: it does not count towards "hopeless"


# -- a bug of ours is no malformed reply ---------------------------------------------------------


def test_a_request_the_client_cannot_even_encode_raises_the_bug_unretried(stub_server):
    stub = stub_server(SCRIPT)
    client = ModelClient([Endpoint(stub.base_url, "m")], api="chat", retries=3, backoff=0.01)
    with pytest.raises(TypeError, match="not JSON serializable"):
        chat(client, [{"role": "user", "content": object()}])
    assert stub.requests == [] and client.fatal_streak == 0


def test_a_token_request_with_a_bug_raises_it_unretried(stub_server):
    stub = stub_server(SCRIPT, generate=False)
    client = ModelClient([Endpoint(stub.base_url, "m")], api="completions", backoff=0.01)
    with pytest.raises(TypeError):
        asyncio.run(client.tokens_and_logprobs_completion(input_ids=[object()], max_tokens=4))
    assert stub.requests == []


# -- replies in the wrong form: each reader names what is missing ------------------------------


@pytest.mark.parametrize(
    ("read", "reply", "missing"),
    [
        (read_completions, [], "no choices"),
        (read_completions, {"choices": []}, "choices is empty"),
        (read_completions, {"choices": [{"logprobs": None}]}, "neither token_ids nor"),
        (read_completions, {"choices": [{"token_ids": ["x"]}]}, "a token id is not a number"),
        (read_completions, {"choices": [{"token_ids": 3}]}, "token_ids is not a list"),
        (read_generate, {"logprobs": [[[{}]]], "finish_reasons": ["stop"]}, "names no token"),
        (read_generate, {"logprobs": [[{"1": -0.5}]]}, "a position is not a list"),
        (read_generate, {"logprobs": [[[{"1": -0.5}]]]}, "no finish_reasons"),
        (read_sglang, {"meta_info": {}}, "no output_token_logprobs"),
        (read_sglang, {"meta_info": {"output_token_logprobs": [[-0.1]]}}, "not [logprob, id"),
        (read_sglang, [], "the reply is empty"),
    ],
)
def test_a_reply_without_what_its_api_promises_is_malformed(read, reply, missing):
    with pytest.raises(MalformedReply, match="is inference_api right") as caught:
        read(reply, "http://h/v1/x")
    assert missing in str(caught.value) and caught.value.retryable


def test_well_formed_replies_are_read():
    assert read_generate({"logprobs": [[[{"5": -0.5}], [{"6": -1}]]], "finish_reasons": ["stop"]})
    assert read_sglang(
        [
            {
                "meta_info": {
                    "output_token_logprobs": [[-0.5, 5, "a"]],
                    "finish_reason": {"type": "length"},
                }
            }
        ]
    ) == ([[5]], [[-0.5]], ["length"])


# -- one hint table --------------------------------------------------------------------------------


def every_kind(root: type = InferenceError) -> set[type]:
    return {root, *(k for sub in root.__subclasses__() for k in every_kind(sub))}


@pytest.mark.parametrize("judge", [False, True])
def test_every_kind_has_a_hint_of_its_own_for_the_model_and_the_judge(judge):
    assert every_kind() <= set(HINTS), "a kind of failure without a line of the hint table"
    endpoint = Endpoint("http://h:1/v1", "m")
    lines = {fix_hint(kind("x", url="u"), endpoint, judge=judge) for kind in every_kind()}
    assert len(lines) >= len(every_kind()) - 1  # the 5xx and the generic kind share one
    judge_words = {("judge" in line) for line in lines}
    assert judge_words == {judge}


def test_a_kind_without_its_own_line_takes_its_parents():
    class Odd(Unreachable):
        pass

    endpoint = Endpoint("http://h:1/v1", "m")
    assert fix_hint(Odd("x", url="u"), endpoint) == fix_hint(Unreachable("x", url="u"), endpoint)


def test_a_404_names_the_rollout_server_or_the_served_models_first():
    error = NotFound("HTTP 404", url="u", status=404)
    endpoint = Endpoint("http://localhost:8000/v1", "m")
    assert "rollout server" in fix_hint(error, endpoint, rollout_server_url="http://127.0.0.1:8000")
    assert (
        fix_hint(error, endpoint, served=["a", "b"])
        == "it serves 'a', 'b', not 'm' (--openai.model_name)"
    )
    judged = fix_hint(error, endpoint, judge=True, rollout_server_url="http://127.0.0.1:8000")
    assert "rollout server" not in judged


# -- one answer to "is this URL on this machine?" --------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:9001/v1",
        "http://LOCALHOST/v1",
        "http://api.localhost:8000",
        "http://127.0.0.1:8000/v1",
        "http://127.3.4.5/v1",
        "http://0.0.0.0:9001",
        "http://[::1]/v1",
        "http://[::1]:8000/v1",
        "http://[::]:8000",
        "http://[::ffff:127.0.0.1]:8000",
        "localhost:9001",
    ],
)
def test_every_name_of_this_machine_is_local(url):
    assert is_local(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://openrouter.ai/api/v1",
        "http://10.0.0.5:8000/v1",
        "http://[2001:db8::1]:8000/v1",
        "http://localhost.example.com/v1",
        "http://128.0.0.1/v1",
        "http://my-gpu-box:9001/v1",
        "",
    ],
)
def test_other_hosts_are_not_local(url):
    assert not is_local(url)


def test_same_server_compares_host_and_port_with_every_local_name_alike():
    assert same_server("http://[::1]:8000/v1", "http://localhost:8000")
    assert same_server("http://127.0.0.1/v1", "http://localhost:80")
    assert not same_server("http://[::1]:8001", "http://localhost:8000")
    assert not same_server("https://h/v1", "http://h/v1")  # 443 and 80


LOCAL = [
    "http://[::1]/v1",
    "http://[::1]:9001/v1",
    "http://127.0.0.1:9001/v1",
    "http://localhost/v1",
]
REMOTE = ["https://openrouter.ai/api/v1", "http://[2001:db8::1]:8000/v1", "http://gpu-box:9001/v1"]


@pytest.mark.parametrize("url", LOCAL + REMOTE)
def test_the_env_and_the_judge_agree_on_which_servers_need_no_key(url, monkeypatch):
    from types import SimpleNamespace

    from hermes_envgen.runtime.env.cli import check_api_key
    from hermes_envgen.runtime.errors import EnvConfigError
    from hermes_envgen.runtime.inference import judge_client

    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    config = SimpleNamespace(base_url=url, api_key="")
    policy = ModelClient([Endpoint("http://127.0.0.1:1/v1", "m")], api="chat")
    if url in LOCAL:
        check_api_key(config)
        assert config.api_key == "EMPTY"  # a placeholder: the OpenAI client wants one
        assert judge_client(policy, url, "judge", "NO_SUCH_KEY").endpoints[0].api_key == ""
    else:
        with pytest.raises(EnvConfigError, match=re.escape(f"no API key for {url}:")):
            check_api_key(config)
        with pytest.raises(EnvConfigError, match="NO_SUCH_KEY is empty"):
            judge_client(policy, url, "judge", "NO_SUCH_KEY")


def test_the_start_up_check_waits_for_a_starting_server_not_for_one_in_the_wrong_form(stub_server):
    import time

    from hermes_envgen.runtime.errors import ModelServerError
    from hermes_envgen.runtime.inference import check_model_server

    stub = stub_server(SCRIPT, faults=Faults(malformed_rate=1.0))
    client = ModelClient([Endpoint(stub.base_url, "m")], api="chat")
    started = time.monotonic()
    with pytest.raises(ModelServerError, match="malformed reply") as caught:
        asyncio.run(check_model_server(client, startup_wait=20))
    assert time.monotonic() - started < 10 and len(stub.requests) == 1
    assert "not in the form --env.inference_api expects" in str(caught.value)
