"""The local backend: a workspace directory on the host and no isolation (development only).

Commands run as the current user with the host's filesystem and network. What it does give:
a private working directory per task, a scrubbed environment (no API keys), its own process
group per command so that a timeout or cleanup kills everything the command started (what
keeps its run tag: a process that clears its environment and leaves its session escapes),
file tools that never follow a link out of the workspace, and capped output. It does not
protect a reward: the agent's processes run as the user that verifies and could change the
checks or the host. Use ``bwrap`` or ``docker`` when an agent under training runs the commands.
"""

from __future__ import annotations

import asyncio
import shlex
import tempfile
from pathlib import Path

from hermes_envgen.runtime.sandbox.base import check_file_name
from hermes_envgen.runtime.sandbox.host_directory import HostDirectorySandbox
from hermes_envgen.runtime.sandbox.workspace_files import remove_tree


class LocalSandbox(HostDirectorySandbox):
    """Runs commands with ``bash -c`` in the task's workspace directory on the host."""

    _home: str | None = None
    _check_dirs: list[str] | None = None

    @property
    def workdir(self) -> str:
        return str(self.workspace)

    def host_root(self) -> str:
        return "/"

    @property
    def verification_home(self) -> str:
        if self._home is None:  # beside the workspace, made when verification starts
            self._home = tempfile.mkdtemp(prefix=f"{self.workspace.name}.home-",
                                          dir=self.workspace.parent)  # fmt: skip
        return self._home

    async def install_checks(self, files: dict[str, bytes]) -> str:
        """Write the check files into a fresh directory beside the workspace, not inside it.

        Inside, a pytest.ini, pyproject.toml or conftest.py of the agent's in the workspace
        would apply to checks below it. The agent's processes are stopped by then; nothing
        stops the agent's user from writing there later (see the module docstring).
        """
        directory = await asyncio.to_thread(
            tempfile.mkdtemp, prefix=f"{self.workspace.name}.verify-", dir=self.workspace.parent
        )
        if self._check_dirs is None:
            self._check_dirs = []
        self._check_dirs.append(directory)
        for name, data in files.items():
            target = Path(directory, check_file_name(name))
            target.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(target.write_bytes, data)
        return directory

    def _command_argv(self, command: str) -> list[str]:
        # Entering the workspace in the shell rather than through cwd lets the command start
        # with posix_spawn.
        return ["bash", "-c", f"cd -- {shlex.quote(self.workdir)} || exit 1\n{command}"]

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            for directory in [self._home, *(self._check_dirs or [])]:
                if directory is not None:
                    remove_tree(Path(directory))
