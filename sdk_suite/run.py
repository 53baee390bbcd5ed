"""The mcp SDK's own test suite as a compatibility gate: `python -m sdk_suite` (or scripts/sdk-suite).

1. Downloads the sdist of the INSTALLED mcp (it ships the SDK's `tests/`) into the cache folder
   (`.tmp/sdk-suite/`, gitignored) and unpacks it; a second run reuses it.
2. Installs what the selected tests import and the environment lacks (inline-snapshot, trio,
   logfire, blockbuster, coverage, ...), at the versions the sdist's own dependency groups ask for,
   with mcp's extras (typer for `mcp.cli`, websockets on 1.x), pytest-timeout, and pytest-xdist
   with `--workers`. By default into an overlay environment
   in the cache (`--deps overlay`) that sees every package of the current one and adds only these:
   they are pytest plugins that load themselves into every pytest run of an environment, and the
   project's own test run must not change because this gate ran first. `--deps venv` installs them
   into the current environment instead.
3. Runs the SDK's client, shared, interaction and transports tests (those of the four folders under
   the sdist's `tests/` that exist: mcp 1.x has client and shared only; `--select` for others)
   three times: `plain`; `early`, instrumented for the whole session before anything imports mcp;
   `late`, instrumented after every test module imported mcp (sdk_suite/instrumented.py; `--runs`
   also offers `configure`, instrumented at pytest_configure, after the initial conftests imported
   mcp and before the test modules). Each test has a timeout (pytest-timeout: a hang is a failure),
   each run a global one.
4. Compares: a test that passed plain and did not pass instrumented (failed, errored, hung, did not
   run) is a difference. A difference not in sdk_suite/expected.toml fails the gate unless it passes
   when run again alone (then it is reported as flaky). An expected difference whose test now passes
   in both runs also fails the gate: remove its entry, so the list only shrinks.

Exit status: 0 compatible; 1 a difference not expected, or an expected one that is gone; 2 the gate
could not run (download, install, a run that crashed or passed no test).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
SELECT = ("client", "shared", "interaction", "transports")  # under the sdist's tests/, if present
RUNS = ("plain", "early", "late")  # the default runs; `configure` instruments at pytest_configure
PASSING = ("passed", "xfailed", "xpassed")  # what counts as the test working, in either run
# Imports whose distribution is not named like the module.
DIST_OF_MODULE = {"xdist": "pytest-xdist", "pytest_timeout": "pytest-timeout", "jwt": "pyjwt"}
# When the sdist's groups do not name them: ours (the per-test timeout that turns a hang into a
# failure; xdist for --workers), and what mcp 1.x's tests import without naming it.
FALLBACK_REQUIREMENTS = ("pytest-timeout>=2.3", "pytest-xdist>=3.6", "requests")


class GateError(Exception):
    """The gate could not run: exit 2."""


def say(text: str = "") -> None:
    print(text, flush=True)


# -- 1. the sdist -------------------------------------------------------------------------------


def fetch_sdist(version: str, cache: Path) -> Path:
    """The unpacked sdist of mcp `version` (downloaded and unpacked once per cache)."""
    root = cache / f"mcp-{version}"
    if (root / ".sdk-suite-unpacked").exists():
        return root
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    archive = downloads / f"mcp-{version}.tar.gz"
    if not archive.exists():
        command = ["download", "--no-deps", "--no-binary", ":all:", "-d", str(downloads), f"mcp=={version}"]
        if not pip(sys.executable, *command, env=dict(os.environ)) or not archive.exists():
            raise GateError(f"could not download the sdist of mcp=={version}")
    shutil.rmtree(root, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch, tarfile.open(archive) as tar:
        for member in tar.getmembers():  # an archive from the registry, still: nothing outside
            if member.name.startswith("/") or ".." in Path(member.name).parts or member.islnk():
                raise GateError(f"the sdist holds an unsafe path: {member.name}")
        if hasattr(tarfile, "data_filter"):  # 3.12, and 3.8.17 / 3.9.17 / 3.10.12 / 3.11.4 on
            tar.extractall(scratch, filter="data")
        else:
            tar.extractall(scratch)
        (unpacked,) = Path(scratch).iterdir()
        unpacked.rename(root)
    (root / ".sdk-suite-unpacked").write_text(version, encoding="utf-8")
    return root


def selected_dirs(sdist: Path, names: list[str]) -> list[str]:
    found = [f"tests/{name}" for name in names if (sdist / "tests" / name).exists()]
    if not found:
        raise GateError(f"none of tests/{{{','.join(names)}}} in the sdist at {sdist}")
    return found


# -- 2. the suite's own test dependencies -------------------------------------------------------


def imported_modules(sdist: Path, dirs: list[str]) -> set[str]:
    """Top-level modules the selected tests (and the conftests and helpers above them) import."""
    files = [p for d in dirs for p in ([sdist / d] if d.endswith(".py") else (sdist / d).rglob("*.py"))]
    # tests/conftest.py and the helpers beside it (not the test modules there: they are not run)
    files += [p for p in (sdist / "tests").glob("*.py") if not p.name.startswith("test_")]
    local = {"tests", "mcp", "mcp_types", "__future__"}
    modules: set[str] = set()
    for path in files:
        try:
            tree = ast.parse(path.read_bytes(), str(path))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module)
    top = {m.split(".")[0] for m in modules}
    return {m for m in top if m not in local and m not in sys.stdlib_module_names}


def _requirements(entries: object) -> list[Requirement]:
    found = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, str):
            continue  # {include-group = ...}: that group is read on its own
        try:
            requirement = Requirement(entry)
        except InvalidRequirement:
            continue
        if requirement.marker is None or requirement.marker.evaluate():
            found.append(requirement)
    return found


def sdist_requirements(sdist: Path) -> tuple[dict[str, Requirement], list[str]]:
    """The sdist's dependency groups (dev, test, ...) by canonical name, and the requirements of
    every extra of mcp (`cli`, `ws`, `rich`): the SDK's tests cover them all (`mcp.cli` needs typer,
    `mcp.client.websocket` websockets), as its own CI installs them."""
    data = tomllib.loads((sdist / "pyproject.toml").read_text(encoding="utf-8"))
    found: dict[str, Requirement] = {}
    for group in data.get("dependency-groups", {}).values():
        for requirement in _requirements(group):
            found.setdefault(canonicalize_name(requirement.name), requirement)
    extras = data.get("project", {}).get("optional-dependencies", {})
    return found, [str(r) for entries in extras.values() for r in _requirements(entries)]


def unsatisfied(python: str, requirements: list[str], env: dict[str, str]) -> list[str]:
    """The requirements `python`'s environment does not meet (absent, or at another version)."""
    probe = (
        "import sys, importlib.metadata as m\n"
        "from packaging.requirements import Requirement\n"
        "for text in sys.argv[1:]:\n"
        "    r = Requirement(text)\n"
        "    try: ok = r.specifier.contains(m.version(r.name), prereleases=True)\n"
        "    except m.PackageNotFoundError: ok = False\n"
        "    ok or print(text)\n"
    )
    done = subprocess.run([python, "-c", probe, *requirements], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise GateError(f"could not check the requirements: {done.stderr.strip()[-300:]}")
    return done.stdout.splitlines()


def missing_modules(python: str, modules: set[str], env: dict[str, str]) -> list[str]:
    """The modules the suite's interpreter cannot import."""
    probe = "import importlib.util as u, sys; print(*(m for m in sys.argv[1:] if not u.find_spec(m)))"
    command = [python, "-c", probe, *sorted(modules)]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.split()


def pip(python: str, *args: str, env: dict[str, str]) -> bool:
    """pip of the suite's interpreter, its output less the lines about absent local indexes."""
    command = [python, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    for line in (done.stdout + done.stderr).splitlines():
        if not re.match(r"WARNING: Location .* is ignored", line):
            say(f"  pip: {line}")
    return done.returncode == 0


def overlay(cache: Path) -> str:
    """A virtual environment layered on this one: it sees every package of the current environment
    (a .pth runs site.addsitedir on its site-packages, so its own .pth files, editable installs
    included, apply too) and holds only what the suite adds. The project's environment stays as it
    was (the suite's pytest plugins load themselves into every pytest run of an environment), and a
    server the tests start as a subprocess of sys.executable sees the same packages."""
    below = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    stamp = json.dumps({"base": sys._base_executable, "below": below})  # type: ignore[attr-defined]
    # One per environment below, so that two gates (mcp 2.3 and 1.30) never rebuild each other's.
    below_key = hashlib.sha256(stamp.encode()).hexdigest()[:12]
    root = cache / f"overlay-py{sys.version_info[0]}{sys.version_info[1]}-{below_key}"
    python = root / "bin" / "python"
    if not python.exists() or (root / "sdk-suite.json").read_text(encoding="utf-8") != stamp:
        shutil.rmtree(root, ignore_errors=True)
        if subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)]).returncode != 0:
            raise GateError("could not create the overlay environment")
        (root / "sdk-suite.json").write_text(stamp, encoding="utf-8")
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, check=True)
    lines = "".join(f"import site; site.addsitedir({path!r})\n" for path in below)
    (Path(site.stdout.strip()) / "_sdk_suite_overlay.pth").write_text(lines, encoding="utf-8")
    return str(python)


