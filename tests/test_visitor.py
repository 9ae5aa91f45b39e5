"""Who is on the server's own machine (editkit/core/visitor.py): every spelling of a loopback address is
local, every other address is not. A server listening on :: sees an IPv4 browser at 127.0.0.1 as
::ffff:127.0.0.1, which Python 3.11's ipaddress calls no loopback address: the teacher on the server's own
machine was refused teacher mode at http://127.0.0.1:PORT (issue 60.1)."""
import pytest

from editkit.core.visitor import is_loopback, visitor_of

LOOPBACK = ["127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "0:0:0:0:0:0:0:1", "[::1]",
            "::ffff:127.0.0.1", "::FFFF:127.0.0.1", "[::ffff:127.0.0.1]", "::ffff:7f00:1",
            "0:0:0:0:0:ffff:127.0.0.1", " 127.0.0.1 "]
OTHER = ["10.0.0.1", "192.168.1.20", "203.0.113.7", "::ffff:10.0.0.1", "::ffff:203.0.113.7", "2001:db8::1",
         "fe80::1", "::", "0.0.0.0", "::127.0.0.1", "unknown", "localhost", "", None,
         "127.0.0.1.evil.example"]


@pytest.mark.parametrize("address", LOOPBACK)
def test_every_loopback_spelling_is_local(address):
    assert is_loopback(address)
    v = visitor_of(address, {"host": "127.0.0.1:8501"})
    assert v.local and v.describe() == "this machine"


@pytest.mark.parametrize("address", OTHER)
def test_every_other_address_is_not(address):
    assert not is_loopback(address)
    assert not visitor_of(address, {"host": "127.0.0.1:8501"}).local


def test_an_ipv4_mapped_visitor_is_shown_and_counted_by_its_ipv4_address():
    v = visitor_of("::ffff:203.0.113.7", {"host": "x"})
    assert (v.address, v.local) == ("203.0.113.7", False) and v.describe() == "another machine (203.0.113.7)"
    assert visitor_of("2001:db8::1", {"host": "x"}).address == "2001:db8::1"


@pytest.mark.parametrize("forwarded,local", [("::ffff:127.0.0.1", True), ("::ffff:203.0.113.7", False),
                                             ("127.0.0.1, ::ffff:127.0.0.1", True)])
def test_a_proxy_on_the_mapped_loopback_is_judged_by_what_it_forwards(forwarded, local):
    v = visitor_of("::ffff:127.0.0.1", {"host": "x", "x-forwarded-for": forwarded})
    assert v.local == local
