"""The rule registry and runner (kconvert/rules/base.py) against what lies outside it:

- docs/rules.md, the documented rule texts users read (generated from the registry by scripts/rules_doc.py and
  checked in; tests/test_rules_doc.py keeps it in step): per rule its name, category, severity, fix availability,
  `needs --target`, and the "What it checks" / "Why it matters" / "Fix" texts.
- schemas/report.schema.json `$defs.finding` (a finding in `inspect --json`: id, name, category, severity,
  message, evidence [where, observed, expected], fixable, needs_decision, fix_ops) and schemas/rules.schema.json
  (`kconvert rules --json`).
- The JSON standard as Python's json module implements it: numpy scalars are not JSON (json.dumps(np.int64(1))
  raises TypeError), tuples are written as arrays.
- The fix-availability meanings written beside the enum and in docs/rules.md ("always": every finding carries the
  ops that repair it; "sometimes": some do, the others no file edit can repair; "needs-decision": some wait for a
  flag; "never": nothing for fix to do).
- tests/factories.py: the tiny draft's d2t is `ids - arange(128)` for ids drawn with numpy's default_rng(0).

Engine-free; milliseconds each (the inspect() ones a few tens)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from kconvert.engines.expectations import engine_rules
from kconvert.formats.canonical import read_draft
from kconvert.rules import REGISTRY
from kconvert.rules.base import (CATEGORIES, SEVERITIES, Context, Evidence, Finding, FixAvailability, Rule,
                                 eagle3_rules_apply, rule, run_rules, skipped_without_target)
from kconvert.schemas import load_schema
from kconvert.source.checkpoint import load_folder
from kconvert.targets import load_target
from kconvert.writer.ops import DeleteConfig, SetConfig, op_to_dict
from tests.factories import TINY, _vocab_map, make_draft, make_target

ROOT = Path(__file__).resolve().parent.parent
RULES_MD = (ROOT / "docs" / "rules.md").read_text()
REPORT_SCHEMA = load_schema("report")  # schemas/report.schema.json (the repository's schemas/ links to kconvert/schemas)
RULES_SCHEMA = load_schema("rules")
A = FixAvailability


def documented() -> dict[str, dict]:
    """docs/rules.md's sections: `## Kxxx name`, `category, severity[, needs --target]`, then the three texts."""
    out = {}
    for m in re.finditer(r"^## (K\d{3}) (\S+)\n\n(.+?)\n\n\*\*What it checks\.\*\* (.+?)\n\n\*\*Why it matters\.\*\* "
                         r"(.+?)\n\n\*\*Fix\*\* \(([a-z-]+)\)\. (.+?)\n(?=\n## |\Z)", RULES_MD, re.S | re.M):
        head = [x.strip() for x in m.group(3).split(",")]
        # the head names every severity the rule's findings can have (issue #48: `Rule.severities`, read from its
        # code), the declared default among them
        out[m.group(1)] = {"id": m.group(1), "name": m.group(2), "category": head[0], "severities": head[1].split("/"),
                           "summary": m.group(4), "why": m.group(5), "fix": m.group(7),
                           "fix_availability": m.group(6), "needs_target": "needs --target" in head[2:]}
    # the group is the index table's last column: | [K000](#...) | name | category | severity | fix | group |
    for m in re.finditer(r"^\| \[(K\d{3})\]\(#[^)]*\) \|.*\| ([a-z]+) \|$", RULES_MD, re.M):
        out[m.group(1)]["group"] = m.group(2)
    return out


def _read(folder):
    return read_draft(load_folder(folder, ref=str(folder)))


def tiny(tmp_path, producer="specforge", **kw):
    return _read(make_draft(tmp_path / "d", producer, **kw))


def fake_rule(id="K998", availability=A.SOMETIMES, **kw) -> Rule:
    """A rule built like the registry's, not registered (its fn is given per test)."""
    return Rule(id, kw.pop("name", "fake-rule"), kw.pop("category", "integrity"), kw.pop("severity", "warning"),
                "s", "w", "f", availability, kw.pop("needs_target", False), kw.pop("fn", lambda ctx: iter(())), **kw)


# --- the registry as documented -------------------------------------------------------------------------------

