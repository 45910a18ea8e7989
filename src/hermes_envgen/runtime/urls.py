"""Whether a URL names this machine, and whether two URLs name the same server.

One answer for every place that asks (the env's API-key check, the judge's, the rollout
server's): every name of this machine counts alike, IPv4 (``127.0.0.0/8``, ``0.0.0.0``),
IPv6 (``::1``, ``::``, ``::ffff:127.0.0.1``) and ``localhost`` (and its subdomains, which
resolve to loopback by RFC 6761).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOCALHOST = "localhost"


def host_port(url: str) -> tuple[str, int | None]:
    """``(host, port)`` of a URL, every name of this machine as ``localhost``.

    A URL without a scheme is read as ``http://``; the port is the scheme's default when
    absent, None when it is not a number.
    """
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = (parts.hostname or "").lower()
    if _names_this_machine(host):
        host = LOCALHOST
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    return host, port


def is_local(url: str) -> bool:
    """True for a URL on this machine (localhost, 127.x, 0.0.0.0, ::1, ::)."""
    return host_port(url)[0] == LOCALHOST


def same_server(url: str, other: str) -> bool:
    """True when two URLs name the same host and port (localhost, 127.0.0.1 and ::1 alike)."""
    return host_port(url) == host_port(other)


def _names_this_machine(host: str) -> bool:
    host = host.rstrip(".")
    if host == LOCALHOST or host.endswith(f".{LOCALHOST}"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a host name: only DNS knows, and a remote one is the safe guess
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified
