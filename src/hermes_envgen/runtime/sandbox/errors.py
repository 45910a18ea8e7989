"""The errors sandbox operations raise."""


class SandboxError(Exception):
    """A sandbox operation the agent asked for was refused or failed."""


class PathOutsideWorkspace(SandboxError):
    """A path that leads outside the task's workspace."""
