"""kconvert/rules/norms.py in full: every finding K601-K606 can yield, with its severity, whole message, every
evidence tuple, its ops and whether fix can act on it, against facts outside kconvert:

- vLLM 0.32's draft class (the CPU build in .venv: vllm/model_executor/models/llama_eagle3.py):
  `eagle_config = getattr(config, "eagle_config", None) or {}`; `norm_before_fc = bool(eagle_config.get(
  "norm_before_fc", getattr(config, "norm_before_fc", False)))` (lines 179-187: eagle_config first, then top level);
  `fc_norm` and `norm_output` are read at top level with getattr(..., False) (lines 231, 252); `input_norm.` is
  dropped from the loaded names when norm_before_fc is false (lines 464-465); a missing RMSNorm weight keeps its
  initial 1 (load_weights reports no missing weight: docs/formats-and-engines.md#vllm-032-loading-rules).
- vLLM 0.32's speculators adapter (vllm/transformers_utils/configs/speculators/algos.py lines 33-38):
  `config_dict.get("norm_before_residual", True)`, while speculators' Eagle3SpeculatorConfig defaults it to false
  (docs/rules.md K602); SpecForge and the EAGLE repo train without it.
- docs/rules.md K601-K606 and the engine rows' sources as docs/rules.md cites them: SGLang ignored norm_before_fc
  and input_norm until PR #32334 (so the pre-25454 row does not apply it); after it, the Llama draft applies it and
  no source shows the MLA draft doing so; vLLM's MLA draft (deepseek_eagle3.py) has no input_norm; no SGLang source
  before 0.5.23 applies fc_norm; vLLM and speculators (PR #610) define norm_output as feeding the post-norm state.
- ModelOpt 0.47.0's export template (tests/data/producers-modelopt, tests/factories.py draft_config "modelopt"):
  eagle_config's use_input_layernorm_in_first_layer true, use_last_layernorm and use_mtp_layernorm false;
  hf_spec_export.py writes neither fc nor hidden_norm for a head with use_aux_hidden_state false.

Each input is the tiny draft of tests/factories.py (hidden 64, three aux states: input_norm over the concatenated
states is 3 x 64 = 192 wide, one fc_norm.{i} of 64 per state), changed in one place the test names. Engine-free;
each test takes milliseconds. The rows' keys (`vllm 0.32/v1`, `sglang pre-25454`, ...) are the
`--engine version` a user passes, as the messages print them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from kconvert.rules.base import Evidence
from kconvert.writer.ops import SetConfig
from tests.factories import TINY, make_draft, one_rule, read_folder

H = TINY.hidden  # 64
NORMS = ["layers.0.input_layernorm.weight", "layers.0.hidden_norm.weight",
         "layers.0.post_attention_layernorm.weight", "norm.weight"]  # the draft's four RMSNorms, as vLLM names them


def _full(f) -> dict:
    """Everything `kconvert inspect` prints of a finding, and what `kconvert fix` acts on."""
    return {"severity": f.severity, "message": f.message, "evidence": f.evidence, "ops": f.ops,
            "needs_decision": f.needs_decision, "fixable": f.fixable}


def _norm(n: int):
    return ("BF16", (n,), np.ones(n, np.float32))


def _draft(tmp_path: Path, name: str, producer: str = "specforge", **kw):
    return read_folder(make_draft(tmp_path / name, producer, **kw))


def _drop(*names: str):
    """Remove the named tensors, whatever layer prefix the producer writes (midlayer. or layers.0.): `norm.weight`
    is the final norm only, `hidden_norm.weight` the layer's."""
    def mut(t):
        for k in [k for k in t if any(k == n or k.endswith("." + n) for n in names)]:
            del t[k]
    return mut


def _add_input_norm(t):
    t["input_norm.weight"] = _norm(3 * H)  # one RMSNorm over the three concatenated aux states: 192


def _add_fc_norms(t):
    for i in range(3):  # one per aux state, each of the target's hidden 64
        t[f"fc_norm.{i}.weight"] = _norm(H)


def _set(**kv):
    return lambda c: c.update(kv)


def _set_ec(**kv):
    return lambda c: c["eagle_config"].update(kv)


# --- K601 norms-missing ----------------------------------------------------------------------------------------

def test_k601_a_complete_draft_has_every_norm(tmp_path):
    assert one_rule("K601", _draft(tmp_path, "d")) == []


