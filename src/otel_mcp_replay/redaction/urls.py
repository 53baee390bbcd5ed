"""URL masking: scheme, host, port and path kept; userinfo, query values and fragment values masked.

The rule: a URL loses what can carry a credential (its userinfo, every query and fragment value)
and keeps what says where the request went. Written with string methods only (each a linear pass),
plus one RE2 pattern that finds URLs quoted in free text: linear time in the text, whoever wrote it.
"""

from __future__ import annotations

from string import ascii_letters, digits
from typing import Final

from otel_mcp_replay.redaction.user_rules import compile_re2

URL_MASK: Final = "REDACTED"  # the word opentelemetry-util-http already writes into URLs

_SCHEME_TAIL: Final = ascii_letters + digits + "+.-"
# A scheme, `://` and what follows up to a space, quote or bracket (Python's str whitespace too).
_URL_IN_TEXT: Final = compile_re2(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\v\x{1c}-\x{1f}\x{85}\p{Z}'\"<>`]+")


def mask_params(text: str) -> str:
    """Each `k=v` keeps k and loses v; an item without `=` is masked whole; empty values stay empty."""
    if not text:
        return text
    return "&".join(";".join(map(_mask_param, chunk.split(";"))) for chunk in text.split("&"))


def _mask_param(part: str) -> str:
    if not part:
        return part
    name, equals, value = part.partition("=")
    if not equals:
        return URL_MASK
    return f"{name}={URL_MASK}" if value else part


def _scheme_end(url: str) -> int:
    """Where a leading `scheme://` ends, or -1 when the URL does not start with one."""
    separator = url.find("://")
    if separator <= 0 or not ("a" <= url[0].lower() <= "z") or url[1:separator].strip(_SCHEME_TAIL):
        return -1
    return separator + 3


def _is_port(text: str) -> bool:
    return not text or (text.isascii() and text.isdigit())


def mask_url(url: str) -> str:
    """Scheme, host, port and path kept; userinfo, query values and fragment values REDACTED.

    Never raises: a string that is not a URL is read as `authority/path?query#fragment` as far as
    it goes. Userinfo holding an unescaped `/` is not a URL by RFC 3986 and is read as a path.
    """
    if "@" not in url and "?" not in url and "#" not in url:
        return url  # no userinfo, query or fragment: nothing below would change
    start = _scheme_end(url)
    if start < 0:
        if url.startswith("//"):
            start = 2
        elif not url.startswith("/"):
            start = 0  # no scheme: a bare `user:pass@host/...` is still read as having an authority
    if start >= 0:
        end = len(url)
        for stop in "/?#":
            found = url.find(stop, start, end)
            if found >= 0:
                end = found
        at = url.rfind("@", start, end)
        if at < 0:
            # `user:pa?ss@host`: an unescaped ? or # inside a password ends the RFC authority
            # early. A colon followed by something that is not a port means userinfo: reach on
            # to the last @ before the path.
            colon = url.find(":", start, end)
            if colon >= 0 and not _is_port(url[colon + 1 : end]):
                slash = url.find("/", start)
                at = url.rfind("@", start, len(url) if slash < 0 else slash)
        if at >= 0:
            userinfo = url[start:at]
            masked = f"{URL_MASK}:{URL_MASK}" if ":" in userinfo else URL_MASK
            url = url[:start] + masked + url[at:]
    rest, hash_sign, fragment = url.partition("#")
    head, question, query = rest.partition("?")
    out = head
    if question:
        out += "?" + mask_params(query)
    if hash_sign:
        out += "#" + mask_params(fragment)
    return out


def mask_urls_in_text(text: str) -> str:
    """Every `scheme://...` quoted in `text` masked as mask_url masks a URL."""
    return _URL_IN_TEXT.sub(lambda match: mask_url(match.group()), text)
