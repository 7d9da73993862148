"""Positions, rope and dtype (kconvert/rules/positions.py, rope.py, dtype.py: K901, K902, K911, K912 and their helpers) against what lies
outside kconvert:

- vLLM 0.32 (installed CPU build) transformers_utils/config.py `iter_rope_parameters` (lines 644-653): a config's
  rope parameters, one dict per layer type when nested (empty ones skipped), the flat dict itself otherwise,
  nothing when `rope_parameters` is no dict; `patch_legacy_rope_type` (line 563) reads the legacy `type` key as
  `rope_type`; transformers' RopeParameters default type is "default".
- vLLM 0.32 config/speculative.py `_maybe_override_draft_max_position_embeddings` (lines 1677-1710): a draft
  below the target's max_model_len is raised to it, one at or above is left alone; 0.33 raises only when every
  rope type is cache-only (`_CACHE_ONLY_ROPE_TYPES`: default, linear, llama3, ntk, proportional, kconvert's
  engines/expectations.py _VLLM_0_33_ROPE, recorded in tests/data/vllm_oracle.json), and Model Runner V2 lowers the
  served max_model_len to the draft's (config/vllm.py `_limit_max_model_len_to_draft`).
- transformers 5.19 (installed) config classes' `max_position_embeddings` defaults: LlamaConfig 2048
  (models/llama/configuration_llama.py:71), Qwen3Config 32768 (qwen3:70), DeepseekV3Config 4096
  (deepseek_v3:104), DeepseekV2Config 2048 (deepseek_v2:83); vLLM maps kimi_k2 to DeepseekV3Config
  (transformers_utils/config.py:100).
- The safetensors dtype names (BF16, F16, F32: the safetensors format's dtype strings) and torch's dtype names
  (bfloat16, float16, float32).
- The tiny draft and target of tests/factories.py: target max_position_embeddings 4096, rope_theta 50000, yarn
  factor 64, torch_dtype bfloat16; the tiny Llama draft holds 13 floating-point tensors (q/k/v/o, gate/up/down,
  three layer norms, fc, norm, lm_head) plus d2t (I64) and t2d (BOOL).

Engine-free; each inspect() of the tiny draft takes a few tens of milliseconds."""
from __future__ import annotations

import json

import pytest

from kconvert.commands.inspect import inspect
from kconvert.engines.expectations import engine_rules
from kconvert.rules import Decisions
from kconvert.rules.positions import effective_positions, rope_types, vllm_positions
from kconvert.writer.ops import CastTensor, SetConfig
from tests.factories import make_draft, make_target

YARN = {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096}  # the tiny target's
FLOATS = 13  # the tiny Llama draft's floating-point tensors (see the docstring)


def findings(tmp_path, rid, *, producer="specforge", config=None, tensors=None, target="tiny", engine="vllm",
             version="0.32/v1", decisions=None, name="d"):
    d = make_draft(tmp_path / name, producer, config=config, tensors=tensors)
    t = str(make_target(tmp_path / "t")) if target == "tiny" else target
    res = inspect(str(d), target=t, engine=engine, engine_version=version, decisions=decisions)
    return [f for f in res.findings if f.id == rid]


def ev(f):
    return [e.to_dict() for e in f.evidence]


