"""Start sandbox commands cheaply: posix_spawn plus a pidfd, instead of fork plus a thread.

In a process that has imported atroposlib and transformers, ``asyncio.create_subprocess_exec``
forks a large address space and starts a watcher thread per child: about 5 ms per command,
where ``posix_spawn`` takes about 1.3 ms. An agent runs thousands of commands, so the runtime
spawns them itself and waits on a pidfd in the event loop. Where that is not possible (no
pidfd, a working directory or a pre-exec hook is needed) it falls back to asyncio's way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable

# A command starts with every signal at its default action: Python ignores SIGPIPE and
# SIGXFSZ (``yes | head`` would complain of a broken pipe, a write past ``ulimit -f`` return
# an error instead of killing the writer), and a host started as a background job ignores
# SIGINT and SIGQUIT; an exec passes on what is ignored.
DEFAULT_SIGNALS = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}


class SpawnedProcess:
    """A running command: its pid (= its process group), its output stream and its exit."""

    def __init__(
        self, pid: int | None, stdout: asyncio.StreamReader, waiter: asyncio.Future
    ) -> None:
        self.pid = pid
        self.stdout = stdout
        self._waiter = waiter
        self.returncode: int | None = None

    @property
    def exited(self) -> asyncio.Future:
        """Done when the child has exited (waiting on it never cancels it)."""
        return self._waiter

    async def wait(self) -> int:
        if not self._waiter.done():
            await asyncio.shield(self._waiter)
        self.returncode = self._waiter.result()
        return self.returncode


def shell_exit_code(code: int) -> int:
    """An exit code as a shell reports it: a death by signal n is 128 + n, not -n.

    ``docker exec`` can only report 128 + n, so every backend reports it that way.
    """
    return 128 - code if code < 0 else code


def _inheritable_descriptors() -> list[int]:
    """The host's descriptors above 0-2 that an exec would pass on (a library may leave some)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    found = []
    for name in names:
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
                if os.get_inheritable(fd):
                    found.append(fd)
    return found


def _exit_status(status: int) -> int:
    return shell_exit_code(os.waitstatus_to_exitcode(status))


async def spawn(
    argv: list[str],
    env: dict[str, str],
    cwd: str | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> SpawnedProcess:
    """Start ``argv`` in a new session (its own process group), stdout and stderr combined."""
    if cwd is None and preexec_fn is None and hasattr(os, "pidfd_open"):
        try:
            return await _posix_spawn(argv, env)
        except OSError as exc:
            if exc.errno not in (38, 1):  # ENOSYS / EPERM: no pidfd here, use the fallback
                raise
    return await _asyncio_spawn(argv, env, cwd, preexec_fn)


async def _posix_spawn(argv: list[str], env: dict[str, str]) -> SpawnedProcess:
    loop = asyncio.get_running_loop()
    executable = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=env.get("PATH"))
    if executable is None:
        raise FileNotFoundError(f"{argv[0]}: command not found")
    read_fd, write_fd = os.pipe()
    try:
        pid = os.posix_spawn(
            executable,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, write_fd, 1),
                (os.POSIX_SPAWN_DUP2, write_fd, 2),
                (os.POSIX_SPAWN_CLOSE, read_fd),
                (os.POSIX_SPAWN_CLOSE, write_fd),
                *((os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_descriptors()),
            ],
            setsigdef=DEFAULT_SIGNALS,
            setsigmask=(),
            setsid=True,
        )
    except BaseException:
        os.close(read_fd)
        os.close(write_fd)
        raise
    os.close(write_fd)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        os.close(read_fd)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise

    waiter: asyncio.Future = loop.create_future()

    def reap() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        if not waiter.done():
            waiter.set_result(_exit_status(status))

    loop.add_reader(pidfd, reap)
    reader = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    return SpawnedProcess(pid, reader, waiter)


async def _asyncio_spawn(
    argv: list[str], env: dict[str, str], cwd: str | None, preexec_fn: Callable[[], None] | None
) -> SpawnedProcess:
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )

    async def wait() -> int:
        return shell_exit_code(await process.wait())

    waiter = asyncio.ensure_future(wait())
    assert process.stdout is not None  # a pipe
    return SpawnedProcess(process.pid, process.stdout, waiter)
