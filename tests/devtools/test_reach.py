"""``hermes-envgen reach``: one row per service, asked from this host, in seconds; and
``check --reach-only``, its earlier spelling, which still works and says to use ``reach``."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.trainer import free_port

SCRIPT = {"model": "stub-model", "conversations": [{"turns": [{"content": "OK"}]}]}


def reach(*args: str, command: tuple[str, ...] = ("reach",)) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hermes_envgen", *command, *args],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
        env=offline_environment(), timeout=120,
    )  # fmt: skip


@pytest.mark.slow
def test_reach_names_what_answers_and_what_does_not(stub_server):
    stub = stub_server(SCRIPT)
    refused = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = reach("--base-url", f"{stub.base_url},{refused}/v1", "--rollout-server-url", refused)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    rows = done.stdout.splitlines()
    assert rows[0].split() == ["PASS", "model", stub.base_url, "serves", "stub-model"], rows
    assert rows[1].startswith(f"FAIL  model {refused}/v1"), rows
    assert rows[1].endswith(f"connection refused (from {socket.gethostname()})"), rows
    assert rows[2].startswith(f"FAIL  run-api {refused}"), rows
    assert "connection refused" in rows[2]
    assert len(rows) == 3 and took < 60


def test_reach_without_anything_to_reach_is_a_usage_error():
    done = reach()
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: reach needs --base-url, --rollout-server-url or --docker-host"
    )


def test_check_reach_only_still_reaches_and_says_to_use_reach(stub_server):
    stub = stub_server(SCRIPT)
    done = reach("--base-url", stub.base_url, command=("check", "--reach-only"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["PASS", "model", stub.base_url, "serves", "stub-model"]
    assert done.stderr.strip() == (
        "warning: `check --reach-only` is deprecated: use `hermes-envgen reach`"
    )
    empty = reach(command=("check", "--reach-only"))
    assert empty.returncode == 2
    assert empty.stderr.strip().endswith(
        "error: --reach-only needs --base-url, --rollout-server-url or --docker-host"
    )


def test_a_server_with_only_generate_passes_on_its_health_endpoint(stub_server):
    stub = stub_server(SCRIPT, openai_api=False)  # like Atropos's vLLM API server
    done = reach("--base-url", stub.base_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"PASS  model {stub.base_url}  answers /health (no /v1/models)"
