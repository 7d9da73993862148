"""Collect every command kconvert prints for a user and run it as printed.

A printed command is a `next:` line (inspect, fix, verify --dry-run, score), a command in a hint, a `--help`
example, or a command quoted in a rule text. Each runs in-process through `kconvert.cli.main` (a subprocess
start costs ~0.6 s each), shlex-split, in the folder the printing command ran in, with nothing substituted:
fix lines run in full (they write beside the draft, in a temporary work folder), verify lines with `--dry-run`
appended, score lines up to the point where they need a trace. Lines starting `python -m sglang.launch_server`
or `tokenspeed serve` are validated, not run: the paths they name exist (after the fix line before them ran), and
-k/--tp agree with the verify line that follows.

`baseline=True` measures the behaviour before `verify --dry-run` existed: a verify line runs as printed and counts
as working when it reaches the engine start (the live run is stopped there), the way a user's run would reach it.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from kconvert.cli import main

ROOT = Path(__file__).resolve().parent.parent
ZOO = Path(__file__).resolve().parent / "zoo"

# Placeholders a printed line marks as such, and what the test puts there.
SERVER_PLACEHOLDERS = ("<url>", "<server>", "URL", "<server-url>")
SERVER_EXAMPLE = "http://localhost:30000"
TRACE = "<trace>"  # the placeholder a score line marks: a trace the user records once with `kconvert trace`
NEXT = re.compile(r"^next: (?P<cmd>.+?)(?:  # (?P<why>.*))?$")
QUOTED = re.compile(r"`((?:kconvert|python -m sglang\.launch_server|tokenspeed serve) [^`]+)`")


@dataclass
class Printed:
    command: str  # as printed
    why: str  # its comment
    origin: str  # which run printed it
    cwd: Path
    following: "Printed | None" = None  # the line printed after it (a launch line's verify --server)


@dataclass
class Outcome:
    printed: Printed
    ok: bool
    detail: str = ""


@dataclass
class Run:
    rc: int
    out: str
    err: str


class EngineWouldStart(BaseException):  # not an Exception: main() must not report it as a kconvert bug
    """Raised in place of the live run: the command got as far as starting the engine."""


def run(argv: list[str], cwd: Path, *, baseline: bool = False) -> Run:
    import os

    from kconvert.cli import _output

    old = Path.cwd()
    out, err = io.StringIO(), io.StringIO()
    os.chdir(cwd)
    patch = contextlib.nullcontext()
    if baseline:
        import unittest.mock

        def stop(*_a, **_k):
            raise EngineWouldStart

        patch = unittest.mock.patch("kconvert.commands.verify.command._run_live", stop)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), patch:
            _output.console.file = out
            _output.err_console.file = err
            try:
                rc = main(argv)
            except EngineWouldStart:
                rc = -1
    finally:
        _output.console.file = None  # back to the current sys.stdout / sys.stderr
        _output.err_console.file = None
        os.chdir(old)
    return Run(rc, out.getvalue(), err.getvalue())


def next_lines(text: str, origin: str, cwd: Path) -> list[Printed]:
    found = []
    for line in text.splitlines():
        m = NEXT.match(line.strip())
        if m:
            found.append(Printed(m["cmd"].strip(), (m["why"] or "").strip(), origin, cwd))
    return found


def hint_lines(text: str, origin: str, cwd: Path) -> list[Printed]:
    found = []
    for line in text.splitlines():
        if "hint:" in line or "error:" in line:
            found += [Printed(c, "from a hint", origin, cwd) for c in QUOTED.findall(line)]
    return found


def expected_ids(why: str) -> list[str]:
    m = re.match(r"repairs ([K0-9, ]+)", why)
    return [i.strip() for i in m[1].split(",") if i.strip()] if m else []


@dataclass
class Collector:
    """Runs printing commands, gathers what they print, runs each printed line once (and what it prints in turn)."""

    baseline: bool = False
    seen: set[tuple[str, str]] = field(default_factory=set)
    outcomes: list[Outcome] = field(default_factory=list)
    written: list[tuple[Path, str]] = field(default_factory=list)  # (cwd, folder) fix lines wrote

    def emit(self, argv: list[str], origin: str, cwd: Path) -> Run:
        """Run one printing command (concise output, so every next line is one line) and follow what it prints."""
        r = run(argv + ["--output-format", "concise"], cwd, baseline=self.baseline)
        self.follow_all(next_lines(r.out, origin, cwd) + hint_lines(r.err, origin, cwd))
        self.clear_written()
        return r

    def clear_written(self) -> None:
        """Another engine row prints the same destinations: a user runs one row, so each starts afresh (and the
        lines about a destination run again for it)."""
        for cwd, out in self.written:
            shutil.rmtree(cwd / out, ignore_errors=True)
            self.seen = {k for k in self.seen
                         if not k[1].startswith(tuple(f"kconvert {c} {out} " for c in ("verify", "inspect", "score")))}
        self.written.clear()

    def follow_all(self, lines: list[Printed]) -> None:
        for i, p in enumerate(lines):
            p.following = lines[i + 1] if i + 1 < len(lines) else None
            self.follow(p)

    def follow(self, p: Printed) -> None:
        key = (str(p.cwd), p.command)
        if key in self.seen:
            return
        self.seen.add(key)
        said = comment_problems(p)
        self.outcomes.append(Outcome(p, False, said) if said else self.check(p))

    def check(self, p: Printed) -> Outcome:
        argv = shlex.split(p.command)
        if argv[:3] == ["python", "-m", "sglang.launch_server"] or argv[:2] == ["tokenspeed", "serve"]:
            return check_sglang_line(p, argv)
        if not argv or argv[0] != "kconvert":
            return Outcome(p, False, f"not a kconvert command: {argv[:1]}")
        cmd, args = argv[1], argv[2:]
        if cmd == "fix":
            return self.check_fix(p, args)
        if cmd == "verify":
            return self.check_verify(p, args)
        if cmd == "score" and TRACE in args:
            return self.check_score_without_trace(p, args)
        if cmd in ("inspect", "score", "rules", "trace", "acceptance"):
            r = run(args_for(cmd, args), p.cwd, baseline=self.baseline)
            ok = r.rc in ((0, 1) if cmd == "score" else (0,))
            return Outcome(p, ok, f"exit {r.rc}: {last_error(r)}")
        return Outcome(p, False, f"unknown command {cmd}")

    def check_fix(self, p: Printed, args: list[str]) -> Outcome:
        r = run(["fix", *args, "--output-format", "concise"], p.cwd, baseline=self.baseline)
        want_rc = 1 if "fix exits 1" in p.why else 0
        if r.rc != want_rc:
            return Outcome(p, False, f"exit {r.rc} (comment says {want_rc}): {last_error(r)}")
        out = option(args, "-o", "--output")
        want_gone = expected_ids(p.why)
        if out and "--dry-run" not in args:
            if not (p.cwd / out).is_dir():
                # nothing to change: exit 0, nothing written, and fix says so
                ok = "nothing to change" in r.out and not want_gone
                self.follow_all(next_lines(r.out, f"fix (nothing to change) {out}", p.cwd))
                return Outcome(p, ok, "" if ok else f"nothing written to {out}, yet the comment says: {p.why}")
            again = inspect_flags(args)
            r2 = run(["inspect", out, *again, "--json"], p.cwd)
            if r2.rc not in (0, 1):
                return Outcome(p, False, f"re-inspect of {out}: exit {r2.rc} {last_error(r2)}")
            doc = json.loads(r2.out)
            left = sorted({f["id"] for f in doc["findings"] if f["id"] in want_gone and f["severity"] != "info"})
            if left:
                return Outcome(p, False, f"{', '.join(left)} still reported on the output")
            self.written.append((p.cwd, out))
            self.follow_all(next_lines(r.out, f"fix → {out}", p.cwd))
        return Outcome(p, True)

    def check_verify(self, p: Printed, args: list[str]) -> Outcome:
        if self.baseline:
            r = run(["verify", *args, "--output-format", "concise"], p.cwd, baseline=True)
            ok = r.rc in (-1, 0)  # reached the engine start, or passed without needing it
            return Outcome(p, ok, f"exit {r.rc}: {last_error(r)}")
        args = [SERVER_EXAMPLE if a in SERVER_PLACEHOLDERS else a for a in args]
        r = run(["verify", *args, "--dry-run", "--output-format", "concise"], p.cwd)
        self.follow_all(next_lines(r.out, f"verify --dry-run {' '.join(args[:1])}", p.cwd))
        return Outcome(p, r.rc == 0, f"exit {r.rc}: {last_error(r)}")

    def check_score_without_trace(self, p: Printed, args: list[str]) -> Outcome:
        """A score line whose trace is a marked placeholder runs up to needing the trace: it gets past the
        argument parsing and stops there, naming the trace (recording one for a Kimi-sized target is not cheap)."""
        missing = p.cwd / "no-trace-recorded-here"
        r = run(["score", *[str(missing) if a == TRACE else a for a in args]], p.cwd)
        ok = r.rc == 2 and "not a trace folder" in r.err and "record one with `kconvert trace`" in r.err
        return Outcome(p, ok, f"exit {r.rc}: {last_error(r)}")

    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def summary(self) -> str:
        bad = self.failed()
        lines = [f"{len(self.outcomes)} printed commands run, {len(bad)} failed"]
        lines += [f"  FAIL [{o.printed.origin}] {o.printed.command}  # {o.printed.why}\n       {o.detail}" for o in bad]
        return "\n".join(lines)


def comment_problems(p: Printed) -> str:
    """What a printed line's comment says that its command contradicts: an option neither the command nor the one
    that printed it has (an SGLang launch line's comment once spoke of --diagnose, which it does not take), or
    parentheses doubled by a decision text pasted into parentheses ("(decide with --x (if ...))")."""
    import re as _re

    from tests.docs_commands import click_command

    def options(name: str) -> set[str]:
        cmd = click_command(name)
        return set() if cmd is None else {o for prm in cmd.params
                                          for o in [*getattr(prm, "opts", []), *getattr(prm, "secondary_opts", [])]}

    problems = []
    argv = shlex.split(p.command)
    if argv[:1] == ["kconvert"] and len(argv) > 1:
        have = options(argv[1])
    else:
        have = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    # the command that printed the line may name its own outputs ("the --html page" of a matrix)
    have |= options(p.origin.split(" ", 1)[0])
    for opt in _re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", p.why):
        if opt not in have:
            problems.append(f"the comment names {opt}, which `{' '.join(argv[:2])}` does not take")
    if "))" in p.why or "((" in p.why:
        problems.append("doubled parentheses in the comment")
    return "; ".join(problems)


def args_for(cmd: str, args: list[str]) -> list[str]:
    return [cmd, *args]


def option(args: list[str], *names: str) -> str | None:
    for i, a in enumerate(args):
        if a in names and i + 1 < len(args):
            return args[i + 1]
        for n in names:
            if n.startswith("--") and a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def inspect_flags(fix_args: list[str]) -> list[str]:
    """The flags of a fix line that inspect of its output repeats: target, engine and its version."""
    out = []
    for name in ("--target", "-t", "--engine", "--engine-version"):
        v = option(fix_args, name)
        if v is not None:
            out += [name, v]
    return out


def last_error(r: Run) -> str:
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    return (lines[-2:] and " | ".join(lines[-2:])) or ""


def check_sglang_line(p: Printed, argv: list[str]) -> Outcome:
    """An SGLang or tokenspeed launch line, validated, not run: the paths it names exist where it was printed (after
    the fix line before it ran) or are Hub ids; its speculative flags agree with each other (a chain of k steps, topk 1,
    k + 1 draft tokens) and with the -k and --tp of the verify line printed after it."""
    problems = []
    for what, name in (("draft", "--speculative-draft-model-path"), ("target", "--model-path")):
        path = option(argv, name) or (option(argv, "--model") if what == "target" else None)
        if path is None and what == "target" and argv[:2] == ["tokenspeed", "serve"]:
            path = argv[2]  # `tokenspeed serve TARGET` (cli/_argsplit.py: a leading positional is the model)
        if path is None:
            problems.append(f"no {what} path ({name})")
        elif not (p.cwd / path).exists() and not _hub_id(path, p.cwd):
            problems.append(f"{what} {path} does not exist")
    steps, topk, tokens = (option(argv, f"--speculative-{n}") for n in ("num-steps", "eagle-topk", "num-draft-tokens"))
    if steps is None or int(steps) < 1:
        problems.append(f"--speculative-num-steps {steps}")
    elif topk == "1" and tokens is not None and int(tokens) != int(steps) + 1:
        problems.append(f"topk 1 drafts a chain: --speculative-num-draft-tokens {tokens} != steps {steps} + 1")
    nxt = p.following
    if nxt is not None and nxt.command.startswith("kconvert verify "):
        vargs = shlex.split(nxt.command)
        k = option(vargs, "-k", "--num-speculative-tokens")
        if k is not None and steps is not None and int(k) != int(steps):
            problems.append(f"verify -k {k} but the launch line drafts {steps} steps")
        tp = option(vargs, "--tp", "--tensor-parallel-size")
        if tp is not None and option(argv, "--tp", "--tp-size") not in (None, tp):
            problems.append(f"verify --tp {tp} but the launch line --tp {option(argv, '--tp', '--tp-size')}")
    return Outcome(p, not problems, "; ".join(problems))


def _hub_id(path: str, cwd: Path) -> bool:
    """org/name that is no local path: its first part is not a folder where the line was printed."""
    parts = path.split("/")
    return len(parts) == 2 and all(parts) and not (cwd / parts[0]).exists() and not path.startswith(".")


# ------------------------------------------------------------------------------------------------- the drafts

def workspace(root: Path) -> list[tuple[str, str | None]]:
    """Build every zoo draft (as tests/test_zoo.py does) and copy examples/tiny into `root`; returns the
    (draft, target) pairs as relative paths from `root`, the way a user would type them there."""
    import importlib

    pairs: list[tuple[str, str | None]] = []
    for case in sorted(p.name for p in ZOO.iterdir() if (p / "expect.json").is_file()):
        mod = importlib.import_module(f"tests.zoo.{case}.build")
        mod.build(root / "zoo" / case)
        pairs.append((f"zoo/{case}", mod.TARGET))
    shutil.copytree(ROOT / "examples" / "tiny", root / "examples" / "tiny",
                    ignore=shutil.ignore_patterns("*.md", "*-vllm", "*-sglang"))
    for group in ("drafts", "broken"):
        for d in sorted((root / "examples" / "tiny" / group).iterdir()):
            if (d / "config.json").is_file():
                pairs.append((f"examples/tiny/{group}/{d.name}", "examples/tiny/target"))
    # NeMo Automodel's checkpoint folders as its recipe wrote them, given as a user gives them: the epoch folder
    # (tests/producers/automodel_drafts.py)
    from tests.producers import automodel_drafts as am

    shutil.copytree(am.DATA, root / "automodel", ignore=shutil.ignore_patterns("*-vllm-export", "provenance.json"))
    for name in am.FIXED_FROM:
        pairs.append((f"automodel/{name}/{am.STEP}", f"automodel/targets/{am.WRITTEN[name][1]}"))
    return pairs


def collect(root: Path, rows, *, baseline: bool = False, pairs=None, dry_runs: bool = True) -> Collector:
    """Every printed line of inspect (and, with `dry_runs`, of verify --dry-run) over `pairs` x `rows`, run."""
    c = Collector(baseline=baseline)
    pairs = pairs if pairs is not None else workspace(root)
    for draft, target in pairs:
        for row in rows:
            flags = ["--engine", row.engine, "--engine-version", row.version]
            tflags = ["--target", target] if target else []
            origin = f"{draft} [{row.key}]"
            r = c.emit(["inspect", draft, *tflags, *flags], f"inspect {origin}", root)
            if dry_runs and not baseline:
                v = c.emit(["verify", draft, *tflags, *flags, "--dry-run"], f"verify --dry-run {origin}", root)
                # the preflight exits by the static verdict: inspect's, never 3; for another method's checkpoint
                # (inspect's K105 says "not an EAGLE-3 draft") verify refuses, exit 1, whatever inspect's verdict
                # (the concise line is cut at 120 characters: K105's messages all open "this is <method>, not an
                # EAGLE-3 draft", kconvert/rules/architecture.py other_method)
                want = 1 if re.search(r"K105 \w+ (\[[\w-]+\] )?this is ", r.out) else r.rc
                if v.rc != want or "dry run: " not in v.out:
                    c.outcomes.append(Outcome(Printed(f"kconvert verify {draft} --dry-run", "static verdict",
                                                      origin, root), False, f"inspect {r.rc}, dry run {v.rc}, want {want}"))
    return c


def iter_help_examples() -> Iterator[tuple[str, str]]:
    from kconvert.cli import _register, app

    _register()
    for info in app.registered_commands:
        # a shell line continued with a backslash is one command
        text = re.sub(r"\\\n\s*", " ", info.epilog or "")
        for line in text.splitlines():
            if line.strip().startswith("kconvert "):
                yield info.name or "", line.strip()
