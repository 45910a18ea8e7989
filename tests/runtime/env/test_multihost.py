"""Serve mode past one machine: run-api, env workers and model servers on different hosts.

The hosts are network namespaces on a private bridge (tests/helpers/netns_rig.py): run-api and the
trainer on one, two env workers and two stub model servers on one each, every process started
in its own. Nothing may assume the others are on 127.0.0.1. The tests need root and
``ip netns`` (CI has both) and are skipped with the reason elsewhere.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import EXAMPLES
from helpers import netns_rig

from hermes_envgen.runtime.env.base_env import GROUP_ID_KEY
from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.trainer import PADDING_KEY, MinimalTrainer, RunApi

UNAVAILABLE = netns_rig.unavailable()
pytestmark = [
    pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or ""),
    pytest.mark.xdist_group("netns"),
    pytest.mark.slow,
]

HOSTS = ["api", "w0", "w1", "m0", "m1"]
GROUP_SIZE = 4
BATCH_SIZE = 8  # two groups per batch
STEPS = 20
API_PORT = 8000
MODEL_PORT = 9001


@pytest.fixture
def rig():
    netns_rig.reap_stale()
    with netns_rig.Rig(HOSTS) as made:
        yield made


def start_model(rig: netns_rig.Rig, host: str, tmp: Path, *flags: str) -> str:
    """The stub model server on ``host``, listening on its address; its base URL."""
    address = rig.addresses[host]
    log = tmp / f"{host}.log"
    command = [sys.executable, "-m", "hermes_envgen", "stub-server",
               "--script", str(EXAMPLES / "stub_script.yaml"),
               "--host", address, "--port", str(MODEL_PORT),
               "--latency", "0.05", *flags]  # fmt: skip
    process = rig.start(host, command, log, env=offline_environment())
    deadline = time.monotonic() + 60
    while "listening on" not in log.read_text():
        assert process.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, f"the stub on {host} did not start"
        time.sleep(0.2)
    assert rig.in_namespace(process, host)
    return f"http://{address}:{MODEL_PORT}/v1"


def worker_command(tokenizer: Path, api_url: str, label: str, tmp: Path, *flags: str) -> list:
    """The example env's ``serve``, labelled in its system prompt, recording what run-api took."""
    return [
        sys.executable, str(EXAMPLES / "terminal_env.py"), "serve",
        "--env.tokenizer_name", str(tokenizer),
        "--env.rollout_server_url", api_url,
        "--env.group_size", str(GROUP_SIZE),
        "--env.total_steps", str(STEPS),
        "--env.steps_per_eval", "1000",
        "--env.include_messages", "true",
        "--env.system_prompt", f"You are {label}.",
        "--env.data_path_to_save_groups", str(tmp / f"{label}.jsonl"),
        "--env.sandbox_root", str(tmp / "sandboxes" / label),
        "--env.delivery_retry_seconds", "20",
        "--env.delivery_request_timeout", "5",
        *flags,
    ]  # fmt: skip


def openai_flags(base_url: str) -> list[str]:
    # A model server on another host needs a key (any, for a private vLLM): the env refuses a
    # remote URL without one rather than send requests that a real endpoint would refuse.
    return ["--openai.base_url", base_url, "--openai.api_key", "EMPTY",
            "--openai.health_check", "false"]  # fmt: skip


def label(group: dict) -> str:
    system = group["messages"][0][0]
    assert system["role"] == "system"
    return system["content"].removeprefix("You are ").removesuffix(".")


