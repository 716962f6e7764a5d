"""Which address clients dial for a listener, and whether a listener is exposed beyond this machine.

`edgeagent sim --bind 0.0.0.0` listens on every interface, but `0.0.0.0` is not an address anyone can connect
to by name: kubeconfigs and start-up text must name one that works (loopback, on this machine). A non-loopback
bind without authorization hands the whole simulated cluster to anyone who can reach it, so it is warned about.
"""

from __future__ import annotations

import ipaddress


def client_host(bind: str) -> str:
    """The host to dial for a server bound to `bind`: a wildcard bind is reached on loopback."""
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        return bind
    if address.is_unspecified:
        return "127.0.0.1" if address.version == 4 else "::1"
    return bind


def url_host(host: str) -> str:
    """`host` as written in a URL (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def is_loopback(bind: str) -> bool:
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def exposure_warning(bind: str, authorization: str) -> str | None:
    """The warning for a listener others can reach while anyone may do anything, else None."""
    if is_loopback(bind) or authorization != "none":
        return None
    return (f"--bind {bind} with --authorization none: anyone who can reach this address may read and change "
            "everything in the simulated cluster; use --authorization rbac, or keep the default --bind 127.0.0.1")
