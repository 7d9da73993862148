"""Re-pin the zoo: rewrite only the `pinned` section of every tests/zoo/*/expect.json from kconvert's current
output (verdict and finding ids of `inspect`, the outcome of `fix --dry-run`, and of the recorded decision, on
every engine row). The `record` section (what the public record says, RECORD.md) is never touched.

    python -m tests.zoo.repin            # rewrite, print what changed
    python -m tests.zoo.repin --check    # exit 1 if a pin would change (nothing written)

A pinned value is not a claim that kconvert is right: it is kept so that a change shows in the diff. Whether a
change is right is for tests/test_zoo.py's record checks and for the reviewer of that diff.
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import tempfile
from pathlib import Path

ZOO = Path(__file__).resolve().parent
_FLAG = re.compile(r"--[a-z][a-z-]+")
_RULE = re.compile(r"\bK\d{3}\b")


def cases() -> list[str]:
    return sorted(p.name for p in ZOO.iterdir() if (p / "expect.json").is_file())


def load(case: str) -> dict:
    return json.loads((ZOO / case / "expect.json").read_text())


def build(case: str, root: Path) -> tuple[Path, str]:
    mod = importlib.import_module(f"tests.zoo.{case}.build")
    return mod.build(root / case), mod.TARGET


def observe_inspect(folder: Path, target: str, row) -> dict:
    from kconvert.commands.inspect import analyse
    from kconvert.engines.expectations import engine_rules
    from kconvert.targets import load_target
    from tests.zoo.replica import open_replica

    # inspect's steps, on the replica opened with the rows it holds embedding values at (tests/zoo/replica.py)
    res = analyse(open_replica(folder), load_target(target), engine_rules(row.engine, row.version))
    errors = sorted({f.id for f in res.findings if f.severity == "error"})
    warnings = sorted({f.id for f in res.findings if f.severity == "warning"})
    return {"verdict": "fail" if errors else "warn" if warnings else "pass", "errors": errors, "warnings": warnings}


def run_fix(folder: Path, target: str, row, *, from_pickle: bool = False, decisions: dict | None = None):
    """`fix --dry-run` on one engine row: its FixResult, or the AmbiguityError / UnfixableError it refused with
    (tests/test_zoo.py keeps it per case and row, so its outcome and invariant tests share one run)."""
    from kconvert.errors import AmbiguityError, UnfixableError
    from kconvert.commands.fix import fix
    from kconvert.rules import Decisions
    from tests.zoo.replica import open_replica

    kw = dict(target=target, engine=row.engine, engine_version=row.version, dry_run=True, from_pickle=from_pickle)
    if decisions is not None:
        kw["decisions"] = Decisions(**decisions)
    try:
        return fix(open_replica(folder), None, **kw)
    except (AmbiguityError, UnfixableError) as e:
        return e


def fix_outcome(res) -> dict:
    """The pinned `fix` value of what `run_fix` returned."""
    from kconvert.errors import AmbiguityError, UnfixableError

    if isinstance(res, AmbiguityError):
        # fix names the deciding flag after "decide with" (kconvert/commands/fix/__init__.py); other messages
        # name one flag
        flags = re.findall(r"decide with (--[a-z][a-z-]+)", res.message) or _FLAG.findall(res.message)
        return {"outcome": "needs", "flag": flags[0] if flags else res.message}
    if isinstance(res, UnfixableError):
        return {"outcome": "unfixable", "findings": sorted(set(_RULE.findall(res.message)))}
    if res.refused:
        # another method's checkpoint (K105): fix plans and writes nothing for it
        return {"outcome": "refused", "findings": [res.refused["rule"]]}
    out = {"outcome": "noop"} if res.noop else {"outcome": "ops",
                                                "findings": sorted({f.id for f in res.plan.applied_findings})}
    # what fix left exactly as it is (a decision nobody gave), and the flag that decides it
    left = res.plan.left_as_is
    if left:
        out["left_as_is"] = sorted({f.id for f in left})
        flags = _FLAG.findall(" ".join(f.needs_decision for f in left))
        out["flag"] = flags[0] if flags else ""
    return out


def observe_fix(folder: Path, target: str, row, *, from_pickle: bool = False, decisions: dict | None = None) -> dict:
    return fix_outcome(run_fix(folder, target, row, from_pickle=from_pickle, decisions=decisions))


def observe(case: str, folder: Path, target: str, e: dict) -> dict:
    """The pinned section as kconvert's current output would write it (keeps `static_limit`, `from_pickle` and the
    decision's options and why: those are inputs, not outputs)."""
    from kconvert.engines.expectations import ALL_ROWS

    rows = {r.key: r for r in ALL_ROWS}
    old = e["pinned"]
    new = {k: v for k, v in old.items() if k not in ("rows", "decided")}
    fp = bool(old.get("from_pickle"))
    new["rows"] = {key: {**observe_inspect(folder, target, rows[key]), "fix": observe_fix(folder, target, rows[key],
                                                                                         from_pickle=fp)}
                   for key in rows}  # every row (a row added to ALL_ROWS gets its pin here)
    if "decided" in old:
        d = old["decided"]
        new["decided"] = {**d, "rows": {key: observe_fix(folder, target, rows[key], decisions=d["options"])
                                        for key in d["rows"]}}
    return new


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.zoo.repin", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report pins that would change; write nothing")
    ap.add_argument("case", nargs="*", help="only these cases (folder names)")
    args = ap.parse_args(argv)
    changed = []
    with tempfile.TemporaryDirectory(prefix="kconvert-repin-") as tmp:
        for case in args.case or cases():
            e = load(case)
            folder, target = build(case, Path(tmp))
            pinned = observe(case, folder, target, e)
            if pinned != e["pinned"]:
                changed.append(case)
                for key, row in pinned["rows"].items():
                    if row != e["pinned"]["rows"].get(key):
                        print(f"{case} / {key}: {e['pinned']['rows'].get(key)} -> {row}")
                if pinned.get("decided") != e["pinned"].get("decided"):
                    print(f"{case} / decided: {e['pinned'].get('decided', {}).get('rows')} -> "
                          f"{pinned.get('decided', {}).get('rows')}")
                if not args.check:
                    e["pinned"] = pinned
                    (ZOO / case / "expect.json").write_text(json.dumps(e, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(changed)} case(s) {'would change' if args.check else 're-pinned'}" + (f": {', '.join(changed)}"
                                                                                       if changed else ""))
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
