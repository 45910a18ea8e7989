"""A rig of "hosts" on one machine: network namespaces on a private bridge, made and removed here.

Each host is a namespace with one veth link to a bridge that lives in a namespace of its own
(the switch), with an address in 10.231.0.0/24: no interface or address is added to the
machine's own namespace. Processes start in a host with ``ip netns exec`` (under ``timeout``,
so none outlives a test that dies); this process talks from inside a host through a thread
that has entered its namespace (:meth:`Rig.thread`). :meth:`Rig.cut` takes a host's link down.
:meth:`Rig.resolver` gives a host a DNS server of the test's own (in that host), for the
processes started there: ``ip netns exec`` mounts ``/etc/netns/<namespace>/`` over ``/etc``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SUBNET = "10.231.0"  # the rig's /24: only ever inside the namespaces it made
PREFIX = "hmh"  # namespace names: hmh<pid>x<n>-<host>, so a dead test's are recognised
NETNS_DIR = Path("/run/netns")
NETNS_ETC = Path("/etc/netns")  # per namespace, files ``ip netns exec`` mounts over /etc's
CLONE_NEWNET = 0x40000000
PROCESS_TIMEOUT = 900  # seconds any process of the rig may live


def unavailable() -> str | None:
    """Why the rig cannot run here (not root, no ``ip netns``), or None."""
    if os.geteuid() != 0:
        return "the network-namespace rig needs root"
    if shutil.which("ip") is None or shutil.which("timeout") is None:
        return "the network-namespace rig needs `ip` (iproute2) and `timeout`"
    probe = f"{PREFIX}{os.getpid()}probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def reap_stale() -> None:
    """Remove the namespaces of rigs whose test process is gone (a crash, a SIGKILL)."""
    if not NETNS_DIR.is_dir():
        return
    for entry in NETNS_DIR.iterdir():
        name = entry.name
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX) :].split("x", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _kill_namespace(name)


def _kill_namespace(name: str) -> None:
    pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
    for pid in pids.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    if name.startswith(PREFIX):
        shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


class Rig:
    """Hosts by name, each with an address; a context manager that removes everything."""

    _count = 0

    def __init__(self, hosts: list[str]) -> None:
        Rig._count += 1
        self.tag = f"{PREFIX}{os.getpid()}x{Rig._count}"
        self.switch = f"{self.tag}-sw"
        self.addresses = {name: f"{SUBNET}.{i}" for i, name in enumerate(hosts, start=1)}
        self.processes: list[subprocess.Popen] = []
        self._threads: list[ThreadPoolExecutor] = []
        self._made: list[str] = []

    def namespace(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def __enter__(self) -> Rig:
        try:
            self._add(self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for host, address in self.addresses.items():
                ns = self.namespace(host)
                self._add(ns)
                port = self._port(host)
                _ip("-n", self.switch, "link", "add", port, "type", "veth",
                    "peer", "name", "eth0", "netns", ns)  # fmt: skip
                _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
                _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def _add(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._made.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _port(self, host: str) -> str:
        return f"p-{host}"[:15]

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        for pool in self._threads:
            pool.shutdown(wait=False, cancel_futures=True)
        for ns in reversed(self._made):
            _kill_namespace(ns)
        self._made.clear()

    def start(self, host: str, command: list[str], log: Path, **kwargs) -> subprocess.Popen:
        """``command`` in ``host``'s namespace, its output in ``log``, killed at the end."""
        wrapped = ["ip", "netns", "exec", self.namespace(host), "timeout", "-s", "KILL",
                   str(PROCESS_TIMEOUT), *command]  # fmt: skip
        with open(log, "w") as output:
            process = subprocess.Popen(
                wrapped, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kwargs
            )
        self.processes.append(process)
        return process

    def resolver(self, host: str, nameserver: str) -> None:
        """Processes started in ``host`` from now on resolve names by DNS at ``nameserver``
        alone (an address in that host: a server the test runs there), no files but
        /etc/hosts, no other name service of this machine."""
        etc = NETNS_ETC / self.namespace(host)
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text(f"nameserver {nameserver}\noptions timeout:2 attempts:1\n")
        (etc / "nsswitch.conf").write_text("hosts: files dns\n")

    def thread(self, host: str) -> ThreadPoolExecutor:
        """A one-thread executor whose thread is in ``host``'s namespace: its sockets are."""
        path = str(NETNS_DIR / self.namespace(host))
        pool = ThreadPoolExecutor(1, initializer=_enter_namespace, initargs=(path,))
        self._threads.append(pool)
        return pool

    def in_namespace(self, process: subprocess.Popen, host: str) -> bool:
        """Whether ``process`` (or the command ``ip netns exec`` became) is in ``host``."""
        mine = os.stat(NETNS_DIR / self.namespace(host)).st_ino
        return os.stat(f"/proc/{process.pid}/ns/net").st_ino == mine

    def cut(self, host: str) -> None:
        """Take ``host``'s link to the switch down: nothing reaches it, it reaches nothing."""
        _ip("-n", self.switch, "link", "set", self._port(host), "down")

    def mend(self, host: str) -> None:
        _ip("-n", self.switch, "link", "set", self._port(host), "up")


def _enter_namespace(path: str) -> None:
    # os.setns is Python 3.12+; the network namespace is per thread, so this thread alone moves.
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)
