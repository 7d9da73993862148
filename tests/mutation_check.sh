#!/usr/bin/env bash
# Mutation check (issue 20, "Done when"): five deliberate breaks, each applied to a scratch worktree of HEAD; each
# must make at least one non-live test fail. Prints, per break, the failing test ids; exits 1 if a break survives.
#
#   bash tests/mutation_check.sh            # all five (about 2 minutes here)
#   bash tests/mutation_check.sh 3          # only break 3
#
# Needs: git, the project's venv (PY, default .venv/bin/python). Never touches the working tree it runs from.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=/work/main/.venv/bin/python
TESTS="tests/test_acceptance.py tests/test_metrics.py tests/test_gate.py tests/test_rules.py tests/test_zoo.py
tests/test_output_formats.py tests/test_producers.py tests/test_fix.py tests/test_score.py"

# name | file | python expression applied to the file's text (s) that makes the break; must change the file
BREAKS=(
  "K404's +1 reversed|kconvert/rules/aux_layers.py|s.replace('    if conv == \"output\":\n        return [i + 1 for i in ids]', '    if conv == \"output\":\n        return [i - 1 for i in ids]', 1)"
  "d2t offsets computed as absolute ids|kconvert/rules/vocab_mapping.py|s.replace('as_off = d2t.astype(np.int64) + ar', 'as_off = d2t.astype(np.int64)', 1)"
  "acceptance length without the bonus token|kconvert/engines/acceptance.py|s.replace('al = None if not drafts else 1.0 + accepted / drafts', 'al = None if not drafts else accepted / drafts', 1)"
  "a zoo replica's aux ids shifted|tests/zoo/aqmedai_kimi_k25_eagle3/build.py|s.replace('ids or [2, 30, 58]', 'ids or [3, 31, 59]', 1)"
  "SARIF level mapping swapped|kconvert/report/sarif.py|s.replace('LEVEL = {\"error\": \"error\", \"warning\": \"warning\", \"info\": \"note\"}', 'LEVEL = {\"error\": \"warning\", \"warning\": \"error\", \"info\": \"note\"}', 1)"
)

only="${1:-}"
survived=0
for i in "${!BREAKS[@]}"; do
  n=$((i + 1))
  [ -n "$only" ] && [ "$only" != "$n" ] && continue
  IFS='|' read -r name file expr <<<"${BREAKS[$i]}"
  dir="$(mktemp -d /tmp/kconvert-mut-$n-XXXX)"
  git -C "$ROOT" worktree add -q --detach "$dir" HEAD
  "$PY" - "$dir/$file" "$expr" <<'EOF' || { echo "break $n: could not apply"; exit 2; }
import sys
path, expr = sys.argv[1], sys.argv[2]
s = open(path).read()
t = eval(expr)
assert t != s, f"the break does not apply to {path}"
open(path, "w").write(t)
EOF
  echo "== break $n: $name ($file)"
  (cd "$dir" && git --no-pager diff --stat | tail -1)
  out="$(cd "$dir" && PYTHONPATH="$dir" "$PY" -m pytest -q -p no:cacheprovider -m "not live" -W ignore::UserWarning \
        --timeout 600 $TESTS 2>&1)"
  failed="$(grep -E '^(FAILED|ERROR) ' <<<"$out" | sed 's/ - .*//')"
  if [ -n "$failed" ]; then
    echo "   caught by $(wc -l <<<"$failed") test(s):"
    sed 's/^/     /' <<<"$failed" | head -15
  else
    echo "   SURVIVED: no test failed"; survived=1
  fi
  tail -1 <<<"$out" | sed 's/^/   /'
  git -C "$ROOT" worktree remove --force "$dir"
done
exit $survived