def test_k601_missing_norms_are_listed_in_layer_order(tmp_path):
    # The final norm and input_layernorm gone (named here in the other order): the layer's first, then the final
    # one; vLLM leaves each at 1.
    d = _draft(tmp_path, "d", tensors=_drop("norm.weight", "input_layernorm.weight"))
    (f,) = one_rule("K601", d)
    assert _full(f) == {"severity": "error",
                        "message": "norm tensor(s) missing, the engine will use weight 1: "
                                   "layers.0.input_layernorm.weight, norm.weight",
                        "evidence": [Evidence("layers.0.input_layernorm.weight", "absent", "present"),
                                     Evidence("norm.weight", "absent", "present")],
                        "ops": [], "needs_decision": None, "fixable": False}


def test_k601_all_four_missing_norms_are_named(tmp_path):
    d = _draft(tmp_path, "d", tensors=_drop("input_layernorm.weight", "hidden_norm.weight",
                                            "post_attention_layernorm.weight", "norm.weight"))
    (f,) = one_rule("K601", d)
    assert _full(f) == {"severity": "error",
                        "message": "norm tensor(s) missing, the engine will use weight 1: "
                                   "layers.0.input_layernorm.weight, layers.0.hidden_norm.weight, "
                                   "layers.0.post_attention_layernorm.weight, norm.weight",
                        "evidence": [Evidence(n, "absent", "present") for n in NORMS], "ops": [],
                        "needs_decision": None, "fixable": False}


def test_k601_a_head_without_aux_states_needs_no_hidden_norm(tmp_path):
    # use_aux_hidden_state false and no fc: ModelOpt writes no hidden_norm for such a head; the final norm is
    # still the engine's, so its absence is reported alone.
    d = _draft(tmp_path, "d", "modelopt", config=_set_ec(use_aux_hidden_state=False),
               tensors=_drop("fc.weight", "hidden_norm.weight", "input_layernorm.weight"))
    (f,) = one_rule("K601", d)
    assert f.message == "norm tensor(s) missing, the engine will use weight 1: layers.0.input_layernorm.weight"
    assert f.evidence == [Evidence("layers.0.input_layernorm.weight", "absent", "present")]
    # ... and with only hidden_norm gone there is nothing to say
    assert one_rule("K601", _draft(tmp_path, "h", "modelopt", config=_set_ec(use_aux_hidden_state=False),
                                tensors=_drop("fc.weight", "hidden_norm.weight"))) == []


def test_k601_hidden_norm_is_needed_while_the_head_has_aux_states(tmp_path):
    # use_aux_hidden_state false but fc present, or fc gone but use_aux_hidden_state not false: an aux head,
    # whose hidden_norm normalises the fc output (vLLM builds it), so its absence is reported.
    for name, cfg, drop in (("f", _set_ec(use_aux_hidden_state=False), ("hidden_norm.weight",)),
                            ("n", None, ("fc.weight", "hidden_norm.weight"))):
        (f,) = one_rule("K601", _draft(tmp_path, name, config=cfg, tensors=_drop(*drop)))
        assert f.message == "norm tensor(s) missing, the engine will use weight 1: layers.0.hidden_norm.weight"
        assert f.evidence == [Evidence("layers.0.hidden_norm.weight", "absent", "present")]


def test_k601_a_checkpoint_without_tensors_is_not_judged(tmp_path):
    # No tensors at all is an integrity finding; listing four absent norms would only repeat it.
    assert one_rule("K601", _draft(tmp_path, "d", tensors=lambda t: t.clear())) == []


# --- K602 norm-before-residual -----------------------------------------------------------------------------

def test_k602_speculators_config_without_the_flag_is_read_true_by_vllm(tmp_path):
    # algos.py: config_dict.get("norm_before_residual", True), the format's own default is false: fix writes false.
    d = _draft(tmp_path, "d", "speculators", config=lambda c: c.pop("norm_before_residual"))
    for version in ("0.32/v1", "0.33"):
        (f,) = one_rule("K602", d, version=version)
        assert _full(f) == {
            "severity": "error",
            "message": "speculators config without norm_before_residual: vLLM reads true, the speculators "
                       "format's default is false",
            "evidence": [Evidence("norm_before_residual", None, False)],
            "ops": [SetConfig(("norm_before_residual",), False, "speculators Eagle3SpeculatorConfig default")],
            "needs_decision": None, "fixable": True}