# --- rope_types ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,want", [
    ({}, {"default"}),  # no rope keys: transformers' default rope
    ({"rope_scaling": None, "rope_parameters": None}, {"default"}),
    ({"rope_scaling": {}}, {"default"}),
    ({"rope_scaling": "yarn"}, {"default"}),  # not a dict: nothing to iterate
    ({"rope_scaling": {"type": "yarn", "factor": 4.0}}, {"yarn"}),  # legacy `type` read as rope_type
    ({"rope_scaling": {"rope_type": "llama3", "type": "yarn"}}, {"llama3"}),  # rope_type first
    ({"rope_scaling": {"factor": 2.0}}, {"default"}),  # no type at all
    ({"rope_scaling": {"rope_type": None, "type": "linear"}}, {"linear"}),
    ({"rope_scaling": {"rope_type": "", "type": None}}, {"default"}),
    # rope_parameters (transformers 5) wins over rope_scaling when it is a non-empty dict
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}, "rope_scaling": {"type": "yarn"}}, {"linear"}),
    ({"rope_parameters": {}, "rope_scaling": {"type": "yarn"}}, {"yarn"}),
    ({"rope_parameters": "x", "rope_scaling": {"type": "yarn"}}, {"yarn"}),
    # nested per layer type: one per non-empty value
    ({"rope_parameters": {"full_attention": {"rope_type": "yarn"}, "sliding_attention": {"rope_type": "default"}}},
     {"yarn", "default"}),
    ({"rope_parameters": {"full_attention": {"rope_type": "yarn"}, "sliding_attention": {}}}, {"yarn"}),
    ({"rope_parameters": {"full_attention": {"rope_type": "ntk"}, "sliding_attention": {"factor": 1.0}}},
     {"ntk", "default"}),
    # a flat dict that holds one dict value is not nested (iter_rope_parameters yields it whole)
    ({"rope_parameters": {"rope_type": "yarn", "extra": {"a": 1}}}, {"yarn"}),
    # the speculators format: the layer config nested under transformer_layer_config is the one vLLM builds
    ({"rope_scaling": {"type": "linear"}, "transformer_layer_config": {"rope_scaling": {"type": "yarn"}}},
     {"yarn"}),
    ({"rope_scaling": {"type": "linear"}, "transformer_layer_config": "not a dict"}, {"linear"}),
])
def test_rope_types_are_what_vllm_iterates(cfg, want):
    assert rope_types(cfg) == want


# --- effective_positions --------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,declared,want", [
    ({"model_type": "llama"}, 8192, 8192),  # a declared value is the value
    ({"model_type": "qwen3"}, 1024, 1024),
    ({"model_type": "llama"}, None, 2048),  # LlamaConfig
    ({}, None, 2048),  # no model_type: kconvert reads it as llama (LlamaConfig)
    ({"model_type": None}, None, 2048),
    ({"model_type": "qwen3"}, None, 32768),  # Qwen3Config
    ({"model_type": "deepseek_v3"}, None, 4096),  # DeepseekV3Config
    ({"model_type": "kimi_k2"}, None, 4096),  # vLLM: kimi_k2 -> DeepseekV3Config
    ({"model_type": "deepseek_v2"}, None, 2048),  # DeepseekV2Config
    ({"model_type": "mistral"}, None, None),  # a class kconvert has not read
    ({"model_type": "llama", "transformer_layer_config": {"model_type": "qwen3"}}, None, 32768),
    ({"model_type": "qwen3", "transformer_layer_config": "x"}, None, 32768),
])
def test_effective_positions_are_the_config_class_defaults(cfg, declared, want):
    assert effective_positions(cfg, declared) == want


# --- vllm_positions -------------------------------------------------------------------------------------------

def test_vllm_032_raises_any_draft_below_the_target_and_leaves_the_rest():
    row = engine_rules("vllm", "0.32/v1")
    yarn = {"rope_scaling": YARN}
    assert vllm_positions(row, yarn, 2048, 4096) == (4096, 4096, True)
    assert vllm_positions(row, yarn, 4095, 4096) == (4096, 4096, True)
    # `draft_max_position_embeddings >= target_max_model_len`: left alone at and above
    assert vllm_positions(row, yarn, 4096, 4096) == (4096, 4096, False)
    assert vllm_positions(row, yarn, 8192, 4096) == (8192, 4096, False)
    # absent: LlamaConfig's 2048 is read, below 4096, raised
    assert vllm_positions(row, {"model_type": "llama"}, None, 4096) == (4096, 4096, True)
    # absent, Qwen3Config's 32768 is above the target's 4096: left alone at 32768
    assert vllm_positions(row, {"model_type": "qwen3"}, None, 4096) == (32768, 4096, False)
    # a class kconvert has not read: counted as below (raised)
    assert vllm_positions(row, {"model_type": "mistral"}, None, 4096) == (4096, 4096, True)


