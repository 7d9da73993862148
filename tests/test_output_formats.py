"""`--output-format` on drafts the tests build: every format carries the findings of `--json` (id, severity,
category, message, evidence, fixable) for a draft with errors and warnings, one with warnings only and a clean
one; SARIF validates against the published schema; the default follows the terminal and GitHub Actions; the full
view keeps every fact whole at 80 and 120 columns (golden files); a failure is answered in the requested format."""
from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from kconvert.cli import main
from kconvert.cli._common import FORMATS
from kconvert.cli._output import choose_format, default_format, format_from_argv
from kconvert.errors import UsageError
from kconvert.report.concise import evidence_text
from kconvert.results.locations import key_lines
from kconvert.schemas import load_sarif_schema, validate
from tests.factories import make_draft, make_target

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "data" / "golden"


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    # The default format reads these; a test run inside GitHub Actions must not change what these tests see.
    for var in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE", "CI_PROJECT_DIR", "KCONVERT_OUTPUT_FORMAT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def drafts(tmp_path, monkeypatch):
    """Relative paths from the test's folder: `errors` (K404 error + K902 warning), `warnings` (K902 only),
    `clean`, and the tiny Kimi-shaped `target`."""
    monkeypatch.chdir(tmp_path)
    make_target(tmp_path / "target")
    no_rope = dict(config=lambda c: c.pop("rope_scaling", None))
    make_draft(tmp_path / "errors", "specforge", family="mla", **no_rope)
    make_draft(tmp_path / "warnings", "torchspec", **no_rope)
    make_draft(tmp_path / "clean", "torchspec")
    return {"errors": "errors", "warnings": "warnings", "clean": "clean", "target": "target"}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def report(capsys, draft: str, target: str) -> dict:
    rc, out, _ = run(capsys, "inspect", draft, "--target", target, "--json")
    doc = json.loads(out)
    validate(doc, "report")
    assert rc == doc["exit_code"]
    return doc


KINDS = ("errors", "warnings", "clean")


def test_the_three_drafts_have_what_their_names_say(drafts, capsys):
    got = {k: sorted((f["id"], f["severity"]) for f in report(capsys, drafts[k], "target")["findings"]) for k in KINDS}
    assert got == {"errors": [("K101", "error"), ("K404", "error"), ("K902", "warning")], "warnings": [("K902", "warning")], "clean": []}


# ------------------------------------------------------------------------------------------------ each format

@pytest.mark.parametrize("kind", KINDS)
def test_concise_is_one_whole_line_per_finding(drafts, capsys, kind):
    """ruff's concise line (issue #31): location, id, severity, the message whole and then the evidence (issue
    #48: a message cut at 120 characters lost the one fact that mattered), one line each."""
    doc = report(capsys, drafts[kind], "target")
    rc, out, _ = run(capsys, "inspect", drafts[kind], "--target", "target", "--output-format", "concise")
    assert rc == doc["exit_code"]
    lines = out.splitlines()
    finding_lines = [ln for ln in lines if re.match(r"^\S+: K\d{3} ", ln)]
    assert len(finding_lines) == len(doc["findings"])
    for f, line in zip(doc["findings"], finding_lines):
        loc = f["location"]
        path = f"{kind}/{loc['file']}" + (f":{loc['line']}" if loc["line"] else "")
        head = f"{path}: {f['id']} {f['severity']} [{f['category']}] "
        assert line.startswith(head + f["message"])
        assert "…" not in line
        assert all(evidence_text(e) in line for e in f["evidence"])
        assert line.endswith("[fixable]") == (f["fixable"] and not f["needs_decision"])
    verdict = [ln for ln in lines if ln.startswith(f"{kind}: ")]
    assert len(verdict) == 1 and verdict[0].endswith(f"verdict: {doc['verdict'].upper()}")


