"""A pool of Docker engines (``sandbox_docker_hosts``): where a new sandbox starts, and which
engines are out for now.

Each sandbox picks its engine once, when its container starts, and keeps it: every docker
command of that container gets ``--host`` (the TLS environment, ``DOCKER_TLS_VERIFY`` and
``DOCKER_CERT_PATH``, applies to each ``tcp://`` engine). The engine with the fewest open
sandboxes is picked, ties in turn: sandboxes live as long as their rollouts, which differ, so
counting what is open keeps the engines level where plain turns would pile long rollouts on
one, and an engine back from an outage takes the new sandboxes until it is level again.

An engine that fails (no answer, refused, a TLS handshake that does not match, the CLI
timing out) is out for ``OUT_SECONDS``, logged once per outage in one line naming it and why;
the start goes on to the next engine. With every engine out, the start fails naming them.
A start on a ``tcp://`` engine first opens a TCP connection to it, within ``CONNECT_TIMEOUT``:
an engine whose packets are dropped (a host gone dark) is out in seconds, where the docker CLI
would wait for the operating system to give up.
One pool per list of hosts per process: every sandbox of the run shares what it knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from hermes_envgen.runtime.errors import EnvConfigError, SandboxUnavailable
from hermes_envgen.runtime.sandbox.base import TIMEOUT_EXIT_CODE

logger = logging.getLogger(__name__)

OUT_SECONDS = 30.0  # an engine that failed gets no new sandbox for this long
CHECK_TIMEOUT = 10.0  # seconds the start-up check gives each engine
CONNECT_TIMEOUT = 5.0  # seconds a start gives a network engine to accept a TCP connection
# What the docker CLI says when the engine itself cannot be used (as opposed to a container
# or image problem): it does not answer, refuses, or the TLS handshake fails.
# Lower case: matched against the lower-cased output.
ENGINE_FAILURES = (
    "cannot connect to the docker daemon",
    "error during connect",
    "connection refused",
    "no such host",
    "i/o timeout",
    "tls:",
    "x509:",
    "failed to initialize",  # the CLI could not set up the endpoint (certificates missing)
)
SCHEMES = ("unix://", "tcp://", "ssh://", "npipe://", "fd://")


def engine_failure(code: int, output: str) -> str | None:
    """Why a docker CLI call's failure means its engine is unusable (one line), or None."""
    if code == TIMEOUT_EXIT_CODE:
        return output.strip().splitlines()[-1] if output.strip() else "the docker CLI timed out"
    if code == 0:
        return None
    for line in output.splitlines():
        if any(marker in line.lower() for marker in ENGINE_FAILURES):
            return line.strip()[:200]
    return None


async def connect_failure(host: str, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """Why a TCP connection to a ``tcp://`` engine cannot be opened within ``timeout`` (one
    line), or None: it accepts, or it is not a ``tcp://`` one (an ``ssh://`` host may be an
    alias of the ssh configuration, and ssh has a ConnectTimeout of its own)."""
    url = urlsplit(host)
    if url.scheme != "tcp" or not url.hostname:
        return None
    try:  # the docker CLI's default ports: 2376 with TLS, else 2375
        port = url.port or (2376 if os.environ.get("DOCKER_TLS_VERIFY") else 2375)
    except ValueError:  # a port out of range: the docker CLI says what is wrong with it
        return None
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(url.hostname, port), timeout)
    except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
        return f"no TCP connection to {url.hostname}:{port} within {timeout:g} s"
    except OSError as exc:  # asyncio's message names the address again: the errno's says why
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        return f"no TCP connection to {url.hostname}:{port}: {why}"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


def is_local(host: str | None) -> bool:
    """Whether an engine runs on this machine (its containers' processes are ours to see)."""
    host = os.environ.get("DOCKER_HOST") if host is None else host
    return not host or host.startswith("unix://")


@dataclass
class Engine:
    host: str
    open: int = 0  # sandboxes picked for it and not yet released
    out_until: float = 0.0  # monotonic time it is back in
    why: str = ""  # why it is out; kept until it works again, so an outage is logged once


