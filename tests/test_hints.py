"""Every hint, decision and refusal kconvert can print names commands and options that exist (issue #48 item 2).

The texts are enumerated from the code, not listed here: every `hint=` / `missing_hint=` / `needs_decision=`
argument in kconvert/, every module constant named `*_HINT` or `DECIDE_*`, and every string literal that quotes a
`kconvert <command> ...` line. f-string holes become a placeholder word, module constants are resolved. Then:

- a `kconvert <command> ...` it quotes parses with that command's own click parser (tests/docs_commands.py
  `parse_problems`): the command and each option exist and take the value given;
- each `--option` it names is an option of the command it quotes, or of some kconvert command when it quotes none;
- a hint that says to (re)run a kconvert command names how: a quoted command line or an option ("rerun verify
  with hashing on" named neither, and verify has no such setting);
- a refusal (an exit-1 error raised on purpose) carries a hint: the way on is printed with the refusal.

The `next:` lines and the hints printed over every zoo draft and engine row run as printed in
tests/test_printed_commands.py; this test covers the texts no draft there happens to reach.
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import docs_commands as dc

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kconvert"
HOLE = "X"  # what an f-string hole reads as: one word, a valid value for a string option
HINT_KEYWORDS = ("hint", "missing_hint", "needs_decision")
REFUSALS = ("GateError", "UnfixableError", "AmbiguityError", "NothingToFixError")
COMMAND_WORDS = ("inspect", "fix", "verify", "score", "trace", "matrix", "push", "push-trace", "rules", "acceptance")
QUOTED = re.compile(r"`(kconvert [^`]+)`")
BARE = re.compile(r"(?<![`\w/-])(kconvert (?:%s)\b[^;`()\n]*)" % "|".join(COMMAND_WORDS))
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


@dataclass
class Text:
    where: str
    text: str
    kind: str  # hint, missing_hint, needs_decision, constant, literal


def _constants(tree: ast.Module) -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            out[n.targets[0].id] = n.value
    return out


def render(node: ast.AST | None, consts: dict[str, ast.AST], depth: int = 0) -> str | None:
    """The text a string expression prints, holes as HOLE; None when it is not a string expression."""
    if node is None or depth > 5:
        return None
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                inner = render(v.value, consts, depth + 1)
                parts.append(inner if inner is not None else HOLE)
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = render(node.left, consts, depth + 1), render(node.right, consts, depth + 1)
        return None if a is None and b is None else (a if a is not None else HOLE) + (b if b is not None else HOLE)
    if isinstance(node, ast.IfExp):
        body, other = render(node.body, consts, depth + 1), render(node.orelse, consts, depth + 1)
        return " | ".join(t for t in (body, other) if t) or None
    if isinstance(node, ast.Name) and node.id in consts:
        return render(consts[node.id], consts, depth + 1)
    return None


def printed_texts() -> list[Text]:
    found: list[Text] = []
    for f in sorted(PACKAGE.rglob("*.py")):
        rel = f.relative_to(ROOT)
        tree = ast.parse(f.read_text(encoding="utf-8"))
        consts = _constants(tree)
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for name, value in consts.items():
            if name.endswith("_HINT") or name.startswith("DECIDE_"):
                t = render(value, consts)
                if t:
                    found.append(Text(f"{rel}:{value.lineno} {name}", t, "constant"))
        for n in ast.walk(tree):
            if isinstance(n, ast.keyword) and n.arg in HINT_KEYWORDS:
                t = render(n.value, consts)
                if t:
                    found.append(Text(f"{rel}:{n.value.lineno}", t, n.arg))
            elif isinstance(n, (ast.Constant, ast.JoinedStr)) and id(n) not in docstrings:
                t = render(n, consts)
                if t and QUOTED.search(t):
                    found.append(Text(f"{rel}:{n.lineno}", t, "literal"))
    return found


def commands_in(text: str, *, bare: bool = True) -> list[str]:
    """The kconvert command lines a text quotes (`kconvert ...`), or, in a hint, writes out unquoted; a command
    whose name is an f-string hole (`kconvert {command}`) names no command of its own."""
    cmds = [c.strip() for c in QUOTED.findall(text)]
    if not cmds and bare:
        cmds = [c.strip().rstrip(".,") for c in BARE.findall(text)]
    return [c for c in cmds if c.split()[1:2] != [HOLE]]


@functools.cache
def option_owners() -> dict[str, set[str]]:
    """Every option of every kconvert command, with the commands that have it (click's own objects)."""
    from kconvert.cli import _built, _register

    _register()
    group = _built(None)
    owners: dict[str, set[str]] = {}
    for name, cmd in group.commands.items():
        for p in cmd.params:
            for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]:
                owners.setdefault(o, set()).add(name)
    return owners


