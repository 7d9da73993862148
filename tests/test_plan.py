"""kconvert/plan: the fix plan (kconvert/plan/__init__.py), the format-conversion steps (plan/conversion.py) and
the diagnoses' readings (plan/candidates.py).

Outside facts checked against: the `kconvert fix` flags as the CLI defines them (kconvert/cli/_common.py
--target/-t, --aux-ids "2,30,58" or 'default', --d2t offsets|absolute; kconvert/cli/fix_cmd.py -o,
--lm-head-from, --decided-by), docs/manual.md's fix line (`kconvert fix ./published-draft -o ./fixed --decided-by
score.json`) and the readings' names it prints ("aux ids [2, 5, 7]", "d2t as absolute", "norm_before_residual
false", "names without the prefix", "lm_head re-selected"), the 60 % of k + 1 threshold docs/manual.md and the
module name for low acceptance (hand arithmetic: 0.6 * 4 = 2.4 exactly in binary floating point, a product by a
power of two), shlex.join's quoting (Python docs: shlex.quote wraps a word with a space in single quotes),
difflib.unified_diff's header lines (Python docs: `--- fromfile` / `+++ tofile`), and the ops the writer applies
(kconvert/writer/ops.py kinds). Expected orders and lists are written by hand. No engine; milliseconds.
"""
from __future__ import annotations

import json

import pytest

from kconvert.plan import candidates as R


# ------------------------------------------------------------------------------------------ readings ----

def test_is_low_below_sixty_percent_of_k_plus_one_or_when_nothing_was_measured():
    assert R.LOW_AL_FRACTION == 0.6
    assert R.is_low(None, 3) is True
    assert R.is_low(2.39, 3) is True      # 0.6 * (3 + 1) = 2.4
    assert R.is_low(2.4, 3) is False      # "below": 2.4 itself is not low
    assert R.is_low(2.41, 3) is False
    assert R.is_low(1.19, 1) is True and R.is_low(1.2, 1) is False  # 0.6 * 2 = 1.2
    assert R.is_low(0.0, 3) is True       # measured, and zero: low, not "unmeasured"


def test_reading_names_as_the_diagnosis_tables_print_them():
    assert R.aux_ids_name([2, 5, 7]) == "aux ids [2, 5, 7]"
    assert R.aux_ids_name(x for x in (2, 30, 58)) == "aux ids [2, 30, 58]"  # any iterable, listed
    assert R.engine_default_name((2, 30, 58)) == "engine default layers [2, 30, 58]"
    assert R.D2T_ABSOLUTE_NAME == "d2t read as absolute ids"
    assert R.d2t_as_name("absolute") == "d2t as absolute"
    assert R.d2t_as_name("offsets") == "d2t as offsets"
    assert R.embeddings_name("the target") == "the target's embeddings"
    assert R.LM_HEAD_RESELECTED_NAME == "lm_head re-selected"
    assert R.NAMES_WITHOUT_PREFIX_NAME == "tensor names without the prefix"
    assert R.norm_name(False) == "norm_before_residual false"
    assert R.norm_name(True) == "norm_before_residual true"


def test_fix_flags_are_the_cli_flags():
    assert R.aux_ids_args([2, 30, 58]) == ["--aux-ids", "2,30,58"]
    assert R.aux_ids_args((7,)) == ["--aux-ids", "7"]
    assert R.AUX_DEFAULT_ARGS == ["--aux-ids", "default"]
    assert R.D2T_ABSOLUTE_ARGS == ["--d2t", "absolute"]
    assert R.lm_head_args("./full") == ["--lm-head-from", "./full"]


