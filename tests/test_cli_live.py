"""The verify command line against real vLLM engines (``-m live``): `--diagnose`, and the CI output formats of a
live report. Each test builds its own tiny pair (tests/live_factories.py) and keeps every engine run short
(8 prompts, 32 tokens)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from kconvert.cli import main
from kconvert.schemas import validate

sys.path.insert(0, str(Path(__file__).parent))
import live_factories  # noqa: E402

live = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (the `live` extra)")
SHORT = ["--prompts", "all", "--max-prompts", "8", "--max-tokens", "32", "-k", "3"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return live_factories.build_pair(tmp_path_factory.mktemp("pair"))


@live
@pytest.mark.live
@pytest.mark.timeout(900)
def test_verify_diagnose_measures_each_candidate_reading_and_names_the_best(pair, capsys):
    """The factory draft predicts two tokens ahead and is right only at the first position (mean acceptance
    length near 2 of 4 at k=3): low enough that --diagnose runs the candidate readings (aux ids shifted by one
    either way), one engine run each, and names the best with the fix command when it beats the draft as
    loaded."""
    target, draft = pair
    capsys.readouterr()
    rc = main(["verify", str(draft), "--target", str(target), "--diagnose", *SHORT, "--json"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc, "report")
    assert rc == doc["exit_code"] == 0 and doc["verdict"] == "pass"  # no gate: diagnosis informs, never fails
    base = doc["live"]["acceptance"]["mean_acceptance_length"]
    assert base < 0.6 * (3 + 1), "the factory draft must be low enough for --diagnose to run"
    diag = doc["diagnosis"]
    assert diag["ran"] is True and diag["baseline"] == pytest.approx(base)
    # 4 target layers, ids [1, 2, 3]: a shift by one leaves 1..L-1 either way, so the engine defaults remain
    names = [c["candidate"] for c in diag["candidates"]]
    assert names and len(set(names)) == len(names) and any(n.startswith("engine default layers") for n in names)
    for c in diag["candidates"]:
        # each candidate was run: a figure from the engine's counters, or the engine's own error
        assert (c.get("mean_acceptance_length") is not None) != ("error" in c), c
        if c.get("mean_acceptance_length") is not None:
            # AL and rate of one engine run, from its counters: draft_tokens = k * drafts, so by vLLM's
            # definitions AL - 1 = accepted / drafts = k * accepted / draft_tokens = k * rate
            assert c["mean_acceptance_length"] - 1 == pytest.approx(3 * c["acceptance_rate"]), c
        else:
            assert c["error"].strip()
    # Which branch runs follows from the factory (tests/live_factories.py): its layers are near-identity
    # (std 0.02), so the residual stream at every layer is the token's embedding plus a small perturbation,
    # and the draft reads only the first aux slot through fc = identity. Every reading (ids shifted by one,
    # the engine's defaults) feeds it the same embedding: no candidate beats the draft as loaded by 0.05,
    # and the diagnosis must say so rather than name a "best" reading.
    measured = [c for c in diag["candidates"] if c.get("mean_acceptance_length") is not None]
    assert measured, diag
    assert all(abs(c["mean_acceptance_length"] - base) <= 0.05 for c in measured), (base, measured)
    assert diag["best"] is None and diag["fix_command"] is None
    # the same run, read by a CI log: one line per candidate and the verdict
    from kconvert.report.concise import render_concise

    lines = render_concise(doc).splitlines()
    assert sum(line.startswith("diagnose: ") for line in lines) == len(names) + 1
    assert any(line.endswith("verdict: PASS") for line in lines)


@live
@pytest.mark.live
@pytest.mark.timeout(600)
def test_failed_gate_of_a_live_run_is_an_annotation_and_a_sarif_result(pair, capsys, tmp_path):
    """A live run below --min-acceptance-length: exit 1, the github format's `::error` for the gate check, the
    SARIF result for it (valid against the published schema), and the JSON report the library returns."""
    import jsonschema

    from kconvert.schemas import load_sarif_schema

    target, draft = pair
    capsys.readouterr()
    report = tmp_path / "verify.json"
    rc = main(["verify", str(draft), "--target", str(target), *SHORT, "--min-acceptance-length", "3.9",
               "--output-format", "github", "--report", str(report)])
    out = capsys.readouterr().out
    doc = json.loads(report.read_text())
    assert rc == 1 and doc["verdict"] == "fail" and doc["exit_code"] == 1
    al = doc["live"]["acceptance"]["mean_acceptance_length"]
    gate = [ln for ln in out.splitlines() if ln.startswith("::error ")]
    assert len(gate) == 1 and "title=kconvert gate min_acceptance_length" in gate[0]
    assert f"{al:.3f}" in out  # the live figures are in the log
    from kconvert.report.sarif import render_sarif_doc

    sarif = render_sarif_doc(doc)
    jsonschema.Draft4Validator(load_sarif_schema()).validate(sarif)
    results = sarif["runs"][0]["results"]
    # the static findings (a K404 warning on the factory pair) come first, then the failed gate check
    assert [r["ruleId"] for r in results] == [f["id"] for f in doc["findings"]] + ["gate/min_acceptance_length"]
    assert results[-1]["level"] == "error"
    assert sarif["runs"][0]["properties"]["live"]["acceptance"]["mean_acceptance_length"] == al
