"""Adapters: the one refusal a named service documents as retryable, recognised by code, never by prose.

A refusal is `session-busy` only when the app named the service behind the endpoint (`adapter`) and
the reply carries that service's documented status AND error code. A loose substring of a body is
never enough: a server behind the service could write any words after it ran the call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

# Amazon Bedrock AgentCore Runtime: HTTP 409 whose error type is RetryableConflictException, in the
# x-amzn-ErrorType header (AWS appends ":<documentation url>" there) or the JSON body's __type/code.
_AGENTCORE_STATUS = 409
_AGENTCORE_CODE = "RetryableConflictException"
_MAX_REFUSAL_BODY = 64 * 1024  # a refusal's body is read for its error code, never further


def _aws_error_type(value: str) -> str:
    # "RetryableConflictException:http://internal.amazon.com/..." and "aws.protocol#Name" forms
    return value.split(":", 1)[0].rsplit("#", 1)[-1].strip()


async def _agentcore(status: int, headers: Mapping[str, str], body: Callable[[], Awaitable[bytes]]) -> bool:
    if status != _AGENTCORE_STATUS:
        return False
    header = headers.get("x-amzn-errortype")
    if header is not None:
        return _aws_error_type(header) == _AGENTCORE_CODE
    if not headers.get("content-type", "").lower().startswith("application/json"):
        return False
    try:
        parsed = json.loads(await body())
    except (ValueError, RecursionError):
        return False
    if type(parsed) is not dict:
        return False
    for field in ("__type", "code"):
        value = parsed.get(field)
        if type(value) is str and _aws_error_type(value) == _AGENTCORE_CODE:
            return True
    return False


RECOGNISERS: Mapping[
    str, Callable[[int, Mapping[str, str], Callable[[], Awaitable[bytes]]], Awaitable[bool]]
] = {
    "agentcore-runtime": _agentcore,
}


async def recognises_session_busy(
    adapter: str, status: int, headers: Mapping[str, str], body: Callable[[], Awaitable[bytes]]
) -> bool:
    recogniser = RECOGNISERS.get(adapter)
    return recogniser is not None and await recogniser(status, headers, body)


async def session_busy(adapter: str, response: Any) -> bool:
    """Whether an HTTP response (the client library's) is `adapter`'s refusal: its status, its
    headers, and its body read only when asked, and never past _MAX_REFUSAL_BODY."""

    async def body() -> bytes:
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > _MAX_REFUSAL_BODY:
            return b""
        try:
            content: bytes = await response.aread()
            return content
        except Exception:  # the client's TransportError: no body is no refusal
            return b""

    return await recognises_session_busy(adapter, response.status_code, response.headers, body)
