"""The built-in key rules: which attribute keys hold a secret, a session id or a URL, by their words.

The rule: a key is read as words (split at anything not a letter or digit and at camelCase humps,
lower-cased); a key is sensitive when a word ends in a sensitive word, or two adjacent words make a
sensitive pair (a captured `Mcp-Param-*` header, a tool argument the SDK mirrors, is one). Word by
word, so `gen_ai.usage.input_tokens` or `http.request.resend_count` are left alone. Any other key is
added with OTEL_PYTHON_MCP_REPLAY_REDACT_KEYS. Plain string code, linear in the key (and each key is
classified once, then cached by the rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Final

SENSITIVE_WORD_ENDINGS: Final = (
    "authorization",
    "cookie",
    "cookies",
    "token",
    "secret",
    "secrets",
    "password",
    "passwords",
    "passwd",
    "pwd",
    "passphrase",
    "apikey",
    "apikeys",
    "privatekey",
    "accesskey",
    "credential",
    "credentials",
    "jwt",
    "bearer",
    "signature",  # x-hub-signature-256, x-amz-signature: a request signed with a secret
)
SENSITIVE_WORD_PAIRS: Final = frozenset(
    {
        ("api", "key"),
        ("private", "key"),
        ("access", "key"),
        ("secret", "key"),
        ("auth", "key"),
        ("session", "key"),
        ("subscription", "key"),  # Ocp-Apim-Subscription-Key
        ("functions", "key"),  # x-functions-key
        ("x", "auth"),  # X-Auth, X-Auth-Key, X-Auth-User: vendor authentication headers
        ("idempotency", "key"),
        ("connection", "string"),
        # A captured `Mcp-Param-*` request header: a tool argument the SDK mirrors into a header
        # (2026-07-28, `x-mcp-header`), an idempotency key among them; however the attribute spells
        # it (`http.request.header.mcp_param_account`, `...mcp-param-account`, `McpParamAccount`).
        ("mcp", "param"),
    }
)
# The same header run together (`http.request.header.mcpparamaccount`): a word that starts so.
MIRRORED_ARGUMENT_WORD_START: Final = "mcpparam"
URL_KEYS: Final = frozenset({"url.full", "http.url", "url.original", "http.target"})
URL_LAST_WORDS: Final = frozenset({"url", "uri", "referer", "referrer", "location"})
PARAM_KEYS: Final = frozenset({"url.query", "url.fragment"})
# The content other instrumentations record by default: tool arguments, results, messages. The
# GenAI conventions' opt-in content, as aws-opentelemetry-distro's MCP instrumentation writes it;
# and OpenLLMetry's (opentelemetry-instrumentation-mcp, on unless TRACELOOP_TRACE_CONTENT=false): a
# call's name and arguments, its result, a server's answer (and the request, named in its keys).
CONTENT_KEYS: Final = frozenset(
    {
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "traceloop.entity.input",
        "traceloop.entity.output",
        "mcp.request.argument",
        "mcp.response.value",
    }
)


def key_words(key: str) -> list[str]:
    """`http.request.header.X-APIKey_v2` -> [http, request, header, x, api, key, v, 2]."""
    words: list[str] = []
    start = 0  # where the current word began
    kind = ""  # the previous character's class: "U" upper, "l" lower, "d" digit, "" none
    for index, char in enumerate(key):
        if char.isascii() and char.isalpha():
            now = "U" if char.isupper() else "l"
        elif "0" <= char <= "9":
            now = "d"
        else:
            now = ""
        if now != kind:
            if now == "l" and kind == "U":
                if index - start > 1:  # `APIKey`: the last capital opens the next word
                    words.append(key[start : index - 1])
                    start = index - 1
            else:
                if kind:
                    words.append(key[start:index])
                start = index
        kind = now
    if kind:
        words.append(key[start:])
    return [word.lower() for word in words]


def is_sensitive(words: Sequence[str]) -> bool:
    if any(
        word.endswith(SENSITIVE_WORD_ENDINGS) or word.startswith(MIRRORED_ARGUMENT_WORD_START)
        for word in words
    ):
        return True
    return any(pair in SENSITIVE_WORD_PAIRS for pair in pairwise(words))


def is_session_id(words: Sequence[str]) -> bool:
    if any(word.endswith("sessionid") for word in words):
        return True
    return ("session", "id") in set(pairwise(words))


def is_url(key: str, words: Sequence[str]) -> bool:
    return key in URL_KEYS or bool(words and words[-1] in URL_LAST_WORDS)