def test_fix_command_writes_beside_the_draft_with_target_flags_and_the_deciding_report():
    assert R.fix_command("./published-draft", []) == "kconvert fix ./published-draft -o ./published-draft-fixed"
    assert R.fix_command("./d/", ["--aux-ids", "2,5,7"], target_ref="kimi-k2.5", report_ref="score.json") == (
        "kconvert fix ./d/ -o ./d-fixed --target kimi-k2.5 --aux-ids 2,5,7 --decided-by score.json")
    assert R.fix_command("acme/d", ["--d2t", "absolute"], report_ref="v.json") == (
        "kconvert fix acme/d -o acme/d-fixed --d2t absolute --decided-by v.json")
    assert R.fix_command("my draft", [], target_ref="") == "kconvert fix 'my draft' -o 'my draft-fixed'"


def test_a_candidate_defaults_to_no_flag_known_and_nothing_to_rewrite():
    c = R.Candidate("aux ids [2, 5, 7]", "the ids one layer up")
    assert (c.fix_args, c.overrides, c.d2t_absolute, c.reading) == (None, None, False, None)


# ------------------------------------------------------------------------------------------ the plan ----

from kconvert.errors import InputError  # noqa: E402
from kconvert.plan import Plan, apply_config_ops, build_plan, order_ops  # noqa: E402
from kconvert.rules.base import Finding  # noqa: E402
from kconvert.writer.ops import (CastTensor, DeleteConfig, DropTensor, RebuildT2D, RenameTensor,  # noqa: E402
                                 RewriteD2TOffsets, SetConfig)


def F(id, severity, ops=(), needs=None):
    return Finding(id, "c", severity, f"{id} message", ops=list(ops), needs_decision=needs)


def test_build_plan_sorts_each_finding_into_what_fix_does_with_it():
    """An op-carrying finding is applied; an error needing a flag blocks; a non-error needing one is left as is;
    an error with no op is unfixable; a warning with no op is left; info is dropped; a finding `only` leaves out
    is left only when it is an error (kconvert/plan/__init__.py's Plan field comments)."""
    applied = F("K201", "error", [SetConfig(("a",), 1)])
    blocking = F("K404", "error", needs="--aux-convention")
    as_is = F("K405", "warning", needs="--aux-ids")
    unfixable = F("K301", "error")
    warn = F("K601", "warning")
    info = F("K901", "info")
    p = build_plan([applied, blocking, as_is, unfixable, warn, info], {"a": 0})
    assert p.applied_findings == [applied]
    assert p.blocking == [blocking]
    assert p.left_as_is == [as_is]
    assert p.unfixable == [unfixable]
    assert p.left == [warn]
    assert p.ops == [SetConfig(("a",), 1)]
    assert (p.config_before, p.config_after) == ({"a": 0}, {"a": 1})

    other_err = F("K202", "error", [SetConfig(("b",), 2)])
    other_warn = F("K203", "warning", [SetConfig(("c",), 3)])
    p = build_plan([applied, other_err, other_warn], {"a": 0}, only={"K201"})
    assert p.applied_findings == [applied]
    assert p.left == [other_err]
    assert p.ops == [SetConfig(("a",), 1)]
    p = build_plan([applied, other_err], {"a": 0}, only=set())  # an empty `only` selects everything
    assert p.applied_findings == [applied, other_err]


def test_the_same_op_from_two_findings_is_applied_once_and_config_ops_go_first():
    set_a = SetConfig(("eagle_config", "ids"), [2, 5, 7], "K404")
    drop = DropTensor("fc.bias", "K501")
    p = build_plan([F("K501", "error", [drop]), F("K404", "error", [set_a]),
                    F("K405", "error", [SetConfig(("eagle_config", "ids"), [2, 5, 7], "K404")])], {})
    assert p.ops == [set_a, drop]
    assert p.config_ops == [set_a] and p.tensor_ops == [drop]
    assert p.describe() == ["config eagle_config.ids = [2, 5, 7]", "drop fc.bias"]
    assert p.config_after == {"eagle_config": {"ids": [2, 5, 7]}}
    # the same path and value for another reason: another op (the reason is part of what is recorded)
    p = build_plan([F("K404", "error", [set_a]), F("K405", "error", [SetConfig(("eagle_config", "ids"),
                                                                                [2, 5, 7], "other")])], {})
    assert len(p.ops) == 2


