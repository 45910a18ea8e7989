"""The host's access to a workspace directory that sandbox processes may be changing meanwhile.

Paths the agent gives are resolved the way a command in the sandbox would see them (a symlink
to ``<workdir>/x`` leads to the workspace's ``x``; one to any other absolute path leads
outside and is refused). The host then opens the resolved path one component at a time with
``O_NOFOLLOW`` below a descriptor of the workspace, so a symlink swapped in at the same moment
cannot redirect the host (possibly root) outside the workspace. Nothing here recurses over
what the agent made, and every walk and read is bounded: a 3,000-deep tree, a million files
or a 1 GiB sparse file cost the host a bounded amount of time and memory.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import stat
from pathlib import Path

from hermes_envgen.runtime.errors import FileTooLarge, PathOutsideWorkspace, SandboxError

MAX_SYMLINK_HOPS = 40  # as the kernel's ELOOP limit
MAX_LIST_DEPTH = 64  # directories deeper than this below the listed one are not listed
MAX_LISTED_FILES = 100_000  # a listing stops after this many files
MAX_WALKED_ENTRIES = 500_000  # ... or after looking at this many entries

_O_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_LIST = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class WorkspaceFiles:
    """Read, write, list and remove the files of one workspace, never outside it."""

    def __init__(
        self,
        root: Path,
        workdir: str,
        owner: tuple[int, int] | None = None,
        linked: bool = False,
    ) -> None:
        self.root = root  # the workspace on the host
        self.workdir = workdir  # the workspace as sandbox commands see it
        self.owner = owner  # (uid, gid) given to what the host creates; None: the host's
        # ``linked``: ``root`` is /proc/<pid>/fd/<fd>, a link to a mount in no namespace of
        # the host's, followed to open it (nobody but the host can change it); any other
        # root is opened without following a link, as everything below it is.
        self._opened_root = os.path.join(root, ".") if linked else root

    def resolve(self, path: str) -> list[str]:
        """The components below the workspace that ``path`` leads to, as seen inside.

        A relative path starts at the workspace, an absolute one must lie under the
        workdir; ``..`` may not climb above the workspace; a symlink's target is followed
        as the sandbox would follow it, absolute targets included.
        """
        if "\x00" in path:
            raise PathOutsideWorkspace(f"invalid path {path!r}")
        outside = PathOutsideWorkspace(f"{path} leads outside the workspace {self.workdir}")
        pending = self._below_workdir(path) if path.startswith("/") else path.split("/")
        if pending is None:
            raise PathOutsideWorkspace(f"{path} is outside the workspace {self.workdir}")
        resolved: list[str] = []
        hops = 0
        while pending:
            name = pending.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                if not resolved:
                    raise outside
                resolved.pop()
                continue
            try:
                target = os.readlink(self.root.joinpath(*resolved, name))
            except OSError:  # not a symlink, or not there (yet): a plain component
                resolved.append(name)
                continue
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                raise SandboxError(f"{path}: too many levels of symbolic links")
            if target.startswith("/"):
                below = self._below_workdir(target)
                if below is None:
                    raise PathOutsideWorkspace(
                        f"{path} leads outside the workspace {self.workdir} (a link to {target})"
                    )
                resolved, pending = [], below + pending
            else:
                pending = target.split("/") + pending
        return resolved

    def _below_workdir(self, path: str) -> list[str] | None:
        """The components of absolute ``path`` after the workdir; None if it is not under it."""
        parts = [part for part in path.split("/") if part not in ("", ".")]
        top = [part for part in self.workdir.split("/") if part]
        if parts[: len(top)] != top:
            return None
        return parts[len(top) :]

    def open_directory(self, parts: list[str], create: bool = False, flags: int = _O_DIR) -> int:
        """A descriptor of the workspace directory ``parts``, never reached through a link."""
        fd = os.open(self._opened_root, _O_DIR)
        try:
            for index, name in enumerate(parts):
                last = index == len(parts) - 1
                try:
                    child = os.open(name, flags if last else _O_DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
                        if self.owner is not None:
                            os.chown(name, *self.owner, dir_fd=fd, follow_symlinks=False)
                    child = os.open(name, flags if last else _O_DIR, dir_fd=fd)
                os.close(fd)
                fd = child
            if not parts and flags != _O_DIR:
                child = os.open(".", flags, dir_fd=fd)
                os.close(fd)
                fd = child
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, exc.filename):
                os.close(fd)
                raise _changed(parts) from None  # resolved as a directory, now a link
            os.close(fd)
            raise
        return fd

    def _open_file(self, path: str, parts: list[str], flags: int, create: bool) -> int:
        """A descriptor of the regular file ``parts``, opened without following a link."""
        if not parts:
            raise SandboxError(f"{path} is a directory")
        directory = self.open_directory(parts[:-1], create=create)
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644,
                         dir_fd=directory)  # fmt: skip
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _changed(parts) from None
            if exc.errno == errno.ENXIO:  # a FIFO nobody reads
                raise SandboxError(f"{path} is not a regular file") from None
            raise
        finally:
            os.close(directory)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # a FIFO or a device would block or flood the host
            os.close(fd)
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise SandboxError(f"{path} is {kind}")
        return fd

    def read(self, path: str, limit: int | None = None, refuse_over: int | None = None) -> bytes:
        """A workspace file's bytes: at most ``limit`` of them.

        ``refuse_over``: a file whose size is larger is refused (``FileTooLarge``) unread.
        """
        fd = self._open_file(path, self.resolve(path), os.O_RDONLY, create=False)
        with open(fd, "rb") as file:
            if refuse_over is not None and os.fstat(fd).st_size > refuse_over:
                raise FileTooLarge(path, refuse_over)
            # One buffer of at most ``limit`` bytes, filled by the read (no chunks joined:
            # that held the bytes twice).
            return file.read() if limit is None else file.read(limit)

    def write(self, path: str, data: bytes) -> None:
        """Create or replace a workspace file's content, creating parent directories."""
        fd = self._open_file(path, self.resolve(path), os.O_WRONLY | os.O_CREAT, create=True)
        with open(fd, "wb") as file:
            if self.owner is not None:
                os.fchown(fd, *self.owner)  # the agent may edit what the host wrote
            file.truncate()
            file.write(data)

    def list(self, path: str) -> list[str]:
        """Every regular file below ``path``, relative to the workspace, sorted.

        Bounded: nothing deeper than ``MAX_LIST_DEPTH`` levels, at most ``MAX_LISTED_FILES``
        files; walked with a stack of open directories, never by recursion.
        """
        parts = self.resolve(path)
        try:
            top = self.open_directory(parts, flags=_O_LIST)
        except (FileNotFoundError, NotADirectoryError, PathOutsideWorkspace):
            return self._single_file(parts)
        found: list[str] = []
        walked = 0
        # (descriptor, its entries, its components); scandir reads a duplicate descriptor
        stack = [(top, os.scandir(top), parts)]
        try:
            while stack and len(found) < MAX_LISTED_FILES and walked < MAX_WALKED_ENTRIES:
                fd, entries, where = stack[-1]
                entry = next(entries, None)
                if entry is None:
                    entries.close()
                    os.close(stack.pop()[0])
                    continue
                walked += 1
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False):
                        found.append("/".join([*where, entry.name]))
                    elif entry.is_dir(follow_symlinks=False) and len(stack) <= MAX_LIST_DEPTH:
                        child = os.open(entry.name, _O_LIST, dir_fd=fd)
                        try:
                            stack.append((child, os.scandir(child), [*where, entry.name]))
                        except OSError:
                            os.close(child)
                            raise
        finally:
            for fd, entries, _ in stack:
                entries.close()
                os.close(fd)
        return sorted(found)

    # builtins.list: inside the class, "list" is the method above
    def _single_file(self, parts: builtins.list[str]) -> builtins.list[str]:
        """``[parts]`` if it names a regular file of the workspace, else nothing."""
        if not parts:
            return []
        try:
            directory = self.open_directory(parts[:-1])
        except (OSError, PathOutsideWorkspace):
            return []
        try:
            mode = os.stat(parts[-1], dir_fd=directory, follow_symlinks=False).st_mode
        except OSError:
            return []
        finally:
            os.close(directory)
        return ["/".join(parts)] if stat.S_ISREG(mode) else []