def ensure_deps(python: str, sdist: Path, dirs: list[str], env: dict[str, str], workers: int) -> None:
    """Installs, into `python`'s environment, what the selected tests import and it lacks."""
    wanted = imported_modules(sdist, dirs) | {"pytest_timeout"} | ({"xdist"} if workers else set())
    available, requirements = sdist_requirements(sdist)
    requirements = unsatisfied(python, requirements, env) if requirements else []
    for text in FALLBACK_REQUIREMENTS:
        available.setdefault(canonicalize_name(Requirement(text).name), Requirement(text))
    unknown: list[str] = []
    for module in missing_modules(python, wanted, env):
        found = available.get(canonicalize_name(DIST_OF_MODULE.get(module, module.replace("_", "-"))))
        if found is None:
            unknown.append(module)
        else:
            requirements.append(str(found))
    if unknown:  # a test module importing them fails in every run alike: reported, not fatal
        say(f"note: no requirement of the sdist provides {', '.join(unknown)}; their tests will error")
    if not requirements:
        return
    say(f"installing the suite's test dependencies: {' '.join(requirements)}")
    if not pip(python, "install", *requirements, env=env):
        raise GateError("could not install the suite's test dependencies")
    still = missing_modules(python, wanted - set(unknown), env) + unsatisfied(python, requirements, env)
    if still:
        raise GateError(f"still missing after the install: {', '.join(still)}")


