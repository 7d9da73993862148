"""fix does what is certain and leaves what is not (issue #18): a finding that needs a decision no flag gave leaves
its setting exactly as it is, is named and recorded, and every other repair is applied; fix still refuses where
the error's repair is the decision. The smaller contradictions of the same issue, one test each."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

import kconvert
from kconvert.engines.expectations import ALL_ROWS
from kconvert.errors import AmbiguityError
from kconvert.schemas import validate
from tests import printed
from tests.factories import make_draft, make_target

AUX = "eagle_aux_hidden_state_layer_ids"


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    for var in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE", "KCONVERT_OUTPUT_FORMAT", "KCONVERT_DEBUG"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def ws(tmp_path):
    make_target(tmp_path / "target")
    return tmp_path


def concise(argv: list[str], cwd: Path) -> printed.Run:
    return printed.run([*argv, "--output-format", "concise"], cwd)


def _kimi_specforge(folder: Path, **changes) -> Path:
    """The SpecForge-layout Kimi-K2.5 draft of the issue: AQ-MedAI's replica (ids [2, 30, 58]) with `changes`."""
    from tests.zoo.aqmedai_kimi_k25_eagle3 import build as aq
    from tests.zoo.replica import write

    cfg = aq.config()
    t = aq.tensors()
    for key in changes.get("drop_config", ()):
        cfg.pop(key)
    cfg.update(changes.get("config", {}))
    if changes.get("absolute_d2t"):
        dtype, shape, d2t = t["d2t"]
        t["d2t"] = (dtype, shape, d2t + __import__("numpy").arange(shape[0]))
    if changes.get("prefix"):
        t = {f"model.{k}": v for k, v in t.items()}
    return write(folder, cfg, t)


KIMI_CASES = {
    "absolute d2t": dict(absolute_d2t=True),
    "absolute d2t, model.-prefixed keys": dict(absolute_d2t=True, prefix=True),
    "absolute d2t, no head_dim": dict(absolute_d2t=True, drop_config=("head_dim",)),
    "absolute d2t, short max positions": dict(absolute_d2t=True, config={"max_position_embeddings": 4096}),
}


@pytest.mark.parametrize("case", list(KIMI_CASES))
def test_a_kimi_draft_with_ambiguous_ids_gets_its_certain_repairs_and_keeps_its_ids(tmp_path, case):
    """The issue's cases: K502 (absolute d2t, an error vLLM crashes on) and friends are repaired; the ids
    [2, 30, 58] (K404, a decision) stay exactly as they are, are named with the flag and recorded."""
    src = _kimi_specforge(tmp_path / "in", **KIMI_CASES[case])
    before = json.loads((src / "config.json").read_text())
    pre = kconvert.inspect(str(src), target="kimi-k2.5")
    assert pre.verdict == "fail" and any(f.id == "K502" and f.ops for f in pre.findings)
    res = kconvert.fix(str(src), tmp_path / "out", target="kimi-k2.5")
    assert res.exit_code == 0 and res.written is not None
    assert [f.id for f in res.plan.left_as_is] == ["K404"]
    out_cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert out_cfg["eagle_config"][AUX] == before["eagle_config"][AUX] == [2, 30, 58]
    assert AUX not in out_cfg  # no mirror: which streams the ids name is the open question
    after = kconvert.inspect(str(tmp_path / "out"), target="kimi-k2.5")
    assert after.verdict == "pass", [(f.id, f.message) for f in after.errors]
    assert [f.id for f in after.findings if f.needs_decision] == ["K404"]
    prov = json.loads((tmp_path / "out" / "kconvert.json").read_text())
    assert [e["id"] for e in prov["left_as_is"]] == ["K404"]
    assert prov["left_as_is"][0]["decide_with"].startswith("--aux-convention")
    assert prov["left_as_is"][0]["recommended"]["source"] == "vLLM PR #35966"
    # under a strict gate the warning left as is fails the fix
    strict = kconvert.fix(str(src), None, target="kimi-k2.5", dry_run=True, fail_on="warning")
    assert strict.exit_code == 1
    if "prefixed" not in case:
        return  # the lines below write two more Kimi-sized copies; one case exercises them (renames included)
    # and every line inspect prints for it runs as printed (the fix line with the measured reading first)
    c = printed.Collector()
    c.emit(["inspect", "in", "--target", "kimi-k2.5"], f"inspect {case}", tmp_path)
    assert not c.failed() and c.outcomes, c.summary()
    fixes = [o.printed for o in c.outcomes if o.printed.command.startswith("kconvert fix in ")]
    assert fixes and "--aux-convention input" in fixes[0].command and "K502" in fixes[0].why, c.summary()
    assert any(o.printed.command.startswith("kconvert verify in-vllm ") and "--diagnose" in o.printed.command
               for o in c.outcomes), c.summary()

