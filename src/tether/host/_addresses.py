"""Which network addresses are this machine's or its local network's (S15, WebFetch).

A URL whose host is loopback, link-local (the cloud metadata address 169.254.169.254
among them), private, unspecified, or a `localhost` name reaches places a page on the
internet cannot: the permission rules ask before WebFetch goes there. This module only
classifies hosts and addresses; it resolves nothing and decides nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("PINNED_FIELD", "local_address", "local_host")

PINNED_FIELD: Final = "_addresses"
"""The input field where the host puts the addresses a URL's host resolved to, once,
before the rules judge the call; WebFetch connects to the first of them."""

_LOCAL_NAMES: Final = ("localhost", "localhost.localdomain")


def _kind(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped or ip.sixtofour
        if mapped is not None:
            return _kind(mapped)
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_private:
        return "private"
    return None


def local_address(address: str) -> str | None:
    """Say what kind of local address `address` is (`loopback`, ...), or None.

    IPv6 zone ids (`fe80::1%eth0`) and brackets are accepted; IPv4 in the short forms
    the C library also accepts (`127.1`, `2130706433`, `0x7f.1`) is judged as the
    address it means. Anything that is no address is None.
    """
    text = address.strip().strip("[]").split("%", 1)[0]
    try:
        return _kind(ipaddress.ip_address(text))
    except ValueError:
        pass
    if ":" in text or not text:
        return None
    try:
        packed = socket.inet_aton(text)
    except OSError:
        return None
    return _kind(ipaddress.IPv4Address(packed))


def local_host(host: str, addresses: Iterable[str] = ()) -> str | None:
    """Say why a URL host is local (a `localhost` name, or its address's kind), or None.

    `addresses` are what the name resolved to; any local one makes the host local, so
    a name cannot hide a local address among public ones.
    """
    name = host.strip().rstrip(".").lower()
    if name in _LOCAL_NAMES or name.endswith(".localhost"):
        return "a localhost name"
    kind = local_address(name)
    if kind is not None:
        return f"a {kind} address"
    for address in addresses:
        kind = local_address(address)
        if kind is not None:
            return f"a name resolving to {address}, a {kind} address"
    return None
