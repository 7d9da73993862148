"""verify, score, fix, push and matrix on checkpoints of other methods (K105): a DFlash drafter and MTP layers.

None of them may run kconvert's EAGLE-3 machinery on such a checkpoint and print a figure, plan an EAGLE-3 engine
line, or write a converted checkpoint as if it were an EAGLE-3 draft. Each stops with one line naming the method
and what serves it (K105's own text), `refused` in the report, and exit 1. Exit 1 is the README's exit-code table's
"the draft failed ... a fix that cannot be done ... a push the gate refuses": the files read fine (exit 2 is for
input kconvert cannot read, and comes without a report), and on a row that serves none of the method K105 is
already an error, which fails these commands with 1; a refusal with 2 would make the less broken case the odder
one. `inspect` is unchanged: it reports, with K105's severity per row.

The expected texts are the engines' own, as K105 cites them (vLLM 0.32 config/speculative.py `"method": "dflash"`,
`"mtp"`; SGLang 0.5.23 spec_info.py DFLASH, NEXTN), written out here; the checkpoints are tests/test_methods.py's
(cited there), plus a DFlash drafter shaped like an EAGLE-3 draft (3 target layers, fc [H, 3H], layer-0
hidden_norm, lm_head), on which main's `score` printed "mean acceptance length 1.000 ... verdict: PASS".

Cost: ~10 s in all (in-process CLI runs; one EAGLE-3 control score in torch).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kconvert.cli import main
from kconvert.errors import GateError
from kconvert.schemas import validate
from tests.factories import make_draft
from tests.test_methods import dflash, mtp
from tests.zoo.replica import hole, norm, qwen3_layer, write

H, HEADS, KV, HD, INTER, V = 64, 4, 2, 16, 128, 512  # tests/score_factories.py's trace: hidden 64, vocab 512

EXIT_DRAFT_FAILED = 1  # README "Exit codes": 1 = the draft failed (a fix that cannot be done, a push refused)
REFUSED_VERDICT = "fail"
SKIP_STATIC_NOTE = "--skip-static skips the static gate, not this refusal"

# what serves each checkpoint on each row, in the engines' words (K105's rule text and the engine rows' `methods`)
SERVED = {
    ("dflash", "vllm:0.32"): '"method": "dflash"',
    ("dflash", "sglang:0.5.23"): "--speculative-algorithm DFLASH",
    ("dflash3", "vllm:0.32"): '"method": "dflash"',
    ("dflash3", "sglang:0.5.23"): "--speculative-algorithm DFLASH",
    ("mtp_ds", "vllm:0.32"): '"method": "mtp"',
    ("mtp_ds", "sglang:0.5.23"): "--speculative-algorithm NEXTN",
    # config/speculative.py maps no kimi_k2 model type to an MTP model: K105 is an error there
    ("mtp_kimi", "vllm:0.32"): "serves MTP layers only for model_type",
    ("mtp_kimi", "sglang:0.5.23"): "--speculative-algorithm NEXTN",
}
METHOD = {"dflash": "dflash", "dflash3": "dflash", "mtp_ds": "mtp", "mtp_kimi": "mtp"}
ROWS = ("vllm:0.32", "sglang:0.5.23")


def dflash_shaped_like_eagle3(folder: Path) -> Path:
    """A DFlash drafter (DFlashDraftModel, dflash_config) whose tensors an EAGLE-3 reading can run: one Qwen3
    layer with hidden_norm, fc over 3 target layers, lm_head over the trace's vocab."""
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "num_hidden_layers": 1,
           "num_attention_heads": HEADS, "num_key_value_heads": KV, "intermediate_size": INTER, "head_dim": HD,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000, "vocab_size": V, "block_size": 16, "num_target_layers": 8,
           "dflash_config": {"mask_token_id": V - 1, "target_layer_ids": [1, 4, 6]},
           "max_position_embeddings": 4096, "tie_word_embeddings": False}
    t = qwen3_layer("layers.0.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16", first=True)
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", V, H)
    return write(folder, cfg, t)


