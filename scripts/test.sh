#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: sets up .venv (kconvert, vLLM's CPU build where there is no GPU,
# pytest), then runs every tier, the live one included (real vLLM engines on the tiny examples).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh test
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
