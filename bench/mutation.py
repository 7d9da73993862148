"""Mutation score of the modules whose mistakes change a verdict, a file or a figure (issue #30).

A run of mutmut 3 (https://github.com/boxed/mutmut, 3.8.1), outside the test command: it copies a snapshot of
HEAD's tracked files (plus the working tree's changes) into a scratch folder, mutates the chosen modules there
(in `<scratch>/mutants/`), and runs only the engine-free tests against each mutant (mutmut picks, per mutant, the
tests whose coverage reaches the mutated function). It prints the score per module and every surviving mutant
with its diff, and removes the scratch folder unless `--keep`.

    # mutmut is a bench tool, not a dependency: the `bench` extra, or beside the venv without touching it
    python -m pip install --target .bench-lib mutmut==3.8.1      # .bench-lib is gitignored
    nice -n 19 python bench/mutation.py                           # the whole scope (hours: see bench/NOTES.md)
    nice -n 19 python bench/mutation.py kconvert/writer/atomic.py --tests tests/test_writer.py

Engine-free tests: `-m "not live"`, and never the files that start engines, Ray clusters or a browser
(`*_live.py`, `test_matrix_ray*.py`, `test_matrix_page_browser.py`, `test_live_engine.py`).

Mutants are what the tests import: mutmut puts `<scratch>/mutants` first on sys.path and removes the scratch root;
PYTHONPATH is set to `<scratch>/mutants` so the CLI's child processes import the mutants too. `--check` verifies
that before a run: a known break in the first module (mutmut's own mutant, picked by name) must be killed.

Survivors judged equivalent (no input can tell them apart) are listed in bench/mutation-equivalent.txt as
`<module> | <mutant name> | <diff line> | <reason>`; the score counts them apart ("equivalent"), never as killed.
Other verdicts of mutmut (suspicious, skipped) count as not killed and are listed after the survivors.

Cheaper runs: `--tests` (the module's own test files; mutmut already runs, per mutant, only the tests that reach
the mutated function, fastest first, stopping at the first failure), `--mutants` with names or globs
(`'kconvert.source.safetensors_header.x_parse_index__mutmut_*'`: one function), `--survivors-of` a saved `--json`
after tests were added, and `--keep DIR` to resume a stopped run (mutants with a verdict are not run again);
`--keep DIR --collect` reports a stopped run's verdicts without running (its complete modules count as measured).

The scope's score, from the saved runs: `python bench/mutation.py --report` reads bench/mutation-runs/: per module the
full run saved as `<slug>-after.json` (the final tests) and, where kept, `<slug>-before.json`; survivors listed in
bench/mutation-equivalent.txt since a run count as equivalent. It prints a row per module (before and after), the
scope's total, every module of SCOPE without a full after-run, and every surviving mutant; `--report --json FILE`
writes it; exit 1 if a survivor remains or a module is unmeasured. A full run is one without `--mutants` or
`--survivors-of`, in which every mutant of the module got a verdict; runs of disjoint `--mutants` globs saved as
`-after.json` count together when their verdicts add up to every mutant. A survivor of an after-run that a later
targeted re-run (`--survivors-of`, `--mutants`, with the tests added since) killed counts as killed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The scope of issue #30: the modules whose mistakes change a verdict, a file or a figure.
SCOPE = [
    "kconvert/rules/*", "kconvert/writer/*", "kconvert/plan/*",
    "kconvert/score/walk.py", "kconvert/score/runner.py", "kconvert/score/weights.py",
    "kconvert/source/tensor_read.py", "kconvert/trace/device.py", "kconvert/score/draft.py",
    "kconvert/hub/binding.py", "kconvert/hub/upload.py",
    "kconvert/matrix/cache.py", "kconvert/matrix/spec.py",
    "kconvert/engines/acceptance.py", "kconvert/engines/metrics.py",
    "kconvert/source/safetensors_header.py",
]
# Test files that start an engine, a Ray cluster or a browser: never run against a mutant.
# Data folders the tests read relative to the repository root (examples/tiny, docs/manual.md, schemas/), copied
# beside the mutants (mutmut's `also_copy`).
ALSO_COPY = ["examples", "docs", "schemas"]
ENGINE_TESTS = ("_live.py", "test_matrix_ray", "test_matrix_page_browser.py", "test_live_engine.py")


def engine_free_tests() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if not any(k in p.name for k in ENGINE_TESTS))


def equivalent() -> dict[str, str]:
    """bench/mutation-equivalent.txt: one entry a line, `<module> | <mutant name> | <diff line> | <why>`; `#` starts a
    comment. (The older `<mutant name> <why>` form is still read.) Returns mutant name -> why."""
    out = {}
    f = ROOT / "bench" / "mutation-equivalent.txt"
    if f.exists():
        for line in f.read_text().splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if " | " in line:
                parts = [x.strip() for x in line.split(" | ", 3)]
                if len(parts) == 4:
                    out[parts[1]] = parts[3]
                    continue
            name, _, why = line.partition(" ")
            out[name.strip()] = why.strip()
    return out


def snapshot(dest: Path) -> None:
    """HEAD's tracked files plus the working tree's edits (git ls-files), never .venv, mutants or caches."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           check=True, capture_output=True).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        src = ROOT / f.decode()
        if src.is_file():
            (dest / f.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f.decode())


