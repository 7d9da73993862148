"""Architecture, model_type, layer-count, target-only-field and other-method rules (kconvert/rules/architecture.py:
K101-K105) against the engines' own registries and loaders:

- vLLM 0.32 (installed CPU build) model_executor/models/registry.py `_SPECULATIVE_DECODING_MODELS`: the EAGLE-3
  names and the draft class each builds (llama_eagle3, qwen3_eagle3, deepseek_eagle3); transformers_utils/configs/
  eagle.py: a name that neither starts nor ends with `Eagle3` gets `Eagle3` prefixed before the lookup
  (`LlamaForCausalLM` -> `Eagle3LlamaForCausalLM`, `DeepseekV3ForCausalLM` -> `Eagle3DeepseekV3ForCausalLM`);
  `DeepSeekForCausalLMEagle3` is in no registry (docs/formats-and-engines.md#vllm-032-loading-rules).
- vLLM 0.32 transformers_utils/configs/speculators/algos.py `update_eagle3`: the speculators format picks the
  class from `transformer_layer_config.model_type` (llama -> Llama class, qwen3 -> Eagle3Qwen3ForCausalLM).
- vLLM 0.32 config/speculative.py `hf_config_override`: model_type deepseek_v3 becomes deepseek_mtp (refused for an
  EAGLE-3 draft); kimi_k2 / deepseek_v2 are left alone.
- SGLang: llama_eagle3.py (EntryClass LlamaForCausalLMEagle3) and deepseek_eagle3.py; before PR #24663 the Llama
  draft raised for num_hidden_layers != 1.
- HF PretrainedConfig.architectures is a list of class names.
- The tiny factories (tests/factories.py): target of 8 layers (text_config model_type kimi_k2 inside a kimi_k25
  wrapper); the tiny draft's one decoder layer; the "unknown" draft carries no producer's signature (K004).
- The architecture fix writes per layer family, the engine rows' preferred names (kconvert/engines/expectations.py):
  llama -> LlamaForCausalLMEagle3 (vLLM and SGLang), qwen3 -> Eagle3Qwen3ForCausalLM (vLLM only), mla ->
  Eagle3DeepseekV3ForCausalLM; and how each row asks for another method (its `methods`, from vLLM 0.32
  config/speculative.py and SGLang 0.5.23 spec_info.py; Model Runner V1 refuses DSpark, config/vllm.py).

Engine-free: inspect() of tiny drafts, tens of milliseconds each."""
from __future__ import annotations

import json

from kconvert.commands.inspect import inspect
from kconvert.writer.ops import DeleteConfig
from tests.factories import make_draft, make_target

HD = 32  # the tiny draft's head_dim


def found(folder, rid, *, target=None, engine="vllm", version="0.32/v1"):
    res = inspect(str(folder), target=target, engine=engine, engine_version=version)
    return [f for f in res.findings if f.id == rid]


def ev(f):
    return [e.to_dict() for e in f.evidence]


def ops(f):
    return [(type(o).__name__, o.path, getattr(o, "value", None), o.reason) for o in f.ops]


def qwen3_norms(t):
    """q_norm / k_norm on the first layer: what makes a decoder layer Qwen3's (qwen3_eagle3.py)."""
    t["layers.0.self_attn.q_norm.weight"] = ("BF16", (HD,), None)
    t["layers.0.self_attn.k_norm.weight"] = ("BF16", (HD,), None)


def second_layer(t):
    """A complete second decoder layer (vLLM PR #26164: later layers take H inputs)."""
    for k, (dt, shape, data) in list(t.items()):
        if k.startswith("layers.0."):
            t["layers.1." + k[len("layers.0."):]] = (dt, shape, data)


# --- K101 -----------------------------------------------------------------------------------------------------

def test_names_vllm_maps_after_prefixing_eagle3_are_clean(tmp_path):
    # LlamaForCausalLM -> Eagle3LlamaForCausalLM (llama); LlamaForCausalLMEagle3 and Eagle3LlamaForCausalLM as they are
    for i, arch in enumerate(["LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM"]):
        d = make_draft(tmp_path / f"d{i}", "unknown", config=lambda c, a=arch: c.update(architectures=[a]))
        assert found(d, "K101") == [], arch
    # MLA: DeepseekV3ForCausalLM -> Eagle3DeepseekV3ForCausalLM
    d = make_draft(tmp_path / "mla", "torchspec", family="mla",
                   config=lambda c: c.update(architectures=["DeepseekV3ForCausalLM"]))
    assert found(d, "K101") == []


def test_a_name_vllm_does_not_map_is_rewritten_to_the_preferred_one(tmp_path):
    d = make_draft(tmp_path / "d", "torchspec", family="mla",
                   config=lambda c: c.update(architectures=["DeepSeekForCausalLMEagle3"]))
    (f,) = found(d, "K101")
    assert f.severity == "error" and f.fixable
    assert f.message == "vllm does not map architectures ['DeepSeekForCausalLMEagle3'] to an EAGLE-3 draft"
    assert ev(f) == [{"where": "architectures", "observed": ["DeepSeekForCausalLMEagle3"],
                      "expected": ["Eagle3DeepseekV3ForCausalLM"]}]
    assert ops(f) == [("SetConfig", ("architectures",), ["Eagle3DeepseekV3ForCausalLM"],
                       "engine maps this architecture")]


def test_a_bare_name_vllm_has_neither_prefixed_nor_as_is(tmp_path):
    # MistralForCausalLM: "Eagle3MistralForCausalLM" is not in vLLM 0.32's registry and neither is the bare name
    d = make_draft(tmp_path / "d", "unknown", config=lambda c: c.update(architectures=["MistralForCausalLM"]))
    (f,) = found(d, "K101")
    assert f.message == "vllm does not map architectures ['MistralForCausalLM'] to an EAGLE-3 draft"
    assert ops(f) == [("SetConfig", ("architectures",), ["LlamaForCausalLMEagle3"], "engine maps this architecture")]


def test_the_first_mapped_name_of_several_decides(tmp_path):
    # an unmapped name first, a mapped one after it: vLLM's lookup finds the Llama class
    d = make_draft(tmp_path / "d", "unknown", config=lambda c: c.update(
        architectures=["SomethingElseEagle3", "LlamaForCausalLMEagle3"]))
    assert found(d, "K101") == []