@pytest.mark.parametrize("kind", KINDS)
def test_github_annotates_each_finding_at_its_file_and_line(drafts, capsys, kind, monkeypatch, tmp_path):
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    doc = report(capsys, drafts[kind], "target")
    rc, out, _ = run(capsys, "inspect", drafts[kind], "--target", "target", "--output-format", "github")
    assert rc == doc["exit_code"]
    commands = [ln for ln in out.splitlines() if ln.startswith("::")]
    assert len(commands) == len(doc["findings"])
    level = {"error": "error", "warning": "warning", "info": "notice"}
    for f, line in zip(doc["findings"], commands):
        m = re.match(r"^::(\w+) (.*?)::(.*)$", line)
        assert m, line
        props = dict(p.split("=", 1) for p in m.group(2).split(","))
        message = m.group(3).replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")
        assert m.group(1) == level[f["severity"]]
        assert props["title"] == f"kconvert {f['id']} {f['name']}"
        assert props["file"] == f"{kind}/{f['location']['file']}"
        if f["location"]["line"]:
            assert props["line"] == str(f["location"]["line"])
        assert message.splitlines()[0] == f["message"]
        assert all(f"evidence: {evidence_text(e)}" in message for e in f["evidence"])
        assert ("fixable by `kconvert fix`" in message) == (f["fixable"] and not f["needs_decision"])


def test_github_escapes_what_would_end_a_workflow_command():
    from kconvert.report.github import command

    line = command("error", "50% done\nnext: a,b", file="dir,x/a:b.json", title="t")
    assert line == "::error file=dir%2Cx/a%3Ab.json,title=t::50%25 done%0Anext: a,b"
    assert "\n" not in line


@pytest.mark.parametrize("kind", KINDS)
def test_gitlab_code_quality_has_the_documented_fields(drafts, capsys, kind, monkeypatch, tmp_path):
    monkeypatch.setenv("CI_PROJECT_DIR", str(tmp_path))
    doc = report(capsys, drafts[kind], "target")
    rc, out, _ = run(capsys, "inspect", drafts[kind], "--target", "target", "--output-format", "gitlab")
    assert rc == doc["exit_code"]
    issues = json.loads(out)
    assert len(issues) == len(doc["findings"])
    severity = {"error": "critical", "warning": "major", "info": "info"}
    for f, issue in zip(doc["findings"], issues):
        assert set(issue) == {"description", "check_name", "fingerprint", "severity", "location"}
        assert issue["check_name"] == f"kconvert/{f['id']}" and issue["severity"] == severity[f["severity"]]
        assert issue["description"].startswith(f"{f['id']} {f['message']}")
        assert all(evidence_text(e) in issue["description"] for e in f["evidence"])
        assert issue["description"].endswith("[fixable]") == (f["fixable"] and not f["needs_decision"])
        assert issue["location"]["path"] == f"{kind}/{f['location']['file']}"
        assert issue["location"]["lines"]["begin"] == (f["location"]["line"] or 1)
        assert re.fullmatch(r"[0-9a-f]{64}", issue["fingerprint"])
    assert len({i["fingerprint"] for i in issues}) == len(issues)


