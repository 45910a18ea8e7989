"""pytest fixtures for offline env tests: the stub server and the offline tokenizer.

Installed with hermes-envgen as a pytest plugin, so a generated project's tests use them with
no import. Nothing here is autouse: projects that do not ask for them are not touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_envgen.testing.runner import OFFLINE_ENVIRONMENT


@pytest.fixture(scope="session")
def offline_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a byte-level ChatML tokenizer; pass it as ``tokenizer_name``."""
    from hermes_envgen.testing.tokenizer import build_offline_tokenizer

    return build_offline_tokenizer(tmp_path_factory.mktemp("offline-tokenizer"))


@pytest.fixture
def stub_server() -> Iterator[Callable]:
    """Start scripted stub servers: ``stub_server(script, faults=None)``; stopped after the test."""
    from hermes_envgen.testing.stub_server import Faults, StubServer

    started: list[StubServer] = []

    def start(script, faults: Faults | None = None, **kwargs) -> StubServer:
        server = StubServer(script, faults=faults, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Set the offline switches (no hub, no W&B) for the test's own process."""
    for name, value in OFFLINE_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def reward_checks(offline_tokenizer: Path, tmp_path: Path) -> Callable:
    """Gold and no-op replays: ``reward_checks(EnvClass, SAMPLES)`` -> a RewardCheckReport.

    Each built-in task's gold solution and an immediate answer without tools go through the env's
    real agent loop and sandbox against a scripted stub; the report's ``gold_failures`` and
    ``noop_failures`` name the tasks whose reward does not pay for the task alone.
    """
    from hermes_envgen.testing.reward_checks import check_rewards

    def run(env_cls: type[Any], samples: list[dict], **thresholds: float):
        return check_rewards(
            env_cls, samples, offline_tokenizer, tmp_path / "replays", **thresholds
        )

    return run