# -- 3. the runs --------------------------------------------------------------------------------


@dataclass
class Test:
    outcome: str  # passed failed error skipped xfailed xpassed missing
    crash: dict[str, Any] | None = None


@dataclass
class Run:
    name: str
    wall_s: float
    returncode: int
    timed_out: bool
    tests: dict[str, Test]
    collect_errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: Path | None = None

    def counts(self) -> Counter[str]:
        return Counter(test.outcome for test in self.tests.values())


def read_outcomes(path: Path) -> tuple[dict[str, Test], dict[str, dict[str, Any]]]:
    """Each test's outcome from the outcomes plugin's lines (setup, call and teardown combined)."""
    tests: dict[str, Test] = {}
    collect_errors: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return tests, collect_errors
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        nodeid, when = entry["nodeid"], entry["when"]
        if when == "collect":
            collect_errors[nodeid] = entry["crash"]
            continue
        test = tests.setdefault(nodeid, Test("missing"))
        if when == "start":
            continue
        outcome = entry["outcome"]
        if outcome == "failed":
            if test.outcome not in ("failed", "error"):  # the first failure is the one to show
                test.outcome = "failed" if when == "call" else "error"
                test.crash = entry["crash"]
        elif test.outcome in ("failed", "error"):
            continue
        elif outcome == "skipped" and when in ("setup", "call"):
            test.outcome = "xfailed" if entry["xfail"] else "skipped"
        elif outcome == "passed" and when == "call":
            test.outcome = "xpassed" if entry["xfail"] else "passed"
    return tests, collect_errors