def test_vllm_033_raises_only_cache_only_rope_and_v2_lowers_the_served_length():
    v2, v1 = engine_rules("vllm", "0.33"), engine_rules("vllm", "0.33/v1")
    for rope in ({}, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, {"rope_scaling": {"type": "linear"}}):
        assert vllm_positions(v2, rope, 2048, 4096) == (4096, 4096, True), rope
        assert vllm_positions(v1, rope, 2048, 4096) == (4096, 4096, True), rope
    yarn = {"rope_scaling": YARN}
    # yarn is not cache-only: not raised; V2 serves the draft's 2048, V1 keeps the target's 4096
    assert vllm_positions(v2, yarn, 2048, 4096) == (2048, 2048, False)
    assert vllm_positions(v1, yarn, 2048, 4096) == (2048, 4096, False)
    # yarn next to a cache-only type is still not every type cache-only
    mixed = {"rope_parameters": {"full_attention": {"rope_type": "yarn"}, "sliding_attention": {"rope_type": "default"}}}
    assert vllm_positions(v2, mixed, 1024, 4096) == (1024, 1024, False)
    # every one of the five cache-only types at once (one per layer type) is still all cache-only: raised
    five = {"rope_parameters": {f"layer_{t}": {"rope_type": t}
                                for t in ("default", "linear", "llama3", "ntk", "proportional")}}
    assert rope_types(five) == {"default", "linear", "llama3", "ntk", "proportional"}
    assert vllm_positions(v2, five, 2048, 4096) == (4096, 4096, True)
    # at or above the target nothing changes on either runner
    assert vllm_positions(v2, yarn, 4096, 4096) == (4096, 4096, False)
    # an unknown class's absent key: no number to lower the served length to
    assert vllm_positions(v2, {"model_type": "mistral", **yarn}, None, 4096) == (None, 4096, False)


def test_sglang_never_raises_the_draft():
    row = engine_rules("sglang")
    assert vllm_positions(row, {"rope_scaling": YARN}, 2048, 4096) == (2048, 4096, False)
    assert vllm_positions(row, {}, None, 4096) == (2048, 4096, False)


# --- K901 -----------------------------------------------------------------------------------------------------

def test_k901_on_vllm_032_is_info_because_vllm_raises_it(tmp_path):
    (f,) = findings(tmp_path, "K901", config=lambda c: c.update(max_position_embeddings=2048))
    assert f.severity == "info"
    assert f.message == "max_position_embeddings 2048, below the target's 4096; vLLM raises it to the target's"
    assert ev(f) == [{"where": "max_position_embeddings", "observed": 2048, "expected": 4096}]
    assert [(o.path, o.value) for o in f.ops] == [(("max_position_embeddings",), 4096)]
    assert f.ops[0].reason == "target's maximum"


def test_k901_says_when_the_key_is_absent(tmp_path):
    (f,) = findings(tmp_path, "K901", config=lambda c: c.pop("max_position_embeddings"))
    assert f.severity == "info"
    assert f.message == ("max_position_embeddings is not set (the config class's default applies), below the "
                         "target's 4096; vLLM raises it to the target's")
    assert ev(f) == [{"where": "max_position_embeddings", "observed": None, "expected": 4096}]


def test_k901_on_vllm_033_v2_with_yarn_says_it_is_not_raised_and_the_served_length(tmp_path):
    (f,) = findings(tmp_path, "K901", version="0.33", config=lambda c: c.update(max_position_embeddings=2048))
    assert f.severity == "warning"
    assert f.message == ("max_position_embeddings 2048, below the target's 4096; vLLM 0.33 does not raise it for yarn "
                         "rope and serves at most 2048 tokens (the draft's)")


def test_k901_on_vllm_033_v1_with_yarn_serves_the_targets_length(tmp_path):
    (f,) = findings(tmp_path, "K901", version="0.33/v1", config=lambda c: c.update(max_position_embeddings=2048))
    assert f.severity == "warning"
    assert f.message == "max_position_embeddings 2048, below the target's 4096; vLLM 0.33/v1 does not raise it for yarn rope"