def test_fix_prints_what_it_left_as_is_and_the_flag_that_decides(tmp_path):
    src = _kimi_specforge(tmp_path / "in", absolute_d2t=True)
    r = concise(["fix", "in", "-o", "out", "--target", "kimi-k2.5"], tmp_path)
    assert r.rc == 0, r.err
    line = [ln for ln in r.out.splitlines() if ln.startswith("left as is: K404")][0]
    assert "aux ids [2, 30, 58]" in line and "--aux-convention input|output" in line
    assert "measured: --aux-convention input (51.78%" in line and src.is_dir()
    doc = json.loads(printed.run(["fix", "in", "-o", "out2", "--target", "kimi-k2.5", "--json"], tmp_path).out)
    validate(doc, "report")
    assert [e["id"] for e in doc["fix"]["left_as_is"]] == ["K404"]


def test_a_decision_error_still_refuses_and_names_the_rule(ws):
    """Different ids at two keys (K405 error): the repair is choosing one, so fix refuses; inspect prints the rule
    to read instead of a fix line that would refuse as printed."""
    make_draft(ws / "two", "specforge", config=lambda c: c.update({AUX: [2, 4, 6]}))
    with pytest.raises(AmbiguityError) as e:
        kconvert.fix(str(ws / "two"), None, target=str(ws / "target"), dry_run=True)
    assert "--aux-ids" in e.value.message and "`kconvert rules K405`" in e.value.hint
    r = concise(["inspect", "two", "--target", "target"], ws)
    steps = printed.next_lines(r.out, "inspect", ws)
    assert [p.command for p in steps] == ["kconvert rules K405"]
    assert printed.run(["rules", "K405"], ws).rc == 0
    assert "fix refuses until --aux-ids" in kconvert.rules.REGISTRY["K405"].fix


def test_nothing_to_fix_exits_0_writes_nothing_and_names_the_verify_of_the_input(ws):
    """README's rule: a fix with nothing to do exits 0 and writes nothing; it says the input serves as it is and
    names the command that verifies the input (which runs, here as a dry run)."""
    make_draft(ws / "clean", "torchspec")
    r = concise(["fix", "clean", "-o", "out", "--target", "target"], ws)
    assert r.rc == 0 and not (ws / "out").exists(), r.err
    assert "nothing to change: nothing written (the input serves as it is)" in r.out
    (step,) = printed.next_lines(r.out, "fix", ws)
    assert step.command == "kconvert verify clean --target target"
    assert printed.run(shlex.split(step.command)[1:] + ["--dry-run"], ws).rc == 0


def test_fixable_does_not_count_findings_that_need_a_decision(ws):
    """K404 (ops) and K902 (needs --rope-from-target): 1 fixable, 1 needs a decision, counted from the findings."""
    make_draft(ws / "two", "specforge", config=lambda c: c.pop("rope_scaling", None))
    doc = json.loads(printed.run(["inspect", "two", "--target", "target", "--json"], ws).out)
    with_ops = [f["id"] for f in doc["findings"] if f["fix_ops"] and f["severity"] != "info"]
    deciding = [f["id"] for f in doc["findings"] if f["needs_decision"] and not f["fix_ops"]]
    assert (with_ops, deciding) == (["K404"], ["K902"])
    assert doc["summary"]["fixable"] == 1 and doc["summary"]["needs_decision"] == 1
    r = concise(["inspect", "two", "--target", "target"], ws)
    assert "(1 fixable, 1 needs a decision)" in r.out


