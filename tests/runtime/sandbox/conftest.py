"""Fixtures of the sandbox tests: a project generated for the docker backend, and its run."""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import render_template
from helpers.sandbox import docker_test_image

from hermes_envgen.runtime.sandbox.docker.engine import LABEL, RUN_LABEL
from hermes_envgen.testing.policy import scripted_policy
from hermes_envgen.testing.runner import offline_environment, run_env_mode

PROJECT = "dockerenv"  # a package name no other test renders: it is imported here


def is_our_child(run: str) -> bool:
    """Whether a run label (``host/PID-MS``) names a run of a process this test started.

    Other tests beside this one (other xdist workers) run sandboxes on the same engine.
    """
    pid = run.rpartition("/")[2].partition("-")[0]
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    return int(stat.rpartition(")")[2].split()[1]) == os.getpid()


@contextlib.contextmanager
def containers_created() -> Iterator[list[str]]:
    """Collect the ids of the sandbox containers the env this test starts meanwhile creates.

    Streamed as they happen (the engine keeps only its last 256 events for later queries)
    and told apart by their run label while the env that made them still runs.
    """
    created: list[str] = []
    filters = ["type=container", "event=create", f"label={LABEL}"]
    template = f'{{{{.ID}}}} {{{{index .Actor.Attributes "{RUN_LABEL}"}}}}'
    watcher = subprocess.Popen(
        ["docker", "events", "--format", template, *(f"--filter={f}" for f in filters)],
        stdout=subprocess.PIPE,
        text=True,
    )

    def collect() -> None:
        for line in watcher.stdout:
            container, _, run = line.strip().partition(" ")
            if is_our_child(run):
                created.append(container)

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    time.sleep(0.5)  # subscribed before anything starts
    try:
        yield created
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)
        reader.join(timeout=30)


@pytest.fixture(scope="module")
def generated_env(tmp_path_factory):
    """A rendered project (atropos provider, binary reward) and its built-in tasks."""
    project = render_template(
        tmp_path_factory.mktemp("generated") / PROJECT,
        {
            "project_name": PROJECT,
            "provider": "atropos",
            "reward_pattern": "binary",
            "ci": False,
            "use_dataset": False,
        },
    )
    sys.path.insert(0, str(project / "src"))
    try:
        samples = importlib.import_module(f"{PROJECT}.samples").SAMPLES
    finally:
        sys.path.remove(str(project / "src"))
    return project, samples


@pytest.fixture
def run_on_docker(generated_env, stub_server, offline_tokenizer, tmp_path):
    """Run a mode of the generated env on the docker backend against the stub model that
    solves each task once and gives up once; the ids of the containers it created."""
    project, samples = generated_env
    model = stub_server(scripted_policy(samples))
    pythonpath = f"{project / 'src'}:{offline_environment().get('PYTHONPATH', '')}"

    def run(mode: str, flags: dict, timeout: float = 300) -> list[str]:
        with containers_created() as created:
            run_env_mode(
                PROJECT,
                mode,
                flags={
                    **flags,
                    "openai.base_url": model.base_url,
                    "env.tokenizer_name": offline_tokenizer,
                    "env.sandbox_root": tmp_path / "sandboxes",
                    "env.sandbox_backend": "docker",
                    "env.sandbox_image": docker_test_image(),
                },
                cwd=tmp_path,
                timeout=timeout,
                extra_env={"PYTHONPATH": pythonpath},
            )
        return created

    return run
