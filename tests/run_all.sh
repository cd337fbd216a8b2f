#!/usr/bin/env bash
# The whole suite: brings the local platform up from nothing with the same code `make up` uses, runs the
# linters, pytest and every Molecule scenario, then stops what it started.
# `tests/run_all.sh lint` lints only; `tests/run_all.sh unit` stops after pytest; `tests/run_all.sh molecule S...`
# runs only the named scenarios after the linters and pytest. `S@mitogen` runs scenario S under the optional Mitogen
# strategy (ansible/strategy_plugins/gpufleet_mitogen_linear.py); the whole suite includes one such run.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
export PATH="$PWD/$BIN:$PATH" NO_COLOR=1 PY_COLORS=0 ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1
export ANSIBLE_CONFIG="$PWD/ansible/ansible.cfg" ANSIBLE_COLLECTIONS_PATH="$PWD/.collections"
only="${1:-all}"
t0=$(date +%s)
section() { printf '\n== %s (%ss)\n' "$1" "$(( $(date +%s) - t0 ))"; }

section "platform"
started=$($BIN/python -m gpufleet.sandbox.platform start | tail -n1)
# Stop only what this run started (Molecule destroys its own containers, also after a failure).
cleanup() { if [ "$started" = "started" ]; then $BIN/python -m gpufleet.sandbox.platform stop; fi; }
trap cleanup EXIT

section "cloud SDKs, Mitogen, AWX tools"
# The cloud backends' SDKs, Mitogen and the AWX tools (optional extras) are part of the test suite, not of `make up`.
$BIN/pip install -q --disable-pip-version-check --no-deps -r requirements-clouds.lock -r requirements-mitogen.lock \
  -r requirements-awx.lock

section "ruff";          $BIN/ruff check .
section "mypy";          $BIN/mypy
section "yamllint";      $BIN/yamllint --strict .
section "ansible-lint";  $BIN/ansible-lint --profile production --offline -q
[ "$only" = "lint" ] && exit 0

section "pytest"
$BIN/pytest -q -p no:cacheprovider tests

[ "$only" = "unit" ] && exit 0

section "molecule"
if [ "$only" = "molecule" ]; then shift; scenarios="$*"; else
# The 3-node drift scenario (~9 min) starts first so that the short ones fill the other slot around it.
scenarios=$(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -not -path 'molecule/shared/*' \
            | xargs -n1 dirname | xargs -n1 basename | sort | awk '$0 == "drift" {print; next} {rest = rest $0 "\n"} END {printf "%s", rest}')
# MOLECULE_SKIP="a b" leaves scenarios out of a local run (e.g. MOLECULE_SKIP=drift for a quick pass).
# The optional Mitogen strategy gets its own run of nvidia_driver (become, apt, dpkg holds, modules, idempotence and
# break-and-restore; ~4.5 min under Mitogen against ~8 plain). Queued last: it waits on nvidia_driver's scenario lock.
scenarios="$scenarios
nvidia_driver@mitogen"
for skip in ${MOLECULE_SKIP-}; do scenarios=$(printf '%s\n' $scenarios | grep -vx "$skip" || true); done; fi
echo "scenarios: $(echo $scenarios)"
# Scenarios are independent (own containers), so MOLECULE_JOBS of them run at once; each log is printed
# as its scenario finishes, failed ones in full.
logs=.cache/molecule-logs; rm -rf "$logs"; mkdir -p "$logs"
run_scenario() {
  local s=$1 name=${1%@*} t=$(date +%s) verdict=passed strategy=()
  case "$s" in
    *@mitogen) strategy=(ANSIBLE_STRATEGY_PLUGINS="$PWD/ansible/strategy_plugins" ANSIBLE_STRATEGY=gpufleet_mitogen_linear) ;;
    *@*) echo "unknown scenario variant: $s (known: S@mitogen)" > "$logs/$s.log"; verdict=failed ;;
  esac
  # Container names are per scenario: the lock keeps two checkouts on one machine from running the same one at once.
  [ "$verdict" = failed ] || env "${strategy[@]}" flock "/tmp/gpufleet-molecule-$name.lock" \
    $BIN/molecule -c molecule/shared/base.yml test -s "$name" > "$logs/$s.log" 2>&1 || verdict=failed
  echo "$s $verdict $(( $(date +%s) - t ))s" >> "$logs/results"
  { printf '\n== molecule %s: %s in %ss\n' "$s" "$verdict" "$(( $(date +%s) - t ))"
    if [ "$verdict" = failed ]; then cat "$logs/$s.log"; else grep -E "passed|Executed: Successful|RECAP|changed=" "$logs/$s.log" | tail -n 12; fi
  } | flock "$logs/.print" cat
}
export -f run_scenario; export BIN logs
printf '%s\n' $scenarios | xargs -r -P "${MOLECULE_JOBS:-2}" -I{} bash -c 'run_scenario "$@"' _ {}
section "done"
sort "$logs/results"
passed=$(grep -c " passed " "$logs/results" || true); failed=$(grep -c " failed " "$logs/results" || true)
echo "molecule: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
