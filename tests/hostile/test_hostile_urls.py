"""A URL the HTTP client accepts is never refused by the plugin.

origin_of and Servers.declaration_for are called for every request the app sends. Whatever the URL's text
(an IPv6 zone, port 0, a host too long or spelt with `~`, `$` or `%41`), they return: the URL
matches no declaration (compatibility) and its record names a safe endpoint, one that passes the
record's allow-list and holds nothing of the URL's path, query or credentials.
"""

from __future__ import annotations

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_mcp_replay.declaration import COMPATIBILITY, declaration_of
from otel_mcp_replay.endpoints import NO_SERVERS, origin_of, servers_of
from otel_mcp_replay.record import is_endpoint

CANARY = "CANARY-url-5e21"
DECLARED = declaration_of({"label": "declared"})

# Each of these reaches the server through httpx2 without the plugin, and was refused with it.
ACCEPTED_BY_THE_CLIENT = [
    "http://[fe80::1%25eth0]:8080/mcp",  # an IPv6 zone id
    "http://h:0/mcp",  # port 0
    "http://" + "a" * 250 + ".example/mcp",  # a host over 253 characters
    "http://my~host/mcp",
    "http://host$name/mcp",
    "http://ex%41mple.com/mcp",
]


def servers() -> object:
    return servers_of({"http://h/mcp": DECLARED, "http://[fe80::1]:8080": DECLARED})


def assert_safe(endpoint: object) -> None:
    assert isinstance(endpoint, str) and is_endpoint(endpoint), endpoint
    assert CANARY.lower() not in endpoint.lower()
    for character in "@?#/%~$ ":
        assert character not in endpoint.partition("://")[2], endpoint


@pytest.mark.parametrize("url", ACCEPTED_BY_THE_CLIENT)
def test_a_url_the_client_sends_is_never_refused(url: str) -> None:
    sent = str(httpx2.Request("POST", url).url)  # the text the seam reads: the client's own spelling
    for text in (url, sent):
        assert_safe(origin_of(text))
        assert NO_SERVERS.declaration_for(text) is COMPATIBILITY
        assert servers().declaration_for(text) is COMPATIBILITY  # type: ignore[attr-defined]


def test_an_unparseable_url_is_named_unknown_and_a_parseable_one_by_its_origin() -> None:
    assert origin_of("http://[fe80::1%25eth0]:8080/mcp") == "unknown"
    assert origin_of("http://h:0/mcp") == "unknown"
    assert origin_of(f"ftp://user:{CANARY}@h/x?{CANARY}") == "unknown"
    assert origin_of(b"http://h/mcp") == "unknown"
    assert origin_of(f"https://user:{CANARY}@Example.com/{CANARY}?k={CANARY}") == "https://example.com:443"


url_texts = st.one_of(
    st.text(),
    st.builds(
        lambda scheme, userinfo, host, port, rest: f"{scheme}://{userinfo}{host}{port}{rest}",
        st.sampled_from(("http", "https", "HTTP", "ftp", "", "h t t p")),
        st.sampled_from(("", "user@", f"u:{CANARY}@", "@", "a@b@")),
        st.one_of(
            st.text(max_size=20),
            st.sampled_from(
                ("[fe80::1%25eth0]", "[::1", "[v1.x]", "[::ffff:1.2.3.4]", "bücher.de", "a" * 300)
            ),
        ),
        st.sampled_from(
            ("", ":", ":0", ":80", ":65536", ":-1", ":x", ":\u0663", ":\uff18\uff10", ":" + "9" * 50)
        ),
        st.text(max_size=12).map(lambda s: f"/{CANARY}{s}?{CANARY}#{CANARY}"),
    ),
)


@settings(max_examples=400, deadline=None)
@given(url_texts)
def test_origin_of_and_resolve_never_raise_and_name_only_a_safe_endpoint(url: str) -> None:
    assert_safe(origin_of(url))
    assert NO_SERVERS.declaration_for(url) is COMPATIBILITY
    found = servers().declaration_for(url)  # type: ignore[attr-defined]
    assert found is COMPATIBILITY or found is DECLARED