def test_a_bare_string_is_no_architectures_list(tmp_path):
    d = make_draft(tmp_path / "d", "unknown", config=lambda c: c.update(architectures="LlamaForCausalLMEagle3"))
    (f,) = found(d, "K101")
    assert f.message == 'architectures is "LlamaForCausalLMEagle3", not a list; write ["LlamaForCausalLMEagle3"]'
    assert ev(f) == [{"where": "architectures", "observed": "LlamaForCausalLMEagle3",
                      "expected": ["LlamaForCausalLMEagle3"]}]
    assert ops(f) == [("SetConfig", ("architectures",), ["LlamaForCausalLMEagle3"], "engine maps this architecture")]


def test_an_mla_layer_under_a_llama_architecture_loads_the_wrong_class(tmp_path):
    d = make_draft(tmp_path / "d", "torchspec", family="mla",
                   config=lambda c: c.update(architectures=["LlamaForCausalLMEagle3"]))
    (f,) = found(d, "K101")
    assert f.message == ("architectures ['LlamaForCausalLMEagle3'] load a llama draft but the tensors are those of a "
                         "mla layer")
    assert ops(f) == [("SetConfig", ("architectures",), ["Eagle3DeepseekV3ForCausalLM"],
                       "tensors are those of a mla layer")]
    # the same on SGLang: its registry maps LlamaForCausalLMEagle3 to the Llama draft
    (f,) = found(d, "K101", engine="sglang", version="0.5.23")
    assert f.message.startswith("architectures ['LlamaForCausalLMEagle3'] load a llama draft")


def test_sglang_looks_names_up_as_they_are(tmp_path):
    # SGLang's registry holds LlamaForCausalLMEagle3 (no Eagle3 prefixing): a clean draft is clean there
    d = make_draft(tmp_path / "d", "specforge")
    assert found(d, "K101", engine="sglang", version="0.5.23") == []
    # a name only vLLM's prefixing maps: Qwen3vl is in vLLM's registry as Eagle3Qwen3vlForCausalLM, not SGLang's
    d = make_draft(tmp_path / "d2", "unknown", config=lambda c: c.update(architectures=["Qwen3vlForCausalLM"]))
    assert found(d, "K101") == []
    (f,) = found(d, "K101", engine="sglang", version="0.5.23")
    assert f.message == "sglang does not map architectures ['Qwen3vlForCausalLM'] to an EAGLE-3 draft"


def test_a_bare_name_in_vllms_registry_that_does_not_take_the_prefix(tmp_path):
    # PEagleDraftModel: "Eagle3PEagleDraftModel" is not registered, PEagleDraftModel itself is (-> Llama class)
    d = make_draft(tmp_path / "d", "unknown", config=lambda c: c.update(architectures=["PEagleDraftModel"]))
    assert found(d, "K101") == []


def test_a_qwen3_layer_on_sglang_is_not_fixable(tmp_path):
    d = make_draft(tmp_path / "d", "unknown", tensors=qwen3_norms,
                   config=lambda c: c.update(architectures=["Eagle3Qwen3ForCausalLM"]))
    assert found(d, "K101") == []  # vLLM 0.32 registry: Eagle3Qwen3ForCausalLM -> qwen3_eagle3.py
    (f,) = found(d, "K101", engine="sglang", version="0.5.23")
    assert f.severity == "error" and not f.fixable and f.ops == []
    assert f.message == ("sglang 0.5.23 builds no qwen3-layer EAGLE-3 draft (its Llama draft would skip q_norm/k_norm "
                         "silently); serve this draft with vLLM")
    assert ev(f) == [{"where": "architectures", "observed": ["Eagle3Qwen3ForCausalLM"],
                      "expected": "an architecture this engine maps"}]


def test_a_qwen3_layer_under_a_llama_name_on_vllm_gets_the_qwen3_class(tmp_path):
    d = make_draft(tmp_path / "d", "unknown", tensors=qwen3_norms)  # Eagle3LlamaForCausalLM
    (f,) = found(d, "K101")
    assert f.message == ("architectures ['Eagle3LlamaForCausalLM'] load a llama draft but the tensors are those of a "
                         "qwen3 layer")
    assert ops(f) == [("SetConfig", ("architectures",), ["Eagle3Qwen3ForCausalLM"],
                       "tensors are those of a qwen3 layer")]


def test_speculators_layer_model_type_picks_the_class_on_vllm(tmp_path):
    # qwen3 tensors under transformer_layer_config.model_type llama: algos.py builds the Llama class
    d = make_draft(tmp_path / "d", "speculators", tensors=qwen3_norms)
    (f,) = found(d, "K101")
    assert f.severity == "error" and f.fixable
    assert f.message == ("transformer_layer_config.model_type 'llama' makes vLLM build a llama layer but the tensors "
                         "are those of a qwen3 layer")
    assert ev(f) == [{"where": "transformer_layer_config.model_type", "observed": "llama", "expected": "qwen3"}]
    assert ops(f) == [("SetConfig", ("transformer_layer_config", "model_type"), "qwen3",
                       "tensors are those of a qwen3 layer")]
    # model_type qwen3 over the same tensors: the Qwen3 class, clean
    d = make_draft(tmp_path / "d2", "speculators", tensors=qwen3_norms,
                   config=lambda c: c["transformer_layer_config"].update(model_type="qwen3"))
    assert found(d, "K101") == []


def test_speculators_layer_without_model_type_reads_as_llama(tmp_path):
    d = make_draft(tmp_path / "d", "speculators", tensors=qwen3_norms,
                   config=lambda c: c["transformer_layer_config"].pop("model_type", None))
    (f,) = found(d, "K101")
    assert f.message.startswith("transformer_layer_config.model_type 'llama' makes vLLM build a llama layer")
    assert ops(f)[0][2] == "qwen3"


def test_speculators_model_type_vllm_does_not_know_is_unmapped(tmp_path):
    # update_eagle3 raises for a model_type other than llama/qwen3
    d = make_draft(tmp_path / "d", "speculators",
                   config=lambda c: c["transformer_layer_config"].update(model_type="mistral"))
    # the repair is that key: vLLM's speculators config ignores `architectures` (an op writing them left the draft
    # as refused as before, and fix failed its own self-check: tests/test_fix_wrong_types.py)
    (f,) = found(d, "K101")
    assert f.message == ("transformer_layer_config.model_type \"mistral\" is not one vLLM's speculators config maps "
                         "(llama, qwen3); vLLM refuses the draft ('Unsupported model_type')")
    assert ops(f) == [("SetConfig", ("transformer_layer_config", "model_type"), "llama",
                       "tensors are those of a llama layer")]


