"""The one check of a server URL kconvert is given (`verify --server URL`), before anything is sent to it.

httpx refuses a URL holding a control character or a bad port with its own exception (`InvalidURL: Invalid
non-printable ASCII character in URL`), which reached the user as a kconvert bug (exit 70, issue #45 class 6). Here
every such URL is a usage error (exit 2) with one line naming the option, the URL shown escaped.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from kconvert.errors import UsageError
from kconvert.guard.text import visible

EXAMPLE = "http://localhost:8000"


def server_url(url: str, option: str = "--server") -> str:
    """`url` if it is an http(s) URL with a host and a valid port and no whitespace or control character; else a
    UsageError naming `option`."""
    shown = visible(url)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise UsageError(f"{option} {shown}: give the server's http:// or https:// URL, e.g. {EXAMPLE}")
    # urlsplit keeps controls and whitespace; any of them (C0, DEL, C1, Unicode line breaks, spaces) is no URL
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise UsageError(f"{option} {shown}: a URL holds no whitespace or control character")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as e:
        raise UsageError(f"{option} {shown}: not a URL ({visible(str(e))})") from None
    if not parts.hostname:
        raise UsageError(f"{option} {shown}: no host; give the server's URL, e.g. {EXAMPLE}")
    return url


__all__ = ["server_url"]
