"""Serve mode end to end: run-api, a minimal trainer, and the example env against the stub."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from conftest import EXAMPLES

from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.stub_server import Faults
from hermes_envgen.testing.trainer import MinimalTrainer, RunApi, _post

GROUP_SIZE = 4
BATCH_SIZE = 8  # two groups per batch


def serve_command(model_url: str, tokenizer, rollout_server: str, sandboxes, *flags: str) -> list:
    """The example env's ``serve`` against the stub model and a run-api, plus ``flags``."""
    return [
        sys.executable, str(EXAMPLES / "terminal_env.py"), "serve",
        "--openai.base_url", model_url,
        "--env.tokenizer_name", str(tokenizer),
        "--env.rollout_server_url", rollout_server,
        "--env.group_size", str(GROUP_SIZE),
        "--env.sandbox_root", str(sandboxes),
        *flags,
    ]  # fmt: skip


@pytest.mark.slow
def test_the_trainer_receives_batches_of_valid_groups(stub_server, offline_tokenizer, tmp_path):
    stub = stub_server(EXAMPLES / "stub_script.yaml")
    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=BATCH_SIZE, num_steps=2)
        trainer.register()
        log = open(tmp_path / "env.log", "w")  # noqa: SIM115
        env = subprocess.Popen(
            serve_command(
                stub.base_url,
                offline_tokenizer,
                api.url,
                tmp_path / "sandboxes",
                "--env.total_steps",
                "2",
                "--env.steps_per_eval",
                "1000",
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=offline_environment(),
        )
        try:
            batches = [trainer.next_batch(timeout=120) for _ in range(2)]
            # the env sees the run is over and exits by itself
            assert env.wait(timeout=120) == 0, (tmp_path / "env.log").read_text()[-3000:]
        finally:
            if env.poll() is None:
                env.kill()
                env.wait()
            log.close()

    for batch in batches:
        assert sum(len(group["tokens"]) for group in batch) == BATCH_SIZE
        for group in batch:
            assert len(group["tokens"]) == len(group["masks"]) == len(group["scores"]) == GROUP_SIZE
            for tokens, masks in zip(group["tokens"], group["masks"]):
                assert len(tokens) == len(masks) and any(m != -100 for m in masks)
            assert all(0.0 <= s <= 1.0 for s in group["scores"])
            assert len(set(group["scores"])) > 1  # serve drops groups whose scores are all equal


@pytest.mark.slow
def test_serve_stops_when_every_request_fails_for_good(stub_server, offline_tokenizer, tmp_path):
    # The start-up request is answered; every rollout's request then gets HTTP 403.
    stub = stub_server(EXAMPLES / "stub_script.yaml", faults=Faults(status=403, status_after=1))
    with RunApi(log=tmp_path / "run-api.log") as api:
        MinimalTrainer(api.url, batch_size=BATCH_SIZE, num_steps=2).register()
        completed = subprocess.run(
            serve_command(stub.base_url, offline_tokenizer, api.url, tmp_path / "sandboxes"),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            env=offline_environment(),
            timeout=180,
        )
    assert completed.returncode == 2, completed.stderr[-3000:]
    last = completed.stderr.strip().splitlines()[-1]
    assert last.startswith("error: every request fails: HTTP 403 from "), last
    assert len(stub.requests) < 50


@pytest.mark.slow
def test_the_trainer_command_pulls_batches_from_a_serving_env(
    stub_server, offline_tokenizer, tmp_path
):
    from hermes_envgen.testing.trainer import free_port

    stub = stub_server(EXAMPLES / "stub_script.yaml")
    port = free_port()
    command = [sys.executable, "-m", "hermes_envgen", "trainer", "--port", str(port),
               "--batch-size", str(BATCH_SIZE), "--steps", "1", "--timeout", "120"]  # fmt: skip
    trainer = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=offline_environment(), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    env = None
    try:
        announced = trainer.stdout.readline()
        api_url = f"http://127.0.0.1:{port}"
        assert announced.startswith(f"run-api on {api_url}"), announced
        env = subprocess.Popen(
            serve_command(
                stub.base_url, offline_tokenizer, api_url, tmp_path / "sandboxes",
                "--env.total_steps", "1", "--env.steps_per_eval", "1000",
            ),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            env=offline_environment(),
        )  # fmt: skip
        output, _ = trainer.communicate(timeout=240)
    finally:
        for process in (trainer, env):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    assert trainer.returncode == 0, output
    assert f"batch 1/1: 2 groups, {BATCH_SIZE} rollouts, mean score" in output
    # the example env samples in chat mode: the trainer says what a GRPO trainer would miss
    assert "warning: no inference_logprobs: chat mode" in output


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_that_stops_disconnects_so_the_others_get_its_share(
    stub_server, offline_tokenizer, tmp_path
):
    # run-api shares each batch among the envs it counts as connected and learns of a
    # worker's end only if the worker says so: a stopped worker kept its share for good.
    stub = stub_server(EXAMPLES / "stub_script.yaml")
    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=BATCH_SIZE, num_steps=100)
        trainer.register()
        other = {"max_token_length": 4096, "desired_name": "other", "weight": 1.0,
                 "group_size": GROUP_SIZE, "min_batch_allocation": None}  # fmt: skip
        other_id = _post(api.url + "/register-env", other)["env_id"]
        assert trainer.env_share(other_id) == 1.0
        log = open(tmp_path / "env.log", "w")  # noqa: SIM115
        env = subprocess.Popen(
            serve_command(stub.base_url, offline_tokenizer, api.url, tmp_path / "sandboxes"),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=offline_environment(),
        )
        try:
            deadline = time.monotonic() + 120
            while trainer.env_share(other_id) == 1.0:  # until the worker has registered
                assert env.poll() is None, (tmp_path / "env.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the worker never registered"
                time.sleep(0.2)
            shared = trainer.env_share(other_id)
            env.send_signal(signal.SIGTERM)
            assert env.wait(timeout=60) == 128 + signal.SIGTERM
        finally:
            if env.poll() is None:
                env.kill()
                env.wait()
            log.close()
        assert shared < 1.0 and trainer.env_share(other_id) == 1.0, shared