def remove_tree(path: Path) -> None:
    """Delete a directory tree of any depth, even parts made unreadable (``chmod 000 dir``).

    No recursion and at most two directories open at a time: each subdirectory of a
    directory being emptied is first moved up to the top, so the tree is flattened as it
    goes (a 3,000-deep tree, beyond PATH_MAX, included).
    """
    with contextlib.suppress(OSError):
        os.rmdir(path)  # empty (a rollout that wrote nothing): one call, no walk
        return
    try:
        top = os.open(path, _O_LIST)
    except FileNotFoundError:
        return
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)  # a file or a link where the directory was
        return
    moved = 0
    previous: list[str] | None = None
    try:
        # Each pass empties the top's directories; stop when a pass changed nothing.
        while (names := _names(top)) and names != previous:
            previous = names
            for name in names:
                if not _is_directory(top, name):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=top)
                    continue
                with contextlib.suppress(OSError):
                    os.chmod(name, stat.S_IRWXU, dir_fd=top)  # to list and unlink its entries
                try:
                    directory = os.open(name, _O_LIST, dir_fd=top)
                except OSError:
                    continue
                try:
                    for child in _names(directory):
                        if _is_directory(directory, child):
                            moved += 1
                            with contextlib.suppress(OSError):
                                os.chmod(child, stat.S_IRWXU, dir_fd=directory)  # for its ".."
                                os.rename(child, f".rm-{moved}", src_dir_fd=directory,
                                          dst_dir_fd=top)  # fmt: skip
                        else:
                            with contextlib.suppress(OSError):
                                os.unlink(child, dir_fd=directory)
                finally:
                    os.close(directory)
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=top)
    finally:
        os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _is_directory(dir_fd: int, name: str) -> bool:
    """Whether ``name`` in ``dir_fd`` is a directory (not a link to one)."""
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _names(fd: int) -> list[str]:
    """The entries of an open directory (none if it cannot be read)."""
    try:
        with os.scandir(fd) as entries:
            return [entry.name for entry in entries]
    except OSError:
        return []


def _is_link(dir_fd: int, name: object) -> bool:
    """Whether ``name`` in directory ``dir_fd`` is a symlink."""
    if not isinstance(name, str):
        return False
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _changed(parts: list[str]) -> PathOutsideWorkspace:
    """The refusal when a resolved path turned into a link before the host opened it."""
    return PathOutsideWorkspace(
        f"{'/'.join(parts)} changed into a link while it was opened; refused as outside the "
        "workspace"
    )


def file_errors(path: str, operation):
    """Run a file operation, turning the OS's errors into the sandbox's."""
    try:
        return operation()
    except FileNotFoundError:
        raise SandboxError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SandboxError(f"{path} is a directory") from None
    except NotADirectoryError:
        raise SandboxError(f"{path}: a part of the path is not a directory") from None
    except PermissionError:
        raise SandboxError(f"{path}: permission denied") from None
