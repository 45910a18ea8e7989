"""The docker backend on an engine reached by ``DOCKER_HOST=tcp://...`` with TLS.

The engine is the one CI already runs, put behind a TLS endpoint on 127.0.0.1 that this test
makes (certificates from ``openssl``, client certificates required, each connection relayed
to the engine's socket): the docker client, and so the backend, talks TCP+TLS exactly as to a
remote engine. Files go in and out through the engine's API (no host path is shared), and a
client whose certificates do not match gets a clear error, never a plain-TCP fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers.sandbox import make_manager, needs_docker, run_once

from hermes_envgen.runtime.sandbox import SandboxError

pytestmark = [
    needs_docker,
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make certificates"),
]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(
    directory: Path, name: str, addresses: tuple[str, ...] = ("127.0.0.1",)
) -> Path:
    """A CA, a server certificate for ``addresses`` and a client one, in Docker's file names."""
    directory.mkdir(parents=True)
    days = ["-days", "2"]
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem",
             "-out", "ca.pem", "-subj", f"/CN={name} CA", *days, cwd=directory)  # fmt: skip
    names = ",".join(f"IP:{address}" for address in addresses)
    for who, extension in (("server", f"subjectAltName={names}"),
                           ("client", "extendedKeyUsage=clientAuth")):  # fmt: skip
        (directory / f"{who}.ext").write_text(extension + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}-key.pem",
                 "-out", f"{who}.csr", "-subj", f"/CN={name} {who}", cwd=directory)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                 "-CAcreateserial", "-out", f"{who}-cert.pem", "-extfile", f"{who}.ext",
                 *days, cwd=directory)  # fmt: skip
    client = directory / "client"  # what DOCKER_CERT_PATH names: ca.pem, cert.pem, key.pem
    client.mkdir()
    for source, target in (("ca.pem", "ca.pem"), ("client-cert.pem", "cert.pem"),
                           ("client-key.pem", "key.pem")):  # fmt: skip
        (client / target).write_bytes((directory / source).read_bytes())
    return directory


class TlsEngine:
    """A TLS endpoint on 127.0.0.1 relaying to the engine's unix socket, in threads.

    Blocking sockets, one thread per direction: ``docker exec`` closes its sending half when
    its input ends and reads the output after, which asyncio's TLS transport cannot relay.
    """

    def __init__(self, certificates: Path, engine_socket: str) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(
            certificates / "server-cert.pem", certificates / "server-key.pem"
        )
        self.context.load_verify_locations(certificates / "ca.pem")
        self.context.verify_mode = ssl.CERT_REQUIRED  # a client without our certificate: refused
        self.engine_socket = engine_socket
        self.connections = 0  # relayed, after a handshake that passed
        self.refused = 0  # handshakes that failed
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> TlsEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        self._thread.join(10)

    def _accept(self) -> None:
        while True:
            try:
                plain, _ = self._listener.accept()
            except OSError:
                return  # closed: the test is over
            threading.Thread(target=self._serve, args=(plain,), daemon=True).start()

    def _serve(self, plain: socket.socket) -> None:
        plain.settimeout(60)
        try:
            client = self.context.wrap_socket(plain, server_side=True)
        except (ssl.SSLError, OSError):
            self.refused += 1
            plain.close()
            return
        self.connections += 1
        engine = socket.socket(socket.AF_UNIX)
        engine.connect(self.engine_socket)
        client.settimeout(None)
        back = threading.Thread(target=_pipe, args=(engine, client, False), daemon=True)
        back.start()
        _pipe(client, engine, True)
        back.join(120)
        for end in (client, engine):
            end.close()


def _pipe(source: socket.socket, target: socket.socket, half_close: bool) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    if half_close:  # the client is done sending: tell the engine, keep its answer coming
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


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