def test_speculators_draft_on_sglang_looks_up_its_architectures(tmp_path):
    # SGLang reads no speculators format: Eagle3Speculator is in no SGLang registry
    d = make_draft(tmp_path / "d", "speculators")
    (f,) = found(d, "K101", engine="sglang", version="0.5.23")
    assert f.message == "sglang does not map architectures ['Eagle3Speculator'] to an EAGLE-3 draft"
    assert ops(f) == [("SetConfig", ("architectures",), ["LlamaForCausalLMEagle3"], "engine maps this architecture")]


# --- K102 -----------------------------------------------------------------------------------------------------

def test_an_mla_draft_of_model_type_deepseek_v3_becomes_an_mtp_model(tmp_path):
    d = make_draft(tmp_path / "d", "torchspec", family="mla", config=lambda c: c.update(model_type="deepseek_v3"))
    # no target: deepseek_v2
    (f,) = found(d, "K102")
    assert f.severity == "error" and f.fixable
    assert f.message == "model_type 'deepseek_v3' makes vLLM build an MTP model and refuse this EAGLE-3 draft"
    assert ev(f) == [{"where": "model_type", "observed": "deepseek_v3", "expected": "deepseek_v2"}]
    assert ops(f) == [("SetConfig", ("model_type",), "deepseek_v2", "vLLM turns deepseek_v3 drafts into MTP models")]
    # a Kimi target (the tiny target's text_config model_type kimi_k2): kimi_k2
    (f,) = found(d, "K102", target=str(make_target(tmp_path / "t")))
    assert ops(f)[0][2] == "kimi_k2" and f.evidence[0].expected == "kimi_k2"


def test_k102_reads_a_flat_targets_model_type(tmp_path):
    # Kimi-K2 is DeepseekV3ForCausalLM with model_type kimi_k2 at top level (docs/formats-and-engines.md#the-kimi-targets)
    t = tmp_path / "k2"
    t.mkdir()
    text = json.loads((make_target(tmp_path / "tt") / "config.json").read_text())["text_config"]
    (t / "config.json").write_text(json.dumps(text))
    d = make_draft(tmp_path / "d", "torchspec", family="mla", config=lambda c: c.update(model_type="deepseek_v3"))
    (f,) = found(d, "K102", target=str(t))
    assert ops(f)[0][2] == "kimi_k2"
    # a DeepSeek-V3 target: deepseek_v2
    text["model_type"] = "deepseek_v3"
    (t / "config.json").write_text(json.dumps(text))
    (f,) = found(d, "K102", target=str(t))
    assert ops(f)[0][2] == "deepseek_v2"


def test_k102_is_silent_where_it_does_not_apply(tmp_path):
    mla = make_draft(tmp_path / "d", "torchspec", family="mla", config=lambda c: c.update(model_type="deepseek_v3"))
    assert found(mla, "K102", engine="sglang", version="0.5.23") == []  # SGLang refuses no MLA model_type
    assert found(make_draft(tmp_path / "k2", "torchspec", family="mla"), "K102") == []  # kimi_k2 loads
    # a Llama layer declaring deepseek_v3 is turned into an MTP model as well: vLLM 0.32-0.34's own code refuses it
    # (Eagle3DeepSeekMTPModel "not supported"; tests/data/vllm_oracle.json probes/llama-specforge/model-type-...),
    # and the repair names the Llama layer's own type
    llama = make_draft(tmp_path / "l", "unknown", config=lambda c: c.update(model_type="deepseek_v3"))
    (f,) = found(llama, "K102")
    assert ops(f)[0][1:3] == (("model_type",), "llama")


# --- K103 -----------------------------------------------------------------------------------------------------

def test_num_hidden_layers_copied_from_the_target(tmp_path):
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(num_hidden_layers=8))
    (f,) = found(d, "K103", target=str(make_target(tmp_path / "t")))  # the tiny target has 8 layers
    assert f.severity == "error" and f.fixable
    assert f.message == "num_hidden_layers is 8 (the target’s layer count) but the draft has 1 layer"
    assert ev(f) == [{"where": "num_hidden_layers", "observed": 8, "expected": 1}]
    assert ops(f) == [("SetConfig", ("num_hidden_layers",), 1, "the draft has 1 layer in its tensors")]
    # without a target nothing says whose count it is
    (f,) = found(d, "K103")
    assert f.message == "num_hidden_layers is 8 but the draft has 1 layer"


def test_a_second_layer_the_config_forgot(tmp_path):
    d = make_draft(tmp_path / "d", "unknown", tensors=second_layer)  # num_hidden_layers 1, two complete layers
    (f,) = found(d, "K103")
    assert f.message == "num_hidden_layers is 1 but the draft has 2 layers"
    assert ops(f) == [("SetConfig", ("num_hidden_layers",), 2, "the draft has 2 layers in its tensors")]


def test_a_speculators_draft_gets_the_nested_key(tmp_path):
    d = make_draft(tmp_path / "d", "speculators",
                   config=lambda c: c["transformer_layer_config"].update(num_hidden_layers=3))
    (f,) = found(d, "K103")
    assert f.message == "num_hidden_layers is 3 but the draft has 1 layer"
    assert ops(f)[0][1] == ("transformer_layer_config", "num_hidden_layers")


def test_a_multi_layer_draft_on_an_engine_that_builds_one_layer(tmp_path):
    d = make_draft(tmp_path / "d", "unknown", tensors=second_layer, config=lambda c: c.update(num_hidden_layers=2))
    assert found(d, "K103") == []  # vLLM builds num_hidden_layers layers (PR #26164)
    assert found(d, "K103", engine="sglang", version="0.5.23") == []  # PR #24663: a Llama draft may have more
    (f,) = found(d, "K103", engine="sglang", version="pre-25454")
    assert f.severity == "error" and not f.fixable and f.ops == []
    assert f.message == ("the draft has 2 decoder layers; sglang pre-25454 builds a one-layer llama draft and refuses "
                         "num_hidden_layers != 1 (use vLLM, or SGLang with PR #24663 for a Llama draft)")
    assert ev(f) == [{"where": "num_hidden_layers", "observed": 2, "expected": 1}]


def test_k103_is_silent_on_a_matching_or_absent_count(tmp_path):
    assert found(make_draft(tmp_path / "d", "specforge"), "K103") == []
    assert found(make_draft(tmp_path / "d2", "specforge", config=lambda c: c.pop("num_hidden_layers")), "K103") == []