def test_fix_next_line_repeats_no_decision_flag_and_passing_one_back_adds_no_finding(ws):
    make_draft(ws / "u", "unknown")
    r = concise(["fix", "u", "-o", "out", "--target", "target", "--aux-convention", "output"], ws)
    assert r.rc == 0, r.err
    (step,) = printed.next_lines(r.out, "fix", ws)
    assert step.command == "kconvert verify out --target target"  # kconvert.json records the decision
    plain = kconvert.inspect(str(ws / "out"), target=str(ws / "target"))
    written = json.loads((ws / "out" / "config.json").read_text())["eagle_config"][AUX]
    for flags in ({"aux_convention": "output"}, {"aux_ids": written}):
        again = kconvert.inspect(str(ws / "out"), target=str(ws / "target"), decisions=kconvert.Decisions(**flags))
        assert [(f.id, f.severity) for f in again.findings] == [(f.id, f.severity) for f in plain.findings], flags


def test_not_checked_does_not_name_embeddings_k701_sampled(ws):
    make_draft(ws / "emb", "torchspec", embeddings=True)  # trained-looking rows (std 0.02)
    res = kconvert.inspect(str(ws / "emb"), target=str(ws / "target"))
    assert not res.failing and not [f for f in res.findings if f.id == "K701"]
    doc = res.to_dict()
    assert not any("randomly initialised embed_tokens" in x for x in doc["not_checked"])
    assert any("K701 sampled" in x for x in doc["not_checked"])
    make_draft(ws / "none", "torchspec")  # no embed_tokens: nothing sampled, the gap stays named
    assert any("randomly initialised embed_tokens" in x
               for x in kconvert.inspect(str(ws / "none"), target=str(ws / "target")).to_dict()["not_checked"])


@pytest.mark.parametrize("row", ALL_ROWS, ids=lambda r: r.key)
def test_k401_specforge_default_layers_are_the_engines_defaults(ws, row):
    """SpecForge 0.2.0 trains on the outputs of [1, L//2-1, L-4] when no ids are given
    (specforge/algorithms/model_providers.py, resolve_eagle_capture_layers): for the 8-layer target, outputs of
    [1, 3, 4] = inputs of [2, 4, 5]; vLLM's and SGLang's default is (2, L//2, L-3) = [2, 4, 5]. K401 is info."""
    make_draft(ws / "sf", "specforge", config=lambda c: (c.pop(AUX, None), c["eagle_config"].pop(AUX)))
    res = kconvert.inspect(str(ws / "sf"), target=str(ws / "target"), engine=row.engine, engine_version=row.version)
    k401 = [f for f in res.findings if f.id == "K401"]
    L = 8
    assert [f.severity for f in k401] == ["info"] and k401[0].evidence[0].expected == [1 + 1, L // 2 - 1 + 1, L - 4 + 1]
    assert "model_providers.py" in k401[0].message and not k401[0].needs_decision
    assert "model_providers.py" in kconvert.rules.REGISTRY["K401"].why
    # a TorchSpec draft (stamped) without ids: no producer code read here, so it stays a decision
    make_draft(ws / "ts", "torchspec", config=lambda c: (c.pop(AUX, None), c.pop("eagle_config", None)))
    ts = [f for f in kconvert.inspect(str(ws / "ts"), target=str(ws / "target"), engine=row.engine,
                                      engine_version=row.version).findings if f.id == "K401"]
    assert [f.severity for f in ts] == ["warning"] and ts[0].needs_decision


def test_a_recommendation_rests_on_the_files_not_on_a_name(tmp_path):
    """The measured reading is matched by what the files say: other ids get no recommendation."""
    src = _kimi_specforge(tmp_path / "other", config={"eagle_config": {AUX: [2, 31, 58], "use_aux_hidden_state": True}})
    k404 = [f for f in kconvert.inspect(str(src), target="kimi-k2.5").findings if f.id == "K404"]
    assert k404 and "no public run measured either reading" in k404[0].message
    same = _kimi_specforge(tmp_path / "renamed")
    k404 = [f for f in kconvert.inspect(str(same), target="kimi-k2.5").findings if f.id == "K404"]
    assert "--aux-convention input is recommended" in k404[0].message and "vLLM PR #35966" in k404[0].message
