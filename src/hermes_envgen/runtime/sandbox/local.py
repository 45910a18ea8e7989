"""The local backend: a workspace directory on the host and no isolation (development only).

Commands run as the current user with the host's filesystem and network. What it does give:
a private working directory per task, a scrubbed environment (no API keys), its own process
group per command so that a timeout or cleanup kills everything the command started, and
capped output. Use ``bwrap`` or ``docker`` when an agent under training runs the commands.
"""

from __future__ import annotations

from hermes_envgen.runtime.sandbox.base import HostDirectorySandbox


class LocalSandbox(HostDirectorySandbox):
    """Runs commands with ``bash -c`` in the task's workspace directory on the host."""

    @property
    def workdir(self) -> str:
        return str(self.workspace)

    def _command_argv(self, command: str) -> list[str]:
        # HOME is the workspace (see command_environment); entering it in the shell rather
        # than through cwd lets the command start with posix_spawn.
        return ["bash", "-c", f'cd -- "$HOME" || exit 1\n{command}']
