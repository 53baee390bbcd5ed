"""`python -m benchmarks [--quick] [--only NAME,...]`: run every benchmark, print the results as
markdown and write them to benchmarks/results/latest.md (with the date and the machine).

Each benchmark runs in its own Python process, one after the other (never two at once: they would
measure each other), and stops the servers it started. A full run takes about four minutes on two
cores; `--quick` about 35 s (smaller samples: a smoke test of the benchmarks, not figures).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import REPO, Section, machine, render_section

SECTIONS = (
    "overhead",
    "cpu",
    "retry",
    "memory",
    "redaction",
    "hostile",
    "hostile_redaction",
    "guard_store",
    "opcodes",
)
TIMEOUT_S = {
    "overhead": 600,
    "cpu": 300,
    "retry": 120,
    "memory": 300,
    "redaction": 120,
    "hostile": 600,
    "hostile_redaction": 300,
    "guard_store": 300,
    "opcodes": 180,
}
RESULTS = REPO / "benchmarks" / "results" / "latest.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small samples: a ~35 s smoke run")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the markdown")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")

    about = machine()
    started = time.monotonic()
    sections: list[Section] = []
    failed: list[str] = []
    for name in chosen:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        section = _run_section(name, args.quick)
        if section is None:
            failed.append(name)
        else:
            sections.append(section)
            print(f"  {name}: {section.seconds:.0f} s", file=sys.stderr, flush=True)
    total = time.monotonic() - started

    text = _render(about, sections, failed, args.quick, total)
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text + "\n")
    print(f"written to {args.output}", file=sys.stderr)
    return 1 if failed else 0


def _run_section(name: str, quick: bool) -> Section | None:
    with tempfile.TemporaryDirectory(prefix="otel-mcp-replay-bench-") as tmp:
        out = Path(tmp) / f"{name}.json"
        command = [sys.executable, "-m", f"benchmarks.{name}", "--json", str(out)]
        if quick:
            command.append("--quick")
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
        try:
            done = subprocess.run(command, cwd=REPO, env=env, timeout=TIMEOUT_S[name], check=False)
        except subprocess.TimeoutExpired:
            print(f"  {name}: timed out", file=sys.stderr)
            return None
        if done.returncode != 0 or not out.exists():
            print(f"  {name}: failed (exit {done.returncode})", file=sys.stderr)
            return None
        return Section.from_json(out.read_text())


def _render(
    about: dict[str, str], sections: list[Section], failed: list[str], quick: bool, total: float
) -> str:
    lines = [
        "# otel-mcp-replay benchmarks" + (" (quick: small samples, not figures)" if quick else ""),
        "",
        f"`python -m benchmarks{' --quick' if quick else ''}`, {about['date']}, {total:.0f} s.",
        "",
        "| machine | |",
        "| --- | --- |",
        *(f"| {key} | {value} |" for key, value in about.items()),
        "",
        "## Targets",
        "",
        "| benchmark | metric | value | target | met |",
        "| --- | --- | --- | --- | --- |",
    ]
    for section in sections:
        number = section.name.split(".", 1)[0]
        for row in section.rows:
            if row.met is not None:
                met = "yes" if row.met else "**no**"
                lines.append(f"| {number} | {row.metric.strip()} | {row.value} | {row.target} | {met} |")
    for name in failed:
        lines.append(f"| {name} | did not complete | | | **no** |")
    lines += ["", "## All figures", ""]
    for section in sections:
        lines += [render_section(section), ""]
    return "\n".join(lines).rstrip()


if __name__ == "__main__":
    raise SystemExit(main())