# --- K104 -----------------------------------------------------------------------------------------------------

def test_target_only_fields_are_removed(tmp_path):
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(
        index_topk=2048, quantization_config={"quant_method": "compressed-tensors"}))
    (f,) = found(d, "K104")
    # quantization_config makes the engine load the bf16 draft as quantised: an error
    assert f.severity == "error" and f.fixable
    assert f.message == "target-only fields in the draft config: quantization_config, index_topk"
    assert ev(f) == [{"where": "quantization_config", "observed": "present", "expected": "absent"},
                     {"where": "index_topk", "observed": "present", "expected": "absent"}]
    assert [(type(o), o.path, o.reason) for o in f.ops] == [
        (DeleteConfig, ("quantization_config",), "describes the target, not the draft"),
        (DeleteConfig, ("index_topk",), "describes the target, not the draft")]


def test_index_fields_alone_are_a_warning(tmp_path):
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(index_head_dim=128, index_n_heads=64))
    (f,) = found(d, "K104")
    assert f.severity == "warning"
    assert f.message == "target-only fields in the draft config: index_head_dim, index_n_heads"
    assert found(make_draft(tmp_path / "d2", "specforge"), "K104") == []


# --- K105 -----------------------------------------------------------------------------------------------------
# The checkpoints are tests/test_methods.py's (each cited there to its published config). What serves each method
# is the engine row's `methods` text (kconvert/engines/expectations.py, read from vLLM 0.32 config/speculative.py
# and SGLang 0.5.23 spec_info.py); the method's name is K105's documented wording (docs/rules.md K105), its
# description the rule's why. The message names the method and the row's options for it; the evidence holds what in
# the files names the method and the engine code the options were read from (the closing parenthesis of the row's
# text), one fact in one place (issue #48).

DFLASH = "a DFlash block-diffusion drafter"
MTP = "a multi-token-prediction (MTP) layer of a DeepSeek-style model"
PEAGLE = "a P-EAGLE draft"


def options(how: str) -> str:
    return how.split(" (", 1)[0]


def serves(how: str) -> str:
    return f"serves it with {options(how)}; kconvert's EAGLE-3 checks do not apply"


def serve(row, how) -> dict:
    """The evidence entry: the options as the message names them, and the code they rest on."""
    opts, source = how.split(" (", 1)
    assert source.endswith(")")
    return {"where": f"{row} serves it with", "observed": opts, "expected": source[:-1]}


def test_k105_why_says_what_each_method_is():
    from kconvert.rules.base import REGISTRY

    why = REGISTRY["K105"].why
    for said in ("drafts a block of tokens in parallel from mask tokens, conditioned on target layers "
                 "`dflash_config.target_layer_ids`", "Markov logit-bias head", "`target_layer_ids` = aux ids - 1",
                 "an EAGLE-3 layer trained for parallel drafting with a mask token",
                 "enorm, hnorm, eh_proj and shared_head around one decoder layer"):
        assert said in why, said


def k105(folder, engine, version):
    from kconvert.engines.expectations import engine_rules

    fs = found(folder, "K105", engine=engine, version=version)
    assert len(fs) == 1 and not fs[0].fixable and fs[0].ops == []
    return fs[0], engine_rules(engine, version)


def test_k105_names_dflash_and_the_command_that_serves_it(tmp_path):
    from tests.test_methods import dflash

    folder = dflash(tmp_path / "df")
    for engine, version in (("vllm", "0.32/v1"), ("sglang", "0.5.23")):
        f, row = k105(folder, engine, version)
        assert f.severity == "warning"
        assert f.message == f"this is {DFLASH}, not an EAGLE-3 draft; {engine} {version} {serves(row.methods['dflash'])}"
        assert ev(f) == [{"where": "architectures", "observed": "['DFlashDraftModel']", "expected": "method dflash"},
                         serve(f"{engine} {version}", row.methods["dflash"])]


def test_k105_on_a_row_whose_methods_nobody_read(tmp_path):
    from tests.test_methods import dflash

    f, row = k105(dflash(tmp_path / "df"), "vllm", "0.33")
    assert row.methods is None and f.severity == "warning"
    assert f.message == (f"this is {DFLASH}, not an EAGLE-3 draft; kconvert has not read whether vllm 0.33 serves "
                         "it, and its EAGLE-3 checks do not apply")


def test_k105_an_mtp_layer_vllm_does_not_map(tmp_path):
    from tests.test_methods import mtp

    kimi = mtp(tmp_path / "kimi", model_type="kimi_k2", archs=["DeepseekV3ForCausalLM"])
    f, row = k105(kimi, "vllm", "0.32/v1")
    key, accepted = row.mtp_requires
    assert key == "model_type" and "deepseek_v3" in accepted and "kimi_k2" not in accepted
    assert f.severity == "error"
    assert f.message == (f"this is {MTP}, not an EAGLE-3 draft; vllm 0.32/v1 serves MTP layers only "
                         f"for model_type {', '.join(accepted)}, and this checkpoint declares ['kimi_k2']")
    assert ev(f)[-1] == {"where": "model_type", "observed": ["kimi_k2"], "expected": list(accepted)}
    assert [e["where"] for e in ev(f)] == ["MTP-layer", "num_nextn_predict_layers", "model_type"]
    assert ev(f)[0] == {"where": "MTP-layer", "observed": "tensors (model.layers.61.eh_proj.weight, "
                        "model.layers.61.enorm.weight, model.layers.61.hnorm.weight)", "expected": "method mtp"}


def test_k105_an_mtp_layer_vllm_maps_and_sglang_by_architecture(tmp_path):
    from tests.test_methods import mtp

    ds = mtp(tmp_path / "ds", model_type="deepseek_v3", archs=["DeepseekV3ForCausalLM"])
    f, row = k105(ds, "vllm", "0.32/v1")
    assert f.severity == "warning"
    assert f.message == f"this is {MTP}, not an EAGLE-3 draft; vllm 0.32/v1 {serves(row.methods['mtp'])}"
    assert ev(f)[-1] == serve("vllm 0.32/v1", row.methods["mtp"])
    # SGLang 0.5.23 requires the architecture (model_config.py:1032), which this one has
    f, row = k105(ds, "sglang", "0.5.23")
    assert row.mtp_requires[0] == "architectures" and f.severity == "warning"
    # an architecture SGLang does not load as NextN
    other = mtp(tmp_path / "o", model_type="deepseek_v3", archs=["KimiK25ForConditionalGeneration"])
    f, row = k105(other, "sglang", "0.5.23")
    assert f.severity == "error"
    assert f.message.endswith(f"sglang 0.5.23 serves MTP layers only for architectures "
                              f"{', '.join(row.mtp_requires[1])}, and this checkpoint declares "
                              "['KimiK25ForConditionalGeneration']")