# Decorators kept on a function: mutmut handles these two itself; a property's setter/deleter and typing's overload
# cannot be re-applied after the def (the name is rebound by then, or every overload would get a trampoline).
_KEEP_DECORATED = ("staticmethod", "classmethod", "overload", "typing.overload")


def undecorate(text: str) -> str:
    """The module's decorated functions as plain defs followed by `name = deco(name)` (issue #30: mutmut 3.8.1
    never mutates a decorated function other than a staticmethod/classmethod, mutmut/mutation/file_mutation.py
    "ignore decorated functions"; every `@rule(...)` body, every `@property`, `@contextlib.contextmanager`,
    `@torch.no_grad()` and `@functools.lru_cache` function in the scope would be invisible to the score).

    `@a @b def f` is `f = a(b(f))` (Python reference, "Function definitions"); the decorator expressions are
    evaluated after the def instead of before, which only matters to a decorator whose expression reads the name
    being defined (property setters: kept). Only module-level and class-level defs (what mutmut mutates). The
    decorator lines are blanked, not deleted, so each def keeps its line; each assignment adds one line after it."""
    import ast
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    edits = []  # (first decorator line, def line, end line, indent, assignment)

    def keep(d: ast.expr) -> bool:
        src = ast.get_source_segment(text, d) or ""
        return src in _KEEP_DECORATED or src.endswith((".setter", ".deleter", ".getter"))

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list:
                if any(keep(d) for d in node.decorator_list):
                    continue
                call = node.name
                for d in reversed(node.decorator_list):
                    call = f"({ast.get_source_segment(text, d)})({call})"
                indent = lines[node.lineno - 1][:len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip())]
                first = min(d.lineno for d in node.decorator_list)
                edits.append((first, node.lineno, node.end_lineno, indent, f"{indent}{node.name} = {call}\n"))

    visit(tree.body)
    for first, def_line, end, indent, assign in sorted(edits, reverse=True):
        lines.insert(end, assign)
        # blank the decorator lines instead of deleting them: the def keeps its line number
        for i in range(first - 1, def_line - 1):
            lines[i] = "\n"
    return "".join(lines)


