"""Several inference servers for one env: requests spread over them, a failing one out and back.

Real stub servers over HTTP on 127.0.0.1; the same client runs in serve mode with the
``openai:`` list of a ``--config`` YAML (tests/runtime/env/test_multihost.py runs that across
hosts).
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from hermes_envgen.runtime.inference import Endpoint, ModelClient

SCRIPT = {"conversations": [{"turns": [{"content": "OK"}]}]}
MESSAGES = [{"role": "user", "content": "hi"}]


def ask(client: ModelClient, count: int) -> list:
    async def many() -> list:
        return await asyncio.gather(
            *(client.chat_completion(messages=MESSAGES) for _ in range(count))
        )

    return asyncio.run(many())


def test_requests_spread_over_the_servers_and_a_failing_one_is_out_then_back_in(
    stub_server, caplog
):
    first, second = stub_server(SCRIPT), stub_server(SCRIPT)
    endpoints = [Endpoint(first.base_url, "stub-model"), Endpoint(second.base_url, "stub-model")]
    client = ModelClient(endpoints, api="chat", backoff=0.01, out_for=1.0)
    ask(client, 10)
    assert (len(first.requests), len(second.requests)) == (5, 5)

    port = second.port
    second.stop()  # the second server goes away: its share is retried on the first
    caplog.set_level(logging.WARNING, logger="hermes_envgen.runtime.inference")
    replies = ask(client, 10)
    assert len(replies) == 10 and all(r.choices for r in replies)
    assert len(first.requests) == 15
    assert f"{second.base_url} is out for 1 s" in caplog.text
    before = len(first.requests)
    ask(client, 6)  # while it is out, nothing is even tried on it
    assert len(first.requests) == before + 6

    back = stub_server(SCRIPT, port=port)  # the server is back on its address
    time.sleep(1.1)
    ask(client, 10)
    assert len(back.requests) >= 4, "the server that came back gets no requests"
    assert f"{second.base_url} is back in" in caplog.text


def test_with_every_server_failing_the_request_fails_with_the_last_cause(stub_server):
    from hermes_envgen.runtime.errors import InferenceError
    from hermes_envgen.testing.stub_server import Faults

    stubs = [stub_server(SCRIPT, faults=Faults(status=503)) for _ in range(2)]
    endpoints = [Endpoint(s.base_url, "stub-model") for s in stubs]
    client = ModelClient(endpoints, api="chat", backoff=0.01, retries=3)
    try:
        ask(client, 1)
    except InferenceError as exc:
        assert "HTTP 503" in str(exc)
    else:
        raise AssertionError("a request answered 503 everywhere succeeded")
    # four tries in all, spread over both servers rather than all on one
    assert [len(s.requests) for s in stubs] == [2, 2]


@pytest.mark.slow
def test_serve_with_run_api_unreachable_says_so_in_one_line_and_exits_2(
    stub_server, offline_tokenizer, tmp_path
):
    import socket
    import subprocess
    import sys

    from conftest import EXAMPLES

    from hermes_envgen.testing.runner import offline_environment
    from hermes_envgen.testing.trainer import free_port

    stub = stub_server(EXAMPLES / "stub_script.yaml")
    api_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    command = [sys.executable, str(EXAMPLES / "terminal_env.py"), "serve",
               "--openai.base_url", stub.base_url, "--env.tokenizer_name", str(offline_tokenizer),
               "--env.rollout_server_url", api_url, "--env.startup_wait", "2",
               "--env.sandbox_root", str(tmp_path / "sandboxes")]  # fmt: skip
    completed = subprocess.run(
        command, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        env=offline_environment(), timeout=120,
    )  # fmt: skip
    assert completed.returncode == 2, completed.stderr[-3000:]
    last = completed.stderr.strip().splitlines()[-1]
    assert last == (
        f"error: run-api (--env.rollout_server_url) at {api_url} cannot be reached from "
        f"{socket.gethostname()}: connection refused; is it running, listening on an address "
        "this host reaches (not 127.0.0.1 for workers on other machines)?"
    ), last
    assert "Traceback" not in completed.stderr
    assert stub.requests == []  # nothing asked of the model before run-api is known to be there