def test_k602_speculators_flag_written_out_is_read_as_written(tmp_path):
    for name, value in (("f", False), ("t", True)):
        d = _draft(tmp_path, name, "speculators", config=_set(norm_before_residual=value))
        assert one_rule("K602", d) == []


def test_k602_sglang_does_not_read_the_speculators_format(tmp_path):
    # No vLLM adapter default in play: SGLang has no true default to contradict.
    d = _draft(tmp_path, "d", "speculators", config=lambda c: c.pop("norm_before_residual"))
    assert one_rule("K602", d, engine="sglang", version="0.5.23") == []


def test_k602_specforge_and_eagle_drafts_set_true_wait_for_a_decision(tmp_path):
    # Both train with the raw fc output as the residual; a true flag may be a copied config or a real variant.
    for producer in ("specforge", "eagle"):
        (f,) = one_rule("K602", _draft(tmp_path, producer, producer, config=_set(norm_before_residual=True)))
        # fix has no flag that sets it (issue #48: the old decision named `fix --set`, which does not exist): the
        # message names the edit and the measurement that tells the two trainings apart
        assert _full(f) == {
            "severity": "warning",
            "message": f"norm_before_residual is true but {producer} trains with the raw fc output as residual; if "
                       "this draft was, set it to false in config.json (`kconvert score --diagnose` measures both "
                       "readings)",
            "evidence": [Evidence("norm_before_residual", True, False)], "ops": [],
            "needs_decision": None, "fixable": False}


def test_k602_nothing_to_say_when_the_flag_matches_training(tmp_path):
    # specforge without the flag or with false; torchspec with true (not one of the two trained without it)
    assert one_rule("K602", _draft(tmp_path, "a", "specforge")) == []
    assert one_rule("K602", _draft(tmp_path, "f", "specforge", config=_set(norm_before_residual=False))) == []
    assert one_rule("K602", _draft(tmp_path, "t", "torchspec", config=_set(norm_before_residual=True))) == []


# --- K603 norm-before-fc -----------------------------------------------------------------------------------

def test_k603_neither_flag_nor_tensor_and_both_on_vllm(tmp_path):
    assert one_rule("K603", _draft(tmp_path, "n")) == []
    # flag at top level, tensor present: vLLM 0.32 builds and loads input_norm for a Llama draft
    d = _draft(tmp_path, "b", config=_set(norm_before_fc=True), tensors=_add_input_norm)
    assert one_rule("K603", d) == []


def test_k603_tensor_without_the_flag_is_dropped_and_fix_sets_it(tmp_path):
    # llama_eagle3.py:464: input_norm. is dropped unless norm_before_fc; the tensor says the draft was trained with it
    d = _draft(tmp_path, "d", tensors=_add_input_norm)
    (f,) = one_rule("K603", d)
    assert _full(f) == {
        "severity": "error",
        "message": "input_norm.weight is present but norm_before_fc is not set: the engine drops it",
        "evidence": [Evidence("norm_before_fc", False, True)],
        "ops": [SetConfig(("norm_before_fc",), True, "input_norm.weight is present")],
        "needs_decision": None, "fixable": True}


def test_k603_eagle_config_flag_is_read_before_the_top_level_one(tmp_path):
    # llama_eagle3.py:184-187: eagle_config's true wins over a top-level false ...
    d = _draft(tmp_path, "t", config=lambda c: (c.update(norm_before_fc=False),
                                                 c["eagle_config"].update(norm_before_fc=True)),
               tensors=_add_input_norm)
    assert one_rule("K603", d) == []
    # ... and eagle_config's false over a top-level true: the tensor is dropped, the flag read is false; the
    # evidence and the fix name the key vLLM reads first, eagle_config's
    d = _draft(tmp_path, "f", config=lambda c: (c.update(norm_before_fc=True),
                                                 c["eagle_config"].update(norm_before_fc=False)),
               tensors=_add_input_norm)
    (f,) = one_rule("K603", d)
    assert f.message == "input_norm.weight is present but norm_before_fc is not set: the engine drops it"
    assert f.evidence == [Evidence("eagle_config.norm_before_fc", False, True)]
    assert f.ops == [SetConfig(("eagle_config", "norm_before_fc"), True, "input_norm.weight is present")]


def test_k603_top_level_flag_counts_when_eagle_config_does_not_say(tmp_path):
    # eagle_config without the key (SpecForge) and no eagle_config at all (the EAGLE repo): the top level decides
    for name, producer in (("s", "specforge"), ("e", "eagle")):
        d = _draft(tmp_path, name, producer, config=_set(norm_before_fc=True), tensors=_add_input_norm)
        assert one_rule("K603", d) == []


