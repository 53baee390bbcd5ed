"""Fuzzed declarations, settings and environment values (hypothesis).

Every generated value is known valid or invalid by construction, and some carry a planted canary
(a string, an int, a float, an object whose repr is the canary) in a VALUE, never in a field name
(field names are what refusals name, by design). The properties:
- `servers_of`, `settings_of` and `instrument()` accept exactly the valid inputs and refuse the
  others with TypeError or ValueError only, never echoing a planted value: not in the message, the
  args, the repr, nor anywhere along the __cause__/__context__ chain.
- `config.configuration_of({}, environ)` with fuzzed OTEL_PYTHON_MCP_REPLAY_* values never raises; anything
  invalid is logged at ERROR without the value and the plugin runs fail-closed; all valid, it
  logs nothing and runs normally.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_mcp_replay import McpReplayInstrumentor
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay.config import configuration_of
from otel_mcp_replay.endpoints import Servers, servers_of
from otel_mcp_replay.settings import settings_of

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

# The planted values. None of these ever appears in a message the plugin writes of its own.
CANARY = "zq CANARY!q"  # a space and a "!": not a valid label, policy, kind, adapter or host
CANARY_INT = 7319284650173
CANARY_FLOAT = 31415926535.897
TOKENS = ("CANARY", str(CANARY_INT), "31415926535")

ORIGINAL_SEND = httpx2.AsyncClient.send
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Planted:
    """A value of no type the declaration knows, whose str and repr are the canary."""

    def __repr__(self) -> str:
        return f"Planted({CANARY})"

    __str__ = __repr__


class SneakyStr(str):
    """A str subclass whose __str__ is the canary: only its plain characters may count."""

    __slots__ = ()

    def __str__(self) -> str:
        return CANARY


@dataclass(frozen=True)
class Drawn:
    """A generated value, whether the rule must accept it, and whether it is JSON (for the env)."""

    value: Any
    valid: bool
    json_safe: bool = True


def texts_of(exc: BaseException) -> str:
    """Everything an exception shows: str, repr, args, notes and attributes, along the whole chain."""
    out: list[str] = []
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        out += [str(e), repr(e), repr(e.args), repr(getattr(e, "__notes__", None))]
        out.append(repr(getattr(e, "__dict__", {})))
        stack += [n for n in (e.__cause__, e.__context__) if n is not None]
        if isinstance(e, BaseExceptionGroup):
            stack += list(e.exceptions)
    return "\n".join(out)


def assert_no_echo(text: str) -> None:
    for token in TOKENS:
        assert token not in text, f"a planted value ({token}) was echoed:\n{text}"


# ----------------------------------------------------------------------------------------------
# Strategies: a value per declaration slot, valid or invalid, some planted.

planted_text = st.builds(lambda a, b: a + CANARY + b, st.text(max_size=4), st.text(max_size=4))
# Wrong-typed values for a slot that wants a string; each planted.
planted_scalar = st.one_of(
    st.just(Drawn(CANARY_INT, False)),
    st.just(Drawn(-CANARY_INT, False)),
    st.just(Drawn(CANARY_FLOAT, False)),
    st.just(Drawn(Planted(), False, json_safe=False)),
    st.just(Drawn(CANARY.encode(), False, json_safe=False)),
    st.just(Drawn([CANARY], False)),
    st.just(Drawn({"x": CANARY}, False)),
)


def bad_text() -> st.SearchStrategy[Drawn]:
    """Invalid for a slot that wants one of a few known strings."""
    return st.one_of(planted_text.map(lambda s: Drawn(s, False)), planted_scalar)


policy_slot = st.one_of(
    st.sampled_from(["compatibility", "app-authorized"]).map(lambda s: Drawn(s, True)),
    st.just(Drawn(SneakyStr("app-authorized"), True, json_safe=False)),
    bad_text(),
    st.just(Drawn(None, False)),  # a field written holds its type: null is refused
)
label_slot = st.one_of(
    st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True).map(lambda s: Drawn(s, True)),
    bad_text(),
    st.just(Drawn("x" * 65, False)),
    st.just(Drawn(None, False)),
)
adapter_slot = st.one_of(st.just(Drawn("agentcore-runtime", True)), bad_text(), st.just(Drawn(None, False)))
argument_slot = st.one_of(
    # Any non-empty string names the argument: a planted one is valid, and must still never show.
    st.one_of(st.text(min_size=1, max_size=8), planted_text).map(lambda s: Drawn({"argument": s}, True)),
    st.just(Drawn({"argument": ""}, False)),
    st.just(Drawn({}, False)),
    planted_scalar.map(lambda d: Drawn({"argument": d.value}, False, d.json_safe)),
    st.just(Drawn({"argument": "key", "salt": CANARY}, False)),
    planted_scalar.filter(lambda d: not isinstance(d.value, dict)),
)
kinds = st.lists(st.sampled_from(["throttle", "network"]), max_size=2)
entry_slot = st.one_of(
    st.builds(lambda on, ch: Drawn({"on": on, "changes": ch}, True), kinds, st.booleans()),
    kinds.map(lambda on: Drawn({"on": on}, True)),
    st.booleans().map(lambda ch: Drawn({"changes": ch}, True)),
    st.just(Drawn({}, True)),
    bad_text().map(lambda d: Drawn({"on": ["throttle", d.value]}, False, d.json_safe)),
    planted_text.map(lambda s: Drawn({"on": s}, False)),  # a string is not a list of kinds
    planted_scalar.map(lambda d: Drawn({"changes": d.value}, False, d.json_safe)),
    st.just(Drawn({"changes": None}, False)),
    st.just(Drawn({"chnages": CANARY}, False)),
    planted_scalar.filter(lambda d: not isinstance(d.value, dict)),
)
tool_names = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)


@st.composite
def tools_slot(draw: st.DrawFn) -> Drawn:
    if draw(st.integers(0, 9)) == 0:
        wrong: Drawn = draw(planted_scalar.filter(lambda d: not isinstance(d.value, dict)))
        return wrong
    entries = draw(st.dictionaries(tool_names, entry_slot, max_size=4))
    return Drawn(
        {name: d.value for name, d in entries.items()},
        all(d.valid for d in entries.values()),
        all(d.json_safe for d in entries.values()),
    )


@st.composite
def declaration(draw: st.DrawFn) -> Drawn:
    if draw(st.integers(0, 14)) == 0:
        wrong: Drawn = draw(planted_scalar.filter(lambda d: not isinstance(d.value, dict)))
        return wrong
    fields: dict[str, Drawn] = {}
    for name, slot in (
        ("policy", policy_slot),
        ("label", label_slot),
        ("adapter", adapter_slot),
        ("deduplicates", argument_slot),
        ("tools", tools_slot()),
    ):
        if draw(st.booleans()):
            fields[name] = draw(slot)
    if draw(st.integers(0, 9)) == 0:
        fields["polcy"] = Drawn(CANARY, False)  # an unknown field: named, its value never shown
    return Drawn(
        {name: d.value for name, d in fields.items()},
        all(d.valid for d in fields.values()),
        all(d.json_safe for d in fields.values()),
    )


def endpoint(port: int) -> st.SearchStrategy[Drawn]:
    """An endpoint URL on its own port (so no two name the same endpoint): plain, valid with a
    secret in its userinfo, path, query or fragment (never to be shown), or invalid."""
    base = f"127.0.0.1:{port}"
    return st.one_of(
        st.sampled_from([f"http://{base}/mcp", f"https://{base}", f"http://{base}/a/b/"]).map(
            lambda u: Drawn(u, True)
        ),
        st.sampled_from(
            [
                f"http://user:{CANARY}@{base}/mcp",
                f"http://{base}/{CANARY}",
                f"http://{base}/mcp?token={CANARY}",
                f"https://{base}/mcp#{CANARY}",
            ]
        ).map(lambda u: Drawn(u, True)),
        st.sampled_from(
            [
                f"{CANARY}://{base}/mcp",
                f"http://{CANARY}:{port}/mcp",
                f"http://127.0.0.1:{CANARY_INT}/mcp",
                f"ftp://{base}/{CANARY}",
                f"http://[{CANARY}]/mcp",
            ]
        ).map(lambda u: Drawn(u, False)),
    )


@st.composite
def servers(draw: st.DrawFn) -> Drawn:
    if draw(st.integers(0, 14)) == 0:
        wrong: Drawn = draw(planted_scalar.filter(lambda d: not isinstance(d.value, dict)))
        return wrong
    n = draw(st.integers(0, 4))
    mapping: dict[Any, Any] = {}
    valid, json_safe = True, True
    for i in range(n):
        url = draw(endpoint(1000 + i))
        decl = draw(declaration())
        mapping[url.value] = decl.value
        valid = valid and url.valid and decl.valid
        json_safe = json_safe and decl.json_safe
    if n and draw(st.integers(0, 9)) == 0:
        mapping[CANARY_INT] = {}  # an endpoint that is not a string
        valid = False
    return Drawn(mapping, valid, json_safe)


# ----------------------------------------------------------------------------------------------
# Declarations and settings.


@FUZZ
@given(servers())
def test_servers_of_accepts_the_valid_and_refuses_the_rest_without_echoing(drawn: Drawn) -> None:
    try:
        servers_of(drawn.value)
    except (TypeError, ValueError) as exc:
        assert not drawn.valid, f"a valid declaration was refused: {exc}"
        assert_no_echo(texts_of(exc))
    else:
        assert drawn.valid, "an invalid declaration was accepted"


junk = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
        st.binary(max_size=8),
        st.sampled_from(["compatibility", "app-authorized", "throttle", "network", "agentcore-runtime"]),
        st.sampled_from(["http://127.0.0.1:1/mcp", "https://h", "http://[::1]:8/x", "http://h:0", "http://"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.frozensets(st.text(max_size=5), max_size=3),
        st.dictionaries(
            st.one_of(
                st.sampled_from(["policy", "label", "tools", "deduplicates", "adapter", "on", "changes"]),
                st.text(max_size=10),
                st.integers(),
            ),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=30,
)


@FUZZ
@given(junk)
def test_servers_of_on_any_structure_raises_only_type_or_value_errors(raw: Any) -> None:
    assert_servers_or_refusal(raw)
    assert_servers_or_refusal({"http://127.0.0.1:1/mcp": raw})


def assert_servers_or_refusal(raw: Any) -> None:
    """servers_of(raw) is a Servers, or a TypeError/ValueError naming where it went wrong (anything
    else it raises fails the test)."""
    try:
        servers = servers_of(raw)
    except (TypeError, ValueError) as error:
        assert str(error).startswith("servers"), str(error)
        return
    assert isinstance(servers, Servers)


def _valid_setting(name: str, value: Any) -> bool:
    def whole(v: Any, minimum: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= minimum

    if name == "max_attempts":
        return whole(value, 1)
    if name == "max_wait_ms":
        return whole(value, 0)
    if name == "retry_on_throttle":
        return isinstance(value, bool)
    if name == "retry_budget":
        if value is None:
            return True
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            return False
        tokens, ratio = value
        number = isinstance(ratio, float) or (isinstance(ratio, int) and not isinstance(ratio, bool))
        return whole(tokens, 1) and number and math.isfinite(float(ratio)) and 0.001 <= float(ratio) <= tokens
    return False  # an unknown setting


setting_values = st.one_of(
    st.integers(-3, 20),
    st.booleans(),
    st.none(),
    st.just(CANARY_INT),
    st.just(-CANARY_INT),
    st.just(CANARY_FLOAT),
    st.just(CANARY),
    st.just(Planted()),
    st.tuples(st.integers(-1, 200), st.floats(allow_nan=True, allow_infinity=True)),
    st.tuples(st.just(CANARY), st.just(0.1)),
    st.tuples(st.just(1), st.just(CANARY_FLOAT)),
    st.lists(st.integers(1, 5), max_size=3),
)
setting_names = st.sampled_from(
    ["max_attempts", "max_wait_ms", "retry_on_throttle", "retry_budget", "retires"]
)


@FUZZ
@given(st.dictionaries(setting_names, setting_values, max_size=4))
def test_settings_of_accepts_the_valid_and_refuses_the_rest_without_echoing(kw: dict[str, Any]) -> None:
    valid = all(_valid_setting(name, value) for name, value in kw.items())
    try:
        settings_of(**kw)
    except (TypeError, ValueError) as exc:
        assert not valid, f"valid settings were refused: {exc}"
        assert_no_echo(texts_of(exc))
    else:
        assert valid, "invalid settings were accepted"


@settings(max_examples=40, deadline=None)
@given(servers(), st.dictionaries(setting_names.filter(lambda n: n != "retires"), setting_values, max_size=2))
def test_instrument_accepts_the_valid_and_refuses_the_rest_without_patching(
    drawn: Drawn, kw: dict[str, Any]
) -> None:
    valid = drawn.valid and all(_valid_setting(name, value) for name, value in kw.items())
    instrumentor = McpReplayInstrumentor()
    try:
        instrumentor.instrument(servers=drawn.value, skip_dep_check=True, **kw)
    except (TypeError, ValueError) as exc:
        assert not valid, f"a valid instrument() was refused: {exc}"
        assert_no_echo(texts_of(exc))
        assert not instrumentor.is_instrumented_by_opentelemetry
        assert httpx2.AsyncClient.send is ORIGINAL_SEND  # refused before anything was patched
    else:
        assert valid, "an invalid instrument() was accepted"
        assert instrumentor.is_instrumented_by_opentelemetry
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    assert httpx2.AsyncClient.send is ORIGINAL_SEND


# ----------------------------------------------------------------------------------------------
# The environment: never raises; invalid means logged (without the value) and fail-closed.


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-config")


def _spaced(text: str) -> st.SearchStrategy[str]:
    return st.builds(lambda a, b: a + text + b, st.sampled_from(["", " ", "\t"]), st.sampled_from(["", " "]))


def _int_var(minimum: int) -> st.SearchStrategy[Drawn]:
    return st.one_of(
        st.integers(minimum, 100_000).flatmap(lambda n: _spaced(str(n))).map(lambda s: Drawn(s, True)),
        planted_text.map(lambda s: Drawn(s, False)),
        st.just(Drawn(str(-CANARY_INT), False)),
        # What str.isdigit() takes and int() refuses: int's own error would quote it.
        st.sampled_from(["--", "\u00b2", "\u2460"]).map(lambda p: Drawn(p + str(CANARY_INT), False)),
        st.sampled_from(["1.5", "1e3", "0x10", "-1"]).map(lambda s: Drawn(s, False)),
    )


bool_var = st.one_of(
    st.sampled_from(["true", "false", "1", "0", "yes", "no", "on", "off"])
    .flatmap(lambda s: st.sampled_from([s, s.upper(), s.capitalize()]))
    .map(lambda s: Drawn(s, True)),
    planted_text.map(lambda s: Drawn(s, False)),
    st.sampled_from(["maybe", "2", "truee"]).map(lambda s: Drawn(s, False)),
)
budget_var = st.one_of(
    st.sampled_from(["off", "OFF", "100,0.1", "10, 1", "5,0.001", " 1,1 "]).map(lambda s: Drawn(s, True)),
    planted_text.map(lambda s: Drawn(s, False)),
    st.sampled_from(["5,10", "0,0.1", "1,0.0001", "100", f"{CANARY_INT},{CANARY_FLOAT}x"]).map(
        lambda s: Drawn(s, False)
    ),
)
servers_var = st.one_of(
    servers()
    .filter(lambda d: d.json_safe and isinstance(d.value, dict))
    .map(
        lambda d: Drawn(
            json.dumps({str(k): v for k, v in d.value.items()}),
            d.valid and all(isinstance(k, str) for k in d.value),
        )
    ),
    planted_text.map(lambda s: Drawn("{" + json.dumps(s), False)),  # not JSON
    st.just(
        Drawn(f'{{"http://127.0.0.1:1/mcp": {{"policy": "{CANARY}", "policy": "compatibility"}}}}', False)
    ),
)


@dataclass(frozen=True)
class ConfigFile:
    content: str
    suffix: str
    valid: bool


config_var = st.one_of(
    servers_var.map(lambda d: ConfigFile('{"servers": ' + d.value + "}", ".json", d.valid)),
    st.just(ConfigFile(f'[servers."http://127.0.0.1:1/mcp"]\npolicy = "{CANARY}"\n', ".toml", False)),
    st.just(ConfigFile('[servers."http://127.0.0.1:1/mcp"]\npolicy = "app-authorized"\n', ".toml", True)),
    st.just(ConfigFile(f"servers: {CANARY}", ".yaml", False)),
    # The servers table forgotten: endpoint URLs (credentials and all) where field names belong.
    st.just(ConfigFile(f'{{"http://user:{CANARY}@127.0.0.1:1/mcp": {{}}}}', ".json", False)),
    st.just(
        ConfigFile(f'["http://user:{CANARY}@127.0.0.1:1/mcp"]\npolicy = "app-authorized"\n', ".toml", False)
    ),
    st.just(ConfigFile(f'{{"servers": {{}}, "extra": "{CANARY}"}}', ".json", False)),
)

ENV_VARIABLES = (
    ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS,
    ev.OTEL_PYTHON_MCP_REPLAY_MAX_WAIT_MS,
    ev.OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE,
    ev.OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET,
    ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_S,
    ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE,
    ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET,
    ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE_TIMEOUT_MS,
    ev.OTEL_PYTHON_MCP_REPLAY_RECORD,
    ev.OTEL_PYTHON_MCP_REPLAY_SERVERS,
    ev.OTEL_PYTHON_MCP_REPLAY_CONFIG,
)
# The store's URL may carry a credential (planted: never echoed); read, never connected to, here.
store_var = st.one_of(
    st.sampled_from(
        [
            "redis://127.0.0.1:6379/0",
            f"redis://:{CANARY_INT}@127.0.0.1:6379",
            f"rediss://user:{CANARY_INT}@cache.example:6380/3",
        ]
    ).map(lambda s: Drawn(s, True)),
    planted_text.map(lambda s: Drawn(s, False)),
    st.sampled_from(
        [
            f"http://:{CANARY_INT}@127.0.0.1:6379/0",
            f"redis://:{CANARY_INT}@/0",
            f"redis://:{CANARY_INT}@127.0.0.1:{CANARY_INT}/0",
            f"redis://:{CANARY_INT}@127.0.0.1:6379/db{CANARY_INT}",
            f"redis://:{CANARY_INT}@[::1/0",
        ]
    ).map(lambda s: Drawn(s, False)),
)
record_var = st.one_of(
    st.sampled_from(["span_event", "log", "both"])
    .flatmap(lambda s: st.sampled_from([s, s.upper(), f" {s} "]))
    .map(lambda s: Drawn(s, True)),
    planted_text.map(lambda s: Drawn(s, False)),
    st.sampled_from(["span", "logs", "event", "span-event"]).map(lambda s: Drawn(s, False)),
)
secret_var = st.one_of(
    st.just(Drawn(f"shared-secret-{CANARY_INT}", True)),
    st.just(Drawn(f"s{CANARY_INT}", False)),  # shorter than 16 bytes
    st.just(Drawn("CANARY", False)),
)


@st.composite
def environment(draw: st.DrawFn) -> tuple[dict[str, str], bool, ConfigFile | None, bool]:
    """(environ, all valid, a config file to write, whether CONFIG points at a missing file)."""
    environ: dict[str, str] = {}
    valid = True
    for variable, strategy in (
        (ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS, _int_var(1)),
        (ev.OTEL_PYTHON_MCP_REPLAY_MAX_WAIT_MS, _int_var(0)),
        (ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_S, _int_var(0)),
        (ev.OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE, bool_var),
        (ev.OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET, budget_var),
        (ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, servers_var),
        (ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE, store_var),
        (ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET, secret_var),
        (ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE_TIMEOUT_MS, _int_var(1)),
        (ev.OTEL_PYTHON_MCP_REPLAY_RECORD, record_var),
    ):
        if draw(st.integers(0, 2)) == 0:
            d = draw(strategy)
            environ[variable] = d.value
            valid = valid and d.valid
    if ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE in environ and (
        ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET not in environ
    ):
        valid = False  # a store without its secret
    config: ConfigFile | None = None
    missing = False
    if draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            config = draw(config_var)
            valid = valid and config.valid
        else:
            missing = True
            valid = False
        if ev.OTEL_PYTHON_MCP_REPLAY_SERVERS in environ:
            valid = False  # both set: use one
    environ["UNRELATED"] = CANARY  # another variable's value is never read, never shown
    return environ, valid, config, missing


def log_texts(records: list[logging.LogRecord]) -> str:
    out: list[str] = []
    for record in records:
        out += [record.getMessage(), repr(record.args), record.exc_text or ""]
        if record.exc_info and record.exc_info[1] is not None:
            out.append(texts_of(record.exc_info[1]))
    return "\n".join(out)


@pytest.fixture
def plugin_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger="otel_mcp_replay"):
        yield caplog


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(environment())
def test_the_environment_never_raises_and_an_invalid_value_is_logged_without_it_and_fails_closed(
    plugin_log: pytest.LogCaptureFixture,
    config_dir: Path,
    drawn: tuple[dict[str, str], bool, ConfigFile | None, bool],
) -> None:
    environ, valid, config, missing = drawn
    if config is not None:
        path = config_dir / f"servers{config.suffix}"
        path.write_text(config.content, encoding="utf-8")
        environ[ev.OTEL_PYTHON_MCP_REPLAY_CONFIG] = str(path)
    elif missing:
        environ[ev.OTEL_PYTHON_MCP_REPLAY_CONFIG] = str(config_dir / f"{CANARY}.json")
    plugin_log.clear()
    resolved = configuration_of({}, environ)  # never raises, whatever the environment says
    logged = [r for r in plugin_log.records if r.name.startswith("otel_mcp_replay")]
    errors = [r for r in logged if r.levelno >= logging.ERROR]
    assert_no_echo(log_texts(logged))
    if valid:
        assert not resolved.fail_closed, log_texts(errors)
        assert not errors, log_texts(errors)
    else:
        assert resolved.fail_closed, f"invalid environment not fail-closed: {sorted(environ)}"
        assert errors, "an invalid environment value was not logged at ERROR"
        # Each ERROR names what it refused: a variable of the plugin.
        for record in errors:
            assert any(v in record.getMessage() for v in ENV_VARIABLES), record.getMessage()


def test_the_environment_variables_fuzzed_are_all_the_plugin_reads() -> None:
    names = {n for n in dir(ev) if n.startswith("OTEL_PYTHON_MCP_REPLAY_")}
    # Redaction's variables are read by the redaction processor, not by instrument().
    redaction = {
        ev.OTEL_PYTHON_MCP_REPLAY_REDACT_KEYS,
        ev.OTEL_PYTHON_MCP_REPLAY_REDACT_VALUES,
        ev.OTEL_PYTHON_MCP_REPLAY_SESSION_KEY,
        ev.OTEL_PYTHON_MCP_REPLAY_REDACT_CONTENT,
    }
    assert names - redaction == set(ENV_VARIABLES)
