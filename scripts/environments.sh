# Sourced by scripts/test-lines and scripts/test-pythons. The rule it keeps: an environment of its
# own (.venv-NAME) is built from the project's files only, and holds what `pip check` accepts.
#
#   build NAME EXTRA PACKAGES [FIRST]   .venv-NAME, on $PY (PYTHON, else python3)
#   versions NAME DISTRIBUTION...       the versions .venv-NAME holds, for the log
#   run NAME PYTEST-ARGS...             pytest in .venv-NAME
#   same_as_main NAME                   whether .venv-NAME holds nothing the main environment (.venv)
#                                       does not hold at the same version, on the same Python
PY=${PYTHON:-python3}
UV=${UV:-.venv/bin/uv}

# .venv-NAME with the project (its EXTRA) and PACKAGES installed, after FIRST when given (as an app
# adds the plugin to an environment it has); `pip check` holds. An environment with FIRST is built
# by pip, since what it proves is what pip keeps of the framework's pins; the others by uv (the test
# extra's, as install-compat uses it), which builds one in seconds where pip takes most of a minute.
build() {
  local venv=".venv-$1" extra=$2 packages=$3 first=${4:-}
  if [ -z "$first" ]; then
    if [ ! -x "$venv/bin/python" ]; then "$UV" venv -q --seed --python "$PY" "$venv"; fi
    # shellcheck disable=SC2086 # the list of requirements (and flags) is split on purpose
    "$UV" pip install -q --python "$venv/bin/python" -e ".[$extra]" $packages
    "$venv/bin/python" -m pip check >/dev/null
    return
  fi
  if [ ! -x "$venv/bin/python" ]; then
    "$PY" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
  fi
  # shellcheck disable=SC2086 # the lists of requirements (and pip flags) are split on purpose
  if [ -n "$first" ]; then "$venv/bin/python" -m pip install -q $first; fi
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q -e ".[$extra]" $packages
  "$venv/bin/python" -m pip check >/dev/null
}

# The versions .venv-NAME holds of the given distributions, for the log.
versions() {
  local venv=".venv-$1"
  shift
  "$venv/bin/python" -c 'import sys; from importlib.metadata import version
print(" ".join(f"{name} {version(name)}" for name in sys.argv[1:]))' "$@"
}

# What an environment holds, one line each, sorted: its Python, then each distribution with its
# version, as its metadata names them (the same distribution names itself alike everywhere); the
# installers (pip, setuptools, wheel: uv's --seed) aside, which no suite imports.
_held() {
  "$1/bin/python" -c 'import platform
from importlib.metadata import distributions
installers = {"pip", "setuptools", "wheel"}
held = {d.metadata["Name"] + "==" + d.version for d in distributions() if d.metadata["Name"] not in installers}
print("\n".join(sorted(held | {"python==" + platform.python_version()})))'
}

# Fails (the environments differ) when either cannot be read.
same_as_main() {
  local own main
  own=$(_held ".venv-$1") && main=$(_held .venv) || return 1
  # (in C collation: the order Python sorted them in)
  [ -z "$(LC_ALL=C comm -23 <(echo "$own") <(echo "$main"))" ]
}

run() {
  local venv=".venv-$1"
  shift
  "$venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
}

# The framework installed first, then the project: pip must keep the framework's pins.
framework() {
  local name=$1 packages=$2
  shift 2
  build "fw-$name" test-line "" "$packages"
  echo "$name: $(versions "fw-$name" mcp opentelemetry-api)"
  run "fw-$name" "$@"
}