def test_every_rule_doc_is_what_docs_rules_md_says():
    docs = documented()
    assert len(docs) == len(REGISTRY) == int(re.search(r"^(\d+) rules\.", RULES_MD, re.M).group(1))
    for rid, r in REGISTRY.items():
        doc = r.doc()
        assert doc.pop("severity") in doc["severities"], rid
        assert doc == docs[rid], rid


def test_a_rule_doc_has_the_fields_of_the_rules_schema():
    # rules.schema.json $defs.rule: exactly its required fields, fix_availability one of its enum
    schema = RULES_SCHEMA["$defs"]["rule"]
    for r in REGISTRY.values():
        d = r.doc()
        assert set(d) == set(schema["required"]) == set(schema["properties"]), r.id
        assert d["fix_availability"] in schema["properties"]["fix_availability"]["enum"]
        assert d["category"] in schema["properties"]["category"]["enum"] and isinstance(d["needs_target"], bool)


def _codes(monkeypatch, **extra):
    """kconvert/rules/codes.py's table with test ids added (K99x are free in the real one)."""
    from kconvert.rules import codes
    table = {**codes.CODES, **{k: codes.Code(*v) for k, v in extra.items()}}
    monkeypatch.setattr("kconvert.rules.base.CODES", table)


def test_the_decorator_registers_stripped_texts_and_refuses_a_second_id(monkeypatch):
    monkeypatch.setattr("kconvert.rules.base.REGISTRY", dict(REGISTRY))
    _codes(monkeypatch, K997=("padded", "integrity", "preview"), K996=("plain", "integrity", "stable"))
    from kconvert.rules import base

    def check(ctx):
        return iter(())
    r = rule("K997", "info", summary="  one line.\n", why="\n why \n", fix=" fix ",
             fix_availability=A.NEVER, needs_target=True, runs_last=True, any_method=True)(check)
    assert base.REGISTRY["K997"] is r and r.fn is check  # the check run_rules calls is the decorated function
    assert (r.summary, r.why, r.fix) == ("one line.", "why", "fix")
    assert (r.needs_target, r.runs_last, r.any_method, r.fix_availability) == (True, True, True, A.NEVER)
    # name, category and group from the table, the severity from the decorator
    assert (r.id, r.name, r.category, r.severity, r.group) == ("K997", "padded", "integrity", "info", "preview")
    assert r.doc()["group"] == "preview"
    with pytest.raises(RuntimeError, match=r"^duplicate rule id K997$"):
        rule("K997", "info", summary="s", why="w", fix="f",
             fix_availability=A.NEVER)(lambda ctx: iter(()))
    # defaults: needs no target, runs in id order, EAGLE-3 drafts only
    r = rule("K996", "info", summary="s", why="w", fix="f",
             fix_availability=A.NEVER)(lambda ctx: iter(()))
    assert (r.needs_target, r.runs_last, r.any_method) == (False, False, False)


def test_the_decorator_refuses_an_id_outside_the_table_or_removed(monkeypatch):
    monkeypatch.setattr("kconvert.rules.base.REGISTRY", dict(REGISTRY))
    _codes(monkeypatch, K994=("gone", "integrity", "removed"))
    with pytest.raises(RuntimeError, match=r"^rule id K993 is not in kconvert/rules/codes.py$"):
        rule("K993", "info", summary="s", why="w", fix="f", fix_availability=A.NEVER)
    with pytest.raises(RuntimeError, match=r"^rule id K994 was removed"):
        rule("K994", "info", summary="s", why="w", fix="f", fix_availability=A.NEVER)
    assert "K993" not in REGISTRY and "K994" not in REGISTRY


def test_the_decorator_refuses_what_the_docs_cannot_show(monkeypatch):
    monkeypatch.setattr("kconvert.rules.base.REGISTRY", dict(REGISTRY))
    # categories and severities of report.schema.json's finding (less "live", which no static rule has)
    schema_categories = REPORT_SCHEMA["$defs"]["finding"]["properties"]["category"]["enum"]
    assert list(CATEGORIES) == [c for c in schema_categories if c != "live"]
    assert list(SEVERITIES) == REPORT_SCHEMA["$defs"]["finding"]["properties"]["severity"]["enum"]
    for bad in (dict(category="vibes"), dict(severity="fatal"), dict(fix_availability="always")):
        kw = {"category": "integrity", "severity": "info", "fix_availability": A.NEVER, **bad}
        _codes(monkeypatch, K995=("bad", kw.pop("category"), "stable"))
        with pytest.raises(AssertionError):
            rule("K995", kw.pop("severity"), summary="s", why="w", fix="f", **kw)