def write_config(scratch: Path, modules: list[str], tests: list[str], max_children: int) -> None:
    """mutmut 3 reads [tool.mutmut] from pyproject.toml; the snapshot's copy gets it, the repository's does not."""
    pp = scratch / "pyproject.toml"
    text = pp.read_text()

    def arr(xs: list[str]) -> str:
        return "[" + ", ".join(json.dumps(x) for x in xs) + "]"

    text += ("\n[tool.mutmut]\n"
             f"source_paths = [\"kconvert\"]\n"
             f"only_mutate = {arr(modules)}\n"
             f"pytest_add_cli_args = {arr(['-m', 'not live', '-p', 'no:cacheprovider', '-W', 'ignore::UserWarning', '-x', '-q', '--timeout', '600', '-o', 'addopts='])}\n"
             f"pytest_add_cli_args_test_selection = {arr(tests)}\n"
             # mutmut copies only the sources and tests/ into mutants/; tests that read the example drafts
             # (tests/test_matrix.py: examples/tiny) need them beside the mutants too
             f"also_copy = {arr(ALSO_COPY)}\n"
             "mutate_only_covered_lines = false\n"
             "use_git_change_detection = false\n")
    pp.write_text(text)


def results(scratch: Path) -> dict[str, list[tuple[str, int | None]]]:
    """Per source file, (mutant name, exit code) from mutmut's meta files (`mutants/<file>.meta`)."""
    out: dict[str, list[tuple[str, int | None]]] = {}
    for meta in sorted((scratch / "mutants").rglob("*.py.meta")):
        rel = str(meta.relative_to(scratch / "mutants"))[:-len(".meta")]
        data = json.loads(meta.read_text())
        out[rel] = list(data.get("exit_code_by_key", {}).items())
    return out


def durations(scratch: Path) -> dict[str, float]:
    """Seconds each mutant's test run took (mutmut's `durations_by_key`), for the seconds-per-mutant figure."""
    out: dict[str, float] = {}
    for meta in (scratch / "mutants").rglob("*.py.meta"):
        out.update(json.loads(meta.read_text()).get("durations_by_key", {}))
    return out


def _diff_in_place(scratch: Path, name: str) -> str:
    """The unified diff of one mutant against its original function, from mutmut's mutants file (what `mutmut show`
    prints, without starting a process): mutant `x_f__mutmut_3` of module `a.b` is `def x_f__mutmut_3` in the
    scratch's copy of that module's file, beside `def x_f__mutmut_orig`."""
    import difflib
    import re

    mod, fn = name.rsplit(".", 1)
    base = fn.rsplit("__mutmut_", 1)[0]
    src = (scratch / "mutants" / (mod.replace(".", "/") + ".py")).read_text()

    def body(f: str) -> list[str]:
        m = re.search(r"^([ \t]*)def " + re.escape(f) + r"\(.*?(?=^\1\S|\Z)", src, re.S | re.M)
        return m.group(0).splitlines()[1:] if m else []
    return "\n".join(difflib.unified_diff(body(base + "__mutmut_orig"), body(fn), lineterm="", n=1))


def verdict(code: int | None) -> str:
    """mutmut's own reading of a mutant's exit code (mutmut/stats.py status_by_exit_code): timeouts and
    segfaults count as killed, as mutmut's score does."""
    from mutmut.stats import status_by_exit_code
    st = status_by_exit_code[code]
    return "killed" if st in ("killed", "timeout", "segfault", "caught by type check") else st


RUNS = ROOT / "bench" / "mutation-runs"


def module_files(globs: list[str], root: Path = ROOT) -> list[Path]:
    """The source files a list of module globs names (`kconvert/rules/*` is its .py files), under root."""
    return [p for g in globs for p in sorted(root.glob(g if g.endswith(".py") else g + ".py"))]


def scope_files() -> list[str]:
    """SCOPE's globs as the files mutmut mutates (its meta files are per source file)."""
    return [str(p.relative_to(ROOT)) for p in module_files(SCOPE)]


def _full(run: dict, module: str) -> bool:
    m = run["modules"].get(module)
    cmd = run.get("command", "")
    # a run whose mutmut failed (its clean test run, say) is no measurement, whatever its counts say
    return bool(m) and m["not_checked"] == 0 and run.get("mutmut_exit", 0) == 0 and "--mutants" not in cmd \
        and "--survivors-of" not in cmd


