"""The docker backend on an engine reached by ``DOCKER_HOST=tcp://...`` with TLS.

The engine is the one CI already runs, put behind a TLS endpoint on 127.0.0.1 that this test
makes (certificates from ``openssl``, client certificates required, each connection relayed
to the engine's socket): the docker client, and so the backend, talks TCP+TLS exactly as to a
remote engine. Files go in and out through the engine's API (no host path is shared), and a
client whose certificates do not match gets a clear error, never a plain-TCP fallback.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.docker_tls import TlsEngine, make_certificates
from helpers.sandbox import make_manager, needs_docker, run_once

from hermes_envgen.runtime.sandbox import SandboxError

pytestmark = [
    needs_docker,
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make certificates"),
]


@pytest.fixture
def tls_engine(tmp_path):
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip(f"the engine CI runs is at {host}, not a unix socket this test can relay")
    certificates = make_certificates(tmp_path / "certs", "engine")
    with TlsEngine(certificates, host.removeprefix("unix://")) as engine:
        engine.certificates = certificates
        yield engine


def remote(monkeypatch, engine: TlsEngine, cert_path: Path) -> str:
    url = f"tcp://127.0.0.1:{engine.port}"
    monkeypatch.setenv("DOCKER_HOST", url)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(cert_path))
    return url


def test_sandboxes_run_and_move_files_on_an_engine_over_tcp_and_tls(
    tls_engine, monkeypatch, tmp_path
):
    remote(monkeypatch, tls_engine, tls_engine.certificates / "client")
    manager = make_manager(tmp_path, "docker", command_timeout=30)
    blob = bytes(range(256)) * 16

    async def main():
        sandbox = manager.get("tls")
        ran = await sandbox.run("echo over tls > made.txt && cat made.txt && hostname")
        await sandbox.write_bytes("in/blob.bin", blob)
        sha = await sandbox.run("sha256sum in/blob.bin | cut -c1-64")
        back = await sandbox.read_bytes("made.txt")
        listed = await sandbox.list_files(".")
        await manager.close_all()
        return ran, sha, back, listed

    ran, sha, back, listed = asyncio.run(main())
    import hashlib

    assert ran.exit_code == 0 and ran.output == "over tls\nsandbox\n", ran
    assert sha.output.strip() == hashlib.sha256(blob).hexdigest()
    assert back == b"over tls\n" and sorted(listed) == ["in/blob.bin", "made.txt"]
    assert tls_engine.connections > 0 and tls_engine.refused == 0
    # the workspace never existed on this side: everything went through the engine's API
    assert not any(p.is_file() for p in (tmp_path / "docker").rglob("made.txt"))


def test_certificates_that_do_not_match_are_a_clear_error_not_plain_tcp(
    tls_engine, monkeypatch, tmp_path
):
    other = make_certificates(tmp_path / "other", "someone else")  # signed by another CA
    url = remote(monkeypatch, tls_engine, other / "client")
    manager = make_manager(tmp_path, "docker", command_timeout=30)
    with pytest.raises(SandboxError) as caught:
        run_once(manager, "tls")
    message = str(caught.value)
    assert "certificate" in message.lower(), message
    assert tls_engine.connections == 0  # nothing was relayed: no fallback to plain TCP

    # and the reachability check says the same, in one row
    done = subprocess.run(
        [sys.executable, "-m", "hermes_envgen", "check", "--reach-only", "--docker-host", url],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith(f"FAIL  docker {url}") and "certificate" in done.stdout.lower()
