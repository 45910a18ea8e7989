"""The servers of the DNS rebinding test, run inside its network namespace
(tests/helpers/netns_rig.py).

    python rebinding_servers.py ADDRESS

- DNS on 127.0.0.1:53 (dnslib): a name under ``rebind.test`` answers ADDRESS (the
  namespace's own, playing a public one) to its first A query and 127.0.0.1 to every later
  one, as a rebinding attacker's name server does; a name under ``public.test`` always
  answers ADDRESS; AAAA queries get no answer; anything else is NXDOMAIN. TTL 0.
- A loopback-only service on 127.0.0.1:8080 that must never be read: it answers every GET
  with a secret and logs it.
- A "public" server on ADDRESS:8081: ``/hello`` answers with the Host header it got,
  ``/to?url=URL`` redirects to URL.

Every query and request is logged as one line on stdout; ``ready`` once all listen.
"""

from __future__ import annotations

import collections
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from dnslib import QTYPE, RCODE, RR, A, DNSRecord

LOOPBACK_PORT = 8080
PUBLIC_PORT = 8081
SECRET = "the loopback service's secret"


def log(line: str) -> None:
    print(line, flush=True)


def serve_dns(sock: socket.socket, address: str) -> None:
    asked: collections.Counter[str] = collections.Counter()
    while True:
        data, peer = sock.recvfrom(4096)
        try:
            request = DNSRecord.parse(data)
        except Exception:  # not DNS: nothing to answer
            continue
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        kind = QTYPE[request.q.qtype]
        answer = None
        if not name.endswith((".rebind.test", ".public.test")):
            reply.header.rcode = RCODE.NXDOMAIN
        elif kind == "A":
            asked[name] += 1
            first = asked[name] == 1 or name.endswith(".public.test")
            answer = address if first else "127.0.0.1"
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(answer), ttl=0))
        log(f"dns {name} {kind} -> {answer}")
        sock.sendto(reply.pack(), peer)


class Loopback(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        log(f"loopback GET {self.path}")
        body = SECRET.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class Public(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        log(f"public GET {self.path}")
        if parts.path == "/to":
            self.send_response(302)
            self.send_header("Location", parse_qs(parts.query)["url"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = f"hello, Host: {self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    address = sys.argv[1]
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 53))
    servers = [
        ThreadingHTTPServer(("127.0.0.1", LOOPBACK_PORT), Loopback),
        ThreadingHTTPServer((address, PUBLIC_PORT), Public),
    ]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    log("ready")
    serve_dns(dns, address)


if __name__ == "__main__":
    main()