def _of_module(names, module: str) -> list[str]:
    """The mutant names (`<module>.x_f__mutmut_3`) of one source file under kconvert/ (a package's: its `__init__`)."""
    prefix = module[:-3].removesuffix("/__init__").replace("/", ".") + "."
    return [n for n in names if n.startswith(prefix) and "." not in n[len(prefix):]]


def _figures(run: dict, module: str, eq: dict[str, str]) -> dict:
    """One module's figures in a saved run, with survivors judged equivalent since the run counted apart."""
    m = dict(run["modules"][module])
    mine = _of_module(run["survivors"], module)
    left = [n for n in mine if n not in eq]
    newly = len(mine) - len(left)
    m["equivalent"] += newly
    m["survived"] = max(0, m["survived"] - newly)  # the list does not say which were "no tests": survived first
    m["no_tests"] = len(left) - m["survived"] if len(left) < m["survived"] + m["no_tests"] else m["no_tests"]
    m["survivors"] = left
    judged = m["mutants"] - m["equivalent"] - m["not_checked"]
    m["score"] = round(100.0 * m["killed"] / judged, 1) if judged else None
    return m


def _checked(run: dict, runs: dict[str, dict]) -> tuple[set[str], list[str]]:
    """The mutants a targeted run gave a verdict to: the names and globs after its `--mutants`, and the survivors
    of the saved run its `--survivors-of` names."""
    toks = run.get("command", "").split()
    names: set[str] = set()
    globs: list[str] = []
    for i, t in enumerate(toks):
        if t == "--mutants":
            for x in toks[i + 1:]:
                if x.startswith("--"):
                    break
                x = x.strip("'\"")
                (globs.append(x) if "*" in x else names.add(x))
        elif t == "--survivors-of" and i + 1 < len(toks):
            src = runs.get(Path(toks[i + 1]).name)
            if src:
                names |= set(src["survivors"])
    return names, globs


def _killed_later(survivors: list[str], after_files: set[str], runs: dict[str, dict]) -> set[str]:
    """Survivors of an after-run that a targeted re-run (`--survivors-of`, `--mutants`; never a before-run) killed
    once tests were added: checked there, and neither a survivor nor another verdict of that run."""
    import fnmatch
    out = set()
    for name, r in runs.items():
        if name in after_files or name.endswith("-before.json") or "before" in name:
            continue
        if "--mutants" not in r.get("command", "") and "--survivors-of" not in r.get("command", ""):
            continue
        names, globs = _checked(r, runs)
        left = set(r["survivors"]) | set(r.get("other_verdicts", {}))
        for s in survivors:
            # a re-run of the module as another source (another mutant count) numbered its mutants otherwise:
            # the same name is another mutant there
            mod = next((m for m in r["modules"] if _of_module([s], m)), None)
            if mod is None or {runs[f]["modules"].get(mod, {}).get("mutants") for f in after_files} != \
                    {r["modules"][mod]["mutants"]}:
                continue
            if s not in left and (s in names or any(fnmatch.fnmatchcase(s, g) for g in globs)):
                out.add(s)
    return out


