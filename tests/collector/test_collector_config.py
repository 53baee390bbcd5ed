"""collector-config/ agrees with the plugin's telemetry contract and with itself.

No collector, Docker or network runs here (test_collector_e2e.py runs the built Collector and
Jaeger on these files). What is checked instead:
- every YAML/JSON file parses (duplicate keys refused, as the collector's own YAML loader does);
- every attribute key the plugin can emit, read from `otel_mcp_replay.telemetry` (never a copied
  list), every key the installed mcp SDK sets on its spans (read from its source) and every key the
  httpx2 instrumentor puts on a real request's span (observed in a subprocess, `http/dup`
  conventions) is on the redaction allow-list of each collector configuration that has one;
- pipelines use only the components their file defines, and each defined component is used; the
  component types and keys are within those of the contrib release's schemas (read at v0.136.0;
  that the built v0.161.0 accepts every file is the end-to-end start-up test's to say);
- tail-sampling policies read contract keys and words, cover every decline reason, read only keys
  the allow-list keeps, and the processors run in the documented order;
- the pipelines, run on the contract's spans (a small reading of the OTTL used here), export every
  uncertain span exactly once and every other span at most once, whether the sampler keeps or
  drops the trace, in both layouts;
- blocked patterns are RE2-safe, mask sample secrets and leave the contract's words alone;
- the compose files mount the files they name (which exist) and publish on 127.0.0.1 only;
- the dashboard's and the README's queries (TraceQL, Jaeger tags) use only contract attributes and
  words, and the dashboard names the provisioned data source.

Which strings of telemetry.py are attribute keys: every tuple named `*_KEYS`, and every upper-case
string constant except span names (`*_PREFIX`), metric names (`METRIC_*`) and the instrumentation
name. Event names (`*_EVENT`) are not attributes but are listed too (harmless; the list then holds
the plugin's whole vocabulary). So a constant added to telemetry.py is taken as a key unless it is
named as one of those kinds, and this file fails until the allow-lists carry it.
"""

from __future__ import annotations

import ast
import copy
import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_mcp_replay import telemetry as t

CC = Path(__file__).resolve().parents[2] / "collector-config"
SINGLE = CC / "otelcol.yaml"
AGENT = CC / "otelcol-agent.yaml"
GATEWAY = CC / "otelcol-gateway.yaml"
COLLECTORS = (SINGLE, AGENT, GATEWAY)
REDACTING = (SINGLE, AGENT)  # the configurations that carry a redaction processor
SAMPLING = (SINGLE, GATEWAY)  # the configurations that carry tail_sampling
COMPOSE = CC / "docker-compose.yaml"
COMPOSE_TWO_TIER = CC / "docker-compose.two-tier.yaml"
TEMPO = CC / "tempo.yaml"
DATASOURCES = CC / "grafana" / "provisioning" / "datasources" / "tempo.yaml"
DASHBOARD_PROVIDER = CC / "grafana" / "provisioning" / "dashboards" / "mcp-replay.yaml"
DASHBOARD = CC / "grafana" / "dashboards" / "mcp-replay.json"
README = CC / "README.md"
BUILDER_MANIFEST = CC / "builder-config.yaml"
JAEGER_LOCAL = CC / "jaeger-local.yaml"

COLLECTOR_VERSION = "0.161.0"
COLLECTOR_IMAGE = f"otel/opentelemetry-collector-contrib:{COLLECTOR_VERSION}"

# ---------------------------------------------------------------------------------------------
# Loading


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with a key twice (PyYAML keeps the last one silently)."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.load(path.read_text(), Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    assert isinstance(data, dict), f"{path.name}: not a mapping"
    return data


def load_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict), f"{path.name}: not an object"
    return data


ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def resolve(value: Any) -> Any:
    """A config value as the collector reads it with no environment set: `${env:X:-d}` -> d, as YAML."""
    if isinstance(value, dict):
        return {k: resolve(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v) for v in value]
    if isinstance(value, str):
        whole = ENV_REF.fullmatch(value)
        if whole:
            return yaml.safe_load(whole.group(2) or "")
        return ENV_REF.sub(lambda m: m.group(2) or "", value)
    return value


def redaction(path: Path) -> dict[str, Any]:
    section: dict[str, Any] = load_yaml(path)["processors"]["redaction"]
    return section


def allow_list(path: Path) -> list[str]:
    keys = redaction(path)["allowed_keys"]
    assert isinstance(keys, list) and all(isinstance(k, str) for k in keys)
    return keys


def tail_sampling(path: Path) -> dict[str, Any]:
    section: dict[str, Any] = load_yaml(path)["processors"]["tail_sampling"]
    return section


