"""Serve mode's delivery to run-api: what a worker records as sent is what run-api accepted.

Against the real run-api: a worker cancelled mid-post (as atroposlib cancels them whenever
run-api's queue is full, and at the end of a run) still delivers the group it recorded; a group
run-api refuses is not recorded and is logged by id; a run-api that is not up yet is waited for;
a post whose answer is lost (a slow run-api) is recorded as such and never sent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path

import pytest
from helpers.serve import pipe_stream
from terminal_env import TerminalTaskEnv

from hermes_envgen.runtime.env.delivery import (
    ANSWER_LOST,
    DELIVERED,
    DELIVERY_KEY,
    GROUP_ID_KEY,
    GroupDelivery,
)
from hermes_envgen.testing import build_env
from hermes_envgen.testing.trainer import MinimalTrainer, RunApi, free_port

GROUP_SIZE = 2
NO_MODEL = "http://127.0.0.1:9/v1"  # delivery never asks the model


def scored_group(group_id: str, **fields) -> dict:
    """A small valid group of GROUP_SIZE sequences, with its id."""
    group = {
        "tokens": [[1, 2, 3], [4, 5, 6]],
        "masks": [[-100, 2, 3], [-100, 5, 6]],
        "scores": [0.0, 1.0],
        "group_overrides": {GROUP_ID_KEY: group_id},
    }
    return group | fields


def recorded_ids(path: Path) -> list[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)["group_overrides"][GROUP_ID_KEY] for line in lines]


def recorded_outcomes(path: Path) -> list[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)[DELIVERY_KEY] for line in lines]


class Relay:
    """A TCP relay on loopback to run-api on ``port``; ``url`` is its address, once entered."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def __aenter__(self):
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()

    async def _relay(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class SlowLink(Relay):
    """Holds each new connection ``hold`` seconds before reading it.

    A request whose client hung up meanwhile is dropped, as a post abandoned before the server
    read it never lands.
    """

    def __init__(self, port: int, hold: float) -> None:
        super().__init__(port)
        self.hold = hold
        self.connected = asyncio.Event()  # set on every new connection

    async def _relay(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        self.connected.set()
        await asyncio.sleep(self.hold)
        first = await client.read(1 << 16)
        if client.at_eof():  # the client gave up before the server read its request
            to_client.close()
            return
        upstream, to_upstream = await asyncio.open_connection("127.0.0.1", self.port)
        to_upstream.write(first)
        await asyncio.gather(pipe_stream(client, to_upstream), pipe_stream(upstream, to_client))


class LostAnswer(Relay):
    """Hangs up on the first post once run-api has answered it.

    run-api took the group; the worker never hears so, as when an answer is lost on the way.
    """

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.connections = 0

    async def _relay(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream, to_upstream = await asyncio.open_connection("127.0.0.1", self.port)
        if self.connections > 1:
            await asyncio.gather(pipe_stream(client, to_upstream), pipe_stream(upstream, to_client))
            return
        forwarding = asyncio.ensure_future(pipe_stream(client, to_upstream))
        await upstream.read(1)  # run-api has handled the post and is answering
        forwarding.cancel()
        to_upstream.close()
        to_client.transport.abort()


class SlowAnswer(Relay):
    """Forwards each post to run-api at once and holds run-api's answer ``delay`` seconds.

    An overloaded run-api: it takes every group, and answers after the worker stopped waiting.
    """

    def __init__(self, port: int, delay: float) -> None:
        super().__init__(port)
        self.delay = delay
        self.connections = 0

    async def _relay(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream, to_upstream = await asyncio.open_connection("127.0.0.1", self.port)

        async def late_answer() -> None:
            await asyncio.sleep(self.delay)
            await pipe_stream(upstream, to_client)

        await asyncio.gather(pipe_stream(client, to_upstream), late_answer())


def close_records(env) -> None:
    """Flush what atroposlib's own groups writer still buffers, as the process's exit does."""
    if getattr(env, "jsonl_writer", None) is not None:
        env.jsonl_writer.close()


def serving_env(offline_tokenizer, tmp_path: Path, api_url: str):
    """The example env as serve mode builds it, talking to ``api_url``, recording its groups."""
    return build_env(
        TerminalTaskEnv,
        NO_MODEL,
        offline_tokenizer,
        tmp_path,
        rollout_server_url=api_url,
        group_size=GROUP_SIZE,
        data_path_to_save_groups=str(tmp_path / "groups.jsonl"),
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_cancelled_mid_post_delivers_the_group_it_recorded(offline_tokenizer, tmp_path):
    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=GROUP_SIZE)
        trainer.register()

        async def serve() -> list[dict]:
            async with SlowLink(api.port, hold=1.0) as link:
                env = serving_env(offline_tokenizer, tmp_path, link.url)
                await env.register_env()
                await env.get_server_info()
                link.connected.clear()
                worker = asyncio.ensure_future(env.handle_send_to_api(scored_group("g-1")))
                await asyncio.wait_for(link.connected.wait(), 30)
                # atroposlib cancels every worker this way when run-api's queue is full
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker
                try:
                    return await asyncio.to_thread(trainer.next_batch, 15)
                except TimeoutError:
                    return []
                finally:
                    close_records(env)

        batch = asyncio.run(asyncio.wait_for(serve(), 60))
    recorded = recorded_ids(tmp_path / "groups.jsonl")
    received = [group["group_overrides"][GROUP_ID_KEY] for group in batch]
    assert recorded == ["g-1"], recorded
    assert received == recorded, "the worker recorded a group run-api never received"


@pytest.mark.timeout(120)
def test_a_group_run_api_refuses_is_not_recorded_and_is_logged_by_id(
    offline_tokenizer, tmp_path, caplog
):
    with RunApi(log=tmp_path / "run-api.log") as api:
        MinimalTrainer(api.url, batch_size=GROUP_SIZE).register()
        env = serving_env(offline_tokenizer, tmp_path, api.url)
        # run-api wants a role and content in every message: HTTP 422
        refused = scored_group("g-refused", messages=[[{"role": "user"}], [{"role": "user"}]])

        async def serve() -> None:
            await env.register_env()
            await env.get_server_info()
            await env.handle_send_to_api(refused)
            await env.handle_send_to_api(scored_group("g-ok"))
            close_records(env)

        with caplog.at_level(logging.ERROR):
            asyncio.run(asyncio.wait_for(serve(), 60))
        status = MinimalTrainer(api.url, GROUP_SIZE).status()
    assert recorded_ids(tmp_path / "groups.jsonl") == ["g-ok"]
    assert status["queue_size"] == 1
    assert "run-api refused group(s) g-refused (HTTP 422" in caplog.text


@pytest.mark.timeout(120)
def test_a_group_is_retried_until_run_api_is_up(tmp_path):
    port = free_port()
    record = tmp_path / "groups.jsonl"

    async def deliver() -> tuple[bool, dict]:
        delivery = GroupDelivery(f"http://127.0.0.1:{port}", record)
        sending = asyncio.ensure_future(delivery.send(scored_group("g-late")))
        await asyncio.sleep(1.0)  # refused connections meanwhile
        assert not sending.done() and recorded_ids(record) == []
        with RunApi(port=port, log=tmp_path / "run-api.log") as api:
            MinimalTrainer(api.url, 1).register()  # run-api counts its queue from then on
            accepted = await sending
            await delivery.drain()
            return accepted, await asyncio.to_thread(MinimalTrainer(api.url, 1).status)

    started = time.monotonic()
    accepted, status = asyncio.run(asyncio.wait_for(deliver(), 90))
    assert accepted and status["queue_size"] == 1, (accepted, status, time.monotonic() - started)
    assert recorded_ids(record) == ["g-late"]


@pytest.mark.timeout(120)
def test_a_post_whose_answer_was_lost_is_recorded_so_and_not_sent_again(tmp_path):
    record = tmp_path / "groups.jsonl"
    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=GROUP_SIZE)
        trainer.register()

        async def deliver() -> tuple[bool, int, dict]:
            async with LostAnswer(api.port) as link:
                delivery = GroupDelivery(link.url, record)
                accepted = await delivery.send(scored_group("g-once"))
                await delivery.drain()
                return accepted, link.connections, dict(delivery.counts)

        accepted, connections, counts = asyncio.run(asyncio.wait_for(deliver(), 60))
        received = trainer.drain(GROUP_SIZE)
    # run-api took it; a second post would have been queued as a new group
    assert not accepted and connections == 1 and counts == {ANSWER_LOST: 1}
    assert [g["group_overrides"][GROUP_ID_KEY] for g in received] == ["g-once"]
    assert trainer.repeats() == 0
    assert recorded_ids(record) == ["g-once"] and recorded_outcomes(record) == [ANSWER_LOST]


@pytest.mark.timeout(180)
def test_a_slow_run_api_gets_each_group_once_and_the_record_says_what_was_sent(tmp_path, caplog):
    # run-api answers after the request timeout: each post was sent again and again (the
    # trainer got 18 groups five times each) while the record held none and the log said
    # "dropped".
    record = tmp_path / "groups.jsonl"
    ids = [f"g-{n}" for n in range(6)]
    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=GROUP_SIZE)
        trainer.register()

        async def deliver() -> tuple[list[bool], int, dict]:
            async with SlowAnswer(api.port, delay=2.5) as link:
                delivery = GroupDelivery(link.url, record, retry_for=30, request_timeout=1.0)
                sent = await asyncio.gather(*(delivery.send(scored_group(i)) for i in ids))
                await delivery.drain()
                return sent, link.connections, dict(delivery.counts)

        with caplog.at_level(logging.WARNING):
            sent, connections, counts = asyncio.run(asyncio.wait_for(deliver(), 90))
        received = trainer.drain(GROUP_SIZE)
    assert connections == len(ids) and counts == {ANSWER_LOST: len(ids)}, (connections, counts)
    assert not any(sent)
    received_ids = [g["group_overrides"][GROUP_ID_KEY] for g in received]
    # what the trainer sees after dropping repeats by group_id is what the record holds
    assert (
        sorted(g["group_overrides"][GROUP_ID_KEY] for g in trainer.groups())
        == sorted(recorded_ids(record))
        == sorted(ids)
    )
    assert sorted(received_ids) == sorted(ids) and trainer.repeats() == 0
    assert set(recorded_outcomes(record)) == {ANSWER_LOST}
    assert "g-3 sent to run-api, answer lost" in caplog.text
    assert "dropped" not in caplog.text
    assert f"{len(ids)} answer lost" in caplog.text  # the tally at the end


@pytest.mark.timeout(120)
def test_accepted_groups_are_recorded_as_accepted(tmp_path):
    record = tmp_path / "groups.jsonl"
    with RunApi(log=tmp_path / "run-api.log") as api:
        MinimalTrainer(api.url, batch_size=GROUP_SIZE).register()

        async def deliver() -> dict:
            delivery = GroupDelivery(api.url, record)
            assert await delivery.send([scored_group("g-a"), scored_group("g-b")])
            await delivery.drain()
            return dict(delivery.counts)

        counts = asyncio.run(asyncio.wait_for(deliver(), 60))
    assert counts == {DELIVERED: 2}
    assert recorded_ids(record) == ["g-a", "g-b"]
    assert recorded_outcomes(record) == [DELIVERED, DELIVERED]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_bounded_drain_records_what_run_api_may_have_and_waits_for_answers_due(tmp_path):
    # SIGTERM's flush: posts answered within the bound are recorded as accepted; a post still
    # unanswered at the bound is cancelled and recorded as answer_lost, since run-api has it.
    quick, late = tmp_path / "quick.jsonl", tmp_path / "late.jsonl"
    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=GROUP_SIZE)
        trainer.register()

        async def deliver(record: Path, delay: float, within: float, ids: list[str]) -> float:
            async with SlowAnswer(api.port, delay=delay) as link:
                delivery = GroupDelivery(link.url, record, request_timeout=60)
                sending = [asyncio.ensure_future(delivery.send(scored_group(i))) for i in ids]
                while link.connections < len(ids):
                    await asyncio.sleep(0.01)
                started = time.monotonic()
                await delivery.drain(within=within)
                took = time.monotonic() - started
                await asyncio.gather(*sending, return_exceptions=True)
                return took

        answered_in = asyncio.run(asyncio.wait_for(deliver(quick, 0.5, 20, ["q-1", "q-2"]), 60))
        cut_at = asyncio.run(asyncio.wait_for(deliver(late, 30, 0.5, ["l-1", "l-2"]), 60))
        time.sleep(0.5)  # run-api queues what the relay forwarded
        received = [g["group_overrides"][GROUP_ID_KEY] for g in trainer.drain(GROUP_SIZE)]
    assert answered_in < 10 and cut_at < 5, (answered_in, cut_at)
    assert sorted(recorded_ids(quick)) == ["q-1", "q-2"]
    assert recorded_outcomes(quick) == [DELIVERED, DELIVERED]
    assert sorted(recorded_ids(late)) == ["l-1", "l-2"]
    assert recorded_outcomes(late) == [ANSWER_LOST, ANSWER_LOST]
    assert sorted(received) == ["l-1", "l-2", "q-1", "q-2"]
