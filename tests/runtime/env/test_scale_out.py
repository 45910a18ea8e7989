"""Scale-out on Atropos: three serve workers of one generated env feed one run-api and trainer.

Every worker registers, batches hold groups from all of them, and killing one worker mid-run
(SIGKILL) and starting it again loses and repeats nothing: every group a worker recorded as
accepted by run-api reaches the trainer (what run-api still holds at the end is drained), no
group id arrives twice, and the restarted worker registers anew and delivers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, render_template

from hermes_envgen.runtime.env.base_env import GROUP_ID_KEY
from hermes_envgen.testing import scripted_policy
from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.stub_server import Faults
from hermes_envgen.testing.trainer import MinimalTrainer, RunApi

GROUP_SIZE = 4
GROUPS_PER_BATCH = 3
# Room for the restarted worker's cold start (imports, setup, registration): on an idle
# machine the two live workers fill a dozen batches before its first group arrives.
STEPS = 48
LATENCY = 0.1  # seconds per model request, as a remote model would take
WORKERS_PER_NODE = 4  # concurrent rollouts per serve process


def _samples(project: Path) -> list[dict]:
    spec = importlib.util.spec_from_file_location(
        "scale_samples", project / "src/scale_env/samples.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SAMPLES


class Worker:
    """One ``serve`` process of the env, labelled in its system prompt and logging to a file."""

    def __init__(self, project: Path, label: str, seed: int, flags: list[str], tmp: Path) -> None:
        self.label = label
        self.accepted = tmp / f"{label}.jsonl"  # the groups run-api accepted from the worker
        self.log = tmp / f"{label}.log"
        command = [
            sys.executable, "-m", "scale_env", "serve", *flags,
            "--env.seed", str(seed),
            "--env.system_prompt", f"You are {label}.",
            "--env.data_path_to_save_groups", str(self.accepted),
            "--env.sandbox_root", str(tmp / "sandboxes" / label),
        ]  # fmt: skip
        path = os.pathsep.join([str(project / "src"), str(REPO / "src")])
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                command,
                cwd=project,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=offline_environment({"PYTHONPATH": path}),
            )

    def stop(self, timeout: float) -> int | None:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None

    def accepted_ids(self) -> list[str]:
        lines = self.accepted.read_text().splitlines() if self.accepted.exists() else []
        return [json.loads(line)["group_overrides"][GROUP_ID_KEY] for line in lines]


def _label(group: dict) -> str:
    system = group["messages"][0][0]
    assert system["role"] == "system"
    return system["content"].removeprefix("You are ").removesuffix(".")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_three_workers_feed_one_trainer_and_a_restarted_worker_repeats_nothing(
    stub_server, offline_tokenizer, tmp_path
):
    project = render_template(tmp_path / "scale-env", {"project_name": "scale-env"})
    stub = stub_server(scripted_policy(_samples(project)), faults=Faults(latency=LATENCY))
    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=GROUP_SIZE * GROUPS_PER_BATCH, num_steps=STEPS)
        trainer.register()
        flags = [
            "--openai.base_url", stub.base_url,
            "--openai.health_check", "false",
            "--env.tokenizer_name", str(offline_tokenizer),
            "--env.rollout_server_url", api.url,
            "--env.group_size", str(GROUP_SIZE),
            "--env.total_steps", str(STEPS),
            "--env.steps_per_eval", "1000",
            "--env.max_num_workers_per_node", str(WORKERS_PER_NODE),
        ]  # fmt: skip
        workers = {
            label: Worker(project, label, seed, flags, tmp_path)
            for seed, label in enumerate(["worker-0", "worker-1", "worker-2"])
        }
        try:
            seen: set[str] = set()
            while seen != set(workers):  # every worker registered and delivered
                assert len(trainer.batches) < STEPS - 2, f"only {seen} delivered"
                seen |= {_label(g) for g in trainer.next_batch(timeout=240)}
            # Kill one worker mid-run without warning, then start it again.
            workers["worker-1"].process.send_signal(signal.SIGKILL)
            workers["worker-1"].process.wait(30)
            workers["worker-1b"] = Worker(project, "worker-1b", 1, flags, tmp_path)
            # The trainer waits for it (a cold start takes a while); the live workers stop
            # producing when run-api's queue is full, so the run does not end meanwhile.
            deadline = time.monotonic() + 240
            while not trainer.env_registered(len(workers) - 1):  # the fourth registration
                assert workers["worker-1b"].process.poll() is None, workers["worker-1b"].log
                assert time.monotonic() < deadline, "the restarted worker never registered"
                time.sleep(0.5)
            while "worker-1b" not in {_label(g) for g in trainer.groups()}:
                assert len(trainer.batches) < STEPS, "the restarted worker never delivered"
                trainer.next_batch(timeout=240)
            while len(trainer.batches) < STEPS:
                trainer.next_batch(timeout=240)
            # The run is over: the live workers see it and exit by themselves.
            exits = {label: w.stop(120) for label, w in workers.items() if label != "worker-1"}
            run = list(trainer.batches)  # the run's batches, before the drain's
            trainer.drain(GROUP_SIZE)  # what run-api still holds: full batches, then the rest
            left = trainer.status()["queue_size"]
        finally:
            for worker in workers.values():
                if worker.process.poll() is None:
                    worker.process.kill()
                    worker.process.wait()
    logs = {label: w.log.read_text()[-3000:] for label, w in workers.items()}
    assert all(code == 0 for code in exits.values()), (exits, logs)

    groups = trainer.groups()
    assert trainer.repeats() == 0, "a group arrived twice"
    for batch in trainer.batches:
        assert sum(len(g["tokens"]) for g in batch) == GROUP_SIZE * GROUPS_PER_BATCH
    assert any(len({_label(g) for g in batch}) > 1 for batch in run)
    for group in groups:
        assert len(group["tokens"]) == len(group["masks"]) == len(group["scores"]) == GROUP_SIZE
        assert all(len(t) == len(m) for t, m in zip(group["tokens"], group["masks"]))
    assert left == 0, f"{left} group(s) left in run-api after the drain"
    # Nothing lost: every group a worker recorded as accepted reached the trainer, and each
    # worker that ran to the end received exactly what it recorded. The killed worker may have
    # had a group accepted in the instant before it recorded it: only its records are checked.
    by_label: dict[str, set[str]] = {label: set() for label in workers}
    for group in groups:
        by_label[_label(group)].add(group["group_overrides"][GROUP_ID_KEY])
    for label, worker in workers.items():
        accepted = worker.accepted_ids()
        assert len(accepted) == len(set(accepted)), f"{label} recorded a group twice"
        lost = set(accepted) - by_label[label]
        assert not lost, f"{label}: {len(lost)} of {len(accepted)} accepted groups never arrived"
        if label != "worker-1":
            assert by_label[label] == set(accepted), f"{label} delivered groups it did not record"
    for label in ("worker-0", "worker-2", "worker-1b"):
        assert workers[label].accepted_ids(), f"{label} recorded nothing: {logs[label]}"
