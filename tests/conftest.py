"""Shared test setup: every test runs offline (no hub, no W&B)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hermes_envgen.testing.runner import OFFLINE_ENVIRONMENT

os.environ.update(OFFLINE_ENVIRONMENT)

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
sys.path.insert(0, str(EXAMPLES))


def pytest_collection_modifyitems(config, items):
    """Tests of a real model server run last: CI builds and starts it beside the suite."""
    items.sort(key=lambda item: item.get_closest_marker("llama_server") is not None)


@pytest.fixture
def sandboxes(tmp_path):
    """A sandbox manager whose workspaces live under the test's tmp_path."""
    from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings

    return SandboxManager(SandboxSettings(root=str(tmp_path), command_timeout=10), lifetime=600)


def render_template(target: Path, data: dict) -> Path:
    """Render the working tree's template into ``target`` with ``data`` and default answers."""
    import warnings

    import copier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a dirty working tree is what we mean to render
        copier.run_copy(
            str(REPO), str(target), data=data, defaults=True, quiet=True, vcs_ref="HEAD"
        )
    return target