@pytest.fixture(scope="module")
def drafts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("other-methods")
    return {"dflash": dflash(root / "dflash"), "dflash3": dflash_shaped_like_eagle3(root / "dflash3"),
            "mtp_ds": mtp(root / "mtp_ds", model_type="deepseek_v3", archs=["DeepseekV3ForCausalLM"]),
            "mtp_kimi": mtp(root / "mtp_kimi", model_type="kimi_k2", archs=["DeepseekV3ForCausalLM"])}


@pytest.fixture(scope="module")
def control(tmp_path_factory) -> tuple[Path, Path]:
    """An EAGLE-3 draft that proposes one token z everywhere and a trace on which its verify steps are derived
    by hand (tests/score_factories.py hand_pattern): the control that the trace scores."""
    from tests.score_factories import constant_proposer, hand_pattern, pattern_trace

    root = tmp_path_factory.mktemp("trace")
    draft, z = constant_proposer(root / "eagle3")
    checked, _ = hand_pattern(z, z + 1)
    return draft, pattern_trace(root / "t", checked, avoid={z, z + 1})


@pytest.fixture(scope="module")
def trace(control) -> Path:
    return control[1]


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    for var in ("GITHUB_ACTIONS", "KCONVERT_OUTPUT_FORMAT", "KCONVERT_DEBUG"):
        monkeypatch.delenv(var, raising=False)


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main([*argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def engine_flags(row: str) -> list[str]:
    engine, version = row.split(":")
    return ["--engine", engine, "--engine-version", version]


def assert_refused(doc: dict, name: str, row: str, command: str, *, skip_static: bool = False) -> None:
    validate(doc, "report")
    ref = doc["refused"]
    assert ref["rule"] == "K105" and ref["method"] == METHOD[name]
    assert ref["reason"].startswith(f"{command} not run: this is ") and "\n" not in ref["reason"]
    assert SERVED[(name, row)] in ref["reason"]
    assert (SKIP_STATIC_NOTE in ref["reason"]) == skip_static
    assert doc["verdict"] == REFUSED_VERDICT and doc["exit_code"] == EXIT_DRAFT_FAILED
    assert "K105" in [f["id"] for f in doc["findings"]]
    # the one next step is the rule's text, a command that runs (tests/test_printed_commands.py runs them all)
    assert [s["command"] for s in doc["next_steps"]] == ["kconvert rules K105"]


def no_eagle3_in(obj) -> bool:
    return '"eagle3"' not in json.dumps(obj) and "EAGLE3" not in json.dumps(obj)


# ------------------------------------------------------------------------------------------------------- verify

@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("name", ["dflash", "mtp_ds", "mtp_kimi"])
@pytest.mark.parametrize("flags", [[], ["--fail-on", "warning"], ["--skip-static"]], ids=["", "fail-on", "skip"])
def test_verify_dry_run_plans_no_eagle3_engine_line_for_another_methods_checkpoint(capsys, drafts, name, row, flags):
    rc, doc = run_json(capsys, "verify", str(drafts[name]), "--target", "qwen3-8b", *engine_flags(row), "--dry-run",
                       *flags)
    assert rc == EXIT_DRAFT_FAILED
    assert_refused(doc, name, row, "verify", skip_static="--skip-static" in flags)
    plan = doc["dry_run"]
    assert plan["would_start"] is False and plan["engine_args"] == {} and plan["serve_line"] is None
    assert no_eagle3_in(plan)


def test_verify_dry_run_of_an_eagle3_draft_still_plans_its_eagle3_line(capsys, tmp_path):
    # the control: the same dry run on an EAGLE-3 draft plans vLLM's method "eagle3" (so the check above can fail)
    rc, doc = run_json(capsys, "verify", str(make_draft(tmp_path / "e", "torchspec")), "--target", "qwen3-8b",
                       "--dry-run", "--skip-static")
    assert doc["refused"] is None
    assert doc["dry_run"]["engine_args"]["speculative_config"]["method"] == "eagle3"


@pytest.mark.parametrize("name", ["dflash", "mtp_ds"])
def test_verify_starts_no_engine_for_another_methods_checkpoint_even_with_skip_static(drafts, monkeypatch, name):
    import kconvert.commands.verify.command as run
    from kconvert.results.verify import VerifySettings

    def engine_started(*a, **k):
        raise AssertionError("an engine was started for another method's checkpoint")

    monkeypatch.setattr(run, "run_vllm", engine_started)
    vr = run.verify(str(drafts[name]), "qwen3-8b", engine="vllm", engine_version="0.32",
                    settings=VerifySettings(skip_static=True), diagnose=True)
    assert vr.live is None and vr.diagnosis is None and vr.exit_code == EXIT_DRAFT_FAILED
    assert_refused(vr.to_dict(), name, "vllm:0.32", "verify", skip_static=True)


@pytest.mark.parametrize("name", ["dflash", "mtp_ds"])
def test_live_verify_on_sglang_prints_no_eagle3_launch_line_for_another_methods_checkpoint(capsys, drafts, name):
    # for an EAGLE-3 draft, verify --engine sglang prints SGLang's launch line and exits 2 (README); for another
    # method's checkpoint that line would be `--speculative-algorithm EAGLE3`: verify refuses instead
    capsys.readouterr()
    rc = main(["verify", str(drafts[name]), "--target", "qwen3-8b", "--engine", "sglang", "--engine-version",
               "0.5.23", "--output-format", "concise"])
    out, err = capsys.readouterr()
    assert rc == EXIT_DRAFT_FAILED and "EAGLE3" not in out + err and "sglang.launch_server" not in out + err
    assert "refused: verify not run: this is " in out and SERVED[(name, "sglang:0.5.23")] in out


def test_verify_refusal_is_one_printed_line(capsys, drafts):
    capsys.readouterr()
    rc = main(["verify", str(drafts["dflash"]), "--target", "qwen3-8b", "--dry-run", "--output-format", "concise"])
    out = capsys.readouterr().out
    assert rc == EXIT_DRAFT_FAILED
    refused = [line for line in out.splitlines() if line.startswith("refused: ")]
    assert len(refused) == 1 and "DFlash" in refused[0] and '"method": "dflash"' in refused[0]
    assert "engine args:" not in out and "serve line" not in out


# -------------------------------------------------------------------------------------------------------- score

@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("name", ["dflash3", "mtp_ds", "mtp_kimi"])
@pytest.mark.parametrize("flags", [[], ["--skip-static"], ["--diagnose"]], ids=["", "skip", "diagnose"])
def test_score_prints_no_figure_for_another_methods_checkpoint(capsys, drafts, trace, monkeypatch, name, row, flags):
    import kconvert.score.walk as score_walk

    def scored(*a, **k):
        raise AssertionError("the EAGLE-3 proposer ran on another method's checkpoint")

    monkeypatch.setattr(score_walk, "score_reading", scored)
    rc, doc = run_json(capsys, "score", str(drafts[name]), "--trace", str(trace), *engine_flags(row), *flags)
    assert rc == EXIT_DRAFT_FAILED
    assert_refused(doc, name, row, "score", skip_static="--skip-static" in flags)
    assert doc["score"] is None and doc["diagnosis"] is None


@pytest.mark.parametrize("name", ["dflash3", "mtp_ds"])
def test_score_refuses_another_methods_checkpoint_on_an_install_without_torch(capsys, drafts, trace, monkeypatch,
                                                                               name):
    # a core install (no torch, as `pip install kconvert-eagle3`): the refusal needs no torch, so it is what the user
    # reads (exit 1), not "install torch" (exit 3) followed by the same refusal once it is installed
    import sys

    for mod in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ModuleNotFoundError
    rc, doc = run_json(capsys, "score", str(drafts[name]), "--trace", str(trace))
    assert rc == EXIT_DRAFT_FAILED
    assert_refused(doc, name, "vllm:0.32", "score")
    # and an EAGLE-3 draft on the same install still asks for torch (exit 3, the README's missing-package code)
    rc = main(["score", str(make_draft(drafts[name].parent / f"e-{name}", "torchspec")), "--trace", str(trace),
               "--skip-static"])
    assert rc == 3 and "torch" in capsys.readouterr().err


def test_the_same_trace_scores_an_eagle3_draft(capsys, control, trace):
    # the control: the trace and the command work, so the refusal above is the method's, not the trace's; the
    # figures are hand_pattern's hand-derived verify steps (19 drafts, 18 accepted), not kconvert's count
    from tests.score_factories import HAND_COUNTERS

    draft, _ = control
    rc, doc = run_json(capsys, "score", str(draft), "--trace", str(trace), "--skip-static")
    assert doc["refused"] is None and doc["score"]["counters"] == HAND_COUNTERS
    assert doc["score"]["acceptance"]["mean_acceptance_length"] == pytest.approx(1 + 18 / 19)


# ---------------------------------------------------------------------------------------------------------- fix

def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("name", ["dflash", "mtp_ds", "mtp_kimi"])
@pytest.mark.parametrize("flags", [[], ["--to-format", "speculators"], ["--to-format", "flat"], ["--aux-ids", "2,4,6"],
                                   ["--cast", "bf16"], ["--partial"], ["--fail-on", "warning"], ["--dry-run"]],
                         ids=["", "speculators", "flat", "aux-ids", "cast", "partial", "fail-on", "dry-run"])
def test_fix_writes_nothing_for_another_methods_checkpoint(capsys, drafts, tmp_path, name, row, flags):
    before = digest(drafts[name])
    out = tmp_path / "out"
    rc, doc = run_json(capsys, "fix", str(drafts[name]), "-o", str(out), *engine_flags(row), *flags)
    assert rc == EXIT_DRAFT_FAILED
    assert_refused(doc, name, row, "fix")
    assert doc["fix"]["ops"] == [] and doc["fix"]["output"] is None and doc["fix"]["noop"] is False
    assert not out.exists() and not list(tmp_path.glob(".out*"))
    assert digest(drafts[name]) == before


# --------------------------------------------------------------------------------------------------------- push

@pytest.mark.parametrize("name", ["dflash", "mtp_ds"])
def test_push_refuses_another_methods_checkpoint_even_with_a_passing_live_report(capsys, drafts, tmp_path, name):
    from kconvert.commands.push import push
    from tests.test_push import make_report, write_report

    # a passing live verify report of these very files, as an older kconvert (or a hand) could have written it
    report = write_report(tmp_path / "verify.json", make_report(drafts[name]))
    with pytest.raises(GateError) as e:
        push(drafts[name], "my-org/draft", report=report, dry_run=True)
    assert e.value.message.startswith("push not run: this is ") and SERVED[(name, "vllm:0.32")] in e.value.message
    capsys.readouterr()
    assert main(["push", str(drafts[name]), "my-org/draft", "--report", str(report), "--dry-run"]) == 1
    assert capsys.readouterr().err.startswith("error: push not run: this is ")


# ------------------------------------------------------------------------------------------------------- matrix

def test_matrix_static_cells_are_inspects_and_the_score_is_refused_not_ranked(capsys, drafts, trace, tmp_path):
    capsys.readouterr()
    rc = main(["matrix", str(drafts["dflash3"]), str(drafts["mtp_ds"]), "--target", "qwen3-8b",
               "--engines", "vllm:0.32,sglang:0.5.23", "--trace", str(trace), "--json", "--workers", "1",
               "--cache", str(tmp_path / "cache.db")])
    doc = json.loads(capsys.readouterr().out)
    validate(doc, "matrix")
    cells = {(Path(c["draft"]).name, c["engine"], c["engine_version"]): c for c in doc["cells"]}
    # inspect's K105 severity on each row (tests/test_methods.py): a warning where the row serves the method
    for key in [("dflash3", "vllm", "0.32"), ("dflash3", "sglang", "0.5.23"), ("mtp_ds", "vllm", "0.32"),
                ("mtp_ds", "sglang", "0.5.23")]:
        assert (cells[key]["state"], cells[key]["finding_ids"]) == ("warn", ["K105"]), cells[key]
    by_draft = {Path(d["draft"]).name: d for d in doc["drafts"]}
    for name, what in (("dflash3", "DFlash"), ("mtp_ds", "multi-token-prediction")):
        d = by_draft[name]
        assert d["score"] is None and d["rank"] is None
        assert d["error"].startswith("score: score not run: this is ") and what in d["error"]
    assert doc["ranking"]["order"] == [] and doc["ranking"]["best"] is None
    # a score cell that fails fails the matrix, as `kconvert score` of the draft exits 1
    assert rc == doc["exit_code"] == EXIT_DRAFT_FAILED


def test_matrix_live_cell_starts_no_engine_for_another_methods_checkpoint(drafts, monkeypatch):
    import kconvert.commands.verify.command as run
    from kconvert.matrix.cells import live_cell
    from kconvert.matrix.spec import CellSpec

    monkeypatch.setattr(run, "run_vllm", lambda *a, **k: (_ for _ in ()).throw(AssertionError("engine started")))
    cell = live_cell(CellSpec(draft=str(drafts["dflash"]), engine="vllm", engine_version="0.32", kind="live",
                              target="qwen3-8b"))
    assert cell["state"] == "fail" and cell["exit_code"] == EXIT_DRAFT_FAILED and cell["finding_ids"] == ["K105"]
    assert cell["message"].startswith("verify not run: this is ") and '"method": "dflash"' in cell["message"]


# ------------------------------------------------------------------------------------------------------ inspect

@pytest.mark.parametrize("name, row, rc_expected", [
    ("dflash", "vllm:0.32", 0), ("dflash", "sglang:0.5.23", 0), ("mtp_ds", "vllm:0.32", 0),
    ("mtp_kimi", "vllm:0.32", 1), ("mtp_kimi", "sglang:0.5.23", 0)])
def test_inspect_still_only_reports(capsys, drafts, name, row, rc_expected):
    # inspect reports (K105 a warning where the row serves the method, an error where it does not): no refusal
    rc, doc = run_json(capsys, "inspect", str(drafts[name]), *engine_flags(row))
    assert rc == rc_expected and "refused" not in doc
    assert SERVED[(name, row)] in next(f["message"] for f in doc["findings"] if f["id"] == "K105")


# ------------------------------------------------------------------------------------------ selection and formats

@pytest.mark.parametrize("command", ["verify", "score", "fix"])
def test_ignoring_k105_sets_the_finding_aside_but_not_the_refusal(capsys, drafts, trace, tmp_path, command):
    # --ignore silences a finding; it does not make a DFlash drafter an EAGLE-3 draft (the set-aside finding is
    # still reported under rule_selection, and the refusal quotes it)
    args = {"verify": ["--target", "qwen3-8b", "--dry-run"], "score": ["--trace", str(trace)],
            "fix": ["-o", str(tmp_path / "out")]}[command]
    rc, doc = run_json(capsys, command, str(drafts["dflash"]), *args, "--ignore", "K105")
    assert rc == EXIT_DRAFT_FAILED and doc["findings"] == []
    assert [a["id"] for a in doc["rule_selection"]["set_aside"]] == ["K105"]
    assert doc["refused"]["rule"] == "K105" and '"method": "dflash"' in doc["refused"]["reason"]


@pytest.mark.parametrize("fmt", ["full", "concise", "github", "gitlab", "junit", "sarif"])
@pytest.mark.parametrize("command", ["verify", "fix"])
def test_every_output_format_renders_a_refusal(capsys, drafts, tmp_path, fmt, command):
    args = ["--target", "qwen3-8b", "--dry-run"] if command == "verify" else ["-o", str(tmp_path / "out")]
    capsys.readouterr()
    rc = main([command, str(drafts["dflash"]), *args, "--output-format", fmt])
    out = capsys.readouterr().out
    assert rc == EXIT_DRAFT_FAILED and "K105" in out
    if fmt in ("full", "concise", "github"):
        assert "refused" in out and "DFlash" in out


def test_matrix_best_never_names_another_methods_checkpoint(capsys, drafts, trace):
    # main ranked the EAGLE-3-shaped DFlash drafter first (AL 1.0) and --best printed its path
    capsys.readouterr()
    rc = main(["matrix", str(drafts["dflash3"]), "--engines", "vllm:0.32", "--trace", str(trace), "--best",
               "--cache", "off"])
    out, err = capsys.readouterr()
    assert rc == 1 and out == "" and "K105" in err
