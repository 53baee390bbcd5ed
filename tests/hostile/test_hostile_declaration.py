"""A value written where a tool name belongs is counted in a refusal, never shown.

A credential URL or `password=...` where a tool name belongs (the servers table forgotten, a value
pasted in the wrong place) reached the ERROR log and the exception quoted. A refusal now shows a
tool name only when it is a plain name (`charge`, `web.fetch`); any other is named by its ordinal.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import pytest

from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay.config import configuration_of
from otel_mcp_replay.endpoints import servers_of

CANARY = "CANARY-tool-61c4"
ENDPOINT = "http://127.0.0.1:9/mcp"


@pytest.fixture
def errors(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], str]]:
    with caplog.at_level(logging.DEBUG, logger="otel_mcp_replay"):
        yield lambda: "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


def every_text_of(error: BaseException) -> str:
    texts = [str(error), repr(error), repr(error.args), repr(vars(error))]
    for chained in (error.__cause__, error.__context__):
        if chained is not None:
            texts.append(every_text_of(chained))
    return "\n".join(texts)


VALUE_LIKE_TOOL_NAMES = [
    f"https://user:{CANARY}@x/",
    f"password={CANARY}",
    f"Bearer {CANARY}",
    f"{CANARY}:{CANARY}",
    f"api_key={CANARY}&x=1",
    f"sk.{CANARY}/x",
]


@pytest.mark.parametrize("name", VALUE_LIKE_TOOL_NAMES)
def test_a_value_like_tool_name_is_counted_not_shown(name: str) -> None:
    raw = {ENDPOINT: {"tools": {"search": {}, name: {"on": ["throttle", "never"]}}}}
    with pytest.raises(ValueError) as caught:
        servers_of(raw)
    assert caught.value.field == "servers[0].tools[1].on[1]"  # type: ignore[attr-defined]
    assert CANARY not in every_text_of(caught.value)
    with pytest.raises(TypeError) as caught_type:
        servers_of({ENDPOINT: {"tools": {name: {"chnages": True}}}})
    assert caught_type.value.field == "servers[0].tools[0].chnages"  # type: ignore[attr-defined]
    assert CANARY not in every_text_of(caught_type.value)


@pytest.mark.parametrize("name", VALUE_LIKE_TOOL_NAMES)
def test_a_value_like_tool_name_never_reaches_the_error_log(name: str, errors: Callable[[], str]) -> None:
    declared = {ENDPOINT: {"tools": {name: {"on": "throttle"}}}}
    resolved = configuration_of({}, {ev.OTEL_PYTHON_MCP_REPLAY_SERVERS: json.dumps(declared)})
    assert resolved.fail_closed
    logged = errors()
    assert f"{ev.OTEL_PYTHON_MCP_REPLAY_SERVERS}[0].tools[0].on" in logged, logged
    assert CANARY not in logged


def test_plain_and_dotted_tool_names_are_still_named() -> None:
    for name, path in (("charge", "tools.charge.on"), ("web.fetch", 'tools["web.fetch"].on')):
        with pytest.raises(TypeError) as caught:
            servers_of({ENDPOINT: {"tools": {name: {"on": "throttle"}}}})
        assert caught.value.field == f"servers[0].{path}"  # type: ignore[attr-defined]