def test_k105_mtp_declarations_are_read_at_top_level_and_under_text_config(tmp_path):
    from tests.test_methods import mtp

    folder = mtp(tmp_path / "m", model_type="kimi_k25", archs=["DeepseekV3ForCausalLM"])
    cfg = json.loads((folder / "config.json").read_text())
    cfg["text_config"] = {"model_type": "deepseek_v3"}
    (folder / "config.json").write_text(json.dumps(cfg))
    f, _ = k105(folder, "vllm", "0.32/v1")
    assert f.severity == "warning"  # text_config.model_type deepseek_v3 is one vLLM maps
    cfg["text_config"] = {"model_type": "kimi_k2"}
    (folder / "config.json").write_text(json.dumps(cfg))
    f, _ = k105(folder, "vllm", "0.32/v1")
    assert f.severity == "error" and f.message.endswith("this checkpoint declares ['kimi_k25', 'kimi_k2']")
    # a list of architectures (strings only) is read as its names
    cfg.pop("text_config")
    cfg["model_type"] = None
    (folder / "config.json").write_text(json.dumps(cfg))
    f, _ = k105(folder, "vllm", "0.32/v1")
    assert f.message.endswith("this checkpoint declares none")
    f, _ = k105(folder, "sglang", "0.5.23")
    assert f.severity == "warning"  # architectures ['DeepseekV3ForCausalLM']


def test_k105_a_peagle_draft_is_info_where_eagle3_classes_load_it_and_an_error_elsewhere(tmp_path):
    from tests.test_methods import peagle_config, peagle_folder

    folder = peagle_folder(tmp_path / "p", peagle_config())
    f, row = k105(folder, "vllm", "0.32/v1")
    assert f.severity == "info"
    assert f.message == (f"this is {PEAGLE}; vllm 0.32/v1 loads it with its EAGLE-3 classes and serves it with "
                         f"{options(row.methods['peagle'])}; the EAGLE-3 checks below apply")
    assert ev(f) == [{"where": "speculators_model_type", "observed": "'peagle'", "expected": "method peagle"},
                     serve("vllm 0.32/v1", row.methods["peagle"])]
    f, row = k105(folder, "sglang", "0.5.23")
    assert f.severity == "error"
    assert f.message == f"this is {PEAGLE}, not an EAGLE-3 draft; sglang 0.5.23 serves no peagle checkpoint"


def test_k105_is_silent_on_an_eagle3_draft(tmp_path):
    assert found(make_draft(tmp_path / "d", "specforge"), "K105") == []


def test_a_speculators_config_without_its_layer_config_is_refused_by_vllm(tmp_path):
    # vLLM 0.32 transformers_utils/configs/speculators/base.py:88-93: ValueError("Must provide
    # transformer_layer_config"), TypeError("'transformer_layer_config' must be a dictionary if provided").
    # Before this test kconvert read such a config as a Llama layer and said nothing (a false pass).
    def flat(c):
        layer = c.pop("transformer_layer_config")
        c.update({k: v for k, v in layer.items() if k != "architectures"})
    d = make_draft(tmp_path / "d", "speculators", config=flat)
    (f,) = found(d, "K101")
    assert f.severity == "error" and not f.fixable and f.ops == []
    assert f.message == ("the speculators config has no transformer_layer_config object; vLLM refuses it ('Must "
                         "provide transformer_layer_config', which must be a dictionary)")
    assert ev(f) == [{"where": "transformer_layer_config", "observed": None,
                      "expected": "an object with the decoder layer's config"}]
    d = make_draft(tmp_path / "d2", "speculators", config=lambda c: c.update(transformer_layer_config="llama"))
    (f,) = found(d, "K101")
    assert f.evidence[0].observed == "llama" and not f.fixable


# --- every finding in full ------------------------------------------------------------------------------------
# What `kconvert inspect` prints of a finding: severity, the whole message, each evidence tuple, the ops fix writes
# (class, path, value, reason) and whether fix can repair it. The expected architectures are the engine rows'
# preferred names (kconvert/engines/expectations.py, read from vLLM 0.32 registry.py and SGLang's EntryClass):
# llama -> LlamaForCausalLMEagle3 on both engines, qwen3 -> Eagle3Qwen3ForCausalLM (vLLM), mla ->
# Eagle3DeepseekV3ForCausalLM (both). vLLM's speculators layer types are llama and qwen3 only (algos.py).

def whole(f):
    return {"severity": f.severity, "message": f.message, "evidence": ev(f), "ops": ops(f), "fixable": f.fixable}


def test_k101_an_unmapped_name_in_full_on_each_engine(tmp_path):
    # MistralForCausalLM: vLLM looks up Eagle3MistralForCausalLM (not registered) and SGLang the bare name (not
    # registered); the tensors are a Llama layer's, so each engine's Llama name is written
    d = make_draft(tmp_path / "d", "unknown", config=lambda c: c.update(architectures=["MistralForCausalLM"]))
    ev_ = [{"where": "architectures", "observed": ["MistralForCausalLM"], "expected": ["LlamaForCausalLMEagle3"]}]
    op_ = [("SetConfig", ("architectures",), ["LlamaForCausalLMEagle3"], "engine maps this architecture")]
    (f,) = found(d, "K101")
    assert whole(f) == {"severity": "error", "fixable": True, "evidence": ev_, "ops": op_,
                        "message": "vllm does not map architectures ['MistralForCausalLM'] to an EAGLE-3 draft"}
    (f,) = found(d, "K101", engine="sglang", version="0.5.23")
    assert whole(f) == {"severity": "error", "fixable": True, "evidence": ev_, "ops": op_,
                        "message": "sglang does not map architectures ['MistralForCausalLM'] to an EAGLE-3 draft"}


