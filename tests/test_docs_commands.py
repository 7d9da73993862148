"""Every command README.md, docs/*.md and examples/**/README.md show runs in the test command, and what the text
says about it (exit codes, finding ids, the lines shown) is what it did (issue #48; tests/docs_commands.py says
how each kind of block is checked). Sybil reads the documents; a drift like K404 -> K405 in the README fails here.
Replaces the walk-through's own test (the walk-through and the README's five commands are blocks like any other)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import docs_commands as dc

DOCS = dc.documents()


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    for var in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE", "KCONVERT_OUTPUT_FORMAT", "KCONVERT_DEBUG"):
        monkeypatch.delenv(var, raising=False)


def workspace(tmp: Path) -> Path:
    """Where a document's commands run: a copy of examples/tiny (its drafts, broken variants and target) under the
    same relative paths, so `examples/tiny/...` resolves and `out/` is written here, never in the repository."""
    shutil.copytree(dc.ROOT / "examples" / "tiny", tmp / "examples" / "tiny",
                    ignore=shutil.ignore_patterns("*.md", "*-vllm", "*-sglang"))
    return tmp


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(dc.ROOT)) for d in DOCS])
def test_every_command_the_document_shows_does_what_it_says(doc, tmp_path, monkeypatch):
    ws = workspace(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(ws / ".cache"))
    problems: list[str] = []

    def evaluate(example):
        problems.extend(dc.check_block(example.parsed, ws))

    document = dc.sybil_for(evaluate).parse(doc)
    for example in document.examples():
        example.evaluate()
    assert problems == [], "\n\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(dc.ROOT)) for d in DOCS])
def test_every_command_the_prose_quotes_has_the_options_it_names(doc):
    assert dc.inline_problems(doc) == []


def test_the_documents_show_the_walkthrough_and_the_five_commands():
    """The two sequences the README promises are blocks the test reads (a block the parser stopped seeing would
    pass by running nothing)."""
    def kinds(doc: str) -> list[list[str]]:
        blocks = [ex.parsed for ex in dc.sybil_for(lambda e: None).parse(dc.ROOT / doc).examples()]
        return [[c.words[1] for c in b.commands] for b in blocks if b.commands]

    assert ["inspect", "fix", "inspect", "verify", "matrix", "verify"] in kinds("docs/walkthrough.md")
    assert ["inspect", "fix", "verify", "matrix", "rules"] in kinds("README.md")
    assert sum(len(k) for d in DOCS for k in kinds(str(d.relative_to(dc.ROOT)))) >= 30


def test_a_drifted_claim_is_caught(tmp_path):
    """The checker itself, on a document written here: a wrong id, a wrong exit code, a wrong shown line, an
    option that does not exist on a command marked (live)."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```bash\n"
        "# exit 1, and inspect says K404\n"
        "kconvert inspect examples/tiny/broken/d2t-absolute --target examples/tiny/target\n"
        "kconvert rules K999  # exit 0\n"
        "kconvert verify ./draft --target t --no-such-flag  # (live)\n"
        "```\n\n"
        "```console\n"
        "$ kconvert rules K404 --json  # exit 0\n"
        "not what it prints\n"
        "```\n", encoding="utf-8")
    ws = workspace(tmp_path / "ws")
    problems: list[str] = []
    parser = dc.CommandBlockParser(lambda ex: problems.extend(dc.check_block(ex.parsed, ws)))
    from sybil import Document

    document = Document.parse(str(doc), parser)
    for ex in document.examples():
        ex.evaluate()
    said = "\n".join(p.split("\n", 1)[0] for p in problems)
    assert "names K404, which it did not print" in said, said
    assert "`kconvert rules K999` exited 2, the document says 0" in said, said
    assert "No such option: --no-such-flag" in said, said
    assert "printed other lines than the document shows" in said, said
    prose = tmp_path / "prose.md"
    prose.write_text("Rerun `kconvert verify ./d --hashing`, or `kconvert verfy ./d`.\n", encoding="utf-8")
    assert dc.inline_problems(prose) == ["`kconvert verify ./d --hashing`: --hashing is no option of kconvert verify",
                                         "`kconvert verfy ./d`: no command 'verfy'"]