def test_two_tensors_renamed_to_one_name_are_refused():
    with pytest.raises(InputError) as e:
        build_plan([F("K201", "error", [RenameTensor("a", "x"), RenameTensor("b", "x")])], {})
    assert e.value.message == "the fix plan would give two tensors the same name; the checkpoint mixes layouts"
    build_plan([F("K201", "error", [RenameTensor("a", "x"), RenameTensor("b", "y")])], {})  # distinct: fine


def test_order_ops_puts_config_then_renames_then_the_rest_and_points_rewrites_at_renamed_tensors():
    """K201 strips `model.` from `model.d2t` while K502 rewrites `model.d2t` (order_ops' docstring): the rewrite
    must name `d2t`, the name the tensor has once renamed; a chain a -> b -> c ends at c."""
    ops = [RewriteD2TOffsets("model.d2t"), CastTensor("model.w", "BF16"), RenameTensor("model.d2t", "d2t"),
           DeleteConfig(("x",)), RebuildT2D("t2d", "model.d2t", 512), SetConfig(("y",), 1),
           RenameTensor("model.w", "mid.w"), RenameTensor("mid.w", "w"), DropTensor("untouched")]
    assert order_ops(ops) == [
        DeleteConfig(("x",)), SetConfig(("y",), 1),
        RenameTensor("model.d2t", "d2t"), RenameTensor("model.w", "mid.w"), RenameTensor("mid.w", "w"),
        RewriteD2TOffsets("d2t"), CastTensor("w", "BF16"), RebuildT2D("t2d", "d2t", 512), DropTensor("untouched")]


def test_a_rename_cycle_does_not_hang_and_a_two_step_chain_is_followed_to_its_end():
    """a -> b, b -> a: following the renames stops after one pass over them (len(renames) + 1 steps)."""
    out = order_ops([RenameTensor("a", "b"), RenameTensor("b", "a"), DropTensor("a")])
    assert out[-1] in (DropTensor("a"), DropTensor("b"))
    out = order_ops([RenameTensor("a", "b"), RenameTensor("b", "c"), RenameTensor("c", "d"), DropTensor("a")])
    assert out[-1] == DropTensor("d")


def test_config_diff_is_a_unified_diff_of_the_two_configs():
    """difflib.unified_diff with fromfile/tofile names (Python docs): '--- config.json (input)', '+++ config.json
    (output)', then the hunk; json.dumps(indent=2) lines."""
    p = Plan(config_before={"a": 1, "b": 2}, config_after={"a": 1, "b": 3})
    assert p.config_diff() == ('--- config.json (input)\n+++ config.json (output)\n@@ -1,4 +1,4 @@\n {\n'
                               '   "a": 1,\n-  "b": 2\n+  "b": 3\n }')
    assert Plan(config_before={"a": 1}, config_after={"a": 1}).config_diff() == ""


def test_apply_config_ops_applies_only_the_config_ops():
    assert apply_config_ops({"a": 1, "b": 2}, [SetConfig(("a",), 5), DropTensor("a"), DeleteConfig(("b",))]) == {
        "a": 5}


# ------------------------------------------------------------------- format conversion and aux record ----
# The shipped tiny drafts (examples/tiny/drafts, built by examples/build; examples/tiny/build_info.json records the
# layers the drafts were trained on: aux_ids_vllm [2, 5, 7], i.e. SpecForge's output-of-layer [1, 4, 6]). Layer
# names: the speculators format writes `layers.0.*` (the llama-speculators file's own header), SGLang's
# llama_eagle3.py names its decoder layer `midlayer` (the llama-specforge file), vLLM 0.32 reads `layers.0.*`.
# docs/manual.md's format table: vLLM reads the speculators format natively, SGLang does not read it.

