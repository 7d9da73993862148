#!/bin/sh
# Gate a draft checkpoint on kconvert's live verification (POSIX sh).
#
#   DRAFT=./kimi-draft TARGET=moonshotai/Kimi-K2.5 TP=8 MIN_AL=2.8 ./gate.sh [extra kconvert verify args...]
#
# Writes verify.json, verify.xml (JUnit), verify.md (model card section) and verify.sarif (SARIF 2.1.0) into
# $OUT_DIR (default: .), prints what the exit code means and exits non-zero unless the draft passed.
# The log gets kconvert's default format for it (concise: one line per finding; github inside GitHub Actions);
# OUTPUT_FORMAT picks another (full, concise, github, gitlab, json, junit, sarif).
# kconvert's exit codes: 0 passed; 1 error-level findings or a failed gate; 2 bad usage or unreadable input;
# 3 the engine could not run the live test (crash, timeout, out of memory); 70 internal error (a kconvert bug).
set -u

: "${DRAFT:?set DRAFT to the draft folder or Hub id}"
: "${TARGET:?set TARGET to the target folder, Hub id or profile name}"
TP="${TP:-1}"
K="${K:-3}"
PROMPTS="${PROMPTS:-all}"
OUT_DIR="${OUT_DIR:-.}"
KCONVERT="${KCONVERT:-kconvert}"

mkdir -p "$OUT_DIR" || exit 2

set -- "$DRAFT" --target "$TARGET" --tp "$TP" -k "$K" --prompts "$PROMPTS" \
    --report "$OUT_DIR/verify.json" --junit "$OUT_DIR/verify.xml" --markdown "$OUT_DIR/verify.md" \
    --sarif "$OUT_DIR/verify.sarif" "$@"
if [ -n "${OUTPUT_FORMAT:-}" ]; then
    set -- "$@" --output-format "$OUTPUT_FORMAT"
fi
if [ -n "${MIN_AL:-}" ]; then
    set -- "$@" --min-acceptance-length "$MIN_AL"
fi
if [ -n "${TRUST_REMOTE_CODE:-}" ]; then
    set -- "$@" --trust-remote-code
fi

"$KCONVERT" verify "$@"
rc=$?

case "$rc" in
    0) echo "kconvert gate: PASSED (exit 0): no error-level findings, acceptance within the thresholds" >&2 ;;
    1) echo "kconvert gate: FAILED (exit 1): error-level findings or acceptance below the gate; see $OUT_DIR/verify.md" >&2 ;;
    2) echo "kconvert gate: ERROR (exit 2): bad usage or unreadable input (paths, flags, checkpoint files)" >&2 ;;
    3) echo "kconvert gate: ENGINE FAILURE (exit 3): the engine could not run the live test (crash, timeout, out of memory); the log tail is above" >&2 ;;
    70) echo "kconvert gate: INTERNAL ERROR (exit 70): a kconvert bug; please report it with the error line above" >&2 ;;
    *) echo "kconvert gate: UNEXPECTED exit $rc (interrupted or a kconvert bug)" >&2 ;;
esac
exit "$rc"