def test_k603_fix_makes_vllm_read_the_flag_true(tmp_path):
    # eagle_config says false and the tensor is there: the op must write where vLLM reads first (found by this
    # test: the op wrote the top level, which an eagle_config false still overrode after fix)
    folder = make_draft(tmp_path / "d", "specforge", config=_set_ec(norm_before_fc=False), tensors=_add_input_norm)
    (f,) = one_rule("K603", read_folder(folder))
    import json
    cfg = json.loads((folder / "config.json").read_text())
    for op in f.ops:  # SetConfig: write value at path
        node = cfg
        for part in op.path[:-1]:
            node = node.setdefault(part, {})
        node[op.path[-1]] = op.value
    # llama_eagle3.py:184-187, as vLLM reads the fixed config
    eagle_config = cfg.get("eagle_config") or {}
    assert bool(eagle_config.get("norm_before_fc", cfg.get("norm_before_fc", False))) is True


def test_k603_flag_without_its_tensor_leaves_the_norm_at_one(tmp_path):
    # Set at top level (EAGLE repo config, no eagle_config) or in eagle_config: the built norm stays 1.
    for name, producer, cfg in (("e", "eagle", _set(norm_before_fc=True)),
                                ("s", "specforge", _set_ec(norm_before_fc=True))):
        (f,) = one_rule("K603", _draft(tmp_path, name, producer, config=cfg))
        assert _full(f) == {"severity": "error",
                            "message": "norm_before_fc is set but input_norm.weight is missing: it stays 1",
                            "evidence": [Evidence("input_norm.weight", "absent", "present")], "ops": [],
                            "needs_decision": None, "fixable": False}


def test_k603_sglang_before_32334_does_not_apply_it(tmp_path):
    # Flag and tensor agree, but SGLang ignored both until PR #32334.
    d = _draft(tmp_path, "d", config=_set(norm_before_fc=True), tensors=_add_input_norm)
    (f,) = one_rule("K603", d, engine="sglang", version="pre-25454")
    assert _full(f) == {
        "severity": "error",
        "message": "sglang pre-25454 does not apply norm_before_fc/input_norm.weight to a llama draft: the draft "
                   "runs without the norm it was trained with (sglang PR #32334: acceptance stayed low)",
        "evidence": [Evidence("input_norm.weight", "present", "an engine version that applies it")], "ops": [],
        "needs_decision": None, "fixable": False}
    # ... and after it, the Llama draft applies it
    assert one_rule("K603", d, engine="sglang", version="post-32334") == []


def test_k603_tensor_without_flag_on_an_engine_that_ignores_it_is_two_findings(tmp_path):
    # fix can set the flag, but SGLang before #32334 would still not apply the norm
    d = _draft(tmp_path, "d", tensors=_add_input_norm)
    assert [f.message for f in one_rule("K603", d, engine="sglang", version="post-25454")] == [
        "input_norm.weight is present but norm_before_fc is not set: the engine drops it",
        "sglang post-25454 does not apply norm_before_fc/input_norm.weight to a llama draft: the draft runs "
        "without the norm it was trained with (sglang PR #32334: acceptance stayed low)"]


def test_k603_vllms_mla_draft_has_no_input_norm(tmp_path):
    # deepseek_eagle3.py builds no input_norm: an MLA draft's tensor is not applied on vLLM 0.32.
    d = _draft(tmp_path, "d", "torchspec", family="mla", config=_set(norm_before_fc=True), tensors=_add_input_norm)
    (f,) = one_rule("K603", d)
    assert f.message == ("vllm 0.32/v1 does not apply norm_before_fc/input_norm.weight to a mla draft: the draft "
                         "runs without the norm it was trained with (sglang PR #32334: acceptance stayed low)")
    assert f.evidence == [Evidence("input_norm.weight", "present", "an engine version that applies it")]
    assert f.fixable is False and f.severity == "error"