from pathlib import Path  # noqa: E402

from kconvert.commands.inspect import inspect  # noqa: E402
from kconvert.errors import UsageError  # noqa: E402
from kconvert.plan import build_fix_plan  # noqa: E402
from kconvert.plan.conversion import conversion_ops, diff_ops, wanted_format  # noqa: E402

TINY = Path(__file__).resolve().parent.parent / "examples" / "tiny"
LAYER_TENSORS = ["hidden_norm.weight", "input_layernorm.weight", "mlp.down_proj.weight", "mlp.gate_proj.weight",
                 "mlp.up_proj.weight", "post_attention_layernorm.weight", "self_attn.k_proj.weight",
                 "self_attn.o_proj.weight", "self_attn.q_proj.weight", "self_attn.v_proj.weight"]


def _res(draft: str, engine: str):
    return inspect(str(TINY / "drafts" / draft), target=str(TINY / "target"), engine=engine)


def _plan(res, to_format=None):
    return build_fix_plan(res.findings, res.draft, res.target, res.engine, res.decisions, to_format=to_format)


def test_diff_ops_deletes_what_is_gone_and_sets_what_is_new_or_changed():
    assert diff_ops({"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 5, "d": 4, "e": None}, "why") == [
        DeleteConfig(("c",), "why"), SetConfig(("b",), 5, "why"), SetConfig(("d",), 4, "why"),
        SetConfig(("e",), None, "why")]  # a key new with the value None is still a new key
    assert diff_ops({"a": None}, {"a": None}, "why") == []


def test_wanted_format_refuses_an_unknown_format_and_defaults_by_engine():
    spec_vllm, spec_sgl, flat_vllm = _res("llama-speculators", "vllm"), _res("llama-speculators", "sglang"), \
        _res("llama-specforge", "vllm")
    with pytest.raises(UsageError) as e:
        wanted_format(flat_vllm.draft, flat_vllm.engine, "gguf")
    assert e.value.message == "--to-format 'gguf': choose flat or speculators"
    assert wanted_format(flat_vllm.draft, flat_vllm.engine, "speculators") == "speculators"
    assert wanted_format(spec_vllm.draft, spec_vllm.engine, None) is None   # vLLM reads it natively
    assert wanted_format(spec_sgl.draft, spec_sgl.engine, None) == "flat"   # SGLang does not read it
    assert wanted_format(flat_vllm.draft, flat_vllm.engine, None) is None


def test_a_speculators_draft_for_sglang_becomes_flat_with_midlayer_names():
    res = _res("llama-speculators", "sglang")
    plan = _plan(res)
    after = plan.config_after
    assert after["architectures"] == ["LlamaForCausalLMEagle3"]  # SGLang's llama_eagle3.py EntryClass
    for k in ("speculators_model_type", "speculators_version", "speculators_config", "transformer_layer_config"):
        assert k not in after
    # SGLang reads the ids at eagle_config, in its output-of-layer convention ([2, 5, 7] - 1); the top-level key
    # is vLLM's only
    assert after["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 4, 6]
    assert "eagle_aux_hidden_state_layer_ids" not in after
    assert DeleteConfig(("eagle_aux_hidden_state_layer_ids",), "vLLM-only key; SGLang reads eagle_config") \
        in plan.ops
    renames = sorted((o.old, o.new, o.reason) for o in plan.ops if isinstance(o, RenameTensor))
    assert renames == [(f"layers.0.{t}", f"midlayer.{t}", "midlayer.* layout") for t in LAYER_TENSORS]
    conv = [o for o in plan.ops if isinstance(o, DeleteConfig) and o.path == ("speculators_config",)]
    assert conv and conv[0].reason == "speculators -> flat layout"
    assert plan.aux_record == {"written": [1, 4, 6], "physical": [2, 5, 7], "engine": "sglang",
                               "engine_rules_version": res.engine.version,
                               "read_from": "eagle_config.eagle_aux_hidden_state_layer_ids"}


def test_a_speculators_draft_for_vllm_needs_no_step_and_keeps_its_ids_at_the_top_level():
    res = _res("llama-speculators", "vllm")
    plan = _plan(res)
    assert plan.ops == []
    assert plan.aux_record == {"written": [2, 5, 7], "physical": [2, 5, 7], "engine": "vllm",
                               "engine_rules_version": res.engine.version,
                               "read_from": "eagle_aux_hidden_state_layer_ids"}


def test_a_flat_draft_to_speculators_for_vllm_gets_the_speculators_architecture_and_layers_0_names():
    res = _res("llama-specforge", "vllm")
    plan = _plan(res, "speculators")
    after = plan.config_after
    assert after["architectures"] == ["Eagle3Speculator"]  # speculators' Eagle3SpeculatorConfig architecture
    assert after["transformer_layer_config"]["architectures"] == ["LlamaForCausalLM"]
    assert after["eagle_aux_hidden_state_layer_ids"] == [2, 5, 7]  # vLLM's input-of-layer ids
    renames = sorted((o.old, o.new, o.reason) for o in plan.ops if isinstance(o, RenameTensor))
    assert renames == [(f"midlayer.{t}", f"layers.0.{t}", "layers.0.* layout") for t in LAYER_TENSORS]
    conv = [o for o in plan.ops if isinstance(o, DeleteConfig) and o.path == ("model_type",)]
    assert conv and conv[0].reason == "flat -> speculators layout"
    assert [o for o in plan.ops if o.kind == "set-config" and o.path == ("architectures",)][0].reason == \
        "flat -> speculators layout"


def test_a_tensor_a_rule_already_renames_is_not_renamed_again_by_the_conversion():
    res = _res("llama-specforge", "vllm")
    rule = [RenameTensor("midlayer.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight", "a rule")]
    ops = conversion_ops(res.draft, res.engine, res.target, res.draft.checkpoint.config, rule, "speculators")
    olds = [o.old for o in ops if isinstance(o, RenameTensor)]
    assert "midlayer.mlp.up_proj.weight" not in olds and len(olds) == len(LAYER_TENSORS) - 1


def test_to_speculators_is_refused_for_sglang_and_for_an_mla_layer_with_the_reason():
    res = _res("llama-specforge", "sglang")
    with pytest.raises(UsageError) as e:
        _plan(res, "speculators")
    assert e.value.message == ("--to-format speculators: SGLang does not read the speculators format; use "
                               "--engine vllm")
    res = _res("mla-torchspec", "vllm")
    with pytest.raises(UsageError) as e:
        _plan(res, "speculators")
    assert e.value.message == ("--to-format speculators: vLLM reads Llama- and Qwen3-layer drafts in the "
                               "speculators format only (configs/speculators/algos.py)")


def test_an_mla_draft_for_sglang_loses_only_the_vllm_key():
    res = _res("mla-torchspec", "sglang")
    assert _plan(res).ops == [DeleteConfig(("eagle_aux_hidden_state_layer_ids",),
                                           "vLLM-only key; SGLang reads eagle_config")]


def test_an_lm_head_source_adds_the_reselect_step_last_pointed_at_the_renamed_d2t():
    """examples/tiny/broken/model-prefixed-keys: every key prefixed `model.` except `lm_head.weight` (its header;
    examples/tiny/README.md's table), so K201 renames `model.d2t` to `d2t`; `--lm-head-from DIR` re-selects the
    head's rows as full[d2t + arange] from DIR's `lm_head.weight`, and must read d2t under the name it has after
    the rename, after every rename."""
    from kconvert.rules.decisions import Decisions
    from kconvert.writer.ops import ReselectLmHead

    full = str(TINY / "drafts" / "llama-fullvocab")
    res = inspect(str(TINY / "broken" / "model-prefixed-keys"), target=str(TINY / "target"), engine="vllm",
                  decisions=Decisions(lm_head_source=full))
    plan = _plan(res)
    assert RenameTensor("model.d2t", "d2t", "vllm layout") in plan.ops
    assert plan.ops[-1] == ReselectLmHead("lm_head.weight", full, "lm_head.weight", "d2t",
                                          "re-select rows full[d2t + arange] from the full-vocabulary head")
    assert [o for o in plan.ops if isinstance(o, ReselectLmHead)] == [plan.ops[-1]]
    assert _plan(_res("llama-specforge", "vllm")).ops and not any(
        isinstance(o, ReselectLmHead) for o in _plan(_res("llama-specforge", "vllm")).ops)


def test_no_aux_record_when_the_draft_records_no_ids():
    """examples/tiny/broken/no-aux-ids: "no aux ids anywhere" (examples/tiny/README.md): which streams the
    written ids name is unknown, so nothing is recorded."""
    res = inspect(str(TINY / "broken" / "no-aux-ids"), target=str(TINY / "target"), engine="vllm")
    assert _plan(res).aux_record is None


def test_engine_default_layers_decided_are_recorded_as_the_streams_trained_on():
    """`--aux-ids default` on a draft that records none (examples/tiny/broken/no-aux-ids): the engine's defaults
    for the target's 8 layers, (2, L//2, L-3) = (2, 4, 5) (kconvert/cli/_common.py's --aux-ids help; the same
    figure examples/tiny/build_info.json records as vllm_default_aux_ids), written at the top level and recorded
    as the streams the ids name."""
    from kconvert.rules.decisions import Decisions

    res = inspect(str(TINY / "broken" / "no-aux-ids"), target=str(TINY / "target"), engine="vllm",
                  decisions=Decisions(aux_ids_default=True))
    assert _plan(res).aux_record == {"written": [2, 4, 5], "physical": [2, 4, 5], "engine": "vllm",
                                     "engine_rules_version": res.engine.version,
                                     "read_from": "eagle_aux_hidden_state_layer_ids"}


def test_build_fix_plan_applies_only_the_rules_only_names():
    """`fix --only K101` on llama-specforge for vLLM (which has no K101 finding): its K404 (an error with ops:
    SpecForge's output-convention ids [1, 4, 6] to vLLM's [2, 5, 7]) is not applied and stays an error left, its
    warnings are dropped, so no op is planned."""
    res = _res("llama-specforge", "vllm")
    plan = build_fix_plan(res.findings, res.draft, res.target, res.engine, res.decisions, only={"K101"})
    assert plan.ops == []
    assert [f.id for f in plan.left] == ["K404"]
    assert plan.config_after == res.draft.checkpoint.config


def test_to_speculators_names_the_target_as_the_verifier():
    """The speculators config records its verifier (speculators' `speculators_config.verifier`: name_or_path and
    architectures); here the target as named and the architectures of examples/tiny/target/config.json."""
    arch = json.loads((TINY / "target" / "config.json").read_text())["architectures"]
    res = _res("llama-specforge", "vllm")
    verifier = _plan(res, "speculators").config_after["speculators_config"]["verifier"]
    assert verifier["name_or_path"] == str(TINY / "target")
    assert verifier["architectures"] == arch == ["KimiK25ForConditionalGeneration"]


def test_the_reselect_step_names_the_heads_tensor_as_the_file_holds_it(tmp_path):
    """A draft whose every key is prefixed `model.` (model.lm_head.weight, model.d2t in its header, written here)
    under `fix --only K404 --lm-head-from DIR`: K201's renames are not applied, so the re-selection reads and
    writes the tensors under the names the file holds. A draft with no lm_head at all gets the head under the
    name the engines load, `lm_head.weight` (vLLM llama_eagle3.py, SGLang llama_eagle3.py)."""
    from kconvert.rules.decisions import Decisions
    from kconvert.writer.ops import ReselectLmHead
    from tests.factories import make_draft, make_target, rename_all

    target = str(make_target(tmp_path / "target"))
    full = str(TINY / "drafts" / "llama-fullvocab")
    pre = make_draft(tmp_path / "pre", "specforge", tensors=lambda t: rename_all(t, lambda k: "model." + k))
    res = inspect(str(pre), target=target, engine="vllm", decisions=Decisions(lm_head_source=full))
    plan = build_fix_plan(res.findings, res.draft, res.target, res.engine, res.decisions, only={"K404"})
    assert not any(isinstance(o, RenameTensor) for o in plan.ops)
    assert plan.ops[-1] == ReselectLmHead("model.lm_head.weight", full, "lm_head.weight", "model.d2t",
                                          "re-select rows full[d2t + arange] from the full-vocabulary head")

    headless = make_draft(tmp_path / "headless", "specforge", tensors=lambda t: t.pop("lm_head.weight"))
    res = inspect(str(headless), target=target, engine="vllm", decisions=Decisions(lm_head_source=full))
    op = _plan(res).ops[-1]
    assert isinstance(op, ReselectLmHead) and (op.name, op.d2t_name) == ("lm_head.weight", "d2t")


def test_fix_command_strips_only_trailing_slashes():
    assert R.fix_command("runs/ckptX/", []) == "kconvert fix runs/ckptX/ -o runs/ckptX-fixed"


def test_dedupe_compares_op_contents_not_their_spelling_and_keeps_going_after_a_duplicate():
    """Two findings proposing the same config value as dicts written in another key order are one op (dict
    equality: Python docs, "Mapping types"); a value read from a tensor is a numpy integer (numpy.int64 is not a
    JSON type) and is still compared; ops after a duplicate are kept; a finding `only` leaves out does not stop
    the ones after it."""
    import numpy as np

    a = SetConfig(("rope_scaling",), {"type": "yarn", "factor": 32.0}, "K301")
    b = SetConfig(("rope_scaling",), {"factor": 32.0, "type": "yarn"}, "K301")
    drop = DropTensor("fc.bias", "K501")
    p = build_plan([F("K301", "error", [a]), F("K302", "error", [b]), F("K501", "error", [drop])], {})
    assert p.ops == [a, drop]
    n = SetConfig(("draft_vocab_size",), np.int64(256), "K503")
    p = build_plan([F("K503", "error", [n]), F("K504", "error", [SetConfig(("draft_vocab_size",), np.int64(256),
                                                                          "K503")])], {})
    assert p.ops == [n]
    sel = F("K201", "error", [SetConfig(("a",), 1)])
    p = build_plan([F("K202", "warning", [SetConfig(("b",), 2)]), sel], {}, only={"K201"})
    assert p.applied_findings == [sel] and p.ops == [SetConfig(("a",), 1)]


def test_the_reselect_step_of_a_draft_without_d2t_names_d2t(tmp_path):
    """A draft whose file holds no d2t: the step still names the tensor the engines read, `d2t` (what `fix
    --dry-run` prints: "re-select lm_head.weight rows as DIR:lm_head.weight[d2t + arange]")."""
    from kconvert.rules.decisions import Decisions
    from kconvert.writer.ops import ReselectLmHead, describe
    from tests.factories import make_draft, make_target

    full = str(TINY / "drafts" / "llama-fullvocab")
    d = make_draft(tmp_path / "nod2t", "specforge", tensors=lambda t: t.pop("d2t"))
    res = inspect(str(d), target=str(make_target(tmp_path / "target")), engine="vllm",
                  decisions=Decisions(lm_head_source=full))
    op = _plan(res).ops[-1]
    assert isinstance(op, ReselectLmHead) and op.d2t_name == "d2t"
    assert describe(op) == f"re-select lm_head.weight rows as {full}:lm_head.weight[d2t + arange]"


def _qwen3(t):
    """Qwen3's q/k norms (transformers' Qwen3Attention: q_norm and k_norm over head_dim), under the layer's prefix."""
    prefix = next(k for k in t if k.endswith("input_layernorm.weight"))[:-len("input_layernorm.weight")]
    dtype, _, data = t[prefix + "input_layernorm.weight"]
    for n in ("q_norm", "k_norm"):
        t[f"{prefix}self_attn.{n}.weight"] = (dtype, (32,), None if data is None else data[:32])


def test_a_speculators_mla_draft_for_vllm_becomes_flat_with_the_deepseek_eagle3_class(tmp_path):
    """vLLM builds a Llama or Qwen3 layer for a speculators draft (vLLM 0.32 configs/speculators/algos.py maps
    only those model types), so an MLA layer must leave the format: the flat layout with vLLM's MLA EAGLE-3 class,
    Eagle3DeepseekV3ForCausalLM (vLLM model_executor/models/deepseek_eagle3.py)."""
    from tests.factories import make_draft, make_target

    d = make_draft(tmp_path / "spec-mla", "speculators", family="mla")
    res = inspect(str(d), target=str(make_target(tmp_path / "target")), engine="vllm")
    assert (res.draft.is_speculators, res.draft.layer_family) == (True, "mla")
    assert wanted_format(res.draft, res.engine, None) == "flat"
    after = _plan(res).config_after
    assert after["architectures"] == ["Eagle3DeepseekV3ForCausalLM"]
    assert "speculators_config" not in after


def test_a_speculators_qwen3_draft_for_sglang_gets_the_llama_eagle3_class(tmp_path):
    """SGLang registers EAGLE-3 drafts as LlamaForCausalLMEagle3 and, for MLA, Eagle3DeepseekV3ForCausalLM
    (sglang/srt/models/llama_eagle3.py, deepseek_eagle3 family); a Qwen3-layer draft has no class of its own
    there, so the flat config names the Llama one."""
    from tests.factories import make_draft, make_target

    d = make_draft(tmp_path / "spec-qwen3", "speculators", tensors=_qwen3)
    res = inspect(str(d), target=str(make_target(tmp_path / "target")), engine="sglang")
    assert (res.draft.is_speculators, res.draft.layer_family) == (True, "qwen3")
    assert _plan(res).config_after["architectures"] == ["LlamaForCausalLMEagle3"]


def test_a_flat_qwen3_draft_to_speculators_keeps_its_qwen3_layer(tmp_path):
    """speculators writes the layer config per draft architecture (vllm-project/speculators: scripts/train.py
    DRAFT_ARCH_CONFIGS: LlamaConfig, Qwen3Config) and vLLM's algos.py maps model_type "qwen3" to
    Eagle3Qwen3ForCausalLM: a Qwen3-layer draft must say qwen3, not llama."""
    from tests.factories import make_draft, make_target

    d = make_draft(tmp_path / "flat-qwen3", "modelopt", tensors=_qwen3)
    res = inspect(str(d), target=str(make_target(tmp_path / "target")), engine="vllm")
    assert (res.draft.is_speculators, res.draft.layer_family) == (False, "qwen3")
    layer = _plan(res, "speculators").config_after["transformer_layer_config"]
    assert (layer["architectures"], layer["model_type"]) == (["Qwen3ForCausalLM"], "qwen3")


def test_to_speculators_without_a_target_names_no_verifier():
    """No target given: the verifier is unknown, recorded as null with no architectures (nothing made up)."""
    res = inspect(str(TINY / "drafts" / "llama-specforge"), target=None, engine="vllm")
    verifier = _plan(res, "speculators").config_after["speculators_config"]["verifier"]
    assert verifier == {"name_or_path": None, "architectures": []}