def recorded(path: Path) -> list[str]:
    """The group ids a worker recorded as accepted; every line must be whole JSON."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)["group_overrides"][GROUP_ID_KEY] for line in lines]


def settled_count(path: Path, quiet: float = 3.0, limit: float = 30.0) -> int:
    """How many groups ``path`` records once the count has not changed for ``quiet`` seconds."""
    count, since, deadline = len(recorded(path)), time.monotonic(), time.monotonic() + limit
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.2)
        now = len(recorded(path))
        if now != count:
            count, since = now, time.monotonic()
    return count


@pytest.mark.timeout(600)
def test_two_workers_on_two_hosts_feed_one_trainer_and_one_is_cut_off(
    rig, offline_tokenizer, tmp_path
):
    models = {host: start_model(rig, host, tmp_path) for host in ("m0", "m1")}
    api_host = rig.thread("api")  # the trainer's side: run-api and the trainer's requests
    api = RunApi(port=API_PORT, log=tmp_path / "run-api.log", host=rig.addresses["api"])
    api_host.submit(api.__enter__).result(90)
    try:
        assert rig.in_namespace(api._process, "api")
        trainer = MinimalTrainer(api.url, batch_size=BATCH_SIZE, num_steps=STEPS)
        api_host.submit(trainer.register).result(30)

        def next_batch() -> list[dict]:
            return api_host.submit(trainer.next_batch, 180).result(200)

        workers = {}
        for host, model in (("w0", "m0"), ("w1", "m1")):
            command = worker_command(offline_tokenizer, api.url, host, tmp_path,
                                     *openai_flags(models[model]))  # fmt: skip
            workers[host] = rig.start(host, command, tmp_path / f"{host}.log",
                                      env=offline_environment())  # fmt: skip
        logs = {h: tmp_path / f"{h}.log" for h in workers}

        seen: set[str] = set()
        while seen != set(workers):  # both hosts registered and delivered
            assert len(trainer.batches) < STEPS - 4, f"only {seen} delivered"
            for host, process in workers.items():
                assert process.poll() is None, logs[host].read_text()[-3000:]
            seen |= {label(g) for g in next_batch()}
        assert all(rig.in_namespace(p, h) for h, p in workers.items())

        rig.cut("w1")  # mid-run: w1's host loses its link, its posts and requests go nowhere
        cut_at = len(trainer.batches)
        records_at_cut = {
            "w0": len(recorded(tmp_path / "w0.jsonl")),
            # An answer w1 received just before the cut is still recorded (later on a busy
            # machine): w1's count once it stops growing.
            "w1": settled_count(tmp_path / "w1.jsonl"),
        }
        while len(trainer.batches) < STEPS:
            next_batch()
        # The run is over: w0 sees it and exits by itself; w1 is stopped while still cut off.
        assert workers["w0"].wait(120) == 0, logs["w0"].read_text()[-3000:]
        workers["w1"].send_signal(signal.SIGTERM)
        workers["w1"].wait(60)
        api_host.submit(trainer.drain, GROUP_SIZE).result(120)
        left = api_host.submit(trainer.status).result(30)["queue_size"]
    finally:
        api_host.submit(api.__exit__).result(30)

    assert left == 0
    groups = trainer.groups()
    # The run went on with w0 alone: w0 delivered after the cut, w1 recorded nothing more
    # (what run-api held of w1's from before the cut may still come in later batches).
    after_cut = [g for batch in trainer.batches[cut_at:] for g in batch]
    assert "w0" in {label(g) for g in after_cut if not g["group_overrides"].get(PADDING_KEY)}
    assert len(recorded(tmp_path / "w0.jsonl")) > records_at_cut["w0"]
    # w1 recorded nothing it was not told was accepted: whatever it wrote after the cut (an
    # answer received just before it, written late on a busy machine) reached run-api.
    late = recorded(tmp_path / "w1.jsonl")[records_at_cut["w1"] :]
    assert set(late) <= {g["group_overrides"][GROUP_ID_KEY] for g in groups}, late
    by_host: dict[str, set[str]] = {"w0": set(), "w1": set()}
    for group in groups:
        by_host[label(group)].add(group["group_overrides"][GROUP_ID_KEY])
        assert len(group["tokens"]) == len(group["masks"]) == len(group["scores"]) == GROUP_SIZE
    for host in ("w0", "w1"):
        accepted = recorded(tmp_path / f"{host}.jsonl")  # whole lines only: nothing half-written
        assert accepted, f"{host} recorded nothing"
        assert len(accepted) == len(set(accepted)), f"{host} recorded a group twice"
        lost = set(accepted) - by_host[host]
        assert not lost, f"{host}: {len(lost)} accepted group(s) never reached the trainer"
    # w0 ran to the end: the trainer got exactly what it recorded, once each after dedup.
    assert by_host["w0"] == set(recorded(tmp_path / "w0.jsonl"))
    # w1's groups that reached the trainer but are not in its record: accepted in the instant
    # its link went down, the answer lost; at most the posts then under way.
    assert len(by_host["w1"] - set(recorded(tmp_path / "w1.jsonl"))) <= 4
    assert trainer.repeats() <= 4  # posts sent again after a lost answer, dropped by group_id


def model_list_config(path: Path, urls: list[str], timeout: float) -> Path:
    """A ``--config`` YAML with the ``openai:`` list of several model servers (Atropos's form)."""
    servers = [
        {"base_url": url, "model_name": "stub-model", "api_key": "EMPTY",
         "health_check": False, "timeout": timeout}
        for url in urls
    ]  # fmt: skip
    path.write_text(json.dumps({"openai": servers}))  # JSON is YAML
    return path


def served(rig: netns_rig.Rig, pool, host: str) -> int:
    """How many model requests the stub on ``host`` has answered, asked from ``pool``'s host."""
    url = f"http://{rig.addresses[host]}:{MODEL_PORT}/health"

    def get() -> int:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())["requests"]

    return pool.submit(get).result(20)


