"""Serve mode end to end: run-api, a minimal trainer, and the example env against the stub."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from conftest import EXAMPLES
from helpers.serve import GROUP_SIZE, serve_command

from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.stub_server import Faults
from hermes_envgen.testing.trainer import MinimalTrainer, RunApi, _post

BATCH_SIZE = 8  # two groups per batch


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


def start_serving(command: list, log_path) -> subprocess.Popen:
    log = open(log_path, "w")  # noqa: SIM115  (closed by the process's end)
    return subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=offline_environment(),
    )  # fmt: skip


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def wait_for_line(log_path, text: str, process: subprocess.Popen, seconds: float) -> str:
    """The log once it holds ``text`` (AssertionError with its tail if it never does)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        log = log_path.read_text()
        if text in log:
            return log
        assert process.poll() is None, log[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"{text!r} never came: {log_path.read_text()[-3000:]}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_api_going_away_ends_serve_in_one_line(stub_server, offline_tokenizer, tmp_path):
    # The trainer pulls its batches and exits, taking run-api with it; serve goes on past them.
    stub = stub_server(EXAMPLES / "stub_script.yaml")
    log_path = tmp_path / "env.log"
    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=BATCH_SIZE, num_steps=1)
        trainer.register()
        env = start_serving(
            serve_command(stub.base_url, offline_tokenizer, api.url, tmp_path / "sandboxes"),
            log_path,
        )
        try:
            trainer.next_batch(timeout=120)
        except BaseException:
            stop(env)
            raise
    try:
        code = env.wait(timeout=180)
    finally:
        stop(env)
    log = log_path.read_text()
    assert code == 1, log[-3000:]
    assert "Traceback" not in log and "Unclosed client session" not in log, log[-3000:]
    last = log.strip().splitlines()[-1]
    assert last.startswith(f"error: run-api at {api.url} stopped answering ("), last
    assert "Did the trainer exit?" in last


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_waiting_for_a_trainer_is_said_once(stub_server, offline_tokenizer, tmp_path):
    stub = stub_server(EXAMPLES / "stub_script.yaml")
    log_path = tmp_path / "env.log"
    with RunApi(log=tmp_path / "run-api.log") as api:  # and no trainer
        env = start_serving(
            serve_command(stub.base_url, offline_tokenizer, api.url, tmp_path / "sandboxes"),
            log_path,
        )
        try:
            wait_for_line(log_path, "waiting for a trainer", env, 120)
            time.sleep(10)  # atroposlib asks (and would say so) every second meanwhile
            log = log_path.read_text()
        finally:
            stop(env)
    assert log.count("waiting for a trainer") == 1, log[-3000:]
    assert "Waiting to register the env" not in log
    assert f"run-api at {api.url} answers 'wait for trainer to start'" in log


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_groups_skipped_for_equal_scores_are_said_once_with_why(
    stub_server, offline_tokenizer, tmp_path
):
    # A policy that never solves anything: every group scores 0 throughout, none is sent.
    looks_around = {"default": {"turns": [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": "ls"}}]},
        {"content": "I looked around."},
    ]}}  # fmt: skip
    stub = stub_server(looks_around)
    log_path = tmp_path / "env.log"
    with RunApi(log=tmp_path / "run-api.log") as api:
        MinimalTrainer(api.url, batch_size=BATCH_SIZE, num_steps=1).register()
        env = start_serving(
            serve_command(stub.base_url, offline_tokenizer, api.url, tmp_path / "sandboxes"),
            log_path,
        )
        try:
            wait_for_line(log_path, "so far skipped, not sent to the trainer", env, 180)
            deadline = time.monotonic() + 60  # until several more groups were skipped
            while len(stub.requests) < 40 and time.monotonic() < deadline:
                time.sleep(0.5)
            log = log_path.read_text()
        finally:
            stop(env)
    assert len(stub.requests) >= 40, "the env stopped rolling out"
    assert log.count("so far skipped") == 1, log[-3000:]  # said again only after 60 s
    assert "Scores are the same in a group" not in log
    (line,) = [line for line in log.splitlines() if "so far skipped" in line]
    assert "GRPO has nothing to learn" in line and "scored 0 throughout" in line


class SlowScores:
    """A relay on loopback to run-api that holds run-api's answers to posted groups ``delay``
    seconds (each post reaches run-api at once); every other request passes untouched.

    It runs on an event loop of its own thread, beside the serving env's process.
    """

    def __init__(self, port: int, delay: float) -> None:
        import asyncio
        import threading

        self.port, self.delay = port, delay
        self.posted = 0  # posts of scored groups forwarded to run-api
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> SlowScores:
        import asyncio

        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", 0), self._loop
        )
        self._server = started.result(10)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        import asyncio

        async def close() -> None:
            self._server.close()
            relays = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in relays:
                task.cancel()
            await asyncio.gather(*relays, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _relay(self, client, to_client) -> None:
        import asyncio

        from helpers.serve import pipe_stream

        upstream, to_upstream = await asyncio.open_connection("127.0.0.1", self.port)
        first = await client.read(1 << 16)
        to_upstream.write(first)
        scores = first.startswith(b"POST /scored_data")
        if scores:
            self.posted += 1

        async def answer() -> None:
            if scores:
                await asyncio.sleep(self.delay)
            await pipe_stream(upstream, to_client)

        await asyncio.gather(pipe_stream(client, to_upstream), answer())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_leaves_nothing_the_trainer_received_out_of_the_record(
    stub_server, offline_tokenizer, tmp_path
):
    # A slow run-api: groups it had taken (and the trainer then received) were missing from
    # the worker's record after SIGTERM, their posts cancelled while their answers were due.
    import json

    from hermes_envgen.runtime.env.delivery import DELIVERY_KEY, GROUP_ID_KEY, SHUTDOWN_FLUSH

    stub = stub_server(EXAMPLES / "stub_script.yaml")
    record, log_path = tmp_path / "groups.jsonl", tmp_path / "env.log"
    with RunApi(log=tmp_path / "run-api.log") as api, SlowScores(api.port, delay=3.0) as slow:
        trainer = MinimalTrainer(api.url, batch_size=BATCH_SIZE, num_steps=100)
        trainer.register()
        env = start_serving(
            serve_command(stub.base_url, offline_tokenizer, slow.url, tmp_path / "sandboxes",
                          "--env.data_path_to_save_groups", str(record)),
            log_path,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 150
            while slow.posted < 2:  # groups posted, their answers held
                assert env.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "no group was posted"
                time.sleep(0.1)
            env.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            code = env.wait(timeout=60)
            stopped_in = time.monotonic() - signalled
        finally:
            stop(env)
        received = [g["group_overrides"][GROUP_ID_KEY] for g in trainer.drain(GROUP_SIZE)]
    log = log_path.read_text()
    assert code == 128 + signal.SIGTERM, log[-3000:]
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    recorded = {line["group_overrides"][GROUP_ID_KEY]: line[DELIVERY_KEY] for line in lines}
    assert received, "run-api received no group"
    missing = sorted(set(received) - set(recorded))
    assert not missing, f"received by the trainer, missing from the record: {missing}"
    assert stopped_in < SHUTDOWN_FLUSH + 20, stopped_in  # a bounded flush
    assert "Traceback" not in log, log[-3000:]
