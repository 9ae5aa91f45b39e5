"""Who is asking: a browser on the server's own machine ("local"), or a visitor from another address.

    v = visitor_of(peer="127.0.0.1", headers={"host": "..."})   # Visitor(address="127.0.0.1", local=True)
    v = visitor_of(peer=None, headers={})                         # no connection (a test, a script): local

The peer is the TCP address the server saw. Streamlit's server (uvicorn) already replaces a loopback peer by the
address in X-Forwarded-For when a proxy on the same machine forwards a request (uvicorn's forwarded_allow_ips,
default 127.0.0.1; set FORWARDED_ALLOW_IPS for a proxy elsewhere). A loopback peer that still carries forwarding
headers (a proxy that uvicorn does not trust, e.g. over ::1) counts as local only when every forwarded address is
a loopback one too: a header can make a request less trusted, never more, because a direct visitor from another
machine is judged by its own peer address, whatever headers it sends.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

FORWARDED = ("x-forwarded-for", "x-real-ip", "forwarded")


@dataclass(frozen=True)
class Visitor:
    """The client of one session: its address as the server sees it (None: no connection at all) and whether it
    is a browser on the server's own machine."""

    address: str | None
    local: bool

    def describe(self) -> str:
        if self.address is None:
            return "this process (no network connection)" if self.local else "an unknown address"
        return "this machine" if self.local else f"another machine ({self.address})"


def is_loopback(address: str | None) -> bool:
    try:
        return ipaddress.ip_address((address or "").strip().strip("[]")).is_loopback
    except ValueError:
        return False


def forwarded_addresses(headers) -> list[str]:
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


def visitor_of(peer: str | None, headers, connected: bool | None = None) -> Visitor:
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
    shown = next((a for a in reversed(forwarded) if not is_loopback(a)), peer) if forwarded else peer
    return Visitor(shown, local)