def mutants_today(files: list[str]) -> dict[str, int]:
    """How many mutants mutmut makes of each file as it is now, decorated functions included (`undecorate`): the
    figure a saved run is checked against, so a run made before a source change, or before decorated functions
    were mutated, shows as stale instead of counting as complete. mutmut reads its config from the cwd: a scratch
    folder with the same `source_paths` as the runs'."""
    lib = ROOT / ".bench-lib"
    if lib.is_dir() and str(lib) not in sys.path:
        sys.path.insert(0, str(lib))
    from mutmut import configuration
    from mutmut.mutation.file_mutation import mutate_file_contents
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="kconvert-mutation-count-") as tmp:
        Path(tmp, "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["kconvert"]\n')
        os.chdir(tmp)
        try:
            configuration.config()
        finally:
            os.chdir(cwd)
    return {f: len(mutate_file_contents(f, undecorate((ROOT / f).read_text())).mutant_names) for f in files}


def scope_report(json_out: Path | None) -> int:
    """The scope's score from the saved full runs (see the module docstring)."""
    eq = equivalent()
    today = mutants_today(scope_files())
    runs = {p.name: json.loads(p.read_text()) for p in sorted(RUNS.glob("*.json"))}
    rows, missing, survivors = [], [], []
    tot = {"before": [0, 0], "after": [0, 0]}
    for mod in scope_files():
        row = {"module": mod}
        for kind in ("before", "after"):
            hits = [(n, r) for n, r in runs.items() if n.endswith(f"-{kind}.json") and _full(r, mod)]
            if len(hits) > 1:
                # a run of the module before a source change (its mutant count is not today's) is superseded by
                # a run of the module as it is
                hits = [(n, r) for n, r in hits if r["modules"][mod]["mutants"] == today[mod]] or hits
                # a source change that kept the count: the later run names the one it replaces ("supersedes":
                # ["<run file>:<module>"], written by hand into the later run's JSON)
                gone = {x for _, r in hits for x in r.get("supersedes", [])}
                hits = [(n, r) for n, r in hits if f"{n}:{mod}" not in gone] or hits
            if len(hits) > 1:
                raise SystemExit(f"{mod}: more than one full {kind} run: {', '.join(n for n, _ in hits)}")
            if not hits:
                # runs of disjoint `--mutants` globs (one function each) that together gave every mutant a verdict
                parts = [(n, r) for n, r in runs.items() if n.endswith(f"-{kind}.json") and mod in r["modules"]]
                figs = [_figures(r, mod, eq) for _, r in parts]
                if parts and len({f["mutants"] for f in figs}) == 1 and \
                        sum(f["mutants"] - f["not_checked"] for f in figs) == figs[0]["mutants"]:
                    f = {k: sum(x[k] for x in figs) for k in ("killed", "survived", "no_tests", "equivalent")}
                    f["mutants"] = figs[0]["mutants"]
                    f["survivors"] = [n for x in figs for n in x["survivors"]]
                    judged = f["mutants"] - f["equivalent"]
                    f["score"] = round(100.0 * f["killed"] / judged, 1) if judged else None
                    row[kind] = {"file": " + ".join(n for n, _ in parts),
                                 "seconds": sum(r.get("seconds") or 0 for _, r in parts),
                                 **{k: f[k] for k in ("mutants", "killed", "survived", "no_tests", "equivalent",
                                                      "score")}}
            else:
                f = _figures(hits[0][1], mod, eq)
                row[kind] = {"file": hits[0][0], "seconds": hits[0][1].get("seconds"),
                             **{k: f[k] for k in ("mutants", "killed", "survived", "no_tests", "equivalent",
                                                  "score")}}
            if kind == "after" and kind in row and f["survivors"]:
                files = set(row[kind]["file"].split(" + "))
                later = _killed_later(f["survivors"], files, runs)
                if later:
                    f["survivors"] = [n for n in f["survivors"] if n not in later]
                    f["killed"] += len(later)
                    nt = min(f["no_tests"], max(0, len(later) - f["survived"]))
                    f["survived"] -= len(later) - nt
                    f["no_tests"] -= nt
                    judged = f["mutants"] - f["equivalent"]
                    f["score"] = round(100.0 * f["killed"] / judged, 1) if judged else None
                    row[kind].update({k: f[k] for k in ("killed", "survived", "no_tests", "score")})
                    row[kind]["killed_by_later_runs"] = len(later)
            if kind == "after" and kind in row:
                # mutants of other verdicts (suspicious, timeout) that a later targeted re-run killed count as killed
                files = set(row[kind]["file"].split(" + "))
                others = [n for fn in files for n in _of_module(runs[fn].get("other_verdicts", {}), mod)]
                later = _killed_later(others, files, runs) if others else set()
                if later:
                    f["killed"] += len(later)
                    judged = f["mutants"] - f["equivalent"]
                    f["score"] = round(100.0 * f["killed"] / judged, 1) if judged else None
                    row[kind].update({k: f[k] for k in ("killed", "score")})
                    row[kind]["killed_by_later_runs"] = row[kind].get("killed_by_later_runs", 0) + len(later)
            if kind in row:
                tot[kind][0] += f["killed"]
                tot[kind][1] += f["mutants"] - f["equivalent"]
                if kind == "after":
                    survivors += f["survivors"]
        row["mutants_today"] = today[mod]
        a = row.get("after")
        if a is None and today[mod]:
            missing.append(mod)
        elif a is not None and a["mutants"] != today[mod]:
            row["stale"] = f"the after-run has {a['mutants']} mutants, the module has {today[mod]} today"
        rows.append(row)
    print(f"{'module':40} {'before':>8} {'mutants':>7} {'killed':>6} {'surv':>5} {'notest':>6} {'equiv':>5} "
          f"{'after':>7} {'wall':>6} {'today':>6}")
    for r in rows:
        b, a = r.get("before"), r.get("after")
        bs = f"{b['score']:.1f}%" if b and b["score"] is not None else "-"
        if a:
            sc = f"{a['score']:6.1f}%" if a["score"] is not None else "      -"
            print(f"{r['module']:40} {bs:>8} {a['mutants']:7} {a['killed']:6} {a['survived']:5} {a['no_tests']:6} "
                  f"{a['equivalent']:5} {sc} {a['seconds'] or 0:5}s {r['mutants_today']:6}"
                  + ("  STALE" if "stale" in r else ""))
        else:
            print(f"{r['module']:40} {bs:>8} {'(no full after-run)':>40} {r['mutants_today']:13}")
    score = {k: (round(100.0 * v[0] / v[1], 1) if v[1] else None) for k, v in tot.items()}
    # over the scope as it is today: a mutant without a verdict (its module has no after-run, or it is new since
    # the run: a decorated function, a changed line) counts as not killed
    eq_after = sum(r["after"]["equivalent"] for r in rows if "after" in r)
    killed_now = sum(r["after"]["killed"] for r in rows if "after" in r)
    surv_now = sum(r["after"]["survived"] + r["after"]["no_tests"] for r in rows if "after" in r)
    all_now = sum(today.values()) - eq_after
    score["scope_today"] = round(100.0 * killed_now / all_now, 1) if all_now else None
    print(f"scope, measured modules: after {score['after']}% ({tot['after'][0]} of {tot['after'][1]} "
          f"non-equivalent mutants killed); before {score['before']}% over the modules with a before-run")
    print(f"scope as it is today ({sum(today.values())} mutants, decorated functions included): {killed_now} killed, "
          f"{eq_after} equivalent, {surv_now} surviving, {all_now - killed_now - surv_now} without a verdict "
          f"= {score['scope_today']}% of the non-equivalent killed")
    for r in rows:
        if "stale" in r:
            print(f"  stale: {r['module']}: {r['stale']}")
    for m in missing:
        print(f"  unmeasured: {m}")
    for n in survivors:
        print(f"  survivor: {n}")
    if json_out:
        json_out.write_text(json.dumps({"modules": rows, "score": score, "totals": tot, "unmeasured": missing,
                                        "survivors": survivors}, indent=1) + "\n")
    return 0 if not missing and not survivors and not any("stale" in r for r in rows) else 1


def stale_tests(scratch: Path) -> list[str]:
    """The test files (tests/**/*.py) whose copy in a kept scratch's mutants/ differs from the working tree's."""
    copy = scratch / "mutants" / "tests"
    if not copy.is_dir():
        return []
    out = []
    for f in sorted((ROOT / "tests").rglob("*.py")):
        rel = f.relative_to(ROOT)
        c = scratch / "mutants" / rel
        if not c.exists() or c.read_bytes() != f.read_bytes():
            out.append(str(rel))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", action="store_true",
                    help="print the scope's score from the saved runs in bench/mutation-runs/ (no mutants run)")
    ap.add_argument("modules", nargs="*", help="files or globs under kconvert/ (default: the whole scope)")
    ap.add_argument("--tests", nargs="*", help="test files (default: every engine-free tests/test_*.py)")
    ap.add_argument("--max-children", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR", help="keep the scratch folder at DIR (reuse it on the next run)")
    ap.add_argument("--json", metavar="FILE", help="also write the per-module figures and survivors to FILE")
    ap.add_argument("--mutants", nargs="*", metavar="NAME",
                    help="run only these mutants (names as mutmut prints them), e.g. the survivors of a saved --json "
                         "run after tests were added: the others keep no verdict (counted as 'not checked')")
    ap.add_argument("--survivors-of", metavar="FILE",
                    help="like --mutants, with the survivors listed in a saved --json FILE")
    ap.add_argument("--collect", action="store_true",
                    help="with --keep DIR of a stopped run: run nothing, report the verdicts the folder holds (a "
                         "module whose every mutant has one counts as fully measured; the others as not checked)")
    a = ap.parse_args(argv)
    if a.report:
        return scope_report(Path(a.json).resolve() if a.json else None)
    only = list(a.mutants or [])
    if a.survivors_of:
        only += json.loads(Path(a.survivors_of).read_text())["survivors"]
    json_out = Path(a.json).resolve() if a.json else None
    modules = a.modules or SCOPE
    tests = a.tests or engine_free_tests()
    lib = ROOT / ".bench-lib"
    if lib.is_dir():
        sys.path.insert(0, str(lib))
    env = dict(os.environ)
    scratch = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="kconvert-mutation-"))
    t0 = time.monotonic()
    try:
        if not (scratch / "pyproject.toml").exists():
            snapshot(scratch)
            for f in module_files(modules, scratch):
                f.write_text(undecorate(f.read_text()))
            write_config(scratch, modules, tests, a.max_children)
        elif not a.collect and (stale := stale_tests(scratch)):
            # mutmut runs the copy of tests/ it made in the first run: a kept folder reused after tests changed
            # would judge the mutants by the old tests (a survivor re-run would report the old survivors)
            raise SystemExit(f"--keep {scratch}: tests changed since this folder was made ({', '.join(stale[:3])}"
                             f"{' ...' if len(stale) > 3 else ''}); give a new --keep DIR")
        # the trampolines in the mutants import mutmut: child processes (tests set PYTHONPATH=<tests>/.. =
        # mutants/) find it beside the mutants
        (scratch / "mutants").mkdir(exist_ok=True)
        for name in ("mutmut", "mutmut-3.8.1.dist-info"):
            link = scratch / "mutants" / name
            if lib.is_dir() and not link.exists():
                link.symlink_to(lib / name)
        # mutmut's stats mode reads its config (pyproject.toml) from the cwd in every process a trampoline runs in;
        # a `kconvert` child that a test starts in another folder would die on "Could not figure out where the code
        # to mutate is". A sitecustomize beside the mutants loads the scratch's config first (stats mode only).
        (scratch / "mutants" / "sitecustomize.py").write_text(
            "# written by bench/mutation.py (issue #30): load mutmut's config from the scratch in child processes\n"
            "import os\n"
            "if os.environ.get('MUTANT_UNDER_TEST') == 'stats' and not os.path.exists('pyproject.toml'):\n"
            "    _cwd = os.getcwd()\n"
            f"    os.chdir({str(scratch)!r})\n"
            "    try:\n"
            "        from mutmut.configuration import config\n"
            "        config()\n"
            "    finally:\n"
            "        os.chdir(_cwd)\n")
        # the mutants first, for this process's tests and for every `kconvert` child process they start
        env["PYTHONPATH"] = os.pathsep.join([str(scratch / "mutants"), str(lib)] if lib.is_dir() else
                                            [str(scratch / "mutants")])
        env["MUTMUT_BENCH"] = "1"
        cmd = [sys.executable, "-c", "import sys; from mutmut.__main__ import cli; sys.argv[0]='mutmut'; cli()",
               "run", "--max-children", str(a.max_children)] + only
        if a.collect:
            if not (scratch / "mutants").is_dir() or not a.keep:
                raise SystemExit("--collect needs --keep DIR of an earlier run")
            rc = 0  # the verdicts are mutmut's, from the stopped run; "seconds" below is then no run's wall time
        else:
            rc = subprocess.run(cmd, cwd=scratch, env=env).returncode
        took = time.monotonic() - t0
        res = results(scratch)
        for f in module_files(modules):  # a file mutmut wrote no meta for had nothing to mutate
            res.setdefault(str(f.relative_to(ROOT)), [])
        eq = equivalent()
        print(f"\nmutmut exit {rc}; {took:.0f} s wall, max-children {a.max_children}")
        print(f"{'module':48} {'mutants':>7} {'killed':>6} {'surv':>5} {'equiv':>5} {'notest':>6} {'score':>6}")
        dur = durations(scratch)
        report = {"command": "python bench/mutation.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "seconds": None if a.collect else round(took), "max_children": a.max_children, "mutmut_exit": rc,
                  "collected": bool(a.collect), "modules": {},
                  "survivors": [],
                  "diffs": {}}
        tk = tm = 0
        for mod, items in res.items():
            if not items:
                # mutmut found nothing to mutate (imports and names only): recorded, so --report sees it measured
                report["modules"][mod] = {"mutants": 0, "killed": 0, "survived": 0, "no_tests": 0, "equivalent": 0,
                                          "not_checked": 0, "score": None, "test_seconds": 0,
                                          "seconds_per_mutant_run": None}
                print(f"{mod:48} {0:7} (nothing to mutate)")
                continue
            v = [(n, verdict(c)) for n, c in items]
            k = sum(1 for _, x in v if x == "killed")
            s = [n for n, x in v if x in ("survived", "no tests") and n not in eq]
            e = sum(1 for n, x in v if x in ("survived", "no tests") and n in eq)
            nt = sum(1 for n, x in v if x == "no tests" and n not in eq)
            judged = len(v) - e - sum(1 for _, x in v if x == "not checked")
            score = 100.0 * k / judged if judged else 0.0
            tk += k
            tm += judged
            print(f"{mod:48} {len(v):7} {k:6} {len(s) - nt:5} {e:5} {nt:6} {score:5.1f}%")
            ran = [dur[n] for n, _ in items if n in dur]
            report["modules"][mod] = {"mutants": len(v), "killed": k, "survived": len(s) - nt, "no_tests": nt,
                                      "equivalent": e, "not_checked": sum(1 for _, x in v if x == "not checked"),
                                      "score": round(score, 1), "test_seconds": round(sum(ran), 1),
                                      "seconds_per_mutant_run": round(sum(ran) / len(ran), 2) if ran else None}
            report["survivors"] += s
            report.setdefault("other_verdicts", {}).update(
                {n: x for n, x in v if x not in ("killed", "survived", "no tests", "not checked")})
        if tm:
            print(f"{'all':48} {'':7} {tk:6} {'':5} {'':5} {'':6} {100.0 * tk / tm:5.1f}%")
        ran = list(dur.values())
        if ran:
            print(f"{len(ran)} mutants run: {sum(ran):.0f} s of test runs, {sum(ran) / len(ran):.2f} s a mutant")
        print("\nsurviving mutants (not in bench/mutation-equivalent.txt):")
        for n in report["survivors"]:
            print(" ", n)
            # the diff read from the mutants file in-process, as `mutmut show` does (the mutant function against
            # its `__mutmut_orig`); one `mutmut show` process a survivor took ~1 s each (8 min after a long run)
            d = _diff_in_place(scratch, n)
            diff = [x for x in d.strip().splitlines() if x[:1] in "+-" and x[:3] not in ("+++", "---")]
            report["diffs"][n] = diff
            print("    " + "\n    ".join(d.strip().splitlines()[-12:]))
        for n, x in report.get("other_verdicts", {}).items():
            print(f"  {n}: {x} (not counted as killed)")
        if json_out:
            json_out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
            print(f"\nwritten: {json_out}")
        return 0 if rc == 0 else rc
    finally:
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
