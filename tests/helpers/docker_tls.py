"""A Docker engine behind TLS on 127.0.0.1 with certificates made here (tests, a benchmark)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
from pathlib import Path


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
