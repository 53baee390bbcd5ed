"""6. Redaction on hostile input: does time grow with the text, and no faster?

Text a server controls reaches the redaction (an error message in a span's status description or an
`exception` event), and so do the app's own patterns and environment. Each case is timed at two
sizes, the second twice the first: linear code takes about twice as long, quadratic code four times,
exponential code never ends. Each case runs in a child process with a deadline, so a stall shows as
"> deadline" instead of hanging the benchmark.

- `error message`: letters then " ://", the shape that made the old URL-in-text regex quadratic,
  in a span's status description and an `exception.message` event attribute.
- `nested repeat`: the user's value pattern `(a{1,30}){1,30}$` on a run of "a" ending in "b".
- `env value`: a REDACT_VALUES variable of that many bytes (thousands of entries) read and compiled.

`python -m benchmarks.hostile_redaction [--quick]` (PYTHONPATH holding src and the repo root).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from benchmarks._common import REPO, Section, section_main

DEADLINE_S = 30.0

CHILD = textwrap.dedent(
    """
    import sys, time
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode
    from otel_mcp_replay.redaction import RedactingSpanProcessor, RedactionRules

    case, size = sys.argv[1], int(sys.argv[2])

    def span_through(rules, text):
        provider = TracerProvider()
        processor = RedactingSpanProcessor(SimpleSpanProcessor(InMemorySpanExporter()), rules,
                                           on_refused=lambda: None)
        span = provider.get_tracer("hostile").start_span("tools/call")
        span.add_event("exception", {"exception.message": text})
        span.set_status(Status(StatusCode.ERROR, text))
        span.end()
        started = time.perf_counter()
        processor.on_end(span)
        return time.perf_counter() - started

    if case == "error message":
        seconds = span_through(RedactionRules(), "a" * size + " ://")
    elif case == "nested repeat":
        seconds = span_through(RedactionRules(redact_values=[r"(a{1,30}){1,30}$"]), "a" * size + "b")
    else:
        entry = "secret-[0-9]{4}"
        value = ",".join([entry] * (size // (len(entry) + 1)))
        started = time.perf_counter()
        RedactionRules.from_env_or_builtin({"OTEL_PYTHON_MCP_REPLAY_REDACT_VALUES": value})
        seconds = time.perf_counter() - started
    print(seconds)
    """
)

CASES = (
    ("error message", "chars", (100_000, 200_000)),
    ("nested repeat", "chars", (100_000, 200_000)),
    ("env value", "bytes", (1_000_000, 2_000_000)),
)


def _time(case: str, size: int) -> float | None:
    """Seconds the case took in a child process, or None past the deadline."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")])
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, case, str(size)],
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return None
    return float(done.stdout.strip().splitlines()[-1])


def _shown(seconds: float | None) -> str:
    return f"> {DEADLINE_S:.0f} s" if seconds is None else f"{seconds * 1000:.1f} ms"


def run(quick: bool) -> Section:
    section = Section("7. Redaction on hostile input (two sizes: linear time about doubles)")
    for case, unit, sizes in CASES:
        small, large = (size // 10 for size in sizes) if quick else sizes
        first, second = _time(case, small), _time(case, large)
        ratio = "" if first is None or second is None or first <= 0 else f", x{second / first:.1f}"
        section.add(
            f"{case}: {small:,} -> {large:,} {unit}",
            f"{_shown(first)} -> {_shown(second)}{ratio}",
            "< 1 s each",
            first is not None and second is not None and max(first, second) < 1.0,
        )
    section.notes.append(f"each figure is one run in a fresh process, stopped after {DEADLINE_S:.0f} s")
    return section


if __name__ == "__main__":
    raise SystemExit(section_main(run))
