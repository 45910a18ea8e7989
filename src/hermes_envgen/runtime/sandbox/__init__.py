"""Sandboxes: where a rollout's commands run and its files live, one per task id."""

from hermes_envgen.runtime.sandbox.base import (
    DEFAULT_DOCKER_IMAGE,
    TIMEOUT_EXIT_CODE,
    CommandResult,
    PathOutsideWorkspace,
    Sandbox,
    SandboxError,
    SandboxSettings,
    SandboxUnavailable,
)
from hermes_envgen.runtime.sandbox.manager import (
    BACKENDS,
    SandboxManager,
    check_backend,
    register_backend,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_DOCKER_IMAGE",
    "TIMEOUT_EXIT_CODE",
    "CommandResult",
    "PathOutsideWorkspace",
    "Sandbox",
    "SandboxError",
    "SandboxManager",
    "SandboxSettings",
    "SandboxUnavailable",
    "check_backend",
    "register_backend",
]