# --- fix availability -----------------------------------------------------------------------------------------

def _f(ops=(), needs=None, fixable=None):
    return Finding("K998", "integrity", "warning", "m", [], list(ops), needs, fixable)


OP = DeleteConfig(("index_topk",), "why")


@pytest.mark.parametrize("availability,finding,allowed", [
    # never: no ops, no decision, not fixable
    (A.NEVER, _f(), True), (A.NEVER, _f(ops=[OP]), False), (A.NEVER, _f(needs="--x"), False),
    (A.NEVER, _f(fixable=True), False), (A.NEVER, _f(fixable=False), True),
    # always: every finding fixable, none waits
    (A.ALWAYS, _f(ops=[OP]), True), (A.ALWAYS, _f(), False), (A.ALWAYS, _f(ops=[OP], needs="--x"), False),
    (A.ALWAYS, _f(fixable=True), True), (A.ALWAYS, _f(ops=[OP], fixable=False), False),
    # sometimes: with or without ops, never waiting
    (A.SOMETIMES, _f(), True), (A.SOMETIMES, _f(ops=[OP]), True), (A.SOMETIMES, _f(needs="--x"), False),
    (A.SOMETIMES, _f(fixable=False), True),
    # needs-decision: anything
    (A.NEEDS_DECISION, _f(), True), (A.NEEDS_DECISION, _f(needs="--x"), True), (A.NEEDS_DECISION, _f(ops=[OP]), True),
])
def test_fix_availability_allows_what_its_meaning_says(availability, finding, allowed):
    assert availability.allows(finding) is allowed


def test_fixable_is_ops_or_a_decision_unless_overridden():
    assert _f().fixable is False
    assert _f(ops=[OP]).fixable is True
    assert _f(needs="--cast bf16|fp16|fp32").fixable is True
    assert _f(ops=[OP], fixable=False).fixable is False
    assert _f(fixable=True).fixable is True


def test_a_rule_refuses_a_finding_its_availability_contradicts():
    with pytest.raises(RuntimeError) as e:
        fake_rule(availability=A.NEVER).finding("m", ops=[OP])
    assert str(e.value) == "K998 declares fix availability 'never' but emits a finding that is fixable"
    with pytest.raises(RuntimeError) as e:
        fake_rule(availability=A.ALWAYS).finding("m")
    assert str(e.value) == "K998 declares fix availability 'always' but emits a finding that is not fixable"
    with pytest.raises(RuntimeError) as e:
        fake_rule(availability=A.SOMETIMES).finding("m", needs_decision="--rope-from-target")
    assert str(e.value) == ("K998 declares fix availability 'sometimes' but emits a finding that is fixable and waits "
                            "for --rope-from-target")


def test_a_rules_finding_carries_what_it_was_given():
    r = fake_rule(availability=A.NEEDS_DECISION, category="dtype", severity="warning")
    ev = [Evidence("torch_dtype", "float16", "bfloat16")]
    f = r.finding("msg", evidence=ev, needs_decision="--cast bf16|fp16|fp32")
    assert (f.id, f.category, f.severity, f.message) == ("K998", "dtype", "warning", "msg")
    assert f.evidence == ev and f.evidence is not ev  # a copy: the rule may reuse its list
    assert f.ops == [] and f.needs_decision == "--cast bf16|fp16|fp32" and f.fixable_override is None
    f = r.finding("msg", severity="info", ops=[OP], fixable=False)
    assert f.severity == "info" and f.ops == [OP] and f.evidence == [] and f.fixable is False


# --- what a report shows --------------------------------------------------------------------------------------