class EnginePool:
    """The engines of ``sandbox_docker_hosts``: which one a new sandbox starts on."""

    def __init__(self, hosts: list[str]) -> None:
        self.engines = [Engine(host) for host in dict.fromkeys(hosts)]
        self._turn = 0

    @property
    def hosts(self) -> list[str]:
        return [engine.host for engine in self.engines]

    def pick(self, tried: set[str]) -> str:
        """The engine a sandbox starts on (counted open until ``release``), not one in ``tried``."""
        now = time.monotonic()
        usable = [
            (index, engine)
            for index, engine in enumerate(self.engines)
            if engine.host not in tried and engine.out_until <= now
        ]
        if not usable:
            raise SandboxUnavailable(self._none_left(tried))
        count = len(self.engines)
        index, engine = min(usable, key=lambda pair: (pair[1].open, (pair[0] - self._turn) % count))
        self._turn = (index + 1) % count
        engine.open += 1
        return engine.host

    def release(self, host: str) -> None:
        """A sandbox of ``host`` is gone (or never started)."""
        engine = self._engine(host)
        engine.open = max(0, engine.open - 1)

    def working(self, host: str) -> None:
        """A container started on ``host``: the engine is in (said if it was out)."""
        engine = self._engine(host)
        if engine.why:
            logger.warning("docker engine %s is back in", host)
            engine.why = ""

    def out(self, host: str, why: str) -> None:
        """Take ``host`` out for ``OUT_SECONDS``: no new sandbox starts on it meanwhile."""
        engine = self._engine(host)
        now = time.monotonic()
        if engine.out_until > now:
            return  # out already (another sandbox of it found out first)
        if not engine.why:  # a new outage: said once, not at each retry after it
            logger.warning("docker engine %s is out for %g s: %s", host, OUT_SECONDS, why)
        engine.why = why
        engine.out_until = now + OUT_SECONDS

    def _none_left(self, tried: set[str]) -> str:
        reasons = [
            f"{e.host} ({e.why or 'failed'})" for e in self.engines if e.why or e.host in tried
        ]
        return (
            "docker backend: no engine of sandbox_docker_hosts can start a sandbox, every one "
            f"is out: {'; '.join(reasons)}"
        )

    def _engine(self, host: str) -> Engine:
        return next(engine for engine in self.engines if engine.host == host)


_POOLS: dict[tuple[str, ...], EnginePool] = {}


def pool_of(hosts: list[str] | tuple[str, ...]) -> EnginePool | None:
    """The process's pool of these engines (None for none: the environment's DOCKER_HOST)."""
    if not hosts:
        return None
    key = tuple(hosts)
    if key not in _POOLS:
        _POOLS[key] = EnginePool(list(hosts))
    return _POOLS[key]


def check_hosts(hosts: list[str]) -> None:
    """At start-up: every engine of the pool is a Docker host URL and answers, within seconds.

    Raises EnvConfigError naming those that do not (one line), so the run stops with exit 2.
    """
    bad = [host for host in hosts if not host.startswith(SCHEMES)]
    if bad:
        raise EnvConfigError(
            f"sandbox_docker_hosts: {', '.join(bad)} is not a Docker host URL "
            "(unix:///path, tcp://host:port or ssh://user@host)"
        )
    with ThreadPoolExecutor(max_workers=min(8, len(hosts) or 1)) as threads:
        answers = list(threads.map(engine_answer, hosts))
    failed = [f"{host} ({why})" for host, why in zip(hosts, answers, strict=True) if why]
    if failed:
        raise EnvConfigError(
            f"the Docker engine(s) of sandbox_docker_hosts cannot be reached from "
            f"{socket.gethostname()}: {'; '.join(failed)}; start them, or leave them out"
        )


def engine_answer(host: str, timeout: float = CHECK_TIMEOUT) -> str | None:
    """Why ``docker version`` gets no server answer from ``host`` (one line), or None."""
    try:
        done = subprocess.run(
            ["docker", "--host", host, "version", "--format", "{{.Server.Version}}"],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except FileNotFoundError:
        return "no docker CLI on PATH (Debian: apt-get install docker.io)"
    except subprocess.TimeoutExpired:
        return f"no answer within {timeout:g} s"
    if done.returncode != 0 or not done.stdout.strip():
        lines = (done.stderr.strip() or "docker version failed").splitlines()
        return lines[-1][:200]
    return None