def test_k901_on_vllm_033_names_every_rope_type_sorted(tmp_path):
    def cfg(c):
        c.update(max_position_embeddings=1024)
        c.pop("rope_scaling")
        c["rope_parameters"] = {"sliding_attention": {"rope_type": "yarn", "factor": 64.0},
                                "full_attention": {"rope_type": "default"}}
    (f,) = findings(tmp_path, "K901", version="0.33", config=cfg)
    assert f.message.endswith("; vLLM 0.33 does not raise it for default/yarn rope and serves at most 1024 tokens "
                              "(the draft's)")


def test_k901_on_sglang_is_a_warning_without_an_engine_tail(tmp_path):
    (f,) = findings(tmp_path, "K901", engine="sglang", version=None,
                    config=lambda c: c.update(max_position_embeddings=2048))
    assert f.severity == "warning"
    assert f.message == "max_position_embeddings 2048, below the target's 4096"
    assert [(o.path, o.value) for o in f.ops] == [(("max_position_embeddings",), 4096)]


def test_k901_on_vllm_033_for_an_unknown_class_without_the_key_has_no_tail(tmp_path):
    # effective_positions is None (no class default known), so there is no draft figure to speak of
    def cfg(c):
        c.pop("max_position_embeddings")
        c["model_type"] = "mistral"
    (f,) = findings(tmp_path, "K901", version="0.33", config=cfg)
    assert f.severity == "warning"
    assert f.message == ("max_position_embeddings is not set (the config class's default applies), below the "
                         "target's 4096")


def test_k901_is_silent_at_or_above_the_target_and_without_a_target_length(tmp_path):
    assert findings(tmp_path, "K901", config=lambda c: c.update(max_position_embeddings=4096)) == []
    assert findings(tmp_path, "K901", config=lambda c: c.update(max_position_embeddings=8192), name="d2") == []
    assert findings(tmp_path, "K901", target=None, config=lambda c: c.update(max_position_embeddings=2048),
                    name="d3") == []
    t = make_target(tmp_path / "t-nolen")

    cfg = json.loads((t / "config.json").read_text())
    cfg["text_config"].pop("max_position_embeddings")
    (t / "config.json").write_text(json.dumps(cfg))
    d = make_draft(tmp_path / "d4", "specforge", config=lambda c: c.update(max_position_embeddings=2048))
    res = inspect(str(d), target=str(t), engine="vllm", engine_version="0.32/v1")
    assert [f for f in res.findings if f.id == "K901"] == []


def test_k901_sets_the_nested_key_of_a_speculators_draft(tmp_path):
    (f,) = findings(tmp_path, "K901", producer="speculators",
                    config=lambda c: c["transformer_layer_config"].update(max_position_embeddings=2048))
    assert [(o.path, o.value) for o in f.ops] == [(("transformer_layer_config", "max_position_embeddings"), 4096)]


# --- K902 -----------------------------------------------------------------------------------------------------

def test_k902_reports_another_rope_theta_with_both_values(tmp_path):
    (f,) = findings(tmp_path, "K902", config=lambda c: c.update(rope_theta=10000))
    assert f.severity == "warning" and f.ops == [] and not f.fixable
    assert f.message == "rope_theta 10000 != the target's 50000"
    assert ev(f) == [{"where": "rope_theta", "observed": 10000, "expected": 50000}]


def test_k902_compares_rope_theta_as_numbers(tmp_path):
    # 50000.0 and "50000" are the target's 50000 as floats
    assert findings(tmp_path, "K902", config=lambda c: c.update(rope_theta=50000.0)) == []
    assert findings(tmp_path, "K902", config=lambda c: c.update(rope_theta="50000"), name="d2") == []