def problems_of(t: Text, owners: dict[str, set[str]]) -> list[str]:
    out: list[str] = []
    cmds = commands_in(t.text, bare=t.kind != "literal")
    for c in cmds:
        # a command line written with placeholders: `<dir>`, `...`, `X` stand for values
        try:
            out += [f"`{c}`: {p}" for p in dc.parse_problems(c.replace("...", "DRAFT"))
                    if "Missing argument" not in p]
        except ValueError as e:  # shlex: an unclosed quote
            out.append(f"`{c}`: does not split as a shell line: {e}")
    named = {c.split()[1] for c in cmds if len(c.split()) > 1}
    if t.kind == "literal":
        return out
    outside = QUOTED.sub(" ", t.text)
    for opt in OPTION.findall(outside):
        if opt not in owners:
            out.append(f"{opt}: no kconvert command has it")
        elif named and not (owners[opt] & named) and not BARE.search(outside):
            out.append(f"{opt}: not an option of {', '.join(sorted(named))}")
    if t.kind != "needs_decision":
        rerun = re.search(r"\b(?:re)?run (?:kconvert )?(%s)\b" % "|".join(COMMAND_WORDS), t.text)
        if rerun and not cmds and not OPTION.search(t.text):
            out.append(f"says to run {rerun.group(1)} but names no command line and no option")
    return out


TEXTS = printed_texts()


def test_the_enumeration_finds_the_hints_it_must():
    """A parser that stopped seeing hints would pass by checking nothing: the known kinds are all there."""
    kinds = {t.kind for t in TEXTS}
    assert {"hint", "missing_hint", "needs_decision", "constant", "literal"} <= kinds, kinds
    assert len([t for t in TEXTS if t.kind == "hint"]) >= 25
    assert any("kconvert rules" in t.text for t in TEXTS)


@pytest.mark.parametrize("t", TEXTS, ids=[t.where for t in TEXTS])
def test_every_hint_names_what_exists(t):
    problems = problems_of(t, option_owners())
    assert problems == [], f"{t.where}: {t.text!r}\n" + "\n".join(problems)


def test_every_help_example_parses():
    """Each `--help` example (the epilogs) parses with its command's own parser, `$(...)` included."""
    from tests import printed

    examples = list(printed.iter_help_examples())
    assert len(examples) >= 20
    problems = [f"{cmd}: `{line}`: {p}" for cmd, line in examples for p in dc.parse_problems(line.replace("...", "X"))]
    assert problems == []


def test_the_checker_catches_a_hint_that_names_nothing_real():
    owners = option_owners()
    said = [p for text in ("rerun verify with hashing on", "rerun with --hashing", "run `kconvert verify d --no-such`",
                           "decide with --set x=1")
            for p in problems_of(Text("t", text, "hint"), owners)]
    assert any("names no command line and no option" in p for p in said), said
    assert any("--hashing: no kconvert command has it" in p for p in said), said
    assert any("No such option: --no-such" in p for p in said), said
    assert any("--set: no kconvert command has it" in p for p in said), said


def _refusals() -> list[tuple[str, bool]]:
    out = []
    for f in sorted(PACKAGE.rglob("*.py")):
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call):
                fn = n.exc.func
                name = fn.id if isinstance(fn, ast.Name) else getattr(fn, "attr", "")
                if name in REFUSALS:
                    out.append((f"{f.relative_to(ROOT)}:{n.lineno} {name}",
                                any(k.arg == "hint" for k in n.exc.keywords)))
    return out


def test_every_refusal_prints_the_way_on():
    """An exit-1 error raised on purpose (a gate that refuses, a fix that cannot be done) carries a hint: "push
    publishes only a draft verified live" once stopped there, with no line to get such a draft."""
    found = _refusals()
    assert len(found) >= 10, found
    assert [w for w, has_hint in found if not has_hint] == []


def test_a_dry_run_and_a_live_run_name_the_same_vllm_install(monkeypatch, tmp_path):
    """With no vLLM installed, the dry run's note and the live run's error print one install sentence (the dry run
    once said `[gpu]` where the live run said `[live]`, on the same CPU machine)."""
    import json

    import kconvert.commands.verify.command as command
    from kconvert.runners import vllm_offline
    from tests import printed

    monkeypatch.setattr(command, "installed_version", lambda engine: None)
    monkeypatch.setattr(vllm_offline, "installed_version", lambda name: None)
    args = ["verify", str(ROOT / "examples/tiny/drafts/mla-torchspec"), "--target", str(ROOT / "examples/tiny/target")]
    dry = printed.run([*args, "--dry-run", "--json"], tmp_path)
    note = json.loads(dry.out)["dry_run"]["note"]
    live = printed.run([*args, "--max-prompts", "1"], tmp_path)
    assert live.rc == 3, live.err
    said = live.err.split("hint: ", 1)[1].strip()
    assert "[live]'" in said and "[gpu]'" in said, said
    assert said in " ".join(note.split()), (note, said)


def test_a_next_comment_may_name_only_options_of_its_command():
    """tests/printed.py's check on every printed `next:` line: an SGLang launch line's comment once said
    "--diagnose measures the readings" (neither the launch line nor its `verify --server` line runs a diagnosis),
    and K902's decision text once doubled its parentheses in the comment."""
    from pathlib import Path

    from tests.printed import Printed, comment_problems

    launch = Printed("python -m sglang.launch_server --model-path t --speculative-draft-model-path d-sglang "
                     "--speculative-num-steps 3", "it still carries K404: --diagnose measures the readings",
                     "fix → d-sglang", Path("."))
    assert "--diagnose" in comment_problems(launch)
    fix = Printed("kconvert fix d -o d-vllm", "leaves as is: K902 (decide with --rope-from-target (if dropped))",
                  "inspect d", Path("."))
    assert comment_problems(fix) == "doubled parentheses in the comment"
    ok = Printed("kconvert fix d -o d-vllm", "leaves as is: K902, decide with --rope-from-target (if dropped)",
                 "inspect d", Path("."))
    assert comment_problems(ok) == ""
