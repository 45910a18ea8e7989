"""What the tests of a generated env on docker read of the engine: the containers a run left."""

from __future__ import annotations

from helpers.sandbox import docker_containers
from hermes_envgen.runtime.sandbox.docker.engine import LABEL


def sandbox_containers() -> list[str]:
    """Every container with the sandboxes' label, running or not."""
    return docker_containers(f"label={LABEL}")


def left_of(created: list[str]) -> list[str]:
    """Which of the run's containers the engine still has (other tests' are not counted)."""
    return [
        c for c in sandbox_containers() if any(i.startswith(c) or c.startswith(i) for i in created)
    ]