def test_k902_a_dropped_rope_scaling_waits_for_the_flag(tmp_path):
    (f,) = findings(tmp_path, "K902", config=lambda c: c.pop("rope_scaling"))
    assert f.severity == "warning" and f.ops == []
    assert f.needs_decision == "--rope-from-target (if a converter dropped it)"
    assert f.message == ("the target uses yarn rope scaling and the draft config has no rope_scaling key (dropped by "
                         "a converter, or trained without it?)")
    assert ev(f) == [{"where": "rope_scaling", "observed": None, "expected": YARN}]


def test_k902_with_rope_from_target_copies_the_targets_scaling(tmp_path):
    (f,) = findings(tmp_path, "K902", config=lambda c: c.pop("rope_scaling"),
                    decisions=Decisions(rope_from_target=True))
    assert f.needs_decision is None and f.fixable
    assert [(o.path, o.value, o.reason) for o in f.ops] == [(("rope_scaling",), YARN, "--rope-from-target")]


def test_k902_a_stated_null_is_the_producers_choice(tmp_path):
    (f,) = findings(tmp_path, "K902", config=lambda c: c.update(rope_scaling=None))
    assert f.severity == "info" and f.ops == [] and f.needs_decision is None
    assert f.message == ("the draft states rope_scaling null: it was trained without the target's yarn scaling, so "
                         "positions past the original window are rotated differently from the target (a training "
                         "choice; kconvert keeps it)")
    assert ev(f) == [{"where": "rope_scaling", "observed": None, "expected": YARN}]


def test_k902_a_stated_null_is_overridden_when_asked(tmp_path):
    (f,) = findings(tmp_path, "K902", config=lambda c: c.update(rope_scaling=None),
                    decisions=Decisions(rope_from_target=True))
    assert f.severity == "warning"
    assert [(o.path, o.value) for o in f.ops] == [(("rope_scaling",), YARN)]


def test_k902_the_eagle_reference_trainer_writes_no_rope_keys(tmp_path):
    (f,) = findings(tmp_path, "K902", producer="eagle", config=lambda c: c.pop("rope_scaling"))
    assert f.severity == "info"
    assert f.message.startswith("the draft comes from the EAGLE reference trainer, whose config has no rope_scaling: "
                                "it was trained without the target's yarn scaling")


def test_k902_rope_parameters_with_a_factor_count_as_scaling(tmp_path):
    def cfg(c):
        c.pop("rope_scaling")
        c["rope_parameters"] = {"rope_type": "yarn", "factor": 64.0}
    # no dropped-scaling finding: the rows here read rope_parameters (transformers 5); a transformers 4 stack reads
    # no scaling (it knows rope_scaling only), which the schema finding says as info, with each row's reading
    (f,) = findings(tmp_path, "K902", config=cfg)
    assert f.severity == "info" and f.needs_decision is None
    assert "vllm 0.32, vllm 0.32/v1" in f.message and "yarn x64, rope_theta 50000" in f.message
    assert "trainers and converters on transformers 4 (transformers 4 (rope_scaling + rope_theta)): default, " \
           "rope_theta 50000" in f.message

    def no_factor(c):
        c.pop("rope_scaling")
        c["rope_parameters"] = {"rope_type": "default", "rope_theta": 50000}
    (f,) = findings(tmp_path, "K902", config=no_factor, name="d2")
    assert f.needs_decision == "--rope-from-target (if a converter dropped it)"


def test_k902_another_scaling_kind_or_factor_is_reported(tmp_path):
    (f,) = findings(tmp_path, "K902", config=lambda c: c.update(rope_scaling={"type": "linear", "factor": 2.0}))
    assert f.severity == "warning" and f.ops == []
    assert f.message == "rope scaling ('linear', 2.0) != the target's ('yarn', 64.0)"
    assert ev(f) == [{"where": "rope_scaling", "observed": {"type": "linear", "factor": 2.0}, "expected": YARN}]
    (f,) = findings(tmp_path, "K902", config=lambda c: c.update(rope_scaling={"type": "yarn", "factor": 32.0}),
                    name="d2")
    assert f.message == "rope scaling ('yarn', 32.0) != the target's ('yarn', 64.0)"
    # rope_type is the same field as type (patch_legacy_rope_type)
    assert findings(tmp_path, "K902", config=lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": 64.0}),
                    name="d3") == []