def run_pytest(
    python: str,
    name: str,
    sdist: Path,
    targets: list[str],
    env: dict[str, str],
    out: Path,
    *,
    workers: int,
    test_timeout: int,
    run_timeout: int,
    extra: list[str],
) -> Run:
    outcomes, log = out / f"{name}.outcomes.jsonl", out / f"{name}.log"
    for stale in out.glob(f"{name}.*"):
        stale.unlink()
    env = dict(env, SDK_SUITE_OUTCOMES=str(outcomes))
    command = [python, "-m", "pytest", *targets, "-p", "sdk_suite.outcomes", "-p", "no:cacheprovider"]
    # The sdist's addopts load pytest-examples and, on mcp 1.x, `--numprocesses auto`; log_cli
    # would print every log line of ~2000 tests. Its filterwarnings = error and the rest stay.
    command += ["-o", "addopts=", "-o", "log_cli=false", "-q", "--color=no", "-rfE"]
    command += ["--continue-on-collection-errors"]  # a module that cannot import fails its tests only
    command += [f"--timeout={test_timeout}", f"--junitxml={out / f'{name}.junit.xml'}"]
    if workers:
        command += ["-n", str(workers)]
    if name != "plain":
        command += ["-p", "sdk_suite.instrumented"]
        env.update(SDK_SUITE_INSTRUMENT=name.split("-")[0], SDK_SUITE_RECORDS=str(out / f"{name}.records"))
    command += extra
    say(f"[{name}] {' '.join(command[1:])}")
    started = time.monotonic()
    timed_out = False
    with open(log, "w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            command, cwd=sdist, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode = process.wait(timeout=run_timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
            returncode = process.wait()
    wall = time.monotonic() - started
    tests, collect_errors = read_outcomes(outcomes)
    run = Run(name, wall, returncode, timed_out, tests, collect_errors, log)
    summary = last_summary(log)
    counts = " ".join(f"{k} {v}" for k, v in sorted(run.counts().items()))
    say(f"[{name}] {wall:.0f} s, exit {returncode}{' (killed: run timeout)' if timed_out else ''}: {counts}")
    if summary:
        say(f"[{name}] pytest said: {summary}")
    if returncode not in (0, 1) and not timed_out:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        say("\n".join(f"  | {line}" for line in tail))
    return run


def last_summary(log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    for line in reversed(lines[-40:]):
        if re.search(r"\d+ (passed|failed|errors?|skipped)", line):
            return line.strip("= ")
    return ""


# -- 4. the comparison --------------------------------------------------------------------------

INSTRUMENTED = ("early", "configure", "late")


@dataclass
class Expected:
    group: str
    reason: str
    runs: tuple[str, ...]


def load_expected(path: Path, version: str) -> dict[str, Expected]:
    """expected.toml's tests whose group applies to this mcp version: node id -> its group.

    A group is a table: `reason` (why the instrumented run differs and why that is right), `tests`
    (node ids), `mcp` (a version specifier, default any), `runs` (default every instrumented run).
    """
    if not path.exists():
        return {}
    expected: dict[str, Expected] = {}
    for group, entry in tomllib.loads(path.read_text(encoding="utf-8")).items():
        where = f"{path.name} [{group}]"
        if not isinstance(entry, dict) or not entry.get("reason") or not entry.get("tests"):
            raise GateError(f"{where}: a group needs a reason and tests")
        unknown = set(entry) - {"reason", "tests", "runs", "mcp"}
        runs = tuple(entry.get("runs", INSTRUMENTED))
        if unknown or not set(runs) <= set(INSTRUMENTED):
            raise GateError(f"{where}: unknown field or run: {sorted(unknown) or runs}")
        if not SpecifierSet(entry.get("mcp", "")).contains(version, prereleases=True):
            continue
        for nodeid in entry["tests"]:
            if nodeid in expected:
                raise GateError(f"{where}: {nodeid} is in [{expected[nodeid].group}] too")
            expected[nodeid] = Expected(group, " ".join(entry["reason"].split()), runs)
    return expected


@dataclass
class Difference:
    nodeid: str
    run: str
    outcome: str
    crash: dict[str, Any] | None
    expected: Expected | None = None
    flaky: bool = False


def differences(plain: Run, run: Run, expected: dict[str, Expected]) -> list[Difference]:
    """The tests that passed plain and did not pass in `run`."""
    found = []
    for nodeid, test in plain.tests.items():
        other = run.tests.get(nodeid)
        if test.outcome not in PASSING or (other is not None and other.outcome in PASSING):
            continue
        if other is None or other.outcome == "missing":
            crash = run.collect_errors.get(nodeid.split("::")[0])  # its module did not import
            if crash is None:
                why = "the run was killed (its timeout)" if run.timed_out else "not reported"
                if other is not None:
                    why = f"started, never finished: {why}"
                crash = {"where": "", "message": why, "tail": []}
            diff = Difference(nodeid, run.name, "missing", crash)
        else:
            diff = Difference(nodeid, run.name, other.outcome, other.crash)
        entry = expected.get(nodeid)
        diff.expected = entry if entry is not None and run.name in entry.runs else None
        found.append(diff)
    return found


def stale_entries(expected: dict[str, Expected], runs: dict[str, Run]) -> tuple[list[str], list[str]]:
    """Expected differences that are gone (the test passes plain and instrumented: remove it), and
    those that cannot be judged here (the test did not pass plain)."""
    plain = runs["plain"]
    stale, unjudged = [], []
    for nodeid, entry in expected.items():
        for name in entry.runs:
            if name not in runs:
                continue
            before, after = plain.tests.get(nodeid), runs[name].tests.get(nodeid)
            if before is None:
                continue  # not in this selection (or not in this mcp release's suite)
            if before.outcome not in PASSING:
                unjudged.append(f"{nodeid} ({name})")
            elif after is not None and after.outcome in PASSING:
                stale.append(f"{nodeid} ({name})")
    return stale, unjudged


# -- records ------------------------------------------------------------------------------------

FINDINGS = ("refused", "invalid_filed", "unknown_completed", "no_record", "logged")


def record_findings(out: Path, name: str) -> dict[str, Any]:
    """The instrumented plugin's per-test lines of one run, added up."""
    summary: dict[str, Any] = {"calls": 0, "records": 0, **{key: [] for key in FINDINGS}}
    for path in sorted(out.glob(f"{name}.records.*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            summary["calls"] += entry["calls"]
            summary["records"] += entry["records"]
            for key in FINDINGS:
                summary[key] += [{"nodeid": entry["nodeid"], **item} for item in entry[key]]
    return summary


def print_records(name: str, found: dict[str, Any]) -> None:
    say(
        f"[{name}] {found['calls']} tools/call spans: {found['records']} records filed,"
        f" {len(found['refused'])} refused, {len(found['invalid_filed'])} filed outside the allow-list,"
        f" {len(found['unknown_completed'])} say effect unknown with verdict completed,"
        f" {len(found['no_record'])} calls filed nothing, {len(found['logged'])} plugin log lines"
    )
    for item in found["refused"]:
        why = item.get("why") or {}
        say(f"    refused: {item['nodeid']} tool {item['tool']!r}: key {why.get('field', '?')}")
        say(f"      value {why.get('value')}; rows {why.get('rows')}")
    for key in ("invalid_filed", "no_record", "logged"):
        for item in found[key][:20]:
            say(f"    {key}: {json.dumps(item)[:300]}")
    shapes = Counter(
        json.dumps([item["status"], item["failure"], item["effect"], item["attempt_spans"]])
        for item in found["unknown_completed"]
    )
    for shape, count in shapes.most_common():
        status, failure, effect, spans = json.loads(shape)
        say(f"    unknown+completed x{count}: rows status {status} failure {failure} effect {effect};")
        say(f"      attempt spans {spans}")
    by_module = Counter(item["nodeid"].split("::")[0] for item in found["unknown_completed"])
    for module, count in by_module.most_common():
        say(f"      {count:3d} in {module}")


# -- main ---------------------------------------------------------------------------------------

COLUMNS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "missing")


def first_line(crash: dict[str, Any] | None) -> str:
    if not crash:
        return ""
    message = (crash.get("message") or "").strip().splitlines()
    return f"{crash.get('where', '')}: {message[0] if message else ''}"[:400]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/sdk-suite", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=REPO / ".tmp" / "sdk-suite")
    parser.add_argument("--deps", choices=("overlay", "venv"), default="overlay")
    parser.add_argument("--select", nargs="+", default=list(SELECT), metavar="PATH", help="under tests/")
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=("plain", *INSTRUMENTED))
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist workers (0: none)")
    parser.add_argument("--test-timeout", type=int, default=60, help="seconds per test")
    parser.add_argument("--run-timeout", type=int, default=600, help="seconds per run")
    parser.add_argument("--expected", type=Path, default=HERE / "expected.toml")
    parser.add_argument("--no-confirm", action="store_true", help="no rerun of unexpected differences")
    parser.add_argument("--fail-on-records", action="store_true", help="odd records fail the gate too")
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (e.g. -k)")
    args = parser.parse_args(argv)
    if "plain" not in args.runs:
        parser.error("the plain run is what the others are compared with: keep it in --runs")
    try:
        return gate(args)
    except GateError as error:
        say(f"sdk-suite: cannot run: {error}")
        return 2


def gate(args: argparse.Namespace) -> int:
    started = time.monotonic()
    version = importlib.metadata.version("mcp")
    cache: Path = args.cache.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    expected = load_expected(args.expected, version)  # a malformed list fails before any work
    sdist = fetch_sdist(version, cache)
    dirs = selected_dirs(sdist, args.select)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_PYTHON_MCP_REPLAY_")}
    path = [str(REPO), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(path)  # sdk_suite's plugins, importable from the sdist
    for variable in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "VIRTUAL_ENV"):
        env.pop(variable, None)
    python = overlay(cache) if args.deps == "overlay" else sys.executable
    ensure_deps(python, sdist, dirs, env, args.workers)
    say(f"sdk-suite: mcp {version}, {' '.join(dirs)} (prepared in {time.monotonic() - started:.0f} s)")
    out = cache / f"runs-{version}"
    out.mkdir(parents=True, exist_ok=True)

    def run(name: str, targets: list[str], workers: int) -> Run:
        return run_pytest(
            python,
            name,
            sdist,
            targets,
            env,
            out,
            workers=workers,
            test_timeout=args.test_timeout,
            run_timeout=args.run_timeout,
            extra=args.pytest_args,
        )

    runs = {name: run(name, dirs, args.workers) for name in args.runs}
    plain = runs["plain"]
    if plain.returncode not in (0, 1) or not any(t.outcome == "passed" for t in plain.tests.values()):
        raise GateError(f"the plain run did not run the suite (exit {plain.returncode}); see {plain.log}")
    for each in runs.values():
        if each.returncode not in (0, 1) and not each.timed_out:
            raise GateError(f"the {each.name} run crashed (exit {each.returncode}); see {each.log}")
    found: list[Difference] = []
    for name in INSTRUMENTED:
        if name not in runs:
            continue
        diffs = differences(plain, runs[name], expected)
        unexpected = [d for d in diffs if d.expected is None]
        if unexpected and not args.no_confirm and len(unexpected) <= 200:
            again = run(f"{name}-again", [d.nodeid for d in unexpected], 0)
            for diff in unexpected:
                diff.flaky = again.tests.get(diff.nodeid, Test("missing")).outcome in PASSING
        found += diffs
    stale, unjudged = stale_entries(expected, runs)
    failures = report(version, dirs, runs, found, stale, unjudged)
    records = {name: record_findings(out, name) for name in INSTRUMENTED if name in runs}
    say("")
    say("records of the instrumented runs (not test outcomes: what the plugin filed):")
    for name, findings in records.items():
        print_records(name, findings)
        if args.fail_on_records and any(findings[k] for k in FINDINGS if k != "logged"):
            failures += 1
            say(f"  [{name}] records the contract does not promise: failing (--fail-on-records)")
    summary = {
        "mcp": version,
        "dirs": dirs,
        "runs": {r.name: {"wall_s": round(r.wall_s, 1), "counts": r.counts()} for r in runs.values()},
        "differences": [{**d.__dict__, "expected": d.expected.group if d.expected else None} for d in found],
        "stale": stale,
        "records": records,
    }
    (out / "report.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    compared = sum(1 for t in plain.tests.values() if t.outcome in PASSING)
    say(f"details: {out}/ (report.json; per run .log, .junit.xml, .outcomes.jsonl, .records.*)")
    say(f"total {time.monotonic() - started:.0f} s")
    # The closing line CI reads: tests compared, and what fails the gate.
    say(f"sdk-suite: {compared} passed, {failures} failed")
    return 1 if failures else 0


def report(
    version: str,
    dirs: list[str],
    runs: dict[str, Run],
    found: list[Difference],
    stale: list[str],
    unjudged: list[str],
) -> int:
    """Prints the counts per run and every difference; returns how many fail the gate."""
    say("")
    say(f"sdk-suite: mcp {version}, {' '.join(dirs)}")
    say(f"  {'run':<9} {'wall':>5}  " + " ".join(f"{k:>7}" for k in COLUMNS))
    for run in runs.values():
        counts = run.counts()
        row = " ".join(f"{counts.get(k, 0):>7}" for k in COLUMNS)
        say(f"  {run.name:<9} {run.wall_s:>4.0f}s  {row}{'  (killed: run timeout)' if run.timed_out else ''}")
    by_test: dict[str, list[Difference]] = {}
    for diff in found:
        by_test.setdefault(diff.nodeid, []).append(diff)
    failures = 0
    groups: dict[str, list[str]] = {}
    if by_test:
        say("")
        say("passed plain, not instrumented:")
    for nodeid, diffs in sorted(by_test.items()):
        if all(d.expected is not None for d in diffs):
            groups.setdefault(diffs[0].expected.group, []).append(nodeid)  # type: ignore[union-attr]
            continue
        flaky = all(d.flaky or d.expected is not None for d in diffs)
        failures += not flaky
        verdict = "FLAKY (passed when run again alone)" if flaky else "UNEXPECTED"
        say(f"  {verdict} [{'+'.join(d.run for d in diffs)}] {nodeid}")
        for diff in diffs:
            say(f"      {diff.run}: {diff.outcome} at {first_line(diff.crash)}")
    for group, nodeids in groups.items():
        runs_text = sorted({d.run for d in found if d.nodeid in nodeids})
        say(f"  expected [{group}] x{len(nodeids)} in {'+'.join(runs_text)}:")
        for nodeid in nodeids:
            say(f"      {nodeid}")
    for item in stale:
        failures += 1
        say(f"  STALE expected difference, now passing: {item}: remove it from expected.toml")
    for item in unjudged:
        say(f"  note: expected difference not judged (the test did not pass plain): {item}")
    return failures