def leaf_policies(policies: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for policy in policies:
        yield policy
        for nested in ("and", "drop", "composite"):
            if nested in policy:
                sub = policy[nested].get(f"{nested}_sub_policy", [])
                yield from leaf_policies(sub)


# ---------------------------------------------------------------------------------------------
# The contract's vocabulary, from the code


def telemetry_strings() -> dict[str, str]:
    return {name: value for name, value in vars(t).items() if name.isupper() and isinstance(value, str)}


def _is_span_or_metric_name(name: str) -> bool:
    return (
        name == "INSTRUMENTATION_NAME"
        or name.startswith("METRIC_")
        or name.endswith(("_PREFIX", "_NAME", "_METHOD"))  # span names, and the method of a tool call
        or getattr(t, name) in t.CONVENTION_WORDS  # a word a conventions' key holds
    )


def plugin_attribute_keys() -> set[str]:
    """Every attribute key the plugin can emit (and its event names), read from telemetry.py."""
    keys: set[str] = set()
    for name, value in vars(t).items():
        if name.isupper() and name.endswith("_KEYS") and isinstance(value, tuple):
            keys.update(value)
    for name, value in telemetry_strings().items():
        if not _is_span_or_metric_name(name):
            keys.add(value)
    return keys


EVENT_NAMES = frozenset(value for name, value in telemetry_strings().items() if name.endswith("_EVENT"))
# The call span carries the call's outcome too (contract, "The call span": policy, sent, effect,
# verdict, may_have_run), so tail sampling reads it without copying it from the record.
SPAN_KEYS = frozenset(
    (
        *t.ATTEMPT_SPAN_KEYS,
        *t.CALL_SPAN_KEYS,
        t.POLICY,
        t.SENT,
        t.EFFECT,
        t.VERDICT,
        t.MAY_HAVE_RUN,
        t.MCP_SESSION_ID,
    )
)
EVENT_KEYS = frozenset(t.RECORD_KEYS + t.RECORD_TASK_KEYS)

# The words each key may hold (docs/contract.md, "Telemetry"), from telemetry.py.
WORDS: dict[str, frozenset[str]] = {
    t.MCP_METHOD_NAME: frozenset((t.CALL_SPAN_PREFIX,)),
    t.FAILURE: frozenset(t.FAILURES),
    t.EFFECT: frozenset(t.EFFECTS),
    t.PERMISSION_BY: frozenset(t.PERMISSIONS_BY),
    t.PERMISSION_ON: frozenset(t.FAILURES),
    t.PERMISSION_ASSUMES: frozenset(t.ASSUMPTIONS),
    t.DECLINED: frozenset(t.DECLINED_REASONS),
    t.POLICY: frozenset(t.POLICIES),
    t.VERDICT: frozenset(t.VERDICTS),
    t.ATTEMPTS_FAILURE: frozenset(("", *t.FAILURES)),
    t.ATTEMPTS_EFFECT: frozenset(t.EFFECTS),
    t.ATTEMPTS_PERMISSION: frozenset(t.ATTEMPT_PERMISSIONS),
}
BOOL_KEYS = frozenset((t.MAY_HAVE_RUN,))
INT_KEYS = frozenset(
    (
        t.ATTEMPT,
        t.HTTP_RESEND_COUNT,
        t.HTTP_STATUS_CODE,
        t.WAIT_MS,
        t.SENT,
        t.OMITTED,
        t.ROUND,
        t.ATTEMPTS_STATUS,
        t.ATTEMPTS_WAIT_MS,
    )
)
# error.type: a status code as a string, `tool_error`, or an exception's qualified type (contract).
FREE_TEXT_KEYS = frozenset(
    (t.GEN_AI_TOOL_NAME, t.JSONRPC_REQUEST_ID, t.ENDPOINT, t.MCP_SESSION_ID, t.ERROR_TYPE)
)

# Keys every exported span may carry whatever instrumentation made it: exception events
# (Span.record_exception) and the resource of the Python SDK. An exception's message and stack trace
# are not among them: the plugin itself records only an exception's type (telemetry.ERROR_TYPE), as
# the message may quote what the server said; the collector deletes both from other spans' events.
EXCEPTION_KEYS = frozenset(("exception.type", "exception.escaped"))
EXCEPTION_TEXT_KEYS = frozenset(("exception.message", "exception.stacktrace"))
RESOURCE_KEYS = frozenset(
    (
        "service.name",
        "telemetry.sdk.name",
        "telemetry.sdk.language",
        "telemetry.sdk.version",
        "telemetry.auto.version",
    )
)
# Deliberately never on the list: headers the instrumentor can capture, command lines, and the text
# of an exception.
NEVER_ALLOWED = re.compile(
    r"^(http\.(request|response)\.header\..*|process\.command(_line|_args)?|exception\.(message|stacktrace))$"
)


@cache
def literal_span_keys(package: str) -> frozenset[str]:
    """Attribute keys a package writes on spans as literal strings, read from its source with `ast`.

    Looks, in every module that touches OpenTelemetry, at `attributes=` keywords, `set_attribute(s)`
    calls, `add_event(name, {...})`, and dicts or item assignments named `attributes`. Keys passed
    through a name (`t.EFFECT`) are not literals: telemetry.py is read for those.
    """
    module = importlib.import_module(package)
    assert module.__file__ is not None

    dotted = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
    keys: set[str] = set()

    def add_dict(node: ast.AST) -> None:
        if isinstance(node, ast.Dict):
            for key in node.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and dotted.match(key.value):
                    keys.add(key.value)

    for path in Path(module.__file__).parent.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        if "opentelemetry" not in source and "_otel" not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name == "set_attribute" and node.args:
                    first = node.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        keys.add(first.value)
                if name == "set_attributes" and node.args:
                    add_dict(node.args[0])
                if name == "add_event" and len(node.args) > 1:
                    add_dict(node.args[1])
                for keyword in node.keywords:
                    if keyword.arg == "attributes":
                        add_dict(keyword.value)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id == "attributes" and node.value is not None:
                        add_dict(node.value)
                    if (
                        isinstance(target, ast.Subscript)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "attributes"
                        and isinstance(target.slice, ast.Constant)
                        and isinstance(target.slice.value, str)
                    ):
                        keys.add(target.slice.value)
    return frozenset(keys)


_HTTPX_PROBE = textwrap.dedent(
    """
    import json, httpx2
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.instrumentation.httpx import SyncOpenTelemetryTransportHttpx2

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def handler(request):
        if request.url.path == "/drop":
            raise httpx2.ConnectError("connection refused", request=request)
        answer = {"jsonrpc": "2.0", "id": 1, "result": {}}
        return httpx2.Response(int(request.url.path.strip("/")), json=answer)

    transport = SyncOpenTelemetryTransportHttpx2(httpx2.MockTransport(handler), tracer_provider=provider)
    with httpx2.Client(transport=transport) as client:
        client.post("http://user:pw@127.0.0.1:8000/200?token=x", content=b"{}")
        client.post("http://127.0.0.1:8000/429", content=b"{}")
        client.request("PURGE", "http://127.0.0.1:8000/503")
        try:
            client.post("http://127.0.0.1:8000/drop", content=b"{}")
        except httpx2.ConnectError:
            pass
    spans = exporter.get_finished_spans()
    print(json.dumps({
        "spans": len(spans),
        "span": sorted({k for s in spans for k in s.attributes}),
        "event": sorted({k for s in spans for e in s.events for k in e.attributes}),
    }))
    """
)


@pytest.fixture(scope="module")
def httpx2_instrumentor_keys() -> dict[str, set[str]]:
    """Keys the httpx2 instrumentor really sets, old and new conventions at once (`http/dup`).

    A subprocess: the instrumentor reads OTEL_SEMCONV_STABILITY_OPT_IN once per process.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_SEMCONV_STABILITY_OPT_IN"] = "http/dup"
    done = subprocess.run(
        [sys.executable, "-c", _HTTPX_PROBE], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["spans"] == 4
    return {"span": set(seen["span"]), "event": set(seen["event"])}


# ---------------------------------------------------------------------------------------------
# Every file parses


def config_files() -> list[Path]:
    return sorted(p for p in CC.rglob("*") if p.is_file() and p.suffix in {".yaml", ".yml", ".json"})


def test_the_documented_files_exist() -> None:
    for path in (
        *COLLECTORS,
        COMPOSE,
        COMPOSE_TWO_TIER,
        TEMPO,
        DATASOURCES,
        DASHBOARD_PROVIDER,
        DASHBOARD,
        README,
    ):
        assert path.is_file(), path


@pytest.mark.parametrize("path", config_files(), ids=lambda p: str(p.relative_to(CC)))
def test_every_file_parses(path: Path) -> None:
    if path.suffix == ".json":
        load_json(path)
    else:
        load_yaml(path)


def test_the_strict_loader_refuses_a_duplicate_key() -> None:
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key"):
        yaml.load("a: 1\na: 2\n", Loader=_StrictLoader)


def test_the_readme_names_every_file() -> None:
    text = README.read_text()
    files = [path for path in CC.rglob("*") if path.is_file() and path != README]
    assert files, f"no files found under {CC}"
    for path in files:
        assert str(path.relative_to(CC)) in text, f"README.md does not mention {path.relative_to(CC)}"


# ---------------------------------------------------------------------------------------------
# The redaction allow-list


def test_telemetry_strings_are_keys_or_named_as_another_kind() -> None:
    """A new constant is either an attribute key (dotted, lower case) or named as a span/metric name."""
    dotted = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
    strings = telemetry_strings()
    assert strings, "no telemetry strings found"
    for name, value in strings.items():
        if not _is_span_or_metric_name(name):
            assert dotted.match(value), f"telemetry.{name} = {value!r} is neither a key nor a named kind"
    keys = plugin_attribute_keys()
    assert {*t.ATTEMPT_SPAN_KEYS, *t.CALL_SPAN_KEYS, *t.RECORD_KEYS, t.POLICY, t.MCP_SESSION_ID} <= keys
    assert {t.RECORD_EVENT, t.RECORD_REFUSED_EVENT} <= keys


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_every_key_the_plugin_emits_is_allowed(path: Path) -> None:
    missing = plugin_attribute_keys() - set(allow_list(path))
    assert not missing, f"{path.name}: add to redaction.allowed_keys: {sorted(missing)}"


def test_a_key_added_to_telemetry_without_its_entry_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(t, "NEW_ATTEMPT_KEY", "mcp.replay.something_new", raising=False)
    assert "mcp.replay.something_new" in plugin_attribute_keys() - set(allow_list(SINGLE))
    monkeypatch.setattr(t, "EXTRA_SPAN_KEYS", ("mcp.replay.in_a_tuple",), raising=False)
    assert "mcp.replay.in_a_tuple" in plugin_attribute_keys() - set(allow_list(SINGLE))


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_the_mcp_sdk_span_keys_are_allowed(path: Path) -> None:
    sdk = literal_span_keys("mcp")
    # The scan still sees what mcp 2.3 sets; if an upgrade moves these behind constants, say so here.
    assert {"mcp.method.name", "jsonrpc.request.id", "error.type", "rpc.response.status_code"} <= sdk, sdk
    missing = (sdk | EXCEPTION_KEYS) - set(allow_list(path))
    assert not missing, f"{path.name}: mcp SDK keys missing from the allow-list: {sorted(missing)}"


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_keys_the_plugin_writes_as_literals_are_allowed(path: Path) -> None:
    """A key spelled in the plugin's code rather than in telemetry.py must still pass the collector."""
    missing = literal_span_keys("otel_mcp_replay") - set(allow_list(path))
    assert not missing, f"{path.name}: otel_mcp_replay writes keys the allow-list lacks: {sorted(missing)}"


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_the_httpx2_instrumentor_keys_are_allowed(
    path: Path, httpx2_instrumentor_keys: dict[str, set[str]]
) -> None:
    span_keys = httpx2_instrumentor_keys["span"]
    assert {"http.method", "url.full", "http.response.status_code", "server.address"} <= span_keys, span_keys
    # It records exceptions in full (message, stack trace): those two keys are deleted on purpose.
    assert httpx2_instrumentor_keys["event"] >= EXCEPTION_TEXT_KEYS
    missing = (span_keys | httpx2_instrumentor_keys["event"]) - EXCEPTION_TEXT_KEYS - set(allow_list(path))
    assert not missing, (
        f"{path.name}: httpx2 instrumentor keys missing from the allow-list: {sorted(missing)}"
    )


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_the_allow_list_is_closed_and_clean(path: Path) -> None:
    section = redaction(path)
    assert section["allow_all_keys"] is False
    keys = allow_list(path)
    assert len(keys) == len(set(keys)), f"{path.name}: duplicate allowed_keys"
    assert set(keys) >= RESOURCE_KEYS
    assert not [k for k in keys if NEVER_ALLOWED.match(k)]
    assert section["summary"] in {"debug", "info", "silent"}
    # README: numbers, booleans and arrays are not read by the blocked values.
    assert section.get("redact_all_types", False) is False


def test_agent_and_single_tier_redact_alike() -> None:
    single, agent = dict(redaction(SINGLE)), dict(redaction(AGENT))
    assert single.pop("summary") == "debug"
    assert agent.pop("summary") == "info"
    assert single == agent
    status = "transform/redact_status"
    assert load_yaml(SINGLE)["processors"][status] == load_yaml(AGENT)["processors"][status]


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_the_text_of_an_exception_is_not_allowed(path: Path) -> None:
    assert not EXCEPTION_TEXT_KEYS & set(allow_list(path))


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_status_messages_are_masked_with_the_blocked_values_right_after_redaction(path: Path) -> None:
    """The redaction processor leaves a span's status message alone (processor.go: resource, scope,
    span and span-event attributes only); the plugin masks it, and so does transform/redact_status,
    with the very same patterns, in every traces pipeline that redacts (a log record has no status)."""
    config = load_yaml(path)
    assert pipelines(config), f"{path.name}: no pipelines"
    for name, pipeline in pipelines(config).items():
        names = pipeline["processors"]
        if "redaction" in names and signal(name) == "traces":
            assert names[names.index("redaction") + 1] == "transform/redact_status", name
    (group,) = config["processors"]["transform/redact_status"]["trace_statements"]
    assert group["context"] == "span"
    replaced = [OTTL_REPLACE_STATUS.fullmatch(statement) for statement in group["statements"]]
    assert replaced and all(replaced), group["statements"]
    patterns = [ottl_string(match.group(1)) for match in replaced if match]
    assert patterns == redaction(path)["blocked_values"]
    assert {ottl_string(match.group(2)) for match in replaced if match} == {"****"}


@pytest.mark.parametrize("layout", ("single", "two-tier"))
def test_secrets_in_a_status_message_do_not_reach_the_backends(layout: str) -> None:
    spans = [
        sample_span(number, "tools/call charge", CALL, status=f"McpError: {text}")
        for number, text in enumerate(SECRETS)
    ]
    run = run_layout(layout, spans, sampled=True)
    sent = {span["id"]: span["status"] for span in run.exported["otlp/jaeger"]}
    assert len(sent) == len(SECRETS)
    for number, (text, secret) in enumerate(SECRETS.items()):
        assert secret not in sent[number], f"{layout}: not masked in a status message: {text!r}"
    harmless = [sample_span(0, "x", CALL, status=f"McpError: {word}") for word in sorted(harmless_values())]
    for span in run_layout(layout, harmless, sampled=True).exported["otlp/jaeger"]:
        assert "****" not in span["status"], span["status"]


@pytest.mark.parametrize("layout", ("single", "two-tier"))
def test_url_query_values_do_not_reach_the_backends(layout: str) -> None:
    url = "https://api.example.com/mcp/items?tenant=Canary7781&q=Canary7782#frag"
    span = sample_span(1, "GET", {"url.full": url, "http.url": url})
    (sent,) = run_layout(layout, [span], sampled=True).exported["otlp/jaeger"]
    masked_url = "https://api.example.com/mcp/items?tenant=****&q=****#frag"
    assert sent["attributes"] == {"url.full": masked_url, "http.url": masked_url}


# What each redacting stage does not reach, and the claims that said otherwise.
REDACTION_OVERCLAIMS = ("fail closed", "fails closed", "attributes alike")
REDACTION_LIMITS = (
    "status message",
    "link attributes",
    "event names",
    "span names",
    "scope attributes",
    "#42659",
    "exception.message",
)


@pytest.mark.parametrize("path", (*REDACTING, README), ids=lambda p: p.name)
def test_the_redaction_claims_are_what_the_stages_do(path: Path) -> None:
    text = " ".join(path.read_text().split())
    assert not [claim for claim in REDACTION_OVERCLAIMS if claim in text.lower()]
    if path == README:
        section = text.split("### Redaction: the second line", 1)[1].split("###", 1)[0]
        assert not [limit for limit in REDACTION_LIMITS if limit not in section]


# ---------------------------------------------------------------------------------------------
# Blocked patterns

RE2_UNSUPPORTED = re.compile(r"\(\?[=!>]|\(\?<[=!]|\(\?P=|\\[1-9]|[*+?}]\+")

SECRETS = {
    "Bearer abcDEF123._~+/xyz==": "abcDEF123",
    "upstream said: authorization Bearer s3cr3t-t0k3n rejected": "s3cr3t-t0k3n",
    "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlF": "dozjgNryP4J3",
    "https://alice:hunter2@mcp.example.com/mcp": "hunter2",
    "http://sk_live_abcdef@127.0.0.1:8000/mcp": "sk_live_abcdef",
    "http://127.0.0.1:8000/mcp?token=XYZ123&x=1": "XYZ123",
    "https://mcp.example.com/mcp?api_key=K-42-K": "K-42-K",
    "callback?client_secret=cs-998&sig=abc": "cs-998",
    "key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 in header": "AbCdEfGhIjKlMnOp",
    "aws AKIAIOSFODNN7EXAMPLE used": "IOSFODNN7EXAMPLE",
    "gh token ghp_0123456789abcdefghijABCDEFGHIJ0123456789": "0123456789abcdefghij",
    "glpat-abcdefghijklmnopqrstu": "abcdefghijklmnopqrstu",
    "slack xoxb-1234567890-abcdefghij": "1234567890-abcdefghij",
    "AIzaSyA1234567890abcdefghijklmnopqrstuv": "SyA1234567890",
}
SENSITIVE_KEYS = (
    "http.request.header.authorization",
    "http.response.header.set-cookie",
    "mcp.oauth.access_token",
    "db.password",
    "x_api_key",
    "client.secret",
)


def harmless_values() -> set[str]:
    """Values the plugin and its neighbours really write: none may be masked."""
    words: set[str] = set()
    for name, value in vars(t).items():
        if name.isupper() and isinstance(value, tuple):
            words.update(v for v in value if isinstance(v, str))
    words.update(telemetry_strings().values())
    words.update(
        {
            "tools/call",
            "MCP send tools/call search",
            "http://127.0.0.1:8000",
            "http://127.0.0.1:8000/mcp",
            "https://billing.internal:8443",
            "http://localhost:4318/v1/traces",
            "billing",
            "charge",
            "search",
            "task-management-tool-v2",
            "ask-the-oracle-about-everything",
            "idempotency_key",
            "RetryableConflictException",
            "ConnectError",
            "-32603",
            "2",
            "1.1",
            "execute_tool",
            "2025-06-18",
            # a sha256 hex digest, as mcp.session.id is written
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "Server returned an error response",
            "request_attempts record refused at mcp.replay.endpoint",
            "otel-mcp-replay-demo",
            "python",
        }
    )
    return words


def masked(value: str, patterns: Sequence[str]) -> str:
    """What the redaction processor leaves of a string value: every match of every pattern replaced."""
    for pattern in patterns:
        value = re.sub(pattern, "****", value)
    return value


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_blocked_patterns_are_re2_safe(path: Path) -> None:
    section = redaction(path)
    patterns = [*section["blocked_values"], *section["blocked_key_patterns"]]
    assert patterns
    for pattern in patterns:
        assert not RE2_UNSUPPORTED.search(pattern), f"not RE2 (Go regexp): {pattern}"
        re.compile(pattern)


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_blocked_values_mask_the_secrets(path: Path) -> None:
    patterns = redaction(path)["blocked_values"]
    for text, secret in SECRETS.items():
        assert secret in text
        assert secret not in masked(text, patterns), f"not masked: {text!r}"


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_blocked_values_leave_the_contract_words_alone(path: Path) -> None:
    patterns = redaction(path)["blocked_values"]
    assert harmless_values(), "no harmless values found"
    for value in sorted(harmless_values()):
        assert masked(value, patterns) == value, f"would mask a harmless value: {value!r}"


@pytest.mark.parametrize("path", REDACTING, ids=lambda p: p.name)
def test_blocked_key_patterns_guard_secret_keys_and_spare_the_listed_ones(path: Path) -> None:
    patterns = redaction(path)["blocked_key_patterns"]
    for key in SENSITIVE_KEYS:
        assert any(re.search(p, key) for p in patterns), key
    assert allow_list(path), f"{path.name}: no allow-list"
    for key in allow_list(path):
        hit = [p for p in patterns if re.search(p, key)]
        assert not hit, f"{key} is allowed but its value would be masked by {hit}"


# ---------------------------------------------------------------------------------------------
# Components and pipelines (contrib v0.136.0)

KNOWN_TYPES: dict[str, set[str]] = {
    "receivers": {"otlp"},
    "processors": {
        "memory_limiter",
        "batch",
        "redaction",
        "tail_sampling",
        "attributes",
        "filter",
        "transform",
        "resource",
        "probabilistic_sampler",
    },
    "exporters": {"otlp", "otlphttp", "debug", "nop", "loadbalancing"},
    "extensions": {"health_check", "zpages", "pprof"},
    "connectors": {"forward"},
}
# Keys of the v0.136.0 component configurations (the release's JSON schemas), for the components used.
REDACTION_KEYS = {
    "allow_all_keys",
    "allowed_keys",
    "allowed_values",
    "blocked_key_patterns",
    "blocked_values",
    "db_sanitizer",
    "hash_function",
    "ignored_keys",
    "redact_all_types",
    "summary",
    "url_sanitizer",
}
TAIL_SAMPLING_KEYS = {
    "block_on_overflow",
    "decision_cache",
    "decision_wait",
    "drop_pending_traces_on_shutdown",
    "expected_new_traces_per_sec",
    "num_traces",
    "policies",
    "sample_on_first_match",
}
POLICY_OPTIONS: dict[str, set[str]] = {
    "always_sample": set(),
    "latency": {"threshold_ms", "upper_threshold_ms"},
    "numeric_attribute": {"key", "min_value", "max_value", "invert_match"},
    "probabilistic": {"hash_salt", "sampling_percentage"},
    "status_code": {"status_codes"},
    "string_attribute": {"key", "values", "enabled_regex_matching", "cache_max_size", "invert_match"},
    "boolean_attribute": {"key", "value", "invert_match"},
    "ottl_condition": {"error_mode", "span", "spanevent"},
    "span_count": {"min_spans", "max_spans"},
    "rate_limiting": {"spans_per_second"},
    "trace_state": {"key", "values"},
    "and": {"and_sub_policy"},
    "drop": {"drop_sub_policy"},
    "composite": {"max_total_spans_per_second", "policy_order", "composite_sub_policy", "rate_allocation"},
}
LOADBALANCING_KEYS = {
    "routing_key",
    "routing_attributes",
    "protocol",
    "resolver",
    "timeout",
    "retry_on_failure",
    "sending_queue",
}
RESOLVER_OPTIONS = {
    "static": {"hostnames"},
    "dns": {"hostname", "port", "interval", "timeout"},
    "k8s": {"service", "ports", "timeout", "return_hostnames"},
    "aws_cloud_map": {"namespace", "service_name", "port", "health_status", "interval", "timeout"},
}


def signal(pipeline_name: str) -> str:
    """A pipeline's signal: the part of its name before any `/` (`traces/sampled` -> `traces`)."""
    return pipeline_name.split("/", 1)[0]


def exporters_of(config: Mapping[str, Any], wanted: str) -> set[str]:
    """The exporters (and connectors) the pipelines of one signal send to."""
    return {e for name, p in pipelines(config).items() if signal(name) == wanted for e in p["exporters"]}


def pipelines(config: Mapping[str, Any]) -> dict[str, dict[str, list[str]]]:
    found: dict[str, dict[str, list[str]]] = config["service"]["pipelines"]
    return found


@pytest.mark.parametrize("path", COLLECTORS, ids=lambda p: p.name)
def test_pipelines_use_only_defined_components_and_every_one_is_used(path: Path) -> None:
    config = load_yaml(path)
    used: dict[str, set[str]] = {kind: set() for kind in KNOWN_TYPES}
    connectors = set(config.get("connectors") or {})
    connector_ends: dict[str, set[str]] = {connector: set() for connector in connectors}
    assert pipelines(config), f"{path.name}: no pipelines"
    for name, pipeline in pipelines(config).items():
        assert name.split("/")[0] in {"traces", "metrics", "logs"}, name
        assert set(pipeline) <= {"receivers", "processors", "exporters"}, name
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                if kind != "processors" and component in connectors:
                    # A connector is the exporter of one pipeline and the receiver of others.
                    connector_ends[component].add(kind)
                    used["connectors"].add(component)
                    continue
                assert component in (config.get(kind) or {}), (
                    f"{path.name}: {name} uses undefined {component}"
                )
                used[kind].add(component)
        assert pipeline.get("receivers") and pipeline.get("exporters"), name
    for connector, ends in connector_ends.items():
        assert ends == {"receivers", "exporters"}, f"{path.name}: {connector} is not both ends of pipelines"
    for extension in config["service"].get("extensions", []):
        assert extension in (config.get("extensions") or {}), f"{path.name}: undefined extension {extension}"
        used["extensions"].add(extension)
    for kind, known in KNOWN_TYPES.items():
        defined = set(config.get(kind) or {})
        assert defined == used[kind], (
            f"{path.name}: {kind} defined but unused: {sorted(defined - used[kind])}"
        )
        for component in defined:
            assert component.split("/")[0] in known, f"{path.name}: {component} is not a v0.136.0 {kind} type"
    assert set(config) <= {"receivers", "processors", "exporters", "extensions", "connectors", "service"}


# The pipelines and their processors, in order (README.md, "Pipeline order"). `traces` takes OTLP in;
# in the sampling tiers it hands every span, marked, to `traces/sampled` and `traces/uncertain`.
SAMPLED_AND_UNCERTAIN = {
    "traces/sampled": ["tail_sampling", "filter/drop_uncertain", "batch"],
    "traces/uncertain": ["filter/only_uncertain", "transform/unmark", "batch"],
}
PIPELINE_ORDER: dict[Path, dict[str, list[str]]] = {
    SINGLE: {
        "traces": [
            "memory_limiter",
            "redaction",
            "transform/redact_status",
            "transform/redact_url_queries",
            "transform/mark_uncertain",
        ],
        **SAMPLED_AND_UNCERTAIN,
        # The record as a log-based event: redacted by the same processor, never sampled.
        "logs": ["memory_limiter", "redaction", "batch"],
    },
    AGENT: {
        "traces": [
            "memory_limiter",
            "redaction",
            "transform/redact_status",
            "transform/redact_url_queries",
            "batch",
        ]
    },
    GATEWAY: {"traces": ["memory_limiter", "transform/mark_uncertain"], **SAMPLED_AND_UNCERTAIN},
}


@pytest.mark.parametrize("path", COLLECTORS, ids=lambda p: p.name)
def test_processor_order(path: Path) -> None:
    found = {name: pipeline["processors"] for name, pipeline in pipelines(load_yaml(path)).items()}
    assert found == PIPELINE_ORDER[path]


@pytest.mark.parametrize("path", COLLECTORS, ids=lambda p: p.name)
def test_component_keys_are_the_releases(path: Path) -> None:
    config = load_yaml(path)
    processors = config["processors"]
    if "redaction" in processors:
        assert set(processors["redaction"]) <= REDACTION_KEYS
    if "tail_sampling" in processors:
        section = processors["tail_sampling"]
        assert set(section) <= TAIL_SAMPLING_KEYS
        assert set(section.get("decision_cache", {})) <= {"sampled_cache_size", "non_sampled_cache_size"}
        for policy in leaf_policies(section["policies"]):
            kind = policy["type"]
            assert kind in POLICY_OPTIONS, kind
            assert set(policy) <= {"name", "type", kind}, policy["name"]
            assert set(policy.get(kind) or {}) <= POLICY_OPTIONS[kind], policy["name"]
    if "loadbalancing" in config["exporters"]:
        section = config["exporters"]["loadbalancing"]
        assert set(section) <= LOADBALANCING_KEYS
        assert set(section["protocol"]) == {"otlp"}
        assert len(section["resolver"]) == 1
        for resolver, options in section["resolver"].items():
            assert set(options) <= RESOLVER_OPTIONS[resolver]
    for name, exporter in config["exporters"].items():
        if name.split("/")[0] == "otlp":
            assert set(exporter) <= {"endpoint", "tls", "compression", "headers", "timeout", "sending_queue"}


@pytest.mark.parametrize("path", (SINGLE, AGENT), ids=lambda p: p.name)
def test_otlp_receivers_listen_on_all_container_addresses(path: Path) -> None:
    # By default (a container's); the end-to-end tests move them to 127.0.0.1 by environment.
    protocols = resolve(load_yaml(path)["receivers"]["otlp"]["protocols"])
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"


@pytest.mark.parametrize("path", COLLECTORS, ids=lambda p: p.name)
def test_every_setting_read_from_the_environment_has_a_default_and_is_documented(path: Path) -> None:
    text = path.read_text()
    readme = README.read_text()
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    # `$${` is an escaped `$` (transform/redact_url_queries' `$${1}`), not a reference.
    assert len(re.findall(r"(?<!\$)\$\{", code)) == len(ENV_REF.findall(code)), (
        f"{path.name}: a ${{...}} that is not ${{env:NAME:-default}}"
    )
    for name, default in ENV_REF.findall(code):
        assert name.startswith("MCP_REPLAY_"), name
        assert default, f"{path.name}: ${{env:{name}}} has no default"
        assert f"`{name}`" in readme, f"README.md does not document {name}"
        assert name in text.split("\nextensions:", 1)[0], f"{path.name}: header comment does not list {name}"


README_DEFAULTS = re.compile(r"^\| `(MCP_REPLAY_[A-Z_]+)` \| `([^`]*)` \|", re.M)


def test_the_readme_gives_each_setting_the_default_its_file_has() -> None:
    """Both tables of README.md's variables against the `${env:NAME:-default}` of every file that
    reads them (the three collector configs and jaeger-local.yaml): same names, same defaults."""
    documented = dict(README_DEFAULTS.findall(README.read_text()))
    read: dict[str, set[str]] = defaultdict(set)
    for path in (*COLLECTORS, JAEGER_LOCAL):
        code = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
        for name, default in ENV_REF.findall(code):
            read[name].add(default)
    assert read and all(len(defaults) == 1 for defaults in read.values()), read
    assert documented == {name: defaults.pop() for name, defaults in read.items()}
    # Jaeger outside a container: every port it opens is on loopback unless moved.
    jaeger = {name: documented[name] for name in read if name in JAEGER_LOCAL.read_text()}
    assert len(jaeger) == 4 and all(default.startswith("127.0.0.1:") for default in jaeger.values()), jaeger


BUILD_SCRIPT = CC.parent / "scripts" / "otel-binaries"


def built_versions() -> dict[str, str]:
    """The versions scripts/otel-binaries builds (its `NAME=VERSION` lines)."""
    found = dict(re.findall(r"^([A-Z_]+_VERSION)=(\S+)", BUILD_SCRIPT.read_text(), flags=re.M))
    assert set(found) == {"COLLECTOR_VERSION", "JAEGER_MODULE_VERSION", "JAEGER_VERSION"}, found
    return found


def test_the_versions_named_are_the_ones_built_and_the_images_pinned() -> None:
    """The README's versions, the manifest's, the build script's and the compose images' agree:
    what a user runs by Docker is the release the tests ran as binaries."""
    built = built_versions()
    assert built["COLLECTOR_VERSION"] == COLLECTOR_VERSION == load_yaml(BUILDER_MANIFEST)["dist"]["version"]
    images = {
        service["image"].rpartition(":")[0]: service["image"].rpartition(":")[2]
        for path in (COMPOSE, COMPOSE_TWO_TIER)
        for service in compose_services(path).values()
        if "image" in service
    }
    assert images["otel/opentelemetry-collector-contrib"] == built["COLLECTOR_VERSION"]
    assert images["jaegertracing/jaeger"] == built["JAEGER_VERSION"]
    readme = " ".join(README.read_text().split())
    assert f"Collector **v{built['COLLECTOR_VERSION']}** and Jaeger **v{built['JAEGER_VERSION']}**" in readme
    assert f"`github.com/jaegertracing/jaeger` v{built['JAEGER_MODULE_VERSION']}" in readme
    assert f"v{built['JAEGER_MODULE_VERSION']}" in JAEGER_LOCAL.read_text()


@pytest.mark.parametrize("path", COLLECTORS, ids=lambda p: p.name)
def test_each_collector_file_names_the_release_its_keys_are_from(path: Path) -> None:
    assert f"v{COLLECTOR_VERSION}" in path.read_text().split("\nextensions:", 1)[0]
    assert f"v{COLLECTOR_VERSION}" in README.read_text()


# ---------------------------------------------------------------------------------------------
# Tail sampling

OTTL_ATTRIBUTE = re.compile(r'attributes\["([^"]+)"\]\s*(==|!=)\s*("([^"]*)"|true|false|nil|-?\d+)')
OTTL_NAME = re.compile(r'\bname\s*==\s*"([^"]*)"')


def test_gateway_samples_exactly_as_the_single_tier() -> None:
    assert tail_sampling(GATEWAY) == tail_sampling(SINGLE)


@pytest.mark.parametrize("path", SAMPLING, ids=lambda p: p.name)
def test_policies_read_contract_keys_and_words(path: Path) -> None:
    section = tail_sampling(path)
    names = [p["name"] for p in leaf_policies(section["policies"])]
    assert names and len(names) == len(set(names))
    for policy in leaf_policies(section["policies"]):
        kind = policy["type"]
        options = policy.get(kind) or {}
        if kind in {"string_attribute", "numeric_attribute", "boolean_attribute"}:
            key = options["key"]
            assert key in SPAN_KEYS, f"{policy['name']}: {key} is not a contract span key"
            if kind == "string_attribute":
                assert not options.get("enabled_regex_matching")
                assert key in WORDS and set(options["values"]) <= WORDS[key], policy["name"]
            if kind == "numeric_attribute":
                assert key in INT_KEYS
            if kind == "boolean_attribute":
                assert key in BOOL_KEYS
        if kind == "ottl_condition":
            assert options.get("error_mode") == "ignore"
            for condition in options.get("span", []):
                for key, _op, literal, word in OTTL_ATTRIBUTE.findall(condition):
                    assert key in SPAN_KEYS, condition
                    check_literal(key, literal, word, condition)
            for condition in options.get("spanevent", []):
                for event in OTTL_NAME.findall(condition):
                    assert event in EVENT_NAMES, condition
                for key, _op, literal, word in OTTL_ATTRIBUTE.findall(condition):
                    assert key in EVENT_KEYS, condition
                    check_literal(key, literal, word, condition)


def check_literal(key: str, literal: str, word: str, where: str) -> None:
    if literal == "nil":
        return
    if key in BOOL_KEYS:
        assert literal in {"true", "false"}, where
    elif key in INT_KEYS:
        assert re.fullmatch(r"-?\d+(\.\d+)?", literal), where
    elif key in WORDS:
        assert literal.startswith('"') and word in WORDS[key], f"{word!r} is not a word of {key}: {where}"
    else:
        assert key in FREE_TEXT_KEYS, where


@pytest.mark.parametrize("path", SAMPLING, ids=lambda p: p.name)
def test_policies_keep_every_uncertain_call_and_every_error(path: Path) -> None:
    policies = list(leaf_policies(tail_sampling(path)["policies"]))
    top = tail_sampling(path)["policies"]

    def string_values(key: str) -> set[str]:
        return {
            v
            for p in top
            if p["type"] == "string_attribute" and p["string_attribute"]["key"] == key
            for v in p["string_attribute"]["values"]
        }

    assert "unknown" in string_values(t.EFFECT)
    assert string_values(t.DECLINED) == set(t.DECLINED_REASONS), "every decline reason keeps its trace"
    assert any(p["type"] == "status_code" and "ERROR" in p["status_code"]["status_codes"] for p in top)
    conditions = [
        c for p in top if p["type"] == "ottl_condition" for c in p["ottl_condition"].get("spanevent", [])
    ]
    assert any(t.RECORD_REFUSED_EVENT in c for c in conditions)
    # The call span's own attribute (contract, "The call span"), read without copying.
    assert any(
        p["type"] == "boolean_attribute" and p["boolean_attribute"] == {"key": t.MAY_HAVE_RUN, "value": True}
        for p in top
    )
    # The keeping policies stand alone at the top (an `and` around them would narrow them) and nothing drops.
    assert not [p for p in policies if p["type"] in {"drop", "composite", "rate_limiting"}]
    assert not [p for p in policies if (p.get(p["type"]) or {}).get("invert_match")]


@pytest.mark.parametrize("path", SAMPLING, ids=lambda p: p.name)
def test_every_policy_reads_the_span_not_the_record_s_content(path: Path) -> None:
    """README: the policies read span attributes, status and an event's name, never a record's keys
    (the call span carries the call's outcome itself)."""
    for policy in leaf_policies(tail_sampling(path)["policies"]):
        for condition in (policy.get("ottl_condition") or {}).get("spanevent", []):
            assert not OTTL_ATTRIBUTE.findall(condition) and OTTL_NAME.search(condition), condition
    readme_policies = re.findall(
        r"^\| `([a-z-]+)` \|",
        README.read_text().split("### Tail sampling", 1)[1].split("###", 1)[0],
        flags=re.M,
    )
    assert readme_policies == [p["name"] for p in tail_sampling(path)["policies"]]


@pytest.mark.parametrize("path", SAMPLING, ids=lambda p: p.name)
def test_the_rest_is_sampled_at_a_rate_the_user_sets(path: Path) -> None:
    section = tail_sampling(path)
    rates = [
        p["probabilistic"]["sampling_percentage"] for p in section["policies"] if p["type"] == "probabilistic"
    ]
    assert rates == ["${env:MCP_REPLAY_SAMPLE_PERCENT:-10}"]
    assert resolve(rates[0]) == 10
    wait = resolve(section["decision_wait"])
    assert re.fullmatch(r"\d+s", wait) and int(wait[:-1]) > 10, "longer than the default max_wait_ms"
    cache = section.get("decision_cache", {})
    assert cache.get("sampled_cache_size", 0) > 0


def test_sampling_reads_only_keys_the_redaction_before_it_keeps() -> None:
    # Single tier: redaction runs before tail_sampling in the same pipeline. Two tiers: the agent's
    # redaction runs before the gateway's sampling.
    for redacting, sampling in ((SINGLE, SINGLE), (AGENT, GATEWAY)):
        allowed = set(allow_list(redacting))
        assert list(leaf_policies(tail_sampling(sampling)["policies"])), f"{sampling.name}: no policies"
        for policy in leaf_policies(tail_sampling(sampling)["policies"]):
            options = policy.get(policy["type"]) or {}
            read = {options["key"]} if "key" in options else set()
            for condition in (*options.get("span", []), *options.get("spanevent", [])):
                read |= {key for key, *_ in OTTL_ATTRIBUTE.findall(condition)}
            assert read <= allowed, (
                f"{policy['name']} reads {sorted(read - allowed)}, deleted by {redacting.name}"
            )


# ---------------------------------------------------------------------------------------------
# Uncertain calls survive sampling: the pipelines, run on sample spans
#
# A small reading of the OTTL this configuration uses (comparisons joined by `and`; `set`,
# `delete_key` and `replace_pattern` statements) and of each processor's effect on a span, so that
# the pipelines can be run on the contract's spans for both fates of a trace: kept or dropped by
# tail_sampling. A statement or condition outside that reading fails the test instead of passing
# unread.

_OTTL_STRING = r'"(?:[^"\\]|\\.)*"'
_OTTL_LITERAL = rf"{_OTTL_STRING}|true|false|nil|-?\d+"
OTTL_COMPARISON = re.compile(
    rf'(?:(span|spanevent)\.)?(?:attributes\["([^"]+)"\]|(name))\s*(==|!=)\s*({_OTTL_LITERAL})'
)
OTTL_SET_TRUE = re.compile(r'set\(span\.attributes\["([^"]+)"\], true\) where (.+)')
OTTL_DELETE_KEY = re.compile(r'delete_key\(span\.attributes, "([^"]+)"\)')
OTTL_REPLACE_STATUS = re.compile(
    rf"replace_pattern\(span\.status\.message, ({_OTTL_STRING}), ({_OTTL_STRING})\)"
)
OTTL_REPLACE_ATTRIBUTE = re.compile(
    rf'replace_pattern\(span\.attributes\["([^"]+)"\], ({_OTTL_STRING}), ({_OTTL_STRING})\)'
)

Span = dict[str, Any]  # {"id", "name", "attributes", "events": [{"name", "attributes"}], "status"}


def ottl_string(literal: str) -> str:
    """The value of an OTTL string literal (unquoted as Go does; only \\\\ and \\" are used here)."""
    assert re.fullmatch(r'"(?:[^"\\]|\\["\\])*"', literal), f"an escape OTTL may read otherwise: {literal}"
    value: str = json.loads(literal)
    return value


def ottl_value(literal: str) -> Any:
    if literal.startswith('"'):
        return ottl_string(literal)
    if literal in {"true", "false"}:
        return literal == "true"
    return None if literal == "nil" else int(literal)


def ottl_holds(condition: str, span: Span, event: Span | None = None) -> bool:
    """Whether a condition holds for a span (span context) or for one of its events (spanevent)."""
    for atom in condition.split(" and "):
        match = OTTL_COMPARISON.fullmatch(atom.strip())
        assert match, f"not read by this test: {atom!r} in {condition!r}"
        prefix, key, is_name, op, literal = match.groups()
        target = span if prefix == "span" or event is None else event
        actual = target["name"] if is_name else target["attributes"].get(key)
        expected = ottl_value(literal)
        # nil compares equal only to an absent key; otherwise type and value (true is not 1)
        equal = (
            actual is None if expected is None else (type(actual) is type(expected) and actual == expected)
        )
        if equal != (op == "=="):
            return False
    return True


def run_transform(section: Mapping[str, Any], span: Span) -> None:
    assert set(section) <= {"error_mode", "trace_statements"}
    assert section["error_mode"] == "ignore"
    for group in section["trace_statements"]:
        assert set(group) <= {"context", "statements"}, group
        context = group["context"]
        assert context in {"span", "spanevent"}, context
        for statement in group["statements"]:
            if "spanevent." in statement:
                assert context == "spanevent", statement
            if match := OTTL_SET_TRUE.fullmatch(statement):
                key, condition = match.groups()
                targets = span["events"] if context == "spanevent" else [None]
                if any(ottl_holds(condition, span, event) for event in targets):
                    span["attributes"][key] = True
            elif match := OTTL_DELETE_KEY.fullmatch(statement):
                assert context == "span", statement
                span["attributes"].pop(match.group(1), None)
            elif match := OTTL_REPLACE_ATTRIBUTE.fullmatch(statement):
                assert context == "span", statement
                key = match.group(1)
                pattern, replacement = (ottl_string(g) for g in match.groups()[1:])
                # The config loader reads `$$` as `$`; Go's `${1}` is Python's `\g<1>`.
                replacement = re.sub(r"\$\{(\d+)\}", r"\\g<\1>", replacement.replace("$$", "$"))
                if isinstance(span["attributes"].get(key), str):
                    span["attributes"][key] = re.sub(pattern, replacement, span["attributes"][key])
            elif match := OTTL_REPLACE_STATUS.fullmatch(statement):
                assert context == "span", statement
                pattern, replacement = (ottl_string(g) for g in match.groups())
                assert "$" not in replacement
                span["status"] = re.sub(pattern, replacement, span["status"])
            else:
                raise AssertionError(f"not read by this test: {statement!r}")


def run_filter(section: Mapping[str, Any], batch: list[Span]) -> list[Span]:
    assert set(section) <= {"error_mode", "traces"}
    assert section["error_mode"] == "ignore"
    assert set(section["traces"]) <= {"span", "spanevent"}
    kept = []
    for span in batch:
        if any(ottl_holds(condition, span) for condition in section["traces"].get("span", [])):
            continue
        for condition in section["traces"].get("spanevent", []):
            span["events"] = [e for e in span["events"] if not ottl_holds(condition, span, e)]
        kept.append(span)
    return kept


def run_redaction(section: Mapping[str, Any], span: Span) -> None:
    allowed = set(section["allowed_keys"])
    for holder in (span, *span["events"]):
        holder["attributes"] = {k: v for k, v in holder["attributes"].items() if k in allowed}
        for key, value in holder["attributes"].items():
            if isinstance(value, str):
                holder["attributes"][key] = masked(value, section["blocked_values"])


@dataclass
class Run:
    """One batch through a collector: what each exporter sent, and what tail_sampling was shown."""

    sampled: bool
    exported: dict[str, list[Span]]
    shown_to_sampler: list[Span]


def run_processors(config: Mapping[str, Any], names: list[str], batch: list[Span], run: Run) -> list[Span]:
    for name in names:
        kind, section = name.split("/")[0], resolve(config["processors"][name])
        if kind in {"memory_limiter", "batch"}:
            continue
        if kind == "tail_sampling":
            run.shown_to_sampler.extend(copy.deepcopy(batch))
            batch = batch if run.sampled else []
        elif kind == "filter":
            batch = run_filter(section, batch)
        elif kind == "transform":
            for span in batch:
                run_transform(section, span)
        elif kind == "redaction":
            for span in batch:
                run_redaction(section, span)
        else:
            raise AssertionError(f"{name}: not run by this test")
    return batch


def run_collector(path: Path, batch: list[Span], sampled: bool) -> Run:
    """Send `batch` to the collector's OTLP receiver; tail_sampling keeps or drops the trace."""
    config = load_yaml(path)
    connectors = set(config.get("connectors") or {})
    run = Run(sampled, defaultdict(list), [])

    def feed(receiver: str, spans: list[Span]) -> None:
        for name, pipeline in pipelines(config).items():
            # Spans enter the traces pipelines only: the logs pipeline never sees them.
            if receiver in pipeline["receivers"] and signal(name) == "traces":
                out = run_processors(config, pipeline["processors"], copy.deepcopy(spans), run)
                for exporter in pipeline["exporters"]:
                    if exporter in connectors:
                        feed(exporter, out)
                    else:
                        run.exported[exporter].extend(copy.deepcopy(out))

    feed("otlp", batch)
    return run


def run_layout(layout: str, batch: list[Span], sampled: bool) -> Run:
    if layout == "single":
        return run_collector(SINGLE, batch, sampled)
    agent = run_collector(AGENT, batch, sampled)
    assert set(agent.exported) == {"loadbalancing"}
    return run_collector(GATEWAY, agent.exported["loadbalancing"], sampled)


def sample_span(
    number: int, name: str, attributes: Mapping[str, Any], events: Sequence[Span] = (), status: str = ""
) -> Span:
    return {
        "id": number,
        "name": name,
        "attributes": dict(attributes),
        "events": list(events),
        "status": status,
    }


def record(**attributes: Any) -> Span:
    return {"name": t.RECORD_EVENT, "attributes": attributes}


ATTEMPT = {t.MCP_METHOD_NAME: "tools/call", t.GEN_AI_TOOL_NAME: "charge", t.JSONRPC_REQUEST_ID: "7"}
CALL = {**ATTEMPT, t.POLICY: "app-authorized"}


def call_span(number: int, *, effect: str, may_have_run: bool) -> Span:
    """A call span as the contract draws it: the call's outcome on the span itself, and in its record."""
    outcome = {t.EFFECT: effect, t.MAY_HAVE_RUN: may_have_run}
    return sample_span(number, "tools/call charge", {**CALL, **outcome}, [record(**outcome)])


# (span, uncertain?): one of each way the contract marks a call uncertain, and spans that are not.
SAMPLE_SPANS: list[tuple[Span, bool]] = [
    (
        sample_span(
            1, t.ATTEMPT_SPAN_NAME, {**ATTEMPT, t.ATTEMPT: 1, t.FAILURE: "network", t.EFFECT: "unknown"}
        ),
        True,
    ),
    (
        sample_span(
            2,
            t.ATTEMPT_SPAN_NAME,
            {**ATTEMPT, t.ATTEMPT: 1, t.FAILURE: "error", t.EFFECT: "applied", t.DECLINED: "not-retryable"},
        ),
        True,
    ),
    (call_span(3, effect="unknown", may_have_run=False), True),
    (call_span(4, effect="none", may_have_run=True), True),
    (sample_span(5, "tools/call charge", CALL, [{"name": t.RECORD_REFUSED_EVENT, "attributes": {}}]), True),
    (sample_span(6, "tools/call charge", {**CALL, t.DECLINED: "repeat-of-unknown"}), True),
    (sample_span(7, t.ATTEMPT_SPAN_NAME, {**ATTEMPT, t.ATTEMPT: 1, t.EFFECT: "applied"}), False),
    (
        sample_span(
            8,
            t.ATTEMPT_SPAN_NAME,
            {**ATTEMPT, t.ATTEMPT: 1, t.FAILURE: "throttle", t.EFFECT: "none", t.WAIT_MS: 250},
        ),
        False,
    ),
    (call_span(9, effect="applied", may_have_run=False), False),
    (sample_span(10, "MCP send tools/call charge", {t.MCP_METHOD_NAME: "tools/call"}), False),
    (
        sample_span(
            11,
            "POST",
            {"http.request.method": "POST"},
            [{"name": "exception", "attributes": {"exception.type": "ConnectError"}}],
            "ConnectError: refused",
        ),
        False,
    ),
]
LAYOUTS = ("single", "two-tier")


@pytest.mark.parametrize("sampled", [True, False], ids=["trace-kept", "trace-dropped"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_uncertain_span_is_exported_exactly_once_whatever_the_trace_s_fate(
    layout: str, sampled: bool
) -> None:
    """An uncertain call reaches Jaeger and Tempo even when tail_sampling drops its trace (a late
    span of a dropped trace inherits the drop: tail_sampling README, "Late-Arriving Spans"), and no
    span reaches them twice."""
    run = run_layout(layout, [span for span, _ in SAMPLE_SPANS], sampled)
    assert set(run.exported) == {"otlp/jaeger", "otlp/tempo"}
    for exporter, spans in run.exported.items():
        sent = Counter(span["id"] for span in spans)
        for span, uncertain in SAMPLE_SPANS:
            expected = 1 if uncertain or sampled else 0
            assert sent[span["id"]] == expected, (
                f"{layout}, {exporter}, trace {'kept' if sampled else 'dropped'}: span {span['id']} "
                f"({span['name']}) sent {sent[span['id']]} times, expected {expected}"
            )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_sampler_still_sees_every_uncertain_span(layout: str) -> None:
    """The uncertain spans are split off after tail_sampling, so they still keep their trace."""
    run = run_layout(layout, [span for span, _ in SAMPLE_SPANS], sampled=False)
    shown = {span["id"] for span in run.shown_to_sampler}
    assert shown == {span["id"] for span, _ in SAMPLE_SPANS}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_what_is_exported_carries_only_allowed_keys(layout: str) -> None:
    """The mark that splits the uncertain spans off never leaves the collector."""
    allowed = set(allow_list(SINGLE))
    run = run_layout(layout, [span for span, _ in SAMPLE_SPANS], sampled=True)
    assert any(run.exported.values()), f"{layout}: nothing was exported"
    for spans in run.exported.values():
        for span in spans:
            assert set(span["attributes"]) <= allowed, span
            for event in span["events"]:
                assert set(event["attributes"]) <= allowed, event


def test_a_span_carrying_the_mark_from_outside_loses_it_to_redaction() -> None:
    """The single tier redacts before it marks, and the agents redact before the gateways mark."""
    groups = load_yaml(SINGLE)["processors"]["transform/mark_uncertain"]["trace_statements"]
    marks = {match.group(1) for g in groups for s in g["statements"] if (match := OTTL_SET_TRUE.fullmatch(s))}
    assert len(marks) == 1 and not marks & set(allow_list(SINGLE)) and not marks & plugin_attribute_keys()
    forged = sample_span(99, "forged", {**ATTEMPT, next(iter(marks)): True})
    for layout in LAYOUTS:
        run = run_layout(layout, [forged], sampled=False)
        assert not any(run.exported.values()), layout


def test_the_sampling_tiers_split_alike() -> None:
    single, gateway = load_yaml(SINGLE), load_yaml(GATEWAY)
    for name in SAMPLED_AND_UNCERTAIN:
        assert pipelines(gateway)[name] == pipelines(single)[name]
        for processor in pipelines(single)[name]["processors"]:
            assert gateway["processors"][processor] == single["processors"][processor], processor
    assert (
        gateway["processors"]["transform/mark_uncertain"] == single["processors"]["transform/mark_uncertain"]
    )
    assert gateway["connectors"] == single["connectors"]


@pytest.mark.parametrize("path", SAMPLING, ids=lambda p: p.name)
def test_late_spans_of_a_dropped_trace_are_dropped_on_arrival(path: Path) -> None:
    """Both decision caches on, each far larger than num_traces (tail_sampling README,
    `decision_cache`): a late span of a decided trace gets that decision at once, and a decided
    trace leaves the num_traces buffer at once (processor.go, releaseSampledTrace and
    releaseNotSampledTrace). Uncertain spans do not depend on it: traces/uncertain sends them."""
    section = tail_sampling(path)
    cache = section["decision_cache"]
    assert cache["sampled_cache_size"] >= 2 * section["num_traces"]
    assert cache["non_sampled_cache_size"] >= 2 * section["num_traces"]


LATE_SPAN_OVERCLAIMS = ("decision of its own", "decided on its own", "no cache of dropped decisions")


@pytest.mark.parametrize("path", (*SAMPLING, README), ids=lambda p: p.name)
def test_no_file_says_a_late_span_of_a_dropped_trace_is_decided_again(path: Path) -> None:
    text = " ".join(path.read_text().split()).lower()
    assert not [claim for claim in LATE_SPAN_OVERCLAIMS if claim in text]


# ---------------------------------------------------------------------------------------------
# Two tiers


def test_agent_routes_by_trace_id_to_the_gateways() -> None:
    exporter = load_yaml(AGENT)["exporters"]["loadbalancing"]
    assert exporter["routing_key"] == "traceID"
    dns = exporter["resolver"]["dns"]
    gateway_grpc = resolve(load_yaml(GATEWAY)["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])
    assert gateway_grpc.rsplit(":", 1)[1] == str(resolve(dns["port"]))
    assert "otelcol-gateway" in load_yaml(COMPOSE_TWO_TIER)["services"]
    assert resolve(dns["hostname"]) == "otelcol-gateway"
    assert pipelines(load_yaml(AGENT))["traces"]["exporters"] == ["loadbalancing"]


def test_gateway_has_tail_sampling_and_exports_to_jaeger_and_tempo() -> None:
    for path in SAMPLING:
        config = load_yaml(path)
        assert "tail_sampling" in pipelines(config)["traces/sampled"]["processors"]
        endpoints = {name: resolve(e["endpoint"]) for name, e in config["exporters"].items()}
        traced = exporters_of(config, "traces") - set(config.get("connectors") or {})
        backends = {"otlp/jaeger": "jaeger:4317", "otlp/tempo": "tempo:4317"}
        assert {name: endpoints[name] for name in traced} == backends
        # The single tier alone has a logs pipeline, with its own exporter; nothing else is exported.
        logged = {"otlp/logs": "logs:4317"} if path == SINGLE else {}
        assert {name: endpoints[name] for name in exporters_of(config, "logs")} == logged
        assert set(endpoints) == traced | set(logged)


def test_the_logs_pipeline_redacts_with_the_traces_rules_and_exports_to_a_logs_backend() -> None:
    """The record as a log record (`record` = `log` or `both`) passes the very redaction processor the
    spans do (same allow-list, same blocked values), after memory_limiter, batched, to an OTLP
    exporter of its own that no traces pipeline uses; it is not tail-sampled (a record is one per call)."""
    config = load_yaml(SINGLE)
    found = pipelines(config)
    assert found["logs"] == {
        "receivers": ["otlp"],
        "processors": ["memory_limiter", "redaction", "batch"],
        "exporters": ["otlp/logs"],
    }
    traced = [name for name in found if signal(name) == "traces"]
    assert "redaction" in found["traces"]["processors"]
    assert all("otlp/logs" not in found[name]["exporters"] for name in traced)
    assert redaction(SINGLE)["allow_all_keys"] is False
    assert {*t.RECORD_KEYS, *t.RECORD_TASK_KEYS} <= set(redaction(SINGLE)["allowed_keys"])


def test_the_agent_reroutes_what_a_vanished_gateway_did_not_take() -> None:
    """Without top-level retry and queue the loadbalancing exporter does not re-route data that its
    per-gateway exporter failed to deliver (loadbalancingexporter README, "Resilience and scaling
    considerations"). The per-gateway exporter gives up first, then the top level sends the data again
    by the resolver's current view of the gateways. The per-gateway exporter has no queue of its own:
    a queue would accept the data and drop it after its retries, and no error would come back."""
    exporter = load_yaml(AGENT)["exporters"]["loadbalancing"]
    assert exporter["retry_on_failure"]["enabled"] is True
    assert exporter["sending_queue"]["enabled"] is True
    assert exporter["protocol"]["otlp"]["sending_queue"]["enabled"] is False
    given_up = {
        level: section["retry_on_failure"]["max_elapsed_time"]
        for level, section in (("per gateway", exporter["protocol"]["otlp"]), ("top", exporter))
    }
    assert all(re.fullmatch(r"\d+s", value) for value in given_up.values()), given_up
    assert int(given_up["per gateway"][:-1]) < int(given_up["top"][:-1])


# ---------------------------------------------------------------------------------------------
# Compose


@dataclass(frozen=True)
class Mount:
    source: str
    target: str


def mounts(service: Mapping[str, Any]) -> list[Mount]:
    found: list[Mount] = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        found.append(Mount(source, target))
    return found


def published_host_ips(service: Mapping[str, Any]) -> Iterator[str]:
    for port in service.get("ports", []):
        if isinstance(port, dict):
            yield str(port.get("host_ip", ""))
            continue
        spec = str(port).split("/")[0]
        if spec.startswith("["):
            yield spec[1 : spec.index("]")]
            continue
        parts = spec.split(":")
        yield parts[0] if len(parts) == 3 else ""


def compose_services(path: Path) -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = load_yaml(path)["services"]
    return services


def merged_services() -> dict[str, dict[str, Any]]:
    """docker-compose.two-tier.yaml laid over docker-compose.yaml, as compose merges the parts used here."""
    merged = {name: dict(service) for name, service in compose_services(COMPOSE).items()}
    for name, override in compose_services(COMPOSE_TWO_TIER).items():
        base = merged.setdefault(name, {})
        for key, value in override.items():
            if key == "volumes":
                by_target = {m.target: v for m, v in zip(mounts(base), base.get("volumes", []), strict=True)}
                by_target.update({m.target: v for m, v in zip(mounts(override), value, strict=True)})
                base[key] = list(by_target.values())
            elif key == "environment":
                base[key] = {**base.get(key, {}), **value}
            elif key == "depends_on":
                base[key] = [*base.get(key, []), *value]
            else:
                base[key] = value
    return merged


def config_flag(service: Mapping[str, Any], flag: str) -> str:
    for argument in service.get("command", []):
        if argument.startswith(flag + "="):
            return str(argument.split("=", 1)[1])
    raise AssertionError(f"no {flag}= in {service.get('command')}")


@pytest.mark.parametrize("path", (COMPOSE, COMPOSE_TWO_TIER), ids=lambda p: p.name)
def test_published_ports_bind_loopback_only(path: Path) -> None:
    # The two-tier file is an overlay that publishes nothing itself: what runs is it over the base.
    services = compose_services(COMPOSE) if path == COMPOSE else merged_services()
    assert any(list(published_host_ips(service)) for service in services.values()), path.name
    for name, service in services.items():
        for host_ip in published_host_ips(service):
            assert host_ip in {"127.0.0.1", "::1"}, (
                f"{path.name}: {name} publishes on {host_ip or 'every address'}"
            )


@pytest.mark.parametrize("path", (COMPOSE, COMPOSE_TWO_TIER), ids=lambda p: p.name)
def test_bind_mounts_exist_and_named_volumes_are_declared(path: Path) -> None:
    declared = set((load_yaml(COMPOSE).get("volumes") or {}) | (load_yaml(path).get("volumes") or {}))
    assert any(mounts(service) for service in compose_services(path).values()), f"{path.name}: no mounts"
    for name, service in compose_services(path).items():
        for mount in mounts(service):
            if mount.source.startswith("."):
                assert (CC / mount.source).exists(), f"{path.name}: {name} mounts missing {mount.source}"
            else:
                assert mount.source in declared, f"{path.name}: {name} uses undeclared volume {mount.source}"


def test_the_compose_files_mount_the_configs_they_document() -> None:
    single = compose_services(COMPOSE)
    collector = single["otelcol"]
    target = config_flag(collector, "--config")
    assert Mount("./otelcol.yaml", target) in mounts(collector)
    assert collector["image"] == COLLECTOR_IMAGE
    assert {"4317", "4318"} <= {str(p).split(":")[-1] for p in collector["ports"]}
    assert "MCP_REPLAY_SAMPLE_PERCENT" in collector["environment"]

    tempo = single["tempo"]
    assert Mount("./tempo.yaml", config_flag(tempo, "-config.file")) in mounts(tempo)

    grafana = mounts(single["grafana"])
    assert Mount("./grafana/provisioning/datasources", "/etc/grafana/provisioning/datasources") in grafana
    assert Mount("./grafana/provisioning/dashboards", "/etc/grafana/provisioning/dashboards") in grafana
    provider_path = load_yaml(DASHBOARD_PROVIDER)["providers"][0]["options"]["path"]
    assert Mount("./grafana/dashboards", provider_path) in grafana
    home = single["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider_path}/{DASHBOARD.name}"

    two = merged_services()
    agent = two["otelcol"]
    assert Mount("./otelcol-agent.yaml", config_flag(agent, "--config")) in mounts(agent)
    assert Mount("./otelcol.yaml", config_flag(agent, "--config")) not in mounts(agent)
    gateway = two["otelcol-gateway"]
    assert Mount("./otelcol-gateway.yaml", config_flag(gateway, "--config")) in mounts(gateway)
    assert gateway["image"] == COLLECTOR_IMAGE
    assert not gateway.get("ports"), "gateways publish nothing"


def test_every_config_file_is_mounted_by_a_compose_file() -> None:
    sources = {
        (CC / m.source).resolve()
        for path in (COMPOSE, COMPOSE_TWO_TIER)
        for service in compose_services(path).values()
        for m in mounts(service)
        if m.source.startswith(".")
    }

    def mounted(path: Path) -> bool:
        return any(path.resolve() == s or s in path.resolve().parents for s in sources)

    assert config_files(), "no config files found"
    # The builder's manifest and the local Jaeger's config are read outside any container.
    local = (COMPOSE, COMPOSE_TWO_TIER, BUILDER_MANIFEST, JAEGER_LOCAL)
    for path in config_files():
        if path not in local:
            assert mounted(path), f"{path.relative_to(CC)} is not mounted by either compose file"


METRICS_PORT = 8888


@pytest.mark.parametrize("path", COLLECTORS, ids=lambda p: p.name)
def test_the_collector_serves_its_own_metrics_where_a_published_port_reaches_them(path: Path) -> None:
    """By default the collector serves its metrics on localhost:8888 (collector v0.136.0,
    service/telemetry/otelconftelemetry/factory.go): inside a container, out of every published
    port's reach. A reader written out also loses the default reader's naming unless told."""
    (reader,) = resolve(load_yaml(path)["service"]["telemetry"]["metrics"]["readers"])
    prometheus = reader["pull"]["exporter"]["prometheus"]
    assert prometheus["host"] == "0.0.0.0" and prometheus["port"] == METRICS_PORT
    for naming in ("without_units", "without_type_suffix", "without_scope_info"):
        assert prometheus[naming] is True, naming


def test_the_collector_metrics_are_published_on_loopback() -> None:
    ports = [str(port).split("#")[0].strip() for port in compose_services(COMPOSE)["otelcol"]["ports"]]
    assert f"127.0.0.1:{METRICS_PORT}:{METRICS_PORT}" in ports
    assert f"http://localhost:{METRICS_PORT}/metrics" in README.read_text()


def test_each_collector_container_has_the_memory_limit_its_memory_limiter_reads() -> None:
    """memory_limiter's percentages are of the cgroup's limit, or of the host's RAM when there is
    none (collector v0.136.0, internal/memorylimiter/iruntime/total_memory_linux.go)."""
    for services, name in ((compose_services(COMPOSE), "otelcol"), (merged_services(), "otelcol-gateway")):
        config = load_yaml(CC / next(m.source for m in mounts(services[name]) if m.source.endswith(".yaml")))
        assert "limit_percentage" in config["processors"]["memory_limiter"]
        assert re.fullmatch(r"\d+[mg]", str(services[name].get("mem_limit", ""))), name


README_DETAIL_OVERCLAIMS = (r"`dns`\s*\(default\)", r"resolvers? `dns` \(default")


def test_the_readme_names_no_default_resolver() -> None:
    """The loadbalancing exporter has no default resolver: leaving `resolver` out is an error."""
    text = " ".join(README.read_text().split())
    assert not [claim for claim in README_DETAIL_OVERCLAIMS if re.search(claim, text)]
    assert "no default" in text.split("`loadbalancing`", 1)[1]


def test_images_are_pinned() -> None:
    for path in (COMPOSE, COMPOSE_TWO_TIER):
        assert compose_services(path), f"{path.name}: no services"
        for name, service in compose_services(path).items():
            image = service.get("image")
            if image is None:
                continue
            repository, _, tag = image.rpartition(":")
            assert repository and re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: pin {image}"
            if repository == "jaegertracing/jaeger":
                assert tag.startswith("2."), "Jaeger v2"
            assert f"`{image}`" in README.read_text(), f"README.md does not name {image}"


def test_exporters_reach_services_compose_runs() -> None:
    services = compose_services(COMPOSE)
    tempo_grpc = load_yaml(TEMPO)["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    for path in SAMPLING:
        assert load_yaml(path)["exporters"], f"{path.name}: no exporters"
        for exporter in load_yaml(path)["exporters"].values():
            host, port = resolve(exporter["endpoint"]).rsplit(":", 1)
            assert host in services, exporter
            if host == "tempo":
                assert tempo_grpc.rsplit(":", 1)[1] == port


# ---------------------------------------------------------------------------------------------
# Grafana


def tempo_datasource() -> dict[str, Any]:
    sources: list[dict[str, Any]] = [d for d in load_yaml(DATASOURCES)["datasources"] if d["type"] == "tempo"]
    assert len(sources) == 1
    return sources[0]


def test_datasources_point_at_the_compose_services() -> None:
    tempo = tempo_datasource()
    port = load_yaml(TEMPO)["server"]["http_listen_port"]
    assert tempo["url"] == f"http://tempo:{port}"
    jaeger = [d for d in load_yaml(DATASOURCES)["datasources"] if d["type"] == "jaeger"]
    assert [d["url"] for d in jaeger] == ["http://jaeger:16686"]
    uids = [d["uid"] for d in load_yaml(DATASOURCES)["datasources"]]
    assert len(uids) == len(set(uids))


def dashboard_targets() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    dashboard = load_json(DASHBOARD)
    return [(panel, target) for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_the_dashboard_uses_the_provisioned_datasource() -> None:
    uid = tempo_datasource()["uid"]
    dashboard = load_json(DASHBOARD)
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert ids and len(ids) == len(set(ids))
    assert dashboard_targets(), "no panel has a query"
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        if "targets" in panel:
            assert panel["datasource"] == {"type": "tempo", "uid": uid}
    for _panel, target in dashboard_targets():
        assert target["datasource"] == {"type": "tempo", "uid": uid}
        assert target["queryType"] == "traceql"


def test_the_dashboard_has_the_promised_panels() -> None:
    queries = [target["query"] for _, target in dashboard_targets()]
    joined = "\n".join(queries)
    assert f'event.{t.EFFECT} = "unknown"' in joined or f'span.{t.EFFECT} = "unknown"' in joined
    assert f"by (span.{t.PERMISSION_BY})" in joined
    assert f"by (span.{t.DECLINED})" in joined
    assert f"span.{t.WAIT_MS}" in joined
    for panel, target in dashboard_targets():
        metrics = "|" in target["query"]
        assert panel["type"] == ("timeseries" if metrics else "table"), panel["title"]
        if metrics:
            assert target.get("metricsQueryType") == "range"


def test_quantile_panels_draw_each_quantile_on_its_own() -> None:
    """Stacked, a p90 series is drawn on top of the p50 one (its height p50 + p90), and a `sum` legend
    adds quantiles up: neither means anything. Tempo buckets an integer attribute by powers of two
    before it takes a quantile (pkg/traceql/ast_metrics.go, bucketizeAttribute; Log2Bucketize), so
    the panel says its lines are approximate."""
    panels = [panel for panel, target in dashboard_targets() if "quantile_over_time" in target["query"]]
    assert panels
    for panel in panels:
        custom = panel["fieldConfig"]["defaults"]["custom"]
        assert custom.get("stacking", {}).get("mode", "none") == "none", panel["title"]
        assert custom.get("drawStyle", "line") == "line", panel["title"]
        assert not {"sum", "count", "delta"} & set(panel["options"]["legend"].get("calcs", [])), panel[
            "title"
        ]
        assert "power of two" in panel["description"] or "powers of two" in panel["description"]
    readme = " ".join(README.read_text().split())
    assert "powers of two" in readme.split("quantile_over_time(span.", 1)[1]


# ---------------------------------------------------------------------------------------------
# Queries: TraceQL and Jaeger tags use only contract attributes and words

TRACEQL_INTRINSICS = frozenset(
    (
        "event:name",
        "span:name",
        "span:status",
        "span:duration",
        "span:kind",
        "trace:rootService",
        "trace:rootName",
    )
)
TRACEQL_RESOURCE_KEYS = frozenset(("service.name",))
TRACEQL_FUNCTIONS = frozenset(
    (
        "rate",
        "count_over_time",
        "sum_over_time",
        "min_over_time",
        "max_over_time",
        "avg_over_time",
        "quantile_over_time",
        "histogram_over_time",
    )
)
_STRING = r'"(?:[^"\\]|\\.)*"'
TRACEQL_REF = re.compile(
    r"(?<![\w.:])(span|event|resource|link|instrumentation|trace)([.:])([A-Za-z_][\w.]*)"
)
TRACEQL_COMPARISON = re.compile(
    r"(?<![\w.:])((?:span|event|resource)\.[\w.]+|[a-z]+:[A-Za-z]+)\s*(=~|!~|!=|>=|<=|=|>|<)\s*"
    rf"({_STRING}|nil|true|false|-?\d+(?:\.\d+)?(?:ns|us|ms|s|m|h)?)"
)
TRACEQL_UNSCOPED = re.compile(r"(?<![\w\"])\.[A-Za-z_]")


def check_traceql(query: str) -> None:
    """Every attribute a TraceQL query names is the contract's, in its scope, compared with its words."""
    bare = re.sub(_STRING, '""', query)
    assert bare.count("{") == bare.count("}") and bare.count("(") == bare.count(")"), query
    assert not TRACEQL_UNSCOPED.search(re.sub(r"\d\.\d|\(\s*\.\d", "", bare)), f"unscoped attribute: {query}"
    refs = TRACEQL_REF.findall(bare)
    assert refs, query
    for scope, sep, name in refs:
        if sep == ":":
            assert f"{scope}:{name}" in TRACEQL_INTRINSICS, f"{scope}:{name} in {query}"
        elif scope == "span":
            assert name in SPAN_KEYS, f"span.{name} is not a contract span key: {query}"
        elif scope == "event":
            assert name in EVENT_KEYS, f"event.{name} is not a record key: {query}"
        elif scope == "resource":
            assert name in TRACEQL_RESOURCE_KEYS, query
        else:
            raise AssertionError(f"{scope}.{name}: {query}")
    for ref, op, literal in TRACEQL_COMPARISON.findall(query):
        if ref == "event:name":
            assert op in {"=", "!="} and literal.strip('"') in EVENT_NAMES, query
            continue
        if ":" in ref:
            continue
        key = ref.split(".", 1)[1]
        if literal == "nil":
            assert op in {"=", "!="}, query
        elif key in BOOL_KEYS:
            assert op in {"=", "!="} and literal in {"true", "false"}, query
        elif key in INT_KEYS:
            assert re.fullmatch(r"-?\d+(\.\d+)?", literal), query
        elif key in WORDS:
            assert op in {"=", "!="} and literal.strip('"') in WORDS[key], (
                f"{literal} is not a word of {key}: {query}"
            )
        else:
            assert key in FREE_TEXT_KEYS or key in TRACEQL_RESOURCE_KEYS, query
    if "|" in bare:
        stage = bare.split("|", 1)[1]
        function = re.match(r"\s*(\w+)\s*\(([^)]*)\)", stage)
        assert function and function.group(1) in TRACEQL_FUNCTIONS, query
        for argument in function.group(2).split(","):
            argument = argument.strip()
            if argument.startswith("span."):
                assert argument[5:] in INT_KEYS, f"{argument} is not numeric: {query}"


def readme_traceql() -> list[str]:
    return [block.strip() for block in re.findall(r"```traceql\n(.*?)```", README.read_text(), flags=re.S)]


def test_the_dashboard_queries_only_contract_attributes() -> None:
    queries = [target["query"] for _, target in dashboard_targets()]
    assert len(queries) >= 6
    for query in queries:
        check_traceql(query)


def test_the_readme_traceql_queries_only_contract_attributes() -> None:
    queries = readme_traceql()
    for query in queries:
        check_traceql(query)
    for wanted in (
        f'{{ span.{t.EFFECT} = "unknown" }}',
        f"{{ span.{t.DECLINED} != nil }}",
        f'{{ span.{t.PERMISSION_BY} = "compatibility" }}',
        f'{{ event:name = "{t.RECORD_EVENT}" && event.{t.MAY_HAVE_RUN} = true }}',
    ):
        assert wanted in queries, wanted


@pytest.mark.parametrize(
    "query",
    [
        '{ span.mcp.replay.effect = "maybe" }',
        '{ span.mcp.replay.verdicts = "failed" }',
        "{ span.mcp.replay.omitted > 0 }",  # the record's alone: never a span attribute
        '{ event.mcp.replay.failure = "throttle" }',
        '{ event:name = "mcp.tool.attempts" }',
        '{ .mcp.replay.effect = "unknown" }',
        '{ span.mcp.replay.may_have_run = "yes" }',
        "{ span.mcp.replay.effect != nil } | quantile_over_time(span.mcp.replay.effect, .9)",
    ],
)
def test_the_query_check_refuses_what_is_not_the_contracts(query: str) -> None:
    with pytest.raises(AssertionError):
        check_traceql(query)


JAEGER_INTRINSIC_TAGS = {"error": frozenset(("true", "false"))}


def readme_jaeger_tags() -> list[list[tuple[str, str]]]:
    section = README.read_text().split("## Jaeger searches", 1)[1].split("\n## ", 1)[0]
    searches: list[list[tuple[str, str]]] = []
    for line in section.splitlines():
        if line.startswith("|") and "=" in line:
            cell = line.split("|")[1]  # the tags column
            code = re.findall(r"`([^`]*)`", cell)
            assert len(code) == 1, line
            pairs = [pair.partition("=") for pair in code[0].split()]
            assert all(sep for _, sep, _ in pairs), line
            searches.append([(key, value) for key, _, value in pairs])
    return searches


def test_the_readme_jaeger_searches_use_contract_keys_and_words() -> None:
    searches = readme_jaeger_tags()
    assert len(searches) >= 8
    assert [(t.EFFECT, "unknown")] in searches
    for search in searches:
        for key, value in search:
            if key in JAEGER_INTRINSIC_TAGS:
                assert value in JAEGER_INTRINSIC_TAGS[key]
                continue
            assert key in SPAN_KEYS | EVENT_KEYS, f"Jaeger tag {key} is not a contract key"
            if key in WORDS:
                assert value in WORDS[key], f"{value} is not a word of {key}"
            elif key in BOOL_KEYS:
                assert value in {"true", "false"}
            elif key in INT_KEYS:
                assert value.isdigit()
            else:
                assert key in FREE_TEXT_KEYS


# ---------------------------------------------------------------------------------------------
# The Collector Builder manifest

# Each module's component type, as its factory names it (the type a config's key starts with).
MODULE_TYPES = {
    "healthcheckextension": "health_check",
    "otlpreceiver": "otlp",
    "memorylimiterprocessor": "memory_limiter",
    "batchprocessor": "batch",
    "redactionprocessor": "redaction",
    "transformprocessor": "transform",
    "filterprocessor": "filter",
    "tailsamplingprocessor": "tail_sampling",
    "forwardconnector": "forward",
    "otlpexporter": "otlp",
    "loadbalancingexporter": "loadbalancing",
}


def test_the_builder_manifest_lists_exactly_the_components_the_configs_use_at_one_release() -> None:
    """The end-to-end tests start the built binary on each config, which refuses an unknown type;
    this holds the other half: nothing in the manifest that no config uses."""
    manifest = load_yaml(BUILDER_MANIFEST)
    listed: dict[str, set[str]] = {}
    for kind in KNOWN_TYPES:
        for entry in manifest.get(kind) or []:
            module, version = entry["gomod"].split()
            assert version == f"v{COLLECTOR_VERSION}", entry["gomod"]
            listed.setdefault(kind, set()).add(MODULE_TYPES[module.rsplit("/", 1)[1]])
    used: dict[str, set[str]] = {}
    for path in COLLECTORS:
        config = load_yaml(path)
        for kind in KNOWN_TYPES:
            used.setdefault(kind, set()).update(name.split("/")[0] for name in config.get(kind) or {})
    assert {k: v for k, v in listed.items() if v} == {k: v for k, v in used.items() if v}
    assert manifest["dist"]["version"] == COLLECTOR_VERSION
    assert set(manifest) <= {"dist", "replaces", *KNOWN_TYPES}