def test_evidence_values_are_json():
    e = Evidence("shape", (3, 4), np.int64(7))
    assert e.to_dict() == {"where": "shape", "observed": [3, 4], "expected": 7}
    assert type(e.to_dict()["expected"]) is int
    f = Evidence("norm", np.float32(0.5), np.float64(1.25)).to_dict()
    assert f == {"where": "norm", "observed": 0.5, "expected": 1.25}
    assert type(f["observed"]) is float and type(f["expected"]) is float
    assert Evidence("k").to_dict() == {"where": "k", "observed": None, "expected": None}
    assert Evidence("k", {"a": 1}, "x").to_dict() == {"where": "k", "observed": {"a": 1}, "expected": "x"}
    json.dumps(Evidence("k", np.int32(1), np.float16(2)).to_dict())  # no TypeError


def test_a_finding_as_report_json_has_the_schemas_fields():
    ops = [SetConfig(("max_position_embeddings",), 4096, "target's maximum")]
    f = Finding("K901", "positions", "info", "m", [Evidence("max_position_embeddings", 2048, 4096)], ops)
    d = f.to_dict()
    schema = REPORT_SCHEMA["$defs"]["finding"]
    assert set(schema["required"]) <= set(d) <= set(schema["properties"])
    # K901's name in docs/rules.md: max-positions
    assert d == {"id": "K901", "name": "max-positions", "category": "positions", "severity": "info", "message": "m",
                 "evidence": [{"where": "max_position_embeddings", "observed": 2048, "expected": 4096}],
                 "fixable": True, "needs_decision": None, "fix_ops": [op_to_dict(o) for o in ops]}
    d = Finding("K123", "integrity", "error", "m", needs_decision="--flag").to_dict()
    assert d["name"] == "K123"  # no such rule: its id stands for its name
    assert d["fixable"] is True and d["needs_decision"] == "--flag" and d["fix_ops"] == [] and d["evidence"] == []


# --- Context --------------------------------------------------------------------------------------------------

def test_speculators_layer_keys_are_nested_and_its_top_level_keys_are_not(tmp_path):
    row = engine_rules("vllm", "0.32/v1")
    spec = Context(draft=tiny(tmp_path, "speculators"), target=None, engine=row)
    assert spec.key_path("num_hidden_layers") == ("transformer_layer_config", "num_hidden_layers")
    assert spec.key_path("max_position_embeddings") == ("transformer_layer_config", "max_position_embeddings")
    # the speculators format keeps these at top level (tests/factories.py's speculators config)
    for k in ("draft_vocab_size", "eagle_aux_hidden_state_layer_ids", "torch_dtype", "norm_before_residual",
              "speculators_config", "architectures"):
        assert spec.key_path(k) == (k,), k
    flat = Context(draft=_read(make_draft(tmp_path / "flat", "specforge")), target=None, engine=row)
    assert flat.key_path("num_hidden_layers") == ("num_hidden_layers",)


def test_a_small_tensor_is_read_once_and_an_absent_one_is_none(tmp_path):
    ctx = Context(draft=tiny(tmp_path), target=None, engine=engine_rules("vllm", "0.32/v1"))
    d2t, _ = _vocab_map(TINY)
    a = ctx.array("d2t")
    assert a is not None and a.tolist() == d2t.tolist()
    assert ctx.array("d2t") is a  # cached
    assert ctx.array("embed_tokens.weight") is None  # the specforge draft has none
    assert ctx.unreadable == {}


