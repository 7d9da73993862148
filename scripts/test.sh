#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: sets up .venv (kconvert, vLLM's CPU build where there is no GPU,
# pytest), then runs every tier, the live one included (real vLLM engines on the tiny examples).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh test

# The browser test (tests/test_matrix_page_browser.py, marker `browser`) drives the distribution's Chromium through
# Playwright (the `test` extra); `playwright install` is never used (it downloads a browser build of its own). As
# root, a missing Chromium is installed here; otherwise the reason is printed and the test skips, except under
# CI=true, where it fails, so CI cannot pass by skipping it. Measured here: apt-get update 0.6 s (lists fresh),
# apt-get install -y chromium 29 s (115 packages, 113 MB fetched).
CHROMIUM="${KCONVERT_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test: installing chromium (apt-get) for the browser test"
    apt_log="$(mktemp)"
    if { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } >"$apt_log" 2>&1; then
      rm -f "$apt_log"
    else
      echo "test: apt-get install chromium failed (log: $apt_log); the browser test says why it cannot run"
    fi
  else
    echo "test: no Chromium at $CHROMIUM and not root: 'sudo apt-get install chromium' (or set KCONVERT_CHROMIUM)," \
      "else the browser test skips (and fails under CI=true)"
  fi
fi

# The core tier (issue #19), run when the whole suite is asked for (no arguments): a fresh .venv-core with
# `pip install .` and the test tools only (no vLLM, no torch), running the tests that start no engine, so that an
# import only vLLM or torch brings in fails here (verify --server exited 70 on a core install: httpx). Its children
# run the installed copy. ~63 s on this machine (venv + install ~16 s, tests ~47 s). The main run below reuses
# the venv for the live `verify --server` from a core install (tests/test_server_live.py) and for the commands the
# documentation shows on the core install (tests/test_docs_commands.py).
CORE_TESTS=(
  tests/test_server_standin.py tests/test_cli.py tests/test_sglang_parsing.py tests/test_sglang_oracle.py
  tests/test_engine_rows.py tests/test_serve_lines.py tests/test_acceptance.py tests/test_metrics.py
  tests/test_layers.py tests/test_zoo.py tests/test_rules.py tests/test_formats.py tests/test_fix.py
  tests/test_gate.py tests/test_hostile.py tests/test_names.py tests/test_registry.py tests/test_hub_source.py
  tests/test_push.py tests/test_writer.py tests/test_matrix_render.py tests/test_distribution_name.py
  tests/test_rules_doc.py tests/test_library_results.py
)
if [ $# -eq 0 ]; then
  # SGLang's and tokenspeed's own code as oracles (tests/sglang_oracle/README.md, tests/tokenspeed_oracle/README.md):
  # each re-runs that engine's loaders (sglang 0.5.23, tokenspeed 0.1.1, --no-deps on CPU, in a venv of its own)
  # over every shipped draft and fails if tests/data/sglang_oracle.json or tokenspeed_oracle.json is stale. On a
  # clean clone most of their time is building those venvs (sglang ~90-190 s, tokenspeed ~226 s install + ~85 s
  # run), mostly pip and unpacking, so both start here in the background, beside the core tier and the vLLM oracle,
  # and are waited for (their output shown, a failure fails the run) before the main tier.
  oracle_logs="$(mktemp -d)"
  trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
  echo "test: SGLang and tokenspeed oracles started in the background (logs shown when they end)"
  .venv/bin/python tests/sglang_oracle/record.py --venv "$PWD/.venv-sglang-oracle" --check \
    >"$oracle_logs/sglang" 2>&1 &
  sglang_pid=$!
  .venv/bin/python tests/tokenspeed_oracle/record.py --venv "$PWD/.venv-tokenspeed-oracle" --check \
    >"$oracle_logs/tokenspeed" 2>&1 &
  tokenspeed_pid=$!
  echo "test: core tier (.venv-core: pip install ., no engine)"
  rm -rf .venv-core
  "${PYTHON:-python3}" -m venv .venv-core
  .venv-core/bin/python -m pip --disable-pip-version-check -q install . \
    "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100" "import-linter>=2.16,<3" >/dev/null
  KCONVERT_CORE_TIER=1 .venv-core/bin/python -m pytest -q -p no:cacheprovider -m "not live" "${CORE_TESTS[@]}"
  export KCONVERT_CORE_PYTHON="$PWD/.venv-core/bin/python"
  # vLLM's own code as the oracle for its rows (tests/vllm_oracle/README.md): kconvert's learner asks vLLM 0.32.0's
  # (this venv), 0.33.0's and 0.34.0's (Python files only, .vllm-oracle/) config, loader and runner functions about
  # every shipped draft and kconvert's probe set, and fails if tests/data/vllm_oracle.json or a learned file
  # (kconvert/engines/learned/) is stale. Three child interpreters importing vLLM (see the README for timings); the
  # first run on a machine without .vllm-oracle/vllm-0.3{3,4}.0 also downloads those wheels.
  echo "test: vLLM oracle (vllm 0.32.0 installed, 0.33.0 and 0.34.0 Python files)"
  .venv/bin/python tests/vllm_oracle/record.py --check
  for oracle in sglang tokenspeed; do
    pid_var="${oracle}_pid"
    if wait "${!pid_var}"; then status=0; else status=$?; fi
    echo "test: $oracle oracle (exit $status):"
    cat "$oracle_logs/$oracle"
    if [ "$status" -ne 0 ]; then exit "$status"; fi
  done
  rm -rf "$oracle_logs"
  trap - EXIT
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