@pytest.mark.timeout(600)
def test_workers_spread_requests_over_two_model_hosts_and_one_going_dark_is_out_then_back(
    rig, offline_tokenizer, tmp_path
):
    models = [start_model(rig, host, tmp_path) for host in ("m0", "m1")]
    api_host = rig.thread("api")
    api = RunApi(port=API_PORT, log=tmp_path / "run-api.log", host=rig.addresses["api"])
    api_host.submit(api.__enter__).result(90)
    try:
        trainer = MinimalTrainer(api.url, batch_size=BATCH_SIZE, num_steps=STEPS)
        api_host.submit(trainer.register).result(30)

        def next_batch() -> list[dict]:
            return api_host.submit(trainer.next_batch, 180).result(200)

        config = model_list_config(tmp_path / "models.yaml", models, timeout=20)
        workers = {
            host: rig.start(host, [*worker_command(offline_tokenizer, api.url, host, tmp_path),
                                   "--config", str(config)],
                            tmp_path / f"{host}.log", env=offline_environment())
            for host in ("w0", "w1")
        }  # fmt: skip
        logs = {h: tmp_path / f"{h}.log" for h in workers}
        for _ in range(3):
            next_batch()
        spread = {host: served(rig, api_host, host) for host in ("m0", "m1")}
        assert all(count > 10 for count in spread.values()), spread

        rig.cut("m1")  # the model host goes dark: no refusal, its packets dropped
        cut_at = len(trainer.batches)
        for _ in range(4):
            next_batch()
        rig.mend("m1")
        mended = served(rig, api_host, "m1")
        # A server taken out is back in 10 s after its last failure: give the run that time
        # (the workers wait meanwhile once run-api's queue is full) before it ends.
        time.sleep(11)
        while len(trainer.batches) < STEPS:
            next_batch()
        for host, process in workers.items():
            assert process.wait(120) == 0, logs[host].read_text()[-3000:]
        back = served(rig, api_host, "m1")
        api_host.submit(trainer.drain, GROUP_SIZE).result(120)
    finally:
        api_host.submit(api.__exit__).result(30)

    assert len(trainer.batches) >= STEPS and cut_at < STEPS - 4
    assert trainer.repeats() == 0
    text = {h: log.read_text() for h, log in logs.items()}
    assert any(f"{models[1]} is out for" in t for t in text.values()), text["w0"][-3000:]
    assert any(f"{models[1]} is back in" in t for t in text.values()), text["w0"][-3000:]
    assert back > mended, "the model host that came back got no requests"
    for host in workers:
        accepted = recorded(tmp_path / f"{host}.jsonl")
        assert set(accepted) <= {g["group_overrides"][GROUP_ID_KEY] for g in trainer.groups()}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("unreachable", ["run-api refuses", "run-api host dark", "model host dark"])
def test_an_unreachable_service_at_start_up_is_named_with_the_host_in_one_line(
    unreachable, rig, offline_tokenizer, tmp_path
):
    api_url = f"http://{rig.addresses['api']}:{API_PORT}"  # nothing listens there yet
    model_url = start_model(rig, "m0", tmp_path)
    api = None
    if unreachable == "run-api host dark":
        api_url = f"http://{netns_rig.SUBNET}.99:{API_PORT}"  # no host has that address
    elif unreachable == "model host dark":
        api = RunApi(port=API_PORT, log=tmp_path / "run-api.log", host=rig.addresses["api"])
        rig.thread("api").submit(api.__enter__).result(90)
        model_url = f"http://{netns_rig.SUBNET}.98:{MODEL_PORT}/v1"
    command = worker_command(offline_tokenizer, api_url, "w0", tmp_path,
                             *openai_flags(model_url), "--env.startup_wait", "3")  # fmt: skip
    log = tmp_path / "w0.log"
    try:
        started = time.monotonic()
        process = rig.start("w0", command, log, env=offline_environment())
        code = process.wait(120)
        took = time.monotonic() - started
    finally:
        if api is not None:
            api.__exit__()
    last = log.read_text().strip().splitlines()[-1]
    assert code == 2, log.read_text()[-3000:]
    if unreachable.startswith("run-api"):
        assert last.startswith(f"error: run-api (--env.rollout_server_url) at {api_url} "), last
        reason = "connection refused" if unreachable == "run-api refuses" else "no route to host"
        assert "cannot be reached from " in last and reason in last, last
    else:
        assert last.startswith(f"error: the model server does not answer: {model_url}"), last
        assert "(asked from " in last, last
    assert took < 90, f"{took:.0f} s to fail"


@pytest.mark.timeout(300)
def test_reach_on_a_worker_host_names_each_service_it_cannot_reach(rig, tmp_path):
    model_url = start_model(rig, "m0", tmp_path)
    dark = f"{netns_rig.SUBNET}.97"  # no host has that address
    command = [sys.executable, "-m", "hermes_envgen", "reach",
               "--base-url", f"{model_url},http://{dark}:{MODEL_PORT}/v1",
               "--rollout-server-url", f"http://{dark}:{API_PORT}",
               "--docker-host", f"tcp://{dark}:2376"]  # fmt: skip
    log = tmp_path / "check.log"
    started = time.monotonic()
    code = rig.start("w0", command, log, env=offline_environment()).wait(120)
    took = time.monotonic() - started
    rows = log.read_text().splitlines()
    assert code == 2, rows
    assert rows[0].startswith(f"PASS  model {model_url}") and "stub-model" in rows[0], rows
    assert rows[1].startswith(f"FAIL  model http://{dark}:{MODEL_PORT}/v1"), rows
    assert rows[2].startswith(f"FAIL  run-api http://{dark}:{API_PORT}"), rows
    assert rows[3].startswith(f"FAIL  docker tcp://{dark}:2376"), rows
    assert all("from " in row for row in rows[1:]), rows
    assert took < 90, f"{took:.0f} s"
