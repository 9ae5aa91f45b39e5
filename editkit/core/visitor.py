"""Who is asking: a browser on the server's own machine ("local"), or a visitor from another address.

    v = visitor_of(peer="127.0.0.1", headers={"host": "..."})   # Visitor(address="127.0.0.1", local=True)
    v = visitor_of(peer=None, headers={})                         # no connection (a test, a script): local

The peer is the TCP address the server saw. Streamlit's server (uvicorn) already replaces a loopback peer by
the address in X-Forwarded-For when a proxy on the same machine forwards a request (uvicorn's
forwarded_allow_ips, default 127.0.0.1; set FORWARDED_ALLOW_IPS for a proxy elsewhere). A loopback peer that
still carries forwarding headers (a proxy that uvicorn does not trust, e.g. over ::1) counts as local only
when every forwarded address is a loopback one too: a header can make a request less trusted, never more,
because a direct visitor from another machine is judged by its own peer address, whatever headers it sends. A
server listening on :: sees an IPv4 browser as an IPv4-mapped address (::ffff:127.0.0.1): that is the IPv4
address it carries, loopback included.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

FORWARDED = ("x-forwarded-for", "x-real-ip", "forwarded")


@dataclass(frozen=True)
class Visitor:
    """The client of one session: its address as the server sees it (None: no connection at all) and whether
    it is a browser on the server's own machine."""

    address: str | None
    local: bool

    def describe(self) -> str:
        if self.address is None:
            return "this process (no network connection)" if self.local else "an unknown address"
        return "this machine" if self.local else f"another machine ({self.address})"


def _ip(address: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address as an IP; an IPv4-mapped IPv6 one (::ffff:127.0.0.1, what a server listening on :: sees
    of an IPv4 browser) as the IPv4 address it carries; None for anything else ("unknown", a host name)."""
    try:
        ip = ipaddress.ip_address((address or "").strip().strip("[]"))
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)  # Python 3.11 calls ::ffff:127.0.0.1 no loopback address
    return mapped if mapped is not None else ip


def is_loopback(address: str | None) -> bool:
    """127.0.0.0/8, ::1 and both as an IPv4-mapped IPv6 address (::ffff:127.0.0.1), in any spelling."""
    ip = _ip(address)
    return ip is not None and ip.is_loopback


def shown(address: str) -> str:
    """How the address is shown and counted (limits per remote address): an IPv4-mapped one as its IPv4
    address, so one browser is one visitor whichever way the server listens."""
    ip = _ip(address)
    return address if ip is None or ip.version == 6 else str(ip)


def forwarded_addresses(headers: Any) -> list[str]:
    """Every client address named by the forwarding headers (X-Forwarded-For, X-Real-IP, Forwarded for=)."""
    pairs = headers.items() if hasattr(headers, "items") else headers
    out = []
    for name, value in pairs:
        name = str(name).lower()
        if name not in FORWARDED:
            continue
        if name == "forwarded":
            out += [m.strip('"[]') for m in re.findall(r'for=("?\[?[^;,"\]]*\]?"?)', str(value), re.I)]
        else:
            out += [v.strip() for v in str(value).split(",")]
    return [a.rsplit(":", 1)[0] if a.count(":") == 1 else a for a in out if a]


def visitor_of(peer: str | None, headers: Any, connected: bool | None = None) -> Visitor:
    """The Visitor of a connection from `peer` with these request headers. `connected`: whether there is a
    network connection at all (default: whether any header came); without one the code runs in this process (a
    test, a script) and is local; with one but no peer address it is not."""
    headers = list(headers.items() if hasattr(headers, "items") else headers or [])
    connected = bool(headers) if connected is None else connected
    if not connected:
        return Visitor(None, True)
    if not isinstance(peer, str) or not peer:
        return Visitor(None, False)
    forwarded = forwarded_addresses(headers)
    local = is_loopback(peer) and all(is_loopback(a) for a in forwarded)
    address = next((a for a in reversed(forwarded) if not is_loopback(a)), peer) if forwarded else peer
    return Visitor(shown(address), local)
