"""What reaching the Docker engine over TCP+TLS costs against its local socket, in one run.

The same engine twice: at its unix socket, and behind the TLS relay of
tests/runtime/sandbox/test_docker_tls.py (certificates made with openssl, client certificates
required), as ``DOCKER_HOST=tcp://127.0.0.1:PORT`` with ``DOCKER_TLS_VERIFY=1``. Rounds
alternate the two; each times a sandbox start (first command included, then the container
removed) and ``true`` run ``--commands`` times in one sandbox. Reported: the medians per start
and per command, and the TLS / socket ratio. The relay is a Python process on the same
machine, so the figure is the client's TCP+TLS cost plus the relay's, without a network.

    .venv/bin/python benchmarks/bench_remote_engine.py [--rounds 5] [--commands 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.docker_tls import TlsEngine, make_certificates

from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings

TLS_VARIABLES = ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")


async def one_round(image: str, root: Path, commands: int) -> tuple[float, float]:
    manager = SandboxManager(SandboxSettings(backend="docker", root=str(root), docker_image=image))
    start = time.perf_counter()
    sandbox = manager.get("bench")
    await sandbox.run("true")
    started = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(commands):
        await sandbox.run("true")
    per_command = (time.perf_counter() - start) / commands
    await manager.close_all()
    return started, per_command


def measure(
    settings: dict[str, dict[str, str]], image: str, work: Path, rounds: int, commands: int
) -> dict[str, tuple[float, float]]:
    """Median seconds per sandbox start and per command under each of ``settings``.

    ``settings`` names the docker client's variables (``DOCKER_HOST`` and the TLS ones) of
    each way to reach an engine; rounds alternate them, so a change of load hits them alike.
    bench_multihost.py measures its rig's engines with this too.
    """
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in settings}
    saved = {key: os.environ.get(key) for key in TLS_VARIABLES}
    try:
        for number in range(rounds):
            for name, variables in settings.items():
                for key in TLS_VARIABLES:
                    os.environ.pop(key, None)
                os.environ.update(variables)
                root = work / f"{name}-{number}"
                results[name].append(asyncio.run(one_round(image, root, commands)))
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value
    return {
        name: (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
        for name, rows in results.items()
    }


def report(medians: dict[str, tuple[float, float]]) -> None:
    """One line per way (ms per start and per command), then each against the first."""
    for name, (start, command) in medians.items():
        print(f"{name:8} start {start * 1000:7.0f} ms   command {command * 1000:6.1f} ms")
    (base, (start_b, command_b)), *others = medians.items()
    for name, (start, command) in others:
        print(f"{name} / {base}: start {start / start_b:.2f}, command {command / command_b:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commands", type=int, default=20)
    parser.add_argument("--docker-image", default=os.environ.get("HERMES_ENVGEN_TEST_DOCKER_IMAGE"))
    args = parser.parse_args()
    local = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not local.startswith("unix://") or not args.docker_image:
        sys.exit("needs DOCKER_HOST=unix://... and --docker-image (or the tests' image variable)")
    work = Path(tempfile.mkdtemp(prefix="bench-remote-engine-"))
    certificates = make_certificates(work / "certs", "bench")
    with TlsEngine(certificates, local.removeprefix("unix://")) as relay:
        settings = {
            "socket": {"DOCKER_HOST": local},
            "tcp+tls": {
                "DOCKER_HOST": f"tcp://127.0.0.1:{relay.port}",
                "DOCKER_TLS_VERIFY": "1",
                "DOCKER_CERT_PATH": str(certificates / "client"),
            },
        }
        report(measure(settings, args.docker_image, work, args.rounds, args.commands))


if __name__ == "__main__":
    main()