def test_k101_an_mla_layer_under_a_llama_name_in_full_on_each_engine(tmp_path):
    # both registries map LlamaForCausalLMEagle3 to the Llama draft; kv_a_proj_with_mqa makes the tensors MLA's
    d = make_draft(tmp_path / "d", "torchspec", family="mla",
                   config=lambda c: c.update(architectures=["LlamaForCausalLMEagle3"]))
    for engine, version in (("vllm", "0.32/v1"), ("sglang", "0.5.23")):
        (f,) = found(d, "K101", engine=engine, version=version)
        assert whole(f) == {
            "severity": "error", "fixable": True,
            "message": ("architectures ['LlamaForCausalLMEagle3'] load a llama draft but the tensors are those of a "
                        "mla layer"),
            "evidence": [{"where": "architectures", "observed": ["LlamaForCausalLMEagle3"],
                          "expected": ["Eagle3DeepseekV3ForCausalLM"]}],
            "ops": [("SetConfig", ("architectures",), ["Eagle3DeepseekV3ForCausalLM"],
                     "tensors are those of a mla layer")]}, engine


def test_k101_a_llama_layer_under_the_qwen3_name_gets_the_llama_name(tmp_path):
    # vLLM registry: Eagle3Qwen3ForCausalLM builds qwen3_eagle3 (q_norm/k_norm nobody trained); the tensors have no
    # q_norm/k_norm, so they are a Llama layer's (formats/canonical.py layer_family: the tensors decide)
    d = make_draft(tmp_path / "d", "unknown", config=lambda c: c.update(architectures=["Eagle3Qwen3ForCausalLM"]))
    (f,) = found(d, "K101")
    assert whole(f) == {
        "severity": "error", "fixable": True,
        "message": ("architectures ['Eagle3Qwen3ForCausalLM'] load a qwen3 draft but the tensors are those of a "
                    "llama layer"),
        "evidence": [{"where": "architectures", "observed": ["Eagle3Qwen3ForCausalLM"],
                      "expected": ["LlamaForCausalLMEagle3"]}],
        "ops": [("SetConfig", ("architectures",), ["LlamaForCausalLMEagle3"], "tensors are those of a llama layer")]}


def test_k101_a_qwen3_layer_under_a_llama_name_in_full(tmp_path):
    d = make_draft(tmp_path / "d", "unknown", tensors=qwen3_norms)  # the factory's Eagle3LlamaForCausalLM
    (f,) = found(d, "K101")
    assert whole(f) == {
        "severity": "error", "fixable": True,
        "message": ("architectures ['Eagle3LlamaForCausalLM'] load a llama draft but the tensors are those of a "
                    "qwen3 layer"),
        "evidence": [{"where": "architectures", "observed": ["Eagle3LlamaForCausalLM"],
                      "expected": ["Eagle3Qwen3ForCausalLM"]}],
        "ops": [("SetConfig", ("architectures",), ["Eagle3Qwen3ForCausalLM"], "tensors are those of a qwen3 layer")]}


def test_k101_architectures_that_are_no_list_of_names_in_full(tmp_path):
    # HF PretrainedConfig.architectures is a list of class names: a bare string or an object names no class
    d = make_draft(tmp_path / "s", "unknown", config=lambda c: c.update(architectures="LlamaForCausalLMEagle3"))
    (f,) = found(d, "K101")
    assert whole(f) == {
        "severity": "error", "fixable": True,
        "message": 'architectures is "LlamaForCausalLMEagle3", not a list; write ["LlamaForCausalLMEagle3"]',
        "evidence": [{"where": "architectures", "observed": "LlamaForCausalLMEagle3",
                      "expected": ["LlamaForCausalLMEagle3"]}],
        "ops": [("SetConfig", ("architectures",), ["LlamaForCausalLMEagle3"], "engine maps this architecture")]}
    d = make_draft(tmp_path / "o", "unknown", config=lambda c: c.update(architectures={"name": "Llama"}))
    (f,) = found(d, "K101", engine="sglang", version="0.5.23")
    # the value is shown as JSON (double quotes), as it stands in config.json
    assert f.message == 'architectures is {"name": "Llama"}, not a list; write ["LlamaForCausalLMEagle3"]'
    assert ev(f) == [{"where": "architectures", "observed": {"name": "Llama"}, "expected": ["LlamaForCausalLMEagle3"]}]
    assert f.fixable and f.severity == "error"


def test_k101_architectures_null_is_an_empty_list_no_engine_maps(tmp_path):
    # architectures: null names no class; kconvert reads it as [] and writes the Llama name
    d = make_draft(tmp_path / "d", "unknown", config=lambda c: c.update(architectures=None))
    (f,) = found(d, "K101")
    assert whole(f) == {
        "severity": "error", "fixable": True,
        "message": "vllm does not map architectures [] to an EAGLE-3 draft",
        "evidence": [{"where": "architectures", "observed": [], "expected": ["LlamaForCausalLMEagle3"]}],
        "ops": [("SetConfig", ("architectures",), ["LlamaForCausalLMEagle3"], "engine maps this architecture")]}


def test_k101_speculators_qwen3_type_over_llama_tensors_asks_for_llama(tmp_path):
    # algos.py update_eagle3: model_type qwen3 -> Eagle3Qwen3ForCausalLM, which builds q_norm/k_norm the tensors lack
    d = make_draft(tmp_path / "d", "speculators",
                   config=lambda c: c["transformer_layer_config"].update(model_type="qwen3"))
    (f,) = found(d, "K101")
    assert whole(f) == {
        "severity": "error", "fixable": True,
        "message": ("transformer_layer_config.model_type 'qwen3' makes vLLM build a qwen3 layer but the tensors are "
                    "those of a llama layer"),
        "evidence": [{"where": "transformer_layer_config.model_type", "observed": "qwen3", "expected": "llama"}],
        "ops": [("SetConfig", ("transformer_layer_config", "model_type"), "llama",
                 "tensors are those of a llama layer")]}


def test_k101_speculators_mla_tensors_have_no_layer_type_vllm_builds(tmp_path):
    # vLLM's speculators format builds llama or qwen3 layers only (algos.py): no model_type to write for MLA
    # tensors, so no op and not fixable; the factory's MLA layer config says kimi_k2, set to llama here
    d = make_draft(tmp_path / "d", "speculators", family="mla",
                   config=lambda c: c["transformer_layer_config"].update(model_type="llama"))
    (f,) = found(d, "K101")
    assert whole(f) == {
        "severity": "error", "fixable": False, "ops": [],
        "message": ("transformer_layer_config.model_type 'llama' makes vLLM build a llama layer but the tensors are "
                    "those of a mla layer"),
        "evidence": [{"where": "transformer_layer_config.model_type", "observed": "llama", "expected": None}]}


