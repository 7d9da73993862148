"""Text on its way out (issue #45, class 4): whatever a stranger's strings hold, no output format lets a control
act on a terminal or break a parser, and the full view prints rich markup as written.

The strings are generated (hypothesis): C0 and C1 controls, ESC/CSI/OSC sequences, BEL, lone surrogates, the
characters XML 1.0 excludes, line and paragraph separators, bidirectional overrides, rich markup and emoji codes,
each mixed with plain text. They are put where a stranger puts them: the draft's and the target's
`architectures`, `model_type` and `torch_dtype`, a tensor name (where the header reader accepts one), and the
draft argument itself. Each is then rendered through every format of the registry (`kconvert.report.formats`),
enumerated, for every document a command renders without an engine (inspect, fix, verify --dry-run, matrix), on
stdout and through each file option, and through the failure path of every format. A format added to the
registry is covered without a change here.

What must hold: no output holds a character `kconvert.guard.text.needs_escape` names (a newline between lines
aside); JSON outputs parse as strict JSON (no NaN) and hold no such character once decoded either; SARIF validates
against the published schema; JUnit parses as XML 1.0; the full view shows each value literally (markup not
interpreted, emoji codes not replaced), escaped as `visible` escapes it.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kconvert.cli import _output, main
from kconvert.guard.text import needs_escape, visible
from kconvert.report.formats import file_options, formats, output_formats
from kconvert.schemas import load_sarif_schema
from tests.factories import make_draft, make_target

EXAMPLES = int(os.environ.get("KCONVERT_FUZZ_EXAMPLES", "150"))

# Pieces a hostile string is made of: terminal sequences whole, then single characters of every class.
SEQUENCES = ["\x1b]0;pwned\x07", "\x1b]8;;http://e.x\x1b\\link\x1b]8;;\x1b\\", "\x1b[2J\x1b[H", "\x1b[31m",
             "\x9b31m", "\x9d0;t\x9c", "[bold red]x[/]", "[link=http://e.x]l[/link]", "[/]", ":pile_of_poo:",
             "%0A::error::forged", "]]>", "<x a='1'>&amp;"]
CLASSES = st.characters(categories=["Cc", "Cs", "Cf", "Zl", "Zp"]) | st.sampled_from(["\ufffe", "\uffff"])
PLAIN = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=3)
HOSTILE = st.lists(st.sampled_from(SEQUENCES) | CLASSES | PLAIN, min_size=1, max_size=5).map("".join).filter(
    lambda s: any(needs_escape(c) for c in s) or "[" in s)


def strict_json(text: str):
    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def raw_characters(text: str, *, allowed: str = "\n") -> list[str]:
    return sorted({c for c in text if needs_escape(c) and c not in allowed})


def strings_of(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in strings_of(k) + strings_of(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in strings_of(v)]
    return []


def check(what: str, text: str, kind: str) -> None:
    """One output of one format: no raw control; parses as its kind says."""
    assert not raw_characters(text), f"{what}: raw {raw_characters(text)!r} in {text[:2000]!r}"
    if kind == "json":
        doc = strict_json(text)
        bad = [s for s in strings_of(doc) if raw_characters(s)]
        assert not bad, f"{what}: decoded JSON strings hold controls: {bad[:3]!r}"
    elif kind == "sarif":
        check(what, text, "json")
        jsonschema.validate(strict_json(text), load_sarif_schema())
    elif kind == "xml":
        ET.fromstring(text.encode("utf-8"))  # expat: XML 1.0, refuses C0 controls, surrogates, U+FFFE/U+FFFF


KIND = {".json": "json", ".sarif": "sarif", ".xml": "xml"}


def kind_of(fmt) -> str:
    return KIND.get(fmt.extension, "text")


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        _output.console.file, _output.err_console.file = out, err
        width = _output.console.width
        _output.console.width = 400  # no folding: the full view must show each value whole, as written
        try:
            rc = main(argv)
        finally:
            _output.console.file = _output.err_console.file = None
            _output.console.width = width
    return rc, out.getvalue(), err.getvalue()


def commands(draft: Path, target: Path, work: Path) -> dict[str, list[str]]:
    """The command line of each document a command renders without an engine."""
    return {
        "inspect": ["inspect", str(draft), "--target", str(target)],
        "fix": ["fix", str(draft), "--target", str(target), "--dry-run"],
        "verify": ["verify", str(draft), "--target", str(target), "--dry-run"],
        "matrix": ["matrix", str(draft), "--target", str(target), "--engines", "vllm", "--cache", "off"],
    }


def stdout_choices(document: str) -> list[tuple[str, list[str]]]:
    """(format, the flags that ask for it) for every format the command prints for `document`: the choices of
    `--output-format` (the matrix has none: its full view, or --json)."""
    if document == "matrix":
        return [("full", []), ("json", ["--json"])]
    return [(f.name, ["--output-format", f.name]) for f in output_formats() if f.renders(document)]


def in_json(s: str) -> str:
    """`s` as a config may hold it: strict JSON has no lone surrogate (kconvert refuses one, exit 2:
    tests/test_bad_input.py), so those go; every other character stays."""
    return "".join(c for c in s if not 0xD800 <= ord(c) <= 0xDFFF)


def put(s: str, tensor_ok: bool):
    def config(c: dict) -> None:
        c["architectures"] = [s, "LlamaForCausalLMEagle3"]
        c["model_type"] = s
        c["torch_dtype"] = s

    def tensors(t: dict) -> None:
        if tensor_ok:
            t[f"extra.{s}.weight"] = ("BF16", (2,), None)
    return config, tensors


def tensor_name_accepted(s: str) -> bool:
    """The header reader refuses names with a control character and strings with a lone surrogate (serde_json);
    anything else may be a tensor name."""
    return not any(0xD800 <= ord(c) <= 0xDFFF or c < " " or "\x7f" <= c <= "\x9f" for c in s)


def folder_name(s: str) -> str:
    """`s` as a folder name: without "/" and NUL (no file system takes them) and surrogates (no UTF-8 form)."""
    return "d-" + "".join(c for c in s if c not in "/\0" and not 0xD800 <= ord(c) <= 0xDFFF)


def build(root: Path, s: str) -> tuple[Path, Path]:
    s = in_json(s)
    shutil.rmtree(root, ignore_errors=True)
    config, tensors = put(s, tensor_name_accepted(s))
    draft = make_draft(root / folder_name(s), "specforge", config=config, tensors=tensors)
    target = make_target(root / "target")
    cfg = json.loads((target / "config.json").read_text())
    cfg["architectures"] = [s]
    cfg["model_type"] = s
    cfg["text_config"]["torch_dtype"] = s
    (target / "config.json").write_text(json.dumps(cfg))
    return draft, target


@settings(max_examples=max(3, EXAMPLES // 15), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
@given(s=HOSTILE)
def test_config_strings_reach_no_output_raw_in_any_format(tmp_path: Path, s: str) -> None:
    draft, target = build(tmp_path / "ex", s)
    shown = visible(in_json(s))
    for document, argv in commands(draft, target, tmp_path).items():
        for name, flags in stdout_choices(document):
            rc, out, err = run(argv + flags)
            what = f"{document} {name}"
            assert rc in (0, 1), f"{what}: exit {rc}: {err}"
            check(what, out, kind_of(next(f for f in formats() if f.name == name)))
            check(f"{what} (stderr)", err, "text")
            if name == "full" and document in ("inspect", "verify"):
                # the facts table shows model_type whole: markup and emoji codes as written, controls escaped
                assert shown in out, f"{what}: {shown!r} not shown literally in:\n{out}"
            if name == "full" and document == "matrix":
                # a draft by its folder name
                assert visible(draft.name) in out, f"{what}: {visible(draft.name)!r} not shown literally in:\n{out}"
        files = {f.name: (f, opt, tmp_path / f"out{f.extension}") for f, opt in file_options(document)}
        flags = [a for f, opt in file_options(document) for a in (opt.flag, str(files[f.name][2]))]
        if flags:
            rc, out, err = run(argv + ["--output-format", "concise"] * (document != "matrix") + flags)
            assert rc in (0, 1), f"{document} files: exit {rc}: {err}"
            for name, (fmt, opt, path) in files.items():
                check(f"{document} {opt.flag}", path.read_text(encoding="utf-8"), kind_of(fmt))


@settings(max_examples=max(3, EXAMPLES // 15), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
@given(s=HOSTILE)
def test_the_draft_argument_is_echoed_escaped_in_every_failure_format(tmp_path: Path, s: str) -> None:
    """A draft that is not there: the one error line (stderr) and each format's failure document (stdout) echo
    the argument, escaped. Lone surrogates other than those Python's argv decoding makes (U+DC80-U+DCFF, from
    undecodable bytes) cannot reach a real command line; they are kept, since the library takes any str."""
    missing = str(tmp_path / f"no-{s.replace('/', '_')}")
    for fmt in output_formats():
        rc, out, err = run(["inspect", missing, "--output-format", fmt.name])
        assert rc == 2, f"{fmt.name}: exit {rc}: {err}"
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines and lines[0].startswith("error: ") and len([ln for ln in lines if not ln.startswith("hint:")]) \
            == 1, err
        check(f"failure {fmt.name} (stderr)", err, "text")
        check(f"failure {fmt.name}", out, kind_of(fmt))


# ---------------------------------------------------------------------------------------------------------------
# Names hold no control character, C1 included (SECURITY.md): every one of Unicode's 65 (category Cc), enumerated.
# ---------------------------------------------------------------------------------------------------------------

CONTROLS = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cc"]


def test_the_controls_enumerated_are_c0_del_and_c1():
    assert len(CONTROLS) == 65 and "\x9b" in CONTROLS and "\x7f" in CONTROLS  # a derivation, not the code's list


def refused_one_line(argv: list[str]) -> str:
    rc, out, err = run(argv)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("hint:")]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), (rc, err)
    assert not raw_characters(err), err
    return lines[0]


@pytest.mark.parametrize("where", ["header", "index"])
def test_a_tensor_name_holding_any_control_character_is_refused(tmp_path: Path, where: str) -> None:
    """The tensor name `d2t<control>` (the issue's case: U+009B, a C1 control, was accepted and printed raw), in a
    shard's header or in the index, for each control character: exit 2, one line, the character escaped."""
    from tests.writer_factories import draft_tensors, write_draft

    for i, ch in enumerate(CONTROLS):
        tensors = draft_tensors()
        name = f"extra{ch}.weight"
        if where == "header":
            tensors[name] = ("F32", (1,), b"\0" * 4)
            d = write_draft(tmp_path / f"d{i}", tensors)
        else:
            d = write_draft(tmp_path / f"d{i}", tensors, shards=2)
            index = d / "model.safetensors.index.json"
            doc = json.loads(index.read_text())
            doc["weight_map"][name] = next(iter(doc["weight_map"].values()))
            index.write_text(json.dumps(doc))
        line = refused_one_line(["inspect", str(d)])
        # the message quotes the name as Python writes it (repr: \x9b), never raw
        assert "control characters" in line and repr(ch)[1:-1] in line, (hex(ord(ch)), line)


@settings(max_examples=max(2, EXAMPLES // 50), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
@given(s=HOSTILE)
def test_an_engines_last_lines_are_echoed_escaped_in_every_failure_format(tmp_path: Path, s: str) -> None:
    """An engine that fails prints its own log lines, which quote the model's config (its architectures, a
    name): kconvert echoes the last ones on stderr and in each format's failure document. The engine run is
    replaced by its failure (kconvert.errors.EngineError, as the vLLM runner raises it) so that no engine starts;
    what is checked is the echo."""
    from unittest import mock

    from kconvert.errors import EngineError

    draft = make_draft(tmp_path / "d", "torchspec")
    target = make_target(tmp_path / "t")

    def fails(*_a, **_k):
        raise EngineError(f"the engine exited with code 1 loading {s}", last_lines=[f"ValueError: {s}", s])

    with mock.patch("kconvert.commands.verify.command.run_vllm", fails):
        for fmt in output_formats():
            rc, out, err = run(["verify", str(draft), "--target", str(target), "--skip-static", "--output-format",
                                fmt.name])
            assert rc == 3, f"{fmt.name}: exit {rc}: {err}"
            check(f"engine failure {fmt.name} (stderr)", err, "text")
            check(f"engine failure {fmt.name}", out, kind_of(fmt))
            assert visible(s) in err


# --- no NaN or Infinity out (issue #45: "strict JSON means no NaN/Infinity in, none out") ---------------------------

def _poison(obj, draw_bad):
    """The document with each float replaced by a drawn one, NaN and infinities among them (score --diagnose over one
    sequence once wrote its paired standard error as Infinity, which the strict reader of --decided-by refused)."""
    if isinstance(obj, dict):
        return {k: _poison(v, draw_bad) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_poison(v, draw_bad) for v in obj]
    return draw_bad() if isinstance(obj, float) else obj


@pytest.fixture(scope="module")
def inspect_document() -> dict:
    import kconvert

    root = Path(__file__).resolve().parent.parent / "examples" / "tiny"
    doc = kconvert.inspect(str(root / "broken" / "aux-ids-sglang-convention"), target=str(root / "target")).to_dict()
    doc["measured"] = {"stderr": 0.5, "per_position": [0.25, 0.5]}  # a measurement's floats, as score's are
    return doc


@settings(max_examples=max(5, EXAMPLES // 10), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_format_writes_nan_or_infinity_whatever_floats_a_document_holds(inspect_document, data) -> None:
    import math

    from kconvert.report.formats import render

    bad = st.sampled_from([math.nan, math.inf, -math.inf]) | st.floats(allow_nan=False, allow_infinity=False)
    poisoned = _poison(inspect_document, lambda: data.draw(bad))
    machine = [f for f in formats() if f.render is not None and f.renders("inspect") and kind_of(f) != "text"]
    assert {f.name for f in machine} >= {"json", "sarif"}
    for fmt in machine:
        check(fmt.name, render(fmt.name, "inspect", poisoned), kind_of(fmt))  # strict: NaN/Infinity refused
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _output.emit_json(poisoned)
    strict_json(out.getvalue())