def test_k603_an_engine_row_without_a_source_is_a_warning_to_measure(tmp_path):
    # After SGLang PR #32334 no source shows its MLA draft applying input_norm: `kconvert verify` can tell.
    d = _draft(tmp_path, "d", "torchspec", family="mla", config=_set(norm_before_fc=True), tensors=_add_input_norm)
    (f,) = one_rule("K603", d, engine="sglang", version="post-32334")
    assert _full(f) == {
        "severity": "warning",
        "message": "no source kconvert read shows sglang post-32334 applying norm_before_fc to a mla draft; "
                   "`kconvert verify` measures it",
        "evidence": [Evidence("input_norm.weight", "present", None)], "ops": [], "needs_decision": None,
        "fixable": False}


# --- K604 fc-norm ------------------------------------------------------------------------------------------

def test_k604_neither_and_both_on_an_engine_that_applies_them(tmp_path):
    assert one_rule("K604", _draft(tmp_path, "n")) == []
    both = _draft(tmp_path, "b", config=_set(fc_norm=True), tensors=_add_fc_norms)
    assert one_rule("K604", both) == [] and one_rule("K604", both, engine="sglang", version="0.5.23") == []


def test_k604_tensors_without_the_flag_are_unknown_names_and_fix_sets_it(tmp_path):
    # three fc_norm.{i}.weight, one per aux state; llama_eagle3.py:231 builds them only when fc_norm is set
    (f,) = one_rule("K604", _draft(tmp_path, "d", tensors=_add_fc_norms))
    assert _full(f) == {"severity": "error", "message": "3 fc_norm tensors but fc_norm is not set",
                        "evidence": [Evidence("fc_norm", False, True)],
                        "ops": [SetConfig(("fc_norm",), True, "fc_norm tensors are present")],
                        "needs_decision": None, "fixable": True}


def test_k604_flag_without_tensors_leaves_the_norms_at_one(tmp_path):
    (f,) = one_rule("K604", _draft(tmp_path, "d", config=_set(fc_norm=True)))
    assert _full(f) == {"severity": "error", "message": "fc_norm is set but no fc_norm.* tensor exists",
                        "evidence": [Evidence("fc_norm.0.weight", "absent", "present")], "ops": [],
                        "needs_decision": None, "fixable": False}


def test_k604_flag_false_and_no_tensors_is_nothing(tmp_path):
    assert one_rule("K604", _draft(tmp_path, "d", config=_set(fc_norm=False))) == []


def test_k604_an_engine_without_a_source_is_a_warning_with_the_flag_as_written(tmp_path):
    # No SGLang source before 0.5.23 applies fc_norm: with the flag set, only the warning; its evidence is the
    # config's own value (true).
    d = _draft(tmp_path, "d", config=_set(fc_norm=True), tensors=_add_fc_norms)
    (f,) = one_rule("K604", d, engine="sglang", version="pre-25454")
    assert _full(f) == {
        "severity": "warning",
        "message": "3 fc_norm tensors: no source kconvert read shows sglang pre-25454 applying them; "
                   "`kconvert verify` measures it",
        "evidence": [Evidence("fc_norm", True, None)], "ops": [], "needs_decision": None, "fixable": False}


def test_k604_tensors_without_flag_on_an_unsourced_engine_are_two_findings(tmp_path):
    # The flag is absent from the config: the first finding reads it as false, the warning shows it as unwritten.
    d = _draft(tmp_path, "d", tensors=_add_fc_norms)
    first, warn = one_rule("K604", d, engine="sglang", version="post-32334")
    assert first.message == "3 fc_norm tensors but fc_norm is not set"
    assert first.evidence == [Evidence("fc_norm", False, True)]
    assert warn.message == ("3 fc_norm tensors: no source kconvert read shows sglang post-32334 applying them; "
                            "`kconvert verify` measures it")
    assert warn.evidence == [Evidence("fc_norm", None, None)] and warn.severity == "warning"


# --- K605 norm-output --------------------------------------------------------------------------------------

def test_k605_false_or_absent_is_every_engines_default(tmp_path):
    assert one_rule("K605", _draft(tmp_path, "a")) == []
    assert one_rule("K605", _draft(tmp_path, "f", config=_set(norm_output=False))) == []


def test_k605_producers_that_mean_speculators_reading_are_info_on_vllm(tmp_path):
    # speculators PR #610 defines it; TorchSpec, ModelOpt and the EAGLE repo follow that meaning; vLLM reads it so.
    for producer in ("speculators", "torchspec", "modelopt", "eagle"):
        (f,) = one_rule("K605", _draft(tmp_path, producer, producer, config=_set(norm_output=True)))
        assert _full(f) == {
            "severity": "info",
            "message": f"norm_output=True written by {producer}; vllm 0.32/v1 reads it as speculators defines "
                       "it (post-norm state fed forward)",
            "evidence": [Evidence("norm_output", True, None)], "ops": [], "needs_decision": None,
            "fixable": False}