def test_k101_the_speculators_layer_config_missing_in_full(tmp_path):
    d = make_draft(tmp_path / "d", "speculators", config=lambda c: c.update(transformer_layer_config=["llama"]))
    (f,) = found(d, "K101")
    assert whole(f) == {
        "severity": "error", "fixable": False, "ops": [],
        "message": ("the speculators config has no transformer_layer_config object; vLLM refuses it ('Must provide "
                    "transformer_layer_config', which must be a dictionary)"),
        "evidence": [{"where": "transformer_layer_config", "observed": ["llama"],
                      "expected": "an object with the decoder layer's config"}]}


def test_k101_a_qwen3_layer_on_sglang_in_full(tmp_path):
    # SGLang 0.5.23's row has no qwen3 architecture to write (no SGLang source read builds a Qwen3 layer)
    d = make_draft(tmp_path / "d", "unknown", tensors=qwen3_norms)
    (f,) = found(d, "K101", engine="sglang", version="0.5.23")
    assert whole(f) == {
        "severity": "error", "fixable": False, "ops": [],
        "message": ("sglang 0.5.23 builds no qwen3-layer EAGLE-3 draft (its Llama draft would skip q_norm/k_norm "
                    "silently); serve this draft with vLLM"),
        "evidence": [{"where": "architectures", "observed": ["Eagle3LlamaForCausalLM"],
                      "expected": "an architecture this engine maps"}]}


# --- K102 in full ---------------------------------------------------------------------------------------------

def k102_target(tmp_path, name, mutate):
    t = make_target(tmp_path / name)
    cfg = json.loads((t / "config.json").read_text())
    mutate(cfg)
    (t / "config.json").write_text(json.dumps(cfg))
    return str(t)


def test_k102_in_full_for_a_kimi_and_another_target(tmp_path):
    d = make_draft(tmp_path / "d", "torchspec", family="mla", config=lambda c: c.update(model_type="deepseek_v3"))

    def full(want):
        return {"severity": "error", "fixable": True,
                "message": "model_type 'deepseek_v3' makes vLLM build an MTP model and refuse this EAGLE-3 draft",
                "evidence": [{"where": "model_type", "observed": "deepseek_v3", "expected": want}],
                "ops": [("SetConfig", ("model_type",), want, "vLLM turns deepseek_v3 drafts into MTP models")]}
    (f,) = found(d, "K102", target=str(make_target(tmp_path / "t")))  # text_config model_type kimi_k2
    assert whole(f) == full("kimi_k2")
    # a Kimi-K2.5 wrapper whose text_config names no model_type: the top-level kimi_k25 says Kimi
    (f,) = found(d, "K102", target=k102_target(tmp_path, "t2", lambda c: c["text_config"].pop("model_type")))
    assert whole(f) == full("kimi_k2")
    # a target that names no model_type at all: not a Kimi target, deepseek_v2
    def anonymous(c):
        c.pop("model_type")
        c["text_config"].pop("model_type")
    (f,) = found(d, "K102", target=k102_target(tmp_path, "t3", anonymous))
    assert whole(f) == full("deepseek_v2")
    (f,) = found(d, "K102")  # no target
    assert whole(f) == full("deepseek_v2")


# --- K004 -----------------------------------------------------------------------------------------------------

def test_k004_an_unknown_producer_in_full(tmp_path):
    # the "unknown" factory draft carries no producer's stamp or signature (docs/rules.md K004); evidence names its
    # architectures with no expectation
    (f,) = found(make_draft(tmp_path / "d", "unknown"), "K004")
    assert whole(f) == {"severity": "info", "fixable": False, "ops": [],
                        "message": "producer not recognised; conventions will not be assumed",
                        "evidence": [{"where": "architectures", "observed": ["Eagle3LlamaForCausalLM"],
                                      "expected": None}]}
    assert found(make_draft(tmp_path / "s", "specforge"), "K004") == []


# --- K105 in full ---------------------------------------------------------------------------------------------
# How each row asks for a method: the engine rows' `methods` (kconvert/engines/expectations.py), read from vLLM
# 0.32 config/speculative.py and SGLang 0.5.23 srt/speculative/spec_info.py; written out here.
VLLM_DFLASH = ('--speculative-config \'{"method": "dflash", "model": DRAFT, "num_speculative_tokens": K}\' '
               "(a DFlash drafter, qwen3_dflash.py; parallel drafting is switched on by the method)")
VLLM_DSPARK = ('--speculative-config \'{"method": "dspark", "model": DRAFT, "num_speculative_tokens": K}\' '
               "(qwen3_dspark.py / gemma4_dspark.py / deepseek_v4 DSpark drafters)")
SGLANG_DSPARK = "--speculative-algorithm DSPARK --speculative-draft-model-path DRAFT (srt/models/dspark.py)"
DSPARK = "a DSpark drafter"
# vLLM 0.32 MTPModelTypes and hf_config_override's rewrites (config/speculative.py), in the row's order
VLLM_MTP_TYPES = ["deepseek_v3", "deepseek_v32", "glm_moe_dsa", "deepseek_v4", "deepseek_v41", "kimi_k3",
                  "deepseek_mtp", "kimi_k3_mtp", "mtp"]


def test_k105_dflash_config_alone_in_full(tmp_path):
    # config/speculative.py reads dflash_config: a DFlash checkpoint under a Llama name is still DFlash; the
    # evidence is the key that says so (where "config", the rest as observed)
    from tests.test_methods import dflash

    folder = dflash(tmp_path / "df")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]
    (folder / "config.json").write_text(json.dumps(cfg))
    f, _ = k105(folder, "vllm", "0.32/v1")
    assert whole(f) == {
        "severity": "warning", "fixable": False, "ops": [],
        "message": f"this is {DFLASH}, not an EAGLE-3 draft; vllm 0.32/v1 {serves(VLLM_DFLASH)}",
        "evidence": [{"where": "config", "observed": "key 'dflash_config'", "expected": "method dflash"},
                     serve("vllm 0.32/v1", VLLM_DFLASH)]}


def test_k105_a_row_nobody_read_in_full(tmp_path):
    from tests.test_methods import dflash

    f, _ = k105(dflash(tmp_path / "df"), "sglang", "post-25454")  # a row read for EAGLE-3 only: methods None
    assert whole(f) == {
        "severity": "warning", "fixable": False, "ops": [],
        "message": (f"this is {DFLASH}, not an EAGLE-3 draft; kconvert has not read whether sglang post-25454 serves "
                    "it, and its EAGLE-3 checks do not apply"),
        "evidence": [{"where": "architectures", "observed": "['DFlashDraftModel']", "expected": "method dflash"}]}