@pytest.mark.parametrize("kind", KINDS)
def test_sarif_validates_against_the_published_schema_and_carries_the_findings(drafts, capsys, kind, monkeypatch,
                                                                               tmp_path):
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    doc = report(capsys, drafts[kind], "target")
    rc, out, _ = run(capsys, "inspect", drafts[kind], "--target", "target", "--output-format", "sarif")
    assert rc == doc["exit_code"]
    sarif = json.loads(out)
    jsonschema.Draft4Validator(load_sarif_schema()).validate(sarif)
    assert sarif["version"] == "2.1.0"
    run_ = sarif["runs"][0]
    rules = run_["tool"]["driver"]["rules"]
    assert run_["invocations"][0] == {"executionSuccessful": True, "exitCode": doc["exit_code"]}
    assert [r["ruleId"] for r in run_["results"]] == [f["id"] for f in doc["findings"]]
    level = {"error": "error", "warning": "warning", "info": "note"}
    for f, r in zip(doc["findings"], run_["results"]):
        assert rules[r["ruleIndex"]]["id"] == f["id"] and rules[r["ruleIndex"]]["help"]["text"]
        assert r["level"] == level[f["severity"]]
        assert r["message"]["text"].startswith(f"{f['id']} {f['message']}")
        assert r["properties"]["evidence"] == f["evidence"] and r["properties"]["fixable"] == f["fixable"]
        assert r["properties"]["category"] == f["category"]
        phys = r["locations"][0]["physicalLocation"]
        assert phys["artifactLocation"] == {"uri": f"{kind}/{f['location']['file']}", "uriBaseId": "%SRCROOT%"}
        assert phys["region"]["startLine"] == (f["location"]["line"] or 1)
    if doc["findings"]:
        assert run_["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"


def test_sarif_schema_is_the_vendored_published_one():
    import hashlib

    data = (ROOT / "kconvert" / "schemas" / "sarif-schema-2.1.0.json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"
    schema = load_sarif_schema()
    assert schema["id"].endswith("/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json")
    # and it does reject what is not SARIF
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(schema).validate({"version": "2.1.0", "runs": [{"results": []}]})


@pytest.mark.parametrize("kind", KINDS)
def test_junit_fails_one_testcase_per_error_rule(drafts, capsys, kind):
    doc = report(capsys, drafts[kind], "target")
    rc, out, _ = run(capsys, "inspect", drafts[kind], "--target", "target", "--output-format", "junit")
    assert rc == doc["exit_code"]
    root = ET.fromstring(out)
    failed = {tc.get("name").split()[0] for tc in root.iter("testcase") if tc.find("failure") is not None}
    assert failed == {f["id"] for f in doc["findings"] if f["severity"] == "error"}
    noted = {tc.get("name").split()[0] for tc in root.iter("testcase") if tc.find("system-out") is not None}
    assert {f["id"] for f in doc["findings"] if f["severity"] == "warning"} <= noted
    texts = {tc.get("name").split()[0]: (tc.find("failure") if tc.find("failure") is not None
                                          else tc.find("system-out")).text
             for tc in root.iter("testcase") if tc.find("failure") is not None or tc.find("system-out") is not None}
    for f in doc["findings"]:
        text = texts[f["id"]]
        assert f["message"] in text and all(evidence_text(e) in text for e in f["evidence"])
        assert ("[fixable]" in text) == (f["fixable"] and not f["needs_decision"])


def test_junit_fails_warnings_too_under_fail_on_warning(drafts, capsys):
    rc, out, _ = run(capsys, "inspect", "warnings", "--target", "target", "--fail-on", "warning",
                     "--output-format", "junit")
    assert rc == 1
    failed = {tc.get("name").split()[0] for tc in ET.fromstring(out).iter("testcase") if tc.find("failure") is not None}
    assert failed == {"K902"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_on_fix_dry_run(drafts, capsys, fmt):
    rc, out, _ = run(capsys, "fix", "errors", "--target", "target", "--dry-run", "--output-format", fmt)
    assert rc == 0 and out.strip()
    if fmt == "json":
        doc = json.loads(out)
        validate(doc, "report")
        assert doc["fix"]["dry_run"] is True and doc["fix"]["steps"]
    if fmt == "concise":
        assert any(ln.startswith("plan: config ") for ln in out.splitlines())
        assert out.splitlines()[-1].endswith("fix verdict: PASS")
    assert not Path("errors-vllm").exists()


# ------------------------------------------------------------------------------------------------ default format

def test_default_follows_the_terminal_and_github_actions():
    assert default_format(isatty=True, environ={}) == "full"
    assert default_format(isatty=False, environ={}) == "concise"
    assert default_format(isatty=False, environ={"GITHUB_ACTIONS": "true"}) == "github"
    assert default_format(isatty=True, environ={"GITHUB_ACTIONS": "true"}) == "github"
    assert default_format(isatty=False, environ={"GITHUB_ACTIONS": "false"}) == "concise"
    assert choose_format("sarif", environ={"GITHUB_ACTIONS": "true"}) == "sarif"  # explicit wins
    assert choose_format(None, True) == "json"
    with pytest.raises(UsageError):
        choose_format("sarif", True)


def test_without_a_terminal_the_cli_prints_concise_and_under_github_actions_annotations(drafts, capsys, monkeypatch):
    rc, out, _ = run(capsys, "inspect", "errors", "--target", "target")
    assert rc == 1 and out.startswith("errors/config.json") and " K404 error [aux-layers] " in out
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    rc, out, _ = run(capsys, "inspect", "errors", "--target", "target")
    assert rc == 1 and out.startswith("::error file=errors/config.json,line=")
    monkeypatch.setenv("KCONVERT_OUTPUT_FORMAT", "gitlab")  # the environment names a format: it wins
    rc, out, _ = run(capsys, "inspect", "errors", "--target", "target")
    assert "kconvert/K404" in [i["check_name"] for i in json.loads(out)]


def test_on_a_terminal_the_cli_prints_the_full_view(drafts):
    """A real pseudo-terminal on stdout: the rich view, not the concise lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "KCONVERT_OUTPUT_FORMAT")}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="100", TERM="xterm")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "kconvert", "inspect", "errors", "--target", "target"],
                            stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 1
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    assert "╭─ kconvert inspect" in text and "Draft and target" in text and "verdict: FAIL" in text
    assert not re.search(r"^errors/config\.json:\d+: K404", text, re.M)


# ------------------------------------------------------------------------------------------------ the full view

def _full(doc: dict, width: int) -> str:
    from rich.console import Console

    from kconvert.report.terminal import render_report

    buf = io.StringIO()
    render_report(Console(file=buf, width=width, color_system=None, force_terminal=False, legacy_windows=False), doc)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


@pytest.mark.parametrize("width", [80, 120])
def test_full_view_golden(drafts, capsys, width):
    """The full view of the errors draft, byte for byte (trailing blanks aside), against
    tests/data/golden/inspect_full_{80,120}.txt.

    What the golden files guard is the layout, not the values: the header box, how lines wrap at 80 and 120
    columns, the order of the sections (Draft and target, Draft only, Findings, Next) and of the findings, and
    that no finding id, message or evidence is dropped. They were rendered by kconvert itself, so they are no
    source for a value: the values they show are checked against the draft's and the target's files and the
    report's JSON in test_full_view_values_come_from_the_files below, and the layout facts they encode in
    test_full_view_keeps_every_fact_whole and test_full_view_sections_come_in_order.

    Re-render after a deliberate change of the view (then read the diff):
        KCONVERT_UPDATE_GOLDEN=1 PYTHONPATH=. python -m pytest -q tests/test_output_formats.py -k full_view_golden
    """
    doc = report(capsys, "errors", "target")
    text = _full(doc, width)
    golden = GOLDEN / f"inspect_full_{width}.txt"
    if os.environ.get("KCONVERT_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("width", [80, 120])
def test_full_view_keeps_every_fact_whole(drafts, capsys, width):
    doc = report(capsys, "errors", "target")
    text = _full(doc, width)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= width
    assert "…" not in text and "..." not in text  # nothing ends in an ellipsis
    assert any(re.fullmatch(r"│ verdict: FAIL\s*│", ln) for ln in lines)  # the verdict on one line
    for name in doc["draft"]["architectures"] + doc["target"]["architectures"]:
        assert name in text  # full architecture names, not folded
    flat = re.sub(r"\s+", " ", text)
    for f in doc["findings"]:
        assert f["message"] in flat
        assert all(evidence_text(e) in flat for e in f["evidence"])


SECTIONS = ("Draft and target", "Draft only", "Findings", "Next")


@pytest.mark.parametrize("width", [80, 120])
def test_full_view_sections_come_in_order(drafts, capsys, width):
    """The layout the golden files hold, stated: the header box first, then the sections in order, each
    finding under Findings in the report's order, and the next step's command whole."""
    doc = report(capsys, "errors", "target")
    lines = _full(doc, width).splitlines()
    assert lines[0].startswith("╭─ kconvert inspect") and lines[0].endswith("╮")
    box_end = next(i for i, ln in enumerate(lines) if ln.startswith("╰"))
    heads = [next(i for i, ln in enumerate(lines) if ln == h or ln.startswith(h + " ")) for h in SECTIONS]
    assert box_end < heads[0] and heads == sorted(heads)
    found = [i for i, ln in enumerate(lines) for f in doc["findings"]
             if ln.startswith(f"{f['id']} {f['severity']} [{f['category']}]")]
    assert len(found) == len(doc["findings"]) and found == sorted(found)
    assert heads[2] < found[0] and found[-1] < heads[3]
    assert [ln.strip() for ln in lines[heads[3]:]].count(doc["next_steps"][0]["command"]) == 1


def _table(lines: list[str], heading: str) -> dict[str, list[str]]:
    """The rows of one table of the full view: label -> cells, a label wrapped onto the next line joined."""
    at = lines.index(heading)
    start = next(i for i in range(at, len(lines)) if lines[i].strip().startswith("─")) + 1  # below the rule
    rows: dict[str, list[str]] = {}
    last = None
    for ln in lines[start:]:
        if not ln.strip():
            break
        cells = re.split(r"\s{2,}", ln.strip())
        if len(cells) == 1 and last is not None:  # the label's second line
            rows[f"{last} {cells[0]}"] = rows.pop(last)
            last = f"{last} {cells[0]}"
            continue
        rows[cells[0]] = cells[1:]
        last = cells[0]
    return rows


def _safetensors_header(path: Path) -> dict:
    """The tensors' names, dtypes and shapes as the safetensors format lays them out (8-byte length, JSON)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return {k: v for k, v in json.loads(raw[8:8 + n]).items() if k != "__metadata__"}


def _line_of(text: str, dotted: str) -> int:
    """1-based line of a (dotted) key in a JSON file's text, found by reading the text."""
    lines = text.splitlines()
    at = 0
    for key in dotted.split("."):
        at = next(i for i in range(at, len(lines)) if lines[i].lstrip().startswith(f'"{key}":'))
    return at + 1


def test_full_view_values_come_from_the_files(drafts, capsys):
    """The values the full view (and so the golden files) shows, each against a source outside the renderer:
    the draft's config.json and safetensors header, the target's config.json (its text model: 8 layers), the
    installed vLLM's model registry, and for what only kconvert decides (producer, engine row, verdict) the
    report's JSON."""
    doc = report(capsys, "errors", "target")
    lines = _full(doc, 120).splitlines()
    dcfg_text = Path("errors/config.json").read_text()
    dcfg = json.loads(dcfg_text)
    text_model = json.loads(Path("target/config.json").read_text())["text_config"]
    tensors = _safetensors_header(Path("errors/model.safetensors"))
    assert tensors and text_model["num_hidden_layers"] == 8

    # the header box: producer and engine row from the report (they are kconvert's own judgement), the counts
    # counted here from its findings
    box = "\n".join(lines[:next(i for i, ln in enumerate(lines) if ln.startswith("╰")) + 1])
    fmt, eng = doc["format"], doc["engine"]
    assert f"producer: {fmt['producer']} ({round(fmt['confidence'] * 100)}%)" in box
    assert f"engine: {eng['name']} {eng['rules_version']}" in box
    sev = [f["severity"] for f in doc["findings"]]
    assert (f"{sev.count('error')} errors, {sev.count('warning')} warning, {sev.count('info')} info · "
            f"{sum(bool(f['fixable']) and not f['needs_decision'] for f in doc['findings'])} fixable") in box
    assert f"verdict: {doc['verdict'].upper()}" in box

    mla_tensor = any(".self_attn.kv_a_proj_with_mqa." in n for n in tensors)  # DeepSeek's MLA projection
    prefixes = {n.split(".")[0] for n in tensors if n.count(".") > 2}  # the decoder layer's tensors
    both = _table(lines, "Draft and target")
    assert both == {
        "architectures": [dcfg["architectures"][0], json.loads(Path("target/config.json").read_text())[
            "architectures"][0]],
        "model_type": [dcfg["model_type"], text_model["model_type"]],  # a multimodal target: its text model's
        "layer family": ["mla" if mla_tensor else "llama", "mla" if "kv_lora_rank" in text_model else "llama"],
        "layers": [str(dcfg["num_hidden_layers"]), str(text_model["num_hidden_layers"])],
        "hidden size": [str(dcfg["hidden_size"]), str(text_model["hidden_size"])],
        "vocab": [str(dcfg["vocab_size"]), str(text_model["vocab_size"])],
        "max positions": [str(dcfg["max_position_embeddings"]), str(text_model["max_position_embeddings"])],
        "dtype": [dcfg["torch_dtype"], text_model["torch_dtype"]],
        # the target folder holds no weights: its prefix is what kconvert infers, read from the report
        "key layout / prefix": [prefixes.pop(), doc["target"]["weight_prefix"]],
    }
    assert not prefixes

    ids = dcfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    float_dtypes = sorted({v["dtype"] for n, v in tensors.items() if n not in ("d2t", "t2d")})
    draft_only = _table(lines, "Draft only")
    assert draft_only == {
        "target hidden (declared)": ["—" if "target_hidden_size" not in dcfg else str(dcfg["target_hidden_size"])],
        "fc shape": [str(tensors["fc.weight"]["shape"])],
        "aux layer ids": [str(ids)],
        "aux ids read from": ["eagle_config.eagle_aux_hidden_state_layer_ids"],
        # SGLang's first-id rule (sglang PR #25454): a first id of 1 is the output-of-layer convention
        "aux ids convention": ["output" if ids[0] == 1 else "input"],
        "draft vocab / lm_head rows": [f"{dcfg['draft_vocab_size']} / {tensors['lm_head.weight']['shape'][0]}"],
        "d2t / t2d / embeddings": [" / ".join(str(n in tensors) for n in ("d2t", "t2d", "embed_tokens.weight"))],
        "tensor dtypes": [", ".join(f"{d}: {sum(v['dtype'] == d for n, v in tensors.items() if n not in ('d2t', 't2d'))}"
                                    for d in float_dtypes)],
    }
    assert "eagle_aux_hidden_state_layer_ids" not in dcfg  # so the ids can only have been read from eagle_config

    flat = re.sub(r"\s+", " ", "\n".join(lines))
    by_id = {f["id"]: f for f in doc["findings"]}
    # where each finding points: the key's line in the draft's config.json, found by reading its text
    def at(fid: str) -> str:
        first = next(i for i, ln in enumerate(lines) if ln.startswith(fid + " "))
        return next(ln.strip() for ln in lines[first:] if ln.startswith("  at "))

    assert at("K101") == f"at errors/config.json:{_line_of(dcfg_text, 'architectures')}"
    assert at("K404") == f"at errors/config.json:{_line_of(dcfg_text, 'eagle_config.eagle_aux_hidden_state_layer_ids')}"
    assert at("K902") == "at errors/config.json"  # the key is missing: no line to point at
    # K404's expected ids: the output of layer i is the input of layer i + 1 (same PR), which are also vLLM's
    # defaults (2, L//2, L-3) for the target's 8 layers (vLLM 0.32 deepseek_v2.py get_eagle3_aux_hidden_state_layers)
    L = text_model["num_hidden_layers"]
    assert [i + 1 for i in ids] == [2, L // 2, L - 3] == by_id["K404"]["evidence"][0]["expected"]
    assert f"eagle_config.eagle_aux_hidden_state_layer_ids: {ids} → {[i + 1 for i in ids]}" in flat
    # K902's expected rope scaling is the target's own
    assert by_id["K902"]["evidence"][0]["expected"] == text_model["rope_scaling"] and "rope_scaling" not in dcfg
    assert "rope_scaling: — → " + json.dumps(text_model["rope_scaling"]) in flat
    # K101's expected architecture is the one vLLM's registry maps to its DeepSeek EAGLE-3 class
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    want = by_id["K101"]["evidence"][0]["expected"]
    assert f"architectures: {json.dumps(dcfg['architectures'])} → {json.dumps(want)}" in flat
    if spec is not None and spec.origin:
        registry = (Path(spec.origin).parent / "model_executor" / "models" / "registry.py").read_text()
        assert re.search(rf'"{want[0]}": \("deepseek_eagle3",', registry)


# ------------------------------------------------------------------------------------------------ locations

def test_key_lines_finds_nested_keys_and_keys_inside_lists():
    text = '{\n  "a": 1,\n  "b": {\n    "c": [1, {"d": 2}],\n    "e": "x"\n  }\n}\n'
    assert key_lines(text) == {("a",): 2, ("b",): 3, ("b", "c"): 4, ("b", "c", "1", "d"): 4, ("b", "e"): 5}
    with pytest.raises(ValueError):
        key_lines('{"a": 1,}')


def test_a_finding_points_at_the_line_of_its_config_key(drafts, capsys):
    doc = report(capsys, "errors", "target")
    k404 = next(f for f in doc["findings"] if f["id"] == "K404")
    where = k404["evidence"][0]["where"]
    lines = Path("errors/config.json").read_text().splitlines()
    assert f'"{where.split(".")[-1]}"' in lines[k404["location"]["line"] - 1]


# ------------------------------------------------------------------------------------------------ failures

@pytest.mark.parametrize("fmt", ["json", "sarif", "junit", "gitlab", "github"])
def test_a_failure_is_answered_in_the_requested_format_with_the_same_exit_code(drafts, capsys, fmt):
    rc, out, err = run(capsys, "inspect", "missing-draft", "--output-format", fmt)
    assert rc == 2 and err.startswith("error: missing-draft")
    if fmt == "json":
        doc = json.loads(out)
        validate(doc, "error")
        assert doc["exit_code"] == 2 and doc["command"] == "inspect" and doc["error"]["type"] == "InputError"
    elif fmt == "sarif":
        sarif = json.loads(out)
        jsonschema.Draft4Validator(load_sarif_schema()).validate(sarif)
        inv = sarif["runs"][0]["invocations"][0]
        assert inv["executionSuccessful"] is False and inv["exitCode"] == 2
        assert "missing-draft" in inv["toolExecutionNotifications"][0]["message"]["text"]
    elif fmt == "junit":
        err_el = ET.fromstring(out).find(".//testcase/error")
        assert err_el is not None and "missing-draft" in err_el.get("message")
    elif fmt == "gitlab":
        (issue,) = json.loads(out)
        assert issue["severity"] == "blocker" and issue["check_name"] == "kconvert/error"
    else:
        assert out.startswith("::error title=kconvert inspect (exit 2)::missing-draft")


def test_json_alias_and_output_format_disagreeing_is_a_usage_error(drafts, capsys):
    rc, out, err = run(capsys, "inspect", "errors", "--json", "--output-format", "sarif")
    assert rc == 2 and "--json and --output-format sarif disagree" in err
    validate(json.loads(out), "error")


def test_format_from_argv_reads_what_a_usage_error_leaves_unparsed():
    assert format_from_argv(["inspect", "x", "--bogus", "--json"], environ={}) == "json"
    assert format_from_argv(["inspect", "--output-format=sarif"], environ={}) == "sarif"
    assert format_from_argv(["inspect", "--output-format", "nope"], environ={}) is None
    assert format_from_argv(["inspect", "--", "--json"], environ={}) is None
    assert format_from_argv(["inspect"], environ={"KCONVERT_OUTPUT_FORMAT": "github"}) == "github"