def test_k605_specforges_flag_meant_something_else_before_its_pr_879(tmp_path):
    (f,) = one_rule("K605", _draft(tmp_path, "d", config=_set(norm_output=True)))
    assert _full(f) == {
        "severity": "warning",
        "message": "norm_output=True written by specforge; its meaning differs between SpecForge (before its PR "
                   "#879) and vLLM/speculators, and vllm 0.32/v1's reading is not pinned",
        "evidence": [Evidence("norm_output", True, None)], "ops": [], "needs_decision": None, "fixable": False}


def test_k605_an_engine_whose_reading_is_not_pinned_warns_for_every_producer(tmp_path):
    # SGLang rows before 0.5.23: not pinned. The value is shown as written (a string here, in Python's repr).
    (f,) = one_rule("K605", _draft(tmp_path, "d", "torchspec", config=_set(norm_output="yes")),
                 engine="sglang", version="pre-25454")
    assert f.severity == "warning"
    assert f.message == ("norm_output='yes' written by torchspec; its meaning differs between SpecForge (before "
                         "its PR #879) and vLLM/speculators, and sglang pre-25454's reading is not pinned")
    assert f.evidence == [Evidence("norm_output", "yes", None)]


def test_k605_sure_reading_on_sglang_names_sglang(tmp_path):
    # SGLang 0.5.23 reads norm_output at top level like vLLM (llama_eagle3.py:207, recorded): the row named is the
    # one the user asked about (the message named vLLM on every row until this test)
    (f,) = one_rule("K605", _draft(tmp_path, "d", "torchspec", config=_set(norm_output=True)),
                 engine="sglang", version="0.5.23")
    assert (f.severity, f.message) == ("info", "norm_output=True written by torchspec; sglang 0.5.23 reads it as "
                                               "speculators defines it (post-norm state fed forward)")


# --- K606 modelopt-norm-flags ------------------------------------------------------------------------------

def test_k606_modelopts_template_defaults_are_the_engines_layout(tmp_path):
    # input layernorm in the first layer on, the extra MTP layernorm off: what vLLM's layer does anyway
    assert one_rule("K606", _draft(tmp_path, "d", "modelopt")) == []
    # other producers write none of these flags
    assert one_rule("K606", _draft(tmp_path, "s", "specforge")) == []


def test_k606_flags_off_the_engines_layout_are_listed(tmp_path):
    # No input layernorm in the first layer, and an MTP layernorm: vLLM/SGLang build neither difference.
    d = _draft(tmp_path, "d", "modelopt", config=_set_ec(use_input_layernorm_in_first_layer=False,
                                                         use_mtp_layernorm=True))
    (f,) = one_rule("K606", d)
    assert _full(f) == {
        "severity": "warning",
        "message": "flags the engine ignores: {'use_input_layernorm_in_first_layer': False, "
                   "'use_mtp_layernorm': True}",
        "evidence": [Evidence("eagle_config.use_input_layernorm_in_first_layer", False, None),
                     Evidence("eagle_config.use_mtp_layernorm", True, None)],
        "ops": [], "needs_decision": None, "fixable": False}


def test_k606_each_flag_alone(tmp_path):
    (f,) = one_rule("K606", _draft(tmp_path, "i", "modelopt", config=_set_ec(use_input_layernorm_in_first_layer=False)))
    assert f.message == "flags the engine ignores: {'use_input_layernorm_in_first_layer': False}"
    assert f.evidence == [Evidence("eagle_config.use_input_layernorm_in_first_layer", False, None)]
    (f,) = one_rule("K606", _draft(tmp_path, "m", "modelopt", config=_set_ec(use_mtp_layernorm=True)))
    assert f.message == "flags the engine ignores: {'use_mtp_layernorm': True}"
    assert f.evidence == [Evidence("eagle_config.use_mtp_layernorm", True, None)]


def test_k606_an_unwritten_input_layernorm_flag_is_modelopts_default(tmp_path):
    # Absent from eagle_config: ModelOpt's default (true), nothing to report.
    d = _draft(tmp_path, "d", "modelopt", config=lambda c: c["eagle_config"].pop("use_input_layernorm_in_first_layer"))
    assert one_rule("K606", d) == []