def test_k902_rope_scaling_and_rope_parameters_that_disagree(tmp_path):
    rp = {"rope_type": "linear", "factor": 2.0}
    (f,) = findings(tmp_path, "K902", target=None, config=lambda c: c.update(rope_parameters=rp))
    assert f.severity == "warning"
    assert f.message.startswith("rope_scaling/rope_theta and rope_parameters disagree; each stack's reading: ")
    # transformers 5 lets the rope_scaling dict replace rope_parameters whole, and so does transformers 4: both read
    # yarn x64 here; a differing base is what would split them (next case)
    (f,) = findings(tmp_path, "K902", target=None, name="d1",
                    config=lambda c: c.update(rope_parameters={"rope_type": "yarn", "factor": 64.0, "rope_theta": 1e6},
                                              rope_scaling=None))
    assert f.severity == "warning"
    assert [e["observed"] for e in ev(f)] == ["yarn x64, rope_theta 1e+06", "default, rope_theta 50000"]
    # the same kind and factor spelled with rope_type: they agree
    assert findings(tmp_path, "K902", target=None, name="d2",
                    config=lambda c: c.update(rope_parameters={"rope_type": "yarn", "factor": 64.0})) == []


# --- K911 -----------------------------------------------------------------------------------------------------

def test_k911_two_config_dtypes_that_disagree_are_set_to_the_stored_dtype(tmp_path):
    (f,) = findings(tmp_path, "K911", config=lambda c: c.update(torch_dtype="float16", dtype="bfloat16"))
    assert f.severity == "warning"
    assert f.message == ("config dtypes {'torch_dtype': 'float16', 'dtype': 'bfloat16'} disagree with the stored "
                         "tensors (bfloat16)")
    assert ev(f) == [{"where": "torch_dtype", "observed": "float16", "expected": "bfloat16"},
                     {"where": "dtype", "observed": "bfloat16", "expected": "bfloat16"}]
    assert [(o.path, o.value, o.reason) for o in f.ops] == [
        (("torch_dtype",), "bfloat16", "dtype of the stored tensors"),
        (("dtype",), "bfloat16", "dtype of the stored tensors")]


def test_k911_one_config_dtype_other_than_the_tensors(tmp_path):
    # only torch_dtype, float16 over BF16 tensors
    (f,) = findings(tmp_path, "K911", config=lambda c: c.update(torch_dtype="float16"))
    assert f.message == "config dtypes {'torch_dtype': 'float16'} disagree with the stored tensors (bfloat16)"
    assert [(o.path, o.value) for o in f.ops] == [(("torch_dtype",), "bfloat16")]

    # only dtype: torch_dtype is written too (older stacks read it)
    def only_dtype(c):
        c.pop("torch_dtype")
        c["dtype"] = "float32"
    (f,) = findings(tmp_path, "K911", config=only_dtype, name="d2")
    assert f.message == "config dtypes {'dtype': 'float32'} disagree with the stored tensors (bfloat16)"
    assert [(o.path, o.value) for o in f.ops] == [(("torch_dtype",), "bfloat16"), (("dtype",), "bfloat16")]


def test_k911_is_silent_when_config_and_tensors_agree(tmp_path):
    assert findings(tmp_path, "K911") == []  # torch_dtype bfloat16 over BF16 tensors
    assert findings(tmp_path, "K911", config=lambda c: c.update(dtype="bfloat16"), name="d2") == []
    assert findings(tmp_path, "K911", config=lambda c: c.pop("torch_dtype"), name="d3") == []


def test_k911_the_stored_dtype_is_the_most_common_float_dtype(tmp_path):
    # 12 tensors F16, lm_head BF16: float16 is stored; d2t (I64) and t2d (BOOL) are not floats
    def mostly_f16(t):
        for k, (dt, shape, data) in list(t.items()):
            if dt == "BF16" and k != "lm_head.weight":
                t[k] = ("F16", shape, data)
    (f,) = findings(tmp_path, "K911", tensors=mostly_f16)
    assert f.message == "config dtypes {'torch_dtype': 'bfloat16'} disagree with the stored tensors (float16)"
    assert [(o.path, o.value) for o in f.ops] == [(("torch_dtype",), "float16")]