def _retype(path: Path, name: str, dtype: str) -> None:
    """Rewrite one tensor's dtype in a safetensors header (the format: an 8-byte little-endian header length, the
    JSON header, then the data; offsets unchanged, so the dtype must have the same item size)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header[name]["dtype"] = dtype
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(len(h).to_bytes(8, "little") + h + raw[8 + n:])


def test_a_tensor_that_cannot_be_decoded_is_none_and_recorded(tmp_path):
    # d2t written as 128 one-byte values, then declared F8_E4M3 (1 byte too): a dtype kconvert does not decode
    folder = make_draft(tmp_path / "d", "specforge", tensors=lambda t: t.update(
        d2t=("U8", (TINY.draft_vocab,), np.zeros(TINY.draft_vocab, np.uint8))))
    _retype(folder / "model.safetensors", "d2t", "F8_E4M3")
    ctx = Context(draft=_read(folder), target=None, engine=engine_rules("vllm", "0.32/v1"))
    assert ctx.array("d2t") is None
    assert ctx.unreadable == {"d2t": "cannot decode dtype F8_E4M3 for inspection"}
    ctx.unreadable["d2t"] = "first"
    ctx._cache.clear()
    assert ctx.array("d2t") is None and ctx.unreadable == {"d2t": "first"}  # the first reason is kept


# --- which rules run ------------------------------------------------------------------------------------------

def test_without_a_target_the_rules_that_need_one_are_skipped(tmp_path):
    d = tiny(tmp_path)
    row = engine_rules("vllm", "0.32/v1")
    needs = sorted(k for k, v in documented().items() if v["needs_target"])
    assert needs and skipped_without_target(Context(draft=d, target=None, engine=row)) == needs
    t = load_target(str(make_target(tmp_path / "t")))
    assert skipped_without_target(Context(draft=d, target=t, engine=row)) == []


def test_eagle3_rules_judge_eagle3_and_peagle_where_its_eagle3_classes_load_it(tmp_path):
    d = tiny(tmp_path)
    assert d.method == "eagle3" and eagle3_rules_apply(d, engine_rules("sglang", "0.5.23"))

    class P:
        method = "peagle"
    # vLLM 0.32 registry.py: PEagleDraftModel -> Eagle3LlamaForCausalLM (its row's methods hold peagle)
    assert eagle3_rules_apply(P, engine_rules("vllm", "0.32/v1"))
    assert not eagle3_rules_apply(P, engine_rules("sglang", "0.5.23"))  # no P-EAGLE in SGLang 0.5.23
    assert not eagle3_rules_apply(P, engine_rules("vllm", "0.33"))  # a row whose methods nobody read

    class D:
        method = "dflash"
    assert not eagle3_rules_apply(D, engine_rules("vllm", "0.32/v1"))


def _only(monkeypatch, *rules: Rule):
    monkeypatch.setattr("kconvert.rules.base.REGISTRY", {r.id: r for r in rules})


def test_run_rules_skips_target_rules_and_other_methods_and_sorts_by_severity_then_id(tmp_path, monkeypatch):
    def emit(sev):
        return lambda ctx: iter([Finding("x", "integrity", sev, sev)])

    def tag(rid, sev):
        return lambda ctx: iter([Finding(rid, "integrity", sev, rid)])
    _only(monkeypatch,
          fake_rule("K001", fn=tag("K001", "info")), fake_rule("K003", fn=tag("K003", "error")),
          fake_rule("K002", fn=tag("K002", "warning")), fake_rule("K004", fn=tag("K004", "error")),
          fake_rule("K005", fn=tag("K005", "error"), needs_target=True))
    row = engine_rules("vllm", "0.32/v1")
    out = run_rules(Context(draft=tiny(tmp_path), target=None, engine=row))
    assert [(f.id, f.severity) for f in out] == [("K003", "error"), ("K004", "error"), ("K002", "warning"),
                                                  ("K001", "info")]
    t = load_target(str(make_target(tmp_path / "t")))
    out = run_rules(Context(draft=tiny(tmp_path), target=t, engine=row))
    assert [f.id for f in out] == ["K003", "K004", "K005", "K002", "K001"]


def test_on_another_methods_checkpoint_only_any_method_rules_run(tmp_path, monkeypatch):
    from tests.test_methods import dflash
    d = _read(dflash(tmp_path / "df"))
    assert d.method == "dflash"
    _only(monkeypatch, fake_rule("K001", fn=lambda ctx: iter([Finding("K001", "integrity", "info", "a")])),
          fake_rule("K002", any_method=True, fn=lambda ctx: iter([Finding("K002", "integrity", "info", "b")])))
    assert [f.id for f in run_rules(Context(draft=d, target=None, engine=engine_rules("vllm", "0.32/v1")))] == ["K002"]


def test_a_rule_that_runs_last_sees_what_the_others_did(tmp_path, monkeypatch):
    # K005 (values-unreadable, docs/rules.md) reports on what the other rules could not read: it runs after them,
    # though its id sorts first
    def reader(ctx):
        ctx.unreadable["x"] = "bad"
        return iter(())

    def reporter(ctx):
        return iter([Finding("K005", "integrity", "warning", ",".join(sorted(ctx.unreadable)) or "nothing")])
    _only(monkeypatch, fake_rule("K005", runs_last=True, fn=reporter), fake_rule("K301", fn=reader))
    out = run_rules(Context(draft=tiny(tmp_path), target=None, engine=engine_rules("vllm", "0.32/v1")))
    assert [f.message for f in out] == ["x"]


def test_a_check_that_cannot_run_is_a_failed_check_not_a_crash(tmp_path, monkeypatch):
    def boom(ctx):
        raise ZeroDivisionError("division by zero")
        yield  # pragma: no cover

    def half(ctx):
        raise ValueError("bad shape")
        yield  # pragma: no cover
    _only(monkeypatch, fake_rule("K001", name="fc-width", category="shapes", severity="warning", fn=boom),
          fake_rule("K002", name="half-rule", fn=half))
    out = run_rules(Context(draft=tiny(tmp_path), target=None, engine=engine_rules("vllm", "0.32/v1")))
    assert [(f.id, f.category, f.severity, f.message, [e.to_dict() for e in f.evidence]) for f in out] == [
        ("K001", "shapes", "error", "fc-width: the check could not run on this checkpoint (ZeroDivisionError: "
                                    "division by zero)",
         [{"where": "checkpoint", "observed": "malformed for this check", "expected": None}]),
        ("K002", "integrity", "error", "half-rule: the check could not run on this checkpoint (ValueError: bad shape)",
         [{"where": "checkpoint", "observed": "malformed for this check", "expected": None}]),
    ]
    assert all(f.ops == [] and f.needs_decision is None and not f.fixable for f in out)


def test_on_a_peagle_draft_the_eagle3_rules_run_where_the_engine_loads_it_as_eagle3(tmp_path, monkeypatch):
    from tests.test_methods import peagle_config, peagle_folder
    d = _read(peagle_folder(tmp_path / "p", peagle_config()))
    assert d.method == "peagle"
    _only(monkeypatch, fake_rule("K001", fn=lambda ctx: iter([Finding("K001", "integrity", "info", "a")])),
          fake_rule("K002", any_method=True, fn=lambda ctx: iter([Finding("K002", "integrity", "info", "b")])))
    # vLLM 0.32 loads P-EAGLE with its EAGLE-3 classes (registry.py); SGLang 0.5.23 serves no P-EAGLE
    assert [f.id for f in run_rules(Context(draft=d, target=None, engine=engine_rules("vllm", "0.32/v1")))] == \
        ["K001", "K002"]
    assert [f.id for f in run_rules(Context(draft=d, target=None, engine=engine_rules("sglang", "0.5.23")))] == \
        ["K002"]


def test_rule_severities_reads_every_finding_call_of_the_rule_in_one_pass_over_its_module(tmp_path, monkeypatch):
    """`Rule.severities` from the code (kconvert.rules.base._finding_calls, one traversal per module): a call with
    no severity has the usual one; a constant, a conditional, a local assigned constants (plain or tuple
    assignment) give theirs, in the function the call is in and in a function around it; anything else any."""
    import importlib
    import sys
    from types import SimpleNamespace

    from kconvert.rules.base import SEVERITIES, rule_severities

    (tmp_path / "kc_sev_probe.py").write_text(
        "def plain(ctx):\n"
        "    yield plain.finding('x')\n"
        "def constant(ctx):\n"
        "    yield constant.finding('x', severity='error')\n"
        "def conditional(ctx):\n"
        "    yield conditional.finding('x', severity='error' if ctx else 'info')\n"
        "def local(ctx):\n"
        "    sev, other = 'info', 1\n"
        "    def inner():\n"
        "        level = 'error'\n"
        "        return local.finding('x', severity=level)\n"
        "    yield local.finding('y', severity=sev)\n"
        "    yield inner()\n"
        "def unknown(ctx):\n"
        "    yield unknown.finding('x', severity=ctx.pick())\n"
        "def none(ctx):\n"
        "    yield none.finding('x', severity=None)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("kc_sev_probe")
    try:
        got = {name: rule_severities(SimpleNamespace(fn=getattr(mod, name), severity="warning"))
               for name in ("plain", "constant", "conditional", "local", "unknown", "none")}
    finally:
        sys.modules.pop("kc_sev_probe", None)
    assert got == {"plain": ("warning",), "constant": ("error",), "conditional": ("error", "info"),
                   "local": ("error", "info"), "unknown": tuple(SEVERITIES), "none": ("warning",)}