def test_k105_an_mtp_layer_on_a_row_nobody_read_lists_each_piece_of_evidence(tmp_path):
    # vLLM 0.33's row has no `methods` read; the MTP layer's two pieces of evidence are two entries
    from tests.test_methods import mtp

    f, _ = k105(mtp(tmp_path / "ds", model_type="deepseek_v3", archs=["DeepseekV3ForCausalLM"]), "vllm", "0.33")
    assert f.severity == "warning"
    assert f.message == (f"this is {MTP}, not an EAGLE-3 draft; kconvert has not read whether vllm 0.33 serves it, "
                         "and its EAGLE-3 checks do not apply")
    assert [e["where"] for e in ev(f)] == ["MTP-layer", "num_nextn_predict_layers"]

def test_k105_dspark_is_served_by_model_runner_v2_and_sglang_not_v1(tmp_path):
    # speculators_model_type dspark (vLLM 0.32 algos.py update_dspark; vLLM PRs #46995/#47093)
    d = make_draft(tmp_path / "d", "speculators", config=lambda c: c.update(speculators_model_type="dspark"))
    evidence = [{"where": "speculators_model_type", "observed": "'dspark'", "expected": "method dspark"}]
    f, _ = k105(d, "vllm", "0.32")
    assert whole(f) == {
        "severity": "warning", "fixable": False, "ops": [], "evidence": evidence + [serve("vllm 0.32", VLLM_DSPARK)],
        "message": f"this is {DSPARK}, not an EAGLE-3 draft; vllm 0.32 {serves(VLLM_DSPARK)}"}
    # Model Runner V1 refuses DSpark (config/vllm.py _get_v1_model_runner_unsupported_features)
    f, _ = k105(d, "vllm", "0.32/v1")
    assert whole(f) == {
        "severity": "error", "fixable": False, "ops": [], "evidence": evidence,
        "message": f"this is {DSPARK}, not an EAGLE-3 draft; vllm 0.32/v1 serves no dspark checkpoint"}
    f, _ = k105(d, "sglang", "0.5.23")
    assert f.severity == "warning" and f.message == (f"this is {DSPARK}, not an EAGLE-3 draft; sglang 0.5.23 "
                                                     f"{serves(SGLANG_DSPARK)}")
    assert ev(f) == evidence + [serve("sglang 0.5.23", SGLANG_DSPARK)]


def test_k105_an_mtp_layer_vllm_does_not_map_in_full(tmp_path):
    from tests.test_methods import mtp

    f, _ = k105(mtp(tmp_path / "kimi", model_type="kimi_k2", archs=["DeepseekV3ForCausalLM"]), "vllm", "0.32/v1")
    assert whole(f) == {
        "severity": "error", "fixable": False, "ops": [],
        "message": (f"this is {MTP}, not an EAGLE-3 draft; vllm 0.32/v1 serves MTP layers only for "
                    f"model_type {', '.join(VLLM_MTP_TYPES)}, and this checkpoint declares ['kimi_k2']"),
        "evidence": [{"where": "MTP-layer", "observed": "tensors (model.layers.61.eh_proj.weight, "
                      "model.layers.61.enorm.weight, model.layers.61.hnorm.weight)", "expected": "method mtp"},
                     {"where": "num_nextn_predict_layers", "observed": "1", "expected": "method mtp"},
                     {"where": "model_type", "observed": ["kimi_k2"], "expected": VLLM_MTP_TYPES}]}


def test_k105_mtp_evidence_keeps_the_value_after_the_key_as_written(tmp_path):
    # num_nextn_predict_layers " 2" (a string with a leading space): the observed value is everything after the
    # key and its one separating space
    from tests.test_methods import mtp

    folder = mtp(tmp_path / "m", model_type="deepseek_v3", archs=["DeepseekV3ForCausalLM"])
    cfg = json.loads((folder / "config.json").read_text())
    cfg["num_nextn_predict_layers"] = " 2"
    (folder / "config.json").write_text(json.dumps(cfg))
    f, _ = k105(folder, "vllm", "0.32/v1")
    assert f.severity == "warning"
    assert ev(f)[1] == {"where": "num_nextn_predict_layers", "observed": " 2", "expected": "method mtp"}


def test_k105_sglang_reads_the_names_of_an_mtp_architectures_list(tmp_path):
    # SGLang 0.5.23 model_config.py:1032 loads DeepseekV3ForCausalLM drafts as NextN; a non-name in the list is
    # not a name (HF: architectures is a list of class names)
    from tests.test_methods import mtp

    folder = mtp(tmp_path / "m", model_type="kimi_k25", archs=["KimiK25ForConditionalGeneration", 7])
    f, _ = k105(folder, "sglang", "0.5.23")
    accepted = ["DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN"]
    assert f.severity == "error"
    assert f.message == (f"this is {MTP}, not an EAGLE-3 draft; sglang 0.5.23 serves MTP layers "
                         f"only for architectures {', '.join(accepted)}, and this checkpoint declares "
                         "['KimiK25ForConditionalGeneration']")
    assert ev(f)[-1] == {"where": "architectures", "observed": ["KimiK25ForConditionalGeneration"],
                         "expected": accepted}


def test_k105_peagle_on_sglang_in_full(tmp_path):
    from tests.test_methods import peagle_config, peagle_folder

    f, _ = k105(peagle_folder(tmp_path / "p", peagle_config()), "sglang", "0.5.23")
    assert whole(f) == {
        "severity": "error", "fixable": False, "ops": [],
        "message": f"this is {PEAGLE}, not an EAGLE-3 draft; sglang 0.5.23 serves no peagle checkpoint",
        "evidence": [{"where": "speculators_model_type", "observed": "'peagle'", "expected": "method peagle"}]}


def test_k101_a_list_without_names_is_not_called_no_list(tmp_path):
    # HF's PretrainedConfig.architectures is a list of class names; [7] is a list, of none (it was called "not a
    # list" until this test)
    d = make_draft(tmp_path / "d", "unknown", config=lambda c: c.update(architectures=[7]))
    (f,) = found(d, "K101")
    assert f.fixable and ops(f) == [("SetConfig", ("architectures",), ["LlamaForCausalLMEagle3"],
                                     "engine maps this architecture")]
    assert f.message == 'architectures is [7], a list holding no class name; write ["LlamaForCausalLMEagle3"]'