def test_k911_a_single_f32_tensor_among_bf16_ones_does_not_decide(tmp_path):
    # lm_head F32, the other 12 floats BF16: bfloat16 is stored (most tensors), whatever the names' order ("F32"
    # sorts after "BF16"), so torch_dtype bfloat16 agrees with the files
    def one_f32(t):
        dt, shape, data = t["lm_head.weight"]
        t["lm_head.weight"] = ("F32", shape, data)
    assert findings(tmp_path, "K911", tensors=one_f32) == []


def test_k911_with_cast_names_the_dtype_after_the_cast(tmp_path):
    (f,) = findings(tmp_path, "K911", decisions=Decisions(cast_dtype="F32"))
    assert f.message == "config dtypes {'torch_dtype': 'bfloat16'} disagree with the stored tensors (float32)"
    assert [(o.path, o.value) for o in f.ops] == [(("torch_dtype",), "float32")]


# --- K912 -----------------------------------------------------------------------------------------------------

def _to(dtype):
    def f(t):
        for k, (dt, shape, data) in list(t.items()):
            if dt == "BF16":
                t[k] = (dtype, shape, data)
    return f


def test_k912_fp16_weights_next_to_a_bf16_target(tmp_path):
    (f,) = findings(tmp_path, "K912", tensors=_to("F16"), config=lambda c: c.update(torch_dtype="float16"))
    assert f.severity == "warning" and f.ops == []
    assert f.message == f"weights stored as F16 x{FLOATS}; the target is bfloat16"
    assert f.needs_decision == "--cast bf16|fp16|fp32"
    assert ev(f) == [{"where": "tensors", "observed": {"F16": FLOATS}, "expected": "BF16"}]


def test_k912_is_silent_on_one_dtype_that_is_the_targets_or_without_a_target(tmp_path):
    assert findings(tmp_path, "K912") == []
    assert findings(tmp_path, "K912", target=None, tensors=_to("F16"), name="d2",
                    config=lambda c: c.update(torch_dtype="float16")) == []


def test_k912_several_float_dtypes_without_a_target(tmp_path):
    def mixed(t):
        dt, shape, data = t["lm_head.weight"]
        t["lm_head.weight"] = ("F32", shape, data)
    (f,) = findings(tmp_path, "K912", target=None, tensors=mixed)
    assert f.message == f"weights stored as BF16 x{FLOATS - 1}, F32 x1"
    assert ev(f) == [{"where": "tensors", "observed": {"BF16": FLOATS - 1, "F32": 1}, "expected": None}]


def test_k912_with_cast_casts_every_float_tensor_not_yet_in_that_dtype(tmp_path):
    def mixed(t):
        dt, shape, data = t["lm_head.weight"]
        t["lm_head.weight"] = ("F32", shape, data)
    (f,) = findings(tmp_path, "K912", tensors=mixed, decisions=Decisions(cast_dtype="F16"))
    # --cast names the dtype: the target's bfloat16 is not mentioned
    assert f.message == f"weights stored as BF16 x{FLOATS - 1}, F32 x1"
    assert f.needs_decision is None and f.fixable
    assert len(f.ops) == FLOATS and all(isinstance(o, CastTensor) and o.dtype == "F16" and o.reason == "--cast"
                                        for o in f.ops)
    assert "d2t" not in {o.name for o in f.ops} and "t2d" not in {o.name for o in f.ops}
    assert ev(f) == [{"where": "tensors", "observed": {"BF16": FLOATS - 1, "F32": 1}, "expected": "F16"}]
    # a tensor already in the cast dtype is not cast: cast to BF16 touches only lm_head
    (f,) = findings(tmp_path, "K912", tensors=mixed, decisions=Decisions(cast_dtype="BF16"), name="d2")
    assert [o.name for o in f.ops] == ["lm_head.weight"]


