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
  echo "test: core tier (.venv-core: pip install ., no engine)"
  rm -rf .venv-core
  "${PYTHON:-python3}" -m venv .venv-core
  .venv-core/bin/python -m pip --disable-pip-version-check -q install . \
    "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100" "import-linter>=2.16,<3" >/dev/null
  KCONVERT_CORE_TIER=1 .venv-core/bin/python -m pytest -q -p no:cacheprovider -m "not live" "${CORE_TESTS[@]}"
  export KCONVERT_CORE_PYTHON="$PWD/.venv-core/bin/python"
  # SGLang's own code as the oracle (tests/sglang_oracle/README.md): re-run sglang 0.5.23's loaders and capture
  # and fail if tests/data/sglang_oracle.json is stale. ~90 s the first time (venv .venv-sglang-oracle), ~15 s after.
  echo "test: SGLang oracle (.venv-sglang-oracle: sglang 0.5.23 --no-deps on CPU)"
  .venv/bin/python tests/sglang_oracle/record.py --venv "$PWD/.venv-sglang-oracle" --check
  # vLLM's own code as the oracle for its rows (tests/vllm_oracle/README.md): kconvert's learner asks vLLM 0.32.0's
  # (this venv), 0.33.0's and 0.34.0's (Python files only, .vllm-oracle/) config, loader and runner functions about
  # every shipped draft and kconvert's probe set, and fails if tests/data/vllm_oracle.json or a learned file
  # (kconvert/engines/learned/) is stale. Three child interpreters importing vLLM (see the README for timings); the
  # first run on a machine without .vllm-oracle/vllm-0.3{3,4}.0 also downloads those wheels.
  echo "test: vLLM oracle (vllm 0.32.0 installed, 0.33.0 and 0.34.0 Python files)"
  .venv/bin/python tests/vllm_oracle/record.py --check
  # tokenspeed's own code as the oracle for its row (tests/tokenspeed_oracle/README.md): re-run tokenspeed 0.1.1's
  # config reader, draft classes, aux reader, capture, metrics and serve-line parser on CPU over every shipped draft
  # and fail if tests/data/tokenspeed_oracle.json is stale. ~34 s with the venv kept (.venv-tokenspeed-oracle).
  echo "test: tokenspeed oracle (.venv-tokenspeed-oracle: tokenspeed 0.1.1 --no-deps on CPU)"
  .venv/bin/python tests/tokenspeed_oracle/record.py --venv "$PWD/.venv-tokenspeed-oracle" --check
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
