"""Resource limits of isolating backends: defaults, and how each backend applies them.

``SandboxSettings`` leaves every limit unset (None); the ``local`` backend applies none. The
isolating backends fill the gaps with defaults that contain a fork bomb or a memory hog by
default, and apply the limits inside the sandbox:

- bwrap: ``ulimit`` in the shell that runs the command, inside the sandbox's own user
  namespace (and, looser, in the anchor that starts the commands; see ``bwrap``).
  RLIMIT_NPROC is counted per (user namespace, uid), so a limit set there bounds this
  sandbox's processes alone; set on the host it would count every process of the uid.
  As root, also for the sandbox as a whole (see ``host_limits``): a cgroup caps its memory
  (``memory_mb``), processes and CPUs (``cpus``), and its workspace is a tmpfs of
  ``workspace_mb``.
- docker: ``--pids-limit``, ``--memory`` and ``--cpus`` (the container's cgroups), ``--ulimit``
  for CPU time and file size, and a workspace tmpfs of ``workspace_mb``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermes_envgen.runtime.sandbox.base import SandboxSettings

MIB = 1024 * 1024
INODES_PER_MB = 64  # a size-limited workspace's file limit: 64 files per MiB of its size


def tmpfs_size_options(size_mb: int) -> str:
    """tmpfs mount options that cap a workspace at ``size_mb`` MiB and its number of files."""
    return f"size={size_mb}m,nr_inodes={max(1024, size_mb * INODES_PER_MB)}"


@dataclass(frozen=True)
class ResourceLimits:
    """The limits one sandbox runs under; None means unlimited."""

    cpu_seconds: int | None = None
    memory_mb: int | None = None
    max_processes: int | None = None
    max_file_mb: int | None = None
    workspace_mb: int | None = None
    cpus: float | None = None

    @classmethod
    def from_settings(
        cls, settings: SandboxSettings, defaults: ResourceLimits | None = None
    ) -> ResourceLimits:
        """The settings' limits, with ``defaults`` wherever the settings leave one unset."""
        defaults = defaults or cls()

        def pick(name: str) -> int | None:
            value = getattr(settings, name, None)
            return getattr(defaults, name) if value is None else value

        return cls(
            cpu_seconds=pick("cpu_seconds"),
            memory_mb=pick("memory_mb"),
            max_processes=pick("max_processes"),
            max_file_mb=pick("max_file_mb"),
            workspace_mb=pick("workspace_mb"),
            cpus=pick("cpus"),
        )

    def ulimit_commands(self, extra_processes: int = 0, cpu_time: bool = True) -> str:
        """Shell commands that apply these limits to the shell and everything it starts.

        ``ulimit`` sets the soft and the hard limit, so a command cannot raise them again.
        A failure (the hard limit is already lower) is ignored: the lower limit stays.
        ``extra_processes`` and ``cpu_time=False``: the looser limits of a sandbox's
        long-lived process that starts its commands (each lowers them to these first).
        """
        settings = []
        if self.max_processes is not None:
            settings.append(f"-u {self.max_processes + extra_processes}")
        if self.memory_mb is not None:
            settings.append(f"-v {self.memory_mb * 1024}")  # KiB
        if self.max_file_mb is not None:
            settings.append(f"-f {self.max_file_mb * 1024}")  # 1 KiB blocks (bash, non-POSIX)
        if self.cpu_seconds is not None and cpu_time:
            settings.append(f"-t {self.cpu_seconds}")
        return "; ".join(f"ulimit {flag} 2>/dev/null" for flag in settings) or ":"

    def rlimits(self, extra_processes: int = 0, cpu_time: bool = True) -> list[tuple[int, int]]:
        """``ulimit_commands`` as (RLIMIT_* number, value) pairs, for a process that sets its
        own limits (a bwrap sandbox's anchor): soft and hard alike."""
        import resource

        pairs = []
        if self.max_processes is not None:
            pairs.append((resource.RLIMIT_NPROC, self.max_processes + extra_processes))
        if self.memory_mb is not None:
            pairs.append((resource.RLIMIT_AS, self.memory_mb * MIB))
        if self.max_file_mb is not None:
            pairs.append((resource.RLIMIT_FSIZE, self.max_file_mb * MIB))
        if self.cpu_seconds is not None and cpu_time:
            pairs.append((resource.RLIMIT_CPU, self.cpu_seconds))
        return pairs

    def docker_flags(self) -> list[str]:
        """``docker run`` options that apply these limits to a container."""
        flags: list[str] = []
        if self.max_processes is not None:
            flags += ["--pids-limit", str(self.max_processes)]
        if self.memory_mb is not None:
            # swap equal to memory: no swap on top of the limit
            flags += ["--memory", f"{self.memory_mb}m", "--memory-swap", f"{self.memory_mb}m"]
        if self.max_file_mb is not None:
            flags += ["--ulimit", f"fsize={self.max_file_mb * MIB}"]  # bytes
        if self.cpu_seconds is not None:
            flags += ["--ulimit", f"cpu={self.cpu_seconds}"]
        if self.cpus is not None:
            flags += ["--cpus", f"{self.cpus:g}"]
        return flags


# What an isolating backend applies when the settings leave a limit unset: a fork bomb, a
# memory hog or a disk filler is contained without configuration.
ISOLATED_DEFAULTS = ResourceLimits(
    cpu_seconds=None,  # the command timeout bounds wall time; CPU time needs no second cap
    memory_mb=2048,
    max_processes=256,
    max_file_mb=1024,
    workspace_mb=1024,  # a tmpfs workspace (docker; bwrap as root)
    cpus=1.0,  # the sandbox's cgroup (docker; bwrap as root)
)