def test_k912_the_cast_dtype_is_judged_even_without_a_target(tmp_path):
    (f,) = findings(tmp_path, "K912", target=None, decisions=Decisions(cast_dtype="F32"))
    assert f.message == f"weights stored as BF16 x{FLOATS}"
    assert len(f.ops) == FLOATS and {o.dtype for o in f.ops} == {"F32"}


def test_k902_judges_rope_theta_only_when_both_sides_state_it(tmp_path):
    # no rope_theta in the draft: nothing to compare (no crash either)
    assert findings(tmp_path, "K902", config=lambda c: c.pop("rope_theta")) == []
    # a target without rope_theta or rope scaling: the draft's 10000 and yarn are not compared with anything
    t = make_target(tmp_path / "t-plain")
    cfg = json.loads((t / "config.json").read_text())
    cfg["text_config"].pop("rope_theta")
    cfg["text_config"].pop("rope_scaling")
    (t / "config.json").write_text(json.dumps(cfg))
    d = make_draft(tmp_path / "d2", "specforge", config=lambda c: c.update(rope_theta=10000))
    res = inspect(str(d), target=str(t), engine="vllm", engine_version="0.32/v1")
    assert [f for f in res.findings if f.id == "K902"] == []


def test_k902_the_eagle_reference_trainers_draft_gets_the_scaling_when_asked(tmp_path):
    (f,) = findings(tmp_path, "K902", producer="eagle", config=lambda c: c.pop("rope_scaling"),
                    decisions=Decisions(rope_from_target=True))
    assert f.severity == "warning" and f.needs_decision is None
    assert [(o.path, o.value) for o in f.ops] == [(("rope_scaling",), YARN)]


def _ints(t):
    """Every floating-point tensor stored as I32 instead (same shapes): a draft with no float weights at all."""
    for k, (dt, shape, data) in list(t.items()):
        if dt == "BF16":
            t[k] = ("I32", shape, None if data is None else data.astype("int32"))


def test_without_float_tensors_k911_sets_the_config_to_its_dtype_key_and_k912_is_silent(tmp_path):
    # no stored float dtype to name: transformers 5's `dtype` is the value both keys get
    (f,) = findings(tmp_path, "K911", tensors=_ints, config=lambda c: c.update(torch_dtype="float16", dtype="bfloat16"))
    assert f.message == "config dtypes {'torch_dtype': 'float16', 'dtype': 'bfloat16'} disagree"
    assert [(o.path, o.value) for o in f.ops] == [(("torch_dtype",), "bfloat16"), (("dtype",), "bfloat16")]
    assert ev(f) == [{"where": "torch_dtype", "observed": "float16", "expected": "bfloat16"},
                     {"where": "dtype", "observed": "bfloat16", "expected": "bfloat16"}]
    # one key alone, no float tensors: nothing to disagree with
    assert findings(tmp_path, "K911", tensors=_ints, name="d2") == []
    # --cast names a dtype, but there are no float tensors to cast: the config is not rewritten to it
    assert findings(tmp_path, "K911", tensors=_ints, decisions=Decisions(cast_dtype="F16"), name="d3") == []
    assert findings(tmp_path, "K912", tensors=_ints, decisions=Decisions(cast_dtype="F16"), name="d4") == []


def test_k901_a_declared_value_counts_whatever_the_config_class(tmp_path):
    # model_type of a class whose default kconvert does not know (positions.CLASS_DEFAULT_POSITIONS holds llama,
    # deepseek_v2/v3, kimi_k2, qwen3): the declared 2048 is what vLLM 0.33 reads and does not raise for yarn
    # rope, so the served length is still the draft's 2048, as for the known classes above
    (f,) = findings(tmp_path, "K901", version="0.33",
                    config=lambda c: c.update(max_position_embeddings=2048, model_type="mistral"))
    assert f.message == ("max_position_embeddings 2048, below the target's 4096; vLLM 0.33 does not raise it for yarn "
                         "rope and serves at most 2048 tokens (the draft's)")
