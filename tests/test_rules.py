"""Every rule in the registry: one test that provokes its defect (id, severity, evidence, fixability, ops as the
rule's documentation says) and a clean-draft test that proves it stays silent. `COVERAGE` maps each rule id to
the tests that provoke it; `test_every_registered_rule_has_a_provoking_test` fails when a rule has none."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from kconvert.engines.expectations import SGLANG_CURRENT, SGLANG_LEGACY, engine_rules
from kconvert.targets import load_profile, load_target
from kconvert.commands.inspect import InspectResult, inspect
from kconvert.writer.ops import (CastTensor, DeleteConfig, DropTensor, RebuildT2D, RenameTensor, RewriteD2TOffsets,
                               SetConfig)
from kconvert.rules import REGISTRY, Finding, Decisions
from kconvert.rules.architecture import target_not_served
from kconvert.rules.attention import draft_attention_backend
from tests.factories import KIMI, SHAPES, TINY, _vocab_map, make_draft, make_target, rename_all

AUX = "eagle_aux_hidden_state_layer_ids"
EC_AUX = ("eagle_config", AUX)


# --- helpers ----------------------------------------------------------------------------------------------------

def run(tmp_path: Path, producer: str = "torchspec", *, target: str | None = "tiny", engine: str = "vllm",
        engine_version: str | None = None, decisions: Decisions | None = None, name: str = "draft",
        **draft_kw) -> InspectResult:
    """Build a draft and inspect it against the tiny target (a folder), the kimi-k2.5 profile, or none. vLLM's
    row is Model Runner V1's (0.32/v1) unless one is named: the default row follows the machine (V1 where the CPU
    build is installed, V2 where no vLLM is: the core tier), and a check must not."""
    if engine == "vllm" and engine_version is None:
        engine_version = "0.32/v1"
    folder = make_draft(tmp_path / name, producer, **draft_kw)
    if target == "tiny":
        tgt: str | None = str(make_target(tmp_path / "target", "tiny"))
    elif target == "kimi":
        tgt = "kimi-k2.5"
    else:
        tgt = target
    return inspect(str(folder), target=tgt, engine=engine, engine_version=engine_version, decisions=decisions)


def the(res: InspectResult, rid: str, severity: str | None = None) -> Finding:
    """The one finding `rid` (of `severity` when given), with evidence."""
    fs = [f for f in res.findings if f.id == rid and (severity is None or f.severity == severity)]
    assert len(fs) == 1, (rid, severity, [(f.id, f.severity, f.message) for f in res.findings])
    f = fs[0]
    assert f.evidence, f"{rid} carries no evidence"
    assert f.category == REGISTRY[rid].category
    return f


def ids(res: InspectResult) -> set[str]:
    return {f.id for f in res.findings}


def set_ids(ids_: object, *, top: bool = True, nested: bool = True):
    def mut(c: dict) -> None:
        c.pop(AUX, None)
        c.pop("eagle_config", None)
        if top:
            c[AUX] = ids_
        if nested:
            c["eagle_config"] = {AUX: ids_}
    return mut


def to_f16(t: dict) -> None:
    for k, (dt, shape, data) in list(t.items()):
        if dt == "BF16":
            t[k] = ("F16", shape, data)


# --- K0xx: integrity and security -------------------------------------------------------------------------------

def test_no_target_gives_k000_info_naming_the_skipped_checks(tmp_path):
    res = run(tmp_path, target=None)
    f = the(res, "K000", "info")
    assert not f.fixable and f.ops == []
    for rid, r in REGISTRY.items():
        if r.needs_target:
            assert rid in f.message
    assert res.exit_code == 0


def test_pickle_files_are_reported_and_never_unpickled(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("kconvert unpickled a file")

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    monkeypatch.setattr(pickle, "Unpickler", boom)
    folder = make_draft(tmp_path / "draft", "torchspec")
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    (folder / "extra.pt").write_bytes(b"\x80\x04junk")
    res = inspect(str(folder), target=str(make_target(tmp_path / "target")))
    f = the(res, "K001", "warning")
    assert {e.where for e in f.evidence} == {"pytorch_model.bin", "extra.pt"}
    assert f.fixable and f.ops == []  # fix leaves them out of its output: no op needed


def test_auto_map_is_reported_and_deleted_by_fix(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(auto_map={"AutoModel": "modeling_draft.Draft"}))
    f = the(res, "K002", "warning")
    assert f.fixable and f.ops == [DeleteConfig(("auto_map",), f.ops[0].reason)]


def test_python_file_in_the_folder_is_reported_as_remote_code(tmp_path):
    folder = make_draft(tmp_path / "draft", "torchspec")
    (folder / "modeling_draft.py").write_text("raise SystemExit('never imported')\n")
    res = inspect(str(folder))
    f = the(res, "K002", "warning")
    assert any(e.where == "modeling_draft.py" for e in f.evidence)
    assert f.ops == []


def test_folder_without_safetensors_is_k003_error(tmp_path):
    folder = make_draft(tmp_path / "draft", "torchspec")
    (folder / "model.safetensors").unlink()
    res = inspect(str(folder), target=str(make_target(tmp_path / "target")))
    f = the(res, "K003", "error")
    assert not f.fixable
    assert res.exit_code == 1


def test_safetensors_file_outside_the_index_is_k003_info(tmp_path):
    folder = make_draft(tmp_path / "draft", "torchspec", shards=2)
    (folder / "stray.safetensors").write_bytes((folder / "model-00001-of-00002.safetensors").read_bytes())
    res = inspect(str(folder), target=str(make_target(tmp_path / "target")))
    fs = [f for f in res.findings if f.id == "K003"]
    assert [f.severity for f in fs] == ["info"] and "stray.safetensors" in fs[0].message


def test_unreadable_small_tensor_values_are_k005_warning_not_a_silent_pass(tmp_path, monkeypatch):
    from kconvert.errors import InputError
    from kconvert.source.checkpoint import Checkpoint

    real = Checkpoint.read_bytes

    def no_d2t(self, info):
        if info.name == "d2t":
            raise InputError("model.safetensors: not available locally")
        return real(self, info)

    monkeypatch.setattr(Checkpoint, "read_bytes", no_d2t)
    d2t, _ = _vocab_map(TINY)
    res = run(tmp_path, tensors=_d2t(d2t + np.arange(TINY.draft_vocab)))
    f = the(res, "K005", "warning")
    assert "d2t" in f.message and "not available locally" in f.message and not f.fixable
    assert "K502" not in {x.id for x in res.findings}  # the check could not run: K005 says so


def test_unknown_producer_is_k004_info(tmp_path):
    res = run(tmp_path, "unknown")
    f = the(res, "K004", "info")
    assert not f.fixable


# --- K1xx: architecture and config hygiene ----------------------------------------------------------------------

def test_deepseek_eagle3_architecture_is_not_mapped_by_vllm(tmp_path):
    res = run(tmp_path, family="mla", config=lambda c: c.update(architectures=["DeepSeekForCausalLMEagle3"]))
    f = the(res, "K101", "error")
    assert f.fixable
    assert f.ops == [SetConfig(("architectures",), ["Eagle3DeepseekV3ForCausalLM"], f.ops[0].reason)]


def test_mla_tensors_under_a_llama_architecture_are_k101(tmp_path):
    res = run(tmp_path, family="mla", config=lambda c: c.update(architectures=["LlamaForCausalLMEagle3"]))
    f = the(res, "K101", "error")
    assert f.ops[0].value == ["Eagle3DeepseekV3ForCausalLM"]


def test_eagle_reference_architecture_is_mapped_by_sglang(tmp_path):
    # SGLang's ModelConfig renames a draft's LlamaForCausalLM to LlamaForCausalLMEagle3 (yuhuili's EAGLE-3 drafts
    # run on SGLang, sglang PR #4247). Was: K101, which the record contradicts.
    assert "K101" not in ids(run(tmp_path, "eagle", engine="sglang"))


def test_deepseek_v3_architecture_becomes_an_mtp_model_on_sglang(tmp_path):
    # ... and a draft's DeepseekV3ForCausalLM to DeepseekV3ForCausalLMNextN, an MTP model, not an EAGLE-3 draft.
    res = run(tmp_path, family="mla", engine="sglang", config=lambda c: c.update(architectures=["DeepseekV3ForCausalLM"]))
    f = the(res, "K101", "error")
    assert f.ops[0].value == ["Eagle3DeepseekV3ForCausalLM"]


def test_speculators_architecture_on_sglang_is_fixable_k101(tmp_path):
    # fix converts speculators drafts to the flat layout for SGLang, so K101 must not block it.
    res = run(tmp_path, "speculators", engine="sglang")
    f = the(res, "K101", "error")
    assert f.fixable and f.ops[0].value == ["LlamaForCausalLMEagle3"]


def test_mla_draft_with_model_type_deepseek_v3_is_refused_by_vllm(tmp_path):
    res = run(tmp_path, family="mla", config=lambda c: c.update(model_type="deepseek_v3"))
    f = the(res, "K102", "error")
    assert f.ops == [SetConfig(("model_type",), "kimi_k2", f.ops[0].reason)]  # the tiny target is a Kimi


def test_mla_model_type_deepseek_v3_for_a_deepseek_target_becomes_deepseek_v2(tmp_path):
    res = run(tmp_path, family="mla", target="deepseek-v3", config=lambda c: c.update(model_type="deepseek_v3"))
    assert the(res, "K102", "error").ops[0].value == "deepseek_v2"


def test_mla_model_type_deepseek_v3_is_fine_on_sglang(tmp_path):
    res = run(tmp_path, family="mla", engine="sglang", config=lambda c: c.update(model_type="deepseek_v3"))
    assert "K102" not in ids(res)


def test_num_hidden_layers_copied_from_the_target_is_k103(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(num_hidden_layers=TINY.layers))
    f = the(res, "K103", "error")
    assert "target" in f.message
    assert f.ops == [SetConfig(("num_hidden_layers",), 1, f.ops[0].reason)]


def test_num_hidden_layers_in_speculators_is_set_in_the_nested_layer_config(tmp_path):
    res = run(tmp_path, "speculators", config=lambda c: c["transformer_layer_config"].update(num_hidden_layers=2))
    f = the(res, "K103", "error")
    assert f.ops[0].path == ("transformer_layer_config", "num_hidden_layers")


def test_quantization_config_copied_from_the_target_is_an_error(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(quantization_config={"quant_method": "compressed-tensors"},
                                                   index_topk=2048))
    f = the(res, "K104", "error")
    assert f.fixable
    assert {o.path for o in f.ops} == {("quantization_config",), ("index_topk",)}
    assert all(isinstance(o, DeleteConfig) for o in f.ops)


def test_index_topk_alone_is_a_warning(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(index_topk=2048))
    f = the(res, "K104", "warning")
    assert f.ops == [DeleteConfig(("index_topk",), f.ops[0].reason)]


# --- K2xx: tensor names ------------------------------------------------------------------------------------------

def test_model_prefixed_keys_are_renamed_for_vllm(tmp_path):
    res = run(tmp_path, tensors=lambda t: rename_all(t, lambda k: "model." + k))
    f = the(res, "K201", "error")
    assert f.fixable and all(isinstance(o, RenameTensor) for o in f.ops)
    renames = {o.old: o.new for o in f.ops}
    assert renames["model.midlayer.self_attn.q_proj.weight"] == "layers.0.self_attn.q_proj.weight"
    assert renames["model.fc.weight"] == "fc.weight"
    assert len(renames) == len(res.draft.tensors)


def test_layers0_keys_are_renamed_to_midlayer_for_sglang(tmp_path):
    # SGLang's Llama draft loaded only midlayer.* before PR #24663 (pinned: the newest row loads both).
    res = run(tmp_path, engine="sglang", engine_version="pre-25454",
              tensors=lambda t: rename_all(t, lambda k: k.replace("midlayer.", "layers.0.")))
    f = the(res, "K201", "error")
    renames = {o.old: o.new for o in f.ops}
    assert renames["layers.0.mlp.down_proj.weight"] == "midlayer.mlp.down_proj.weight"
    assert "fc.weight" not in renames  # unchanged names are not renamed


@pytest.mark.parametrize("engine,version,family", [("sglang", "post-25454", "llama"), ("sglang", "post-32334", "llama"),
                                                    ("sglang", "pre-25454", "mla"), ("sglang", "post-32334", "mla")])
def test_layers0_keys_load_on_sglang_rows_that_read_them(tmp_path, engine, version, family):
    # PR #24663 (Llama draft, both names) and deepseek_eagle3.py's own layers.0. -> midlayer. rename (MLA draft).
    res = run(tmp_path, engine=engine, engine_version=version, family=family,
              tensors=lambda t: rename_all(t, lambda k: k.replace("midlayer.", "layers.0.")))
    assert "K201" not in ids(res)


def test_layers0_keys_are_fine_on_vllm(tmp_path):
    res = run(tmp_path, tensors=lambda t: rename_all(t, lambda k: k.replace("midlayer.", "layers.0.")))
    assert "K201" not in ids(res)


def test_missing_projection_is_k202_and_not_fixable(tmp_path):
    res = run(tmp_path, tensors=lambda t: t.pop("midlayer.self_attn.q_proj.weight"))
    f = the(res, "K202", "error")
    assert not f.fixable and f.ops == []
    assert [e.where for e in f.evidence] == ["layers.0.self_attn.q_proj.weight"]


def test_missing_fc_is_k202(tmp_path):
    res = run(tmp_path, tensors=lambda t: t.pop("fc.weight"))
    assert [e.where for e in the(res, "K202").evidence] == ["fc.weight"]


def test_missing_mla_projection_is_k202(tmp_path):
    res = run(tmp_path, family="mla", tensors=lambda t: t.pop("midlayer.self_attn.kv_b_proj.weight"))
    assert [e.where for e in the(res, "K202").evidence] == ["layers.0.self_attn.kv_b_proj.weight"]


def test_bias_tensors_are_a_warning_and_dropped(tmp_path):
    def add_bias(t):
        t["midlayer.self_attn.q_proj.bias"] = ("BF16", (TINY.heads * TINY.head_dim,), np.zeros(64, np.float32))

    res = run(tmp_path, tensors=add_bias)
    f = the(res, "K203", "warning")
    assert f.ops == [DropTensor("midlayer.self_attn.q_proj.bias", f.ops[0].reason)]


def test_stray_tensor_is_an_error_and_dropped(tmp_path):
    def add_layer(t):
        t["layers.1.mlp.gate_proj.weight"] = ("BF16", (4, 4), np.zeros((4, 4), np.float32))

    res = run(tmp_path, tensors=add_layer)
    f = the(res, "K203", "error")
    assert f.fixable and f.ops == [DropTensor("layers.1.mlp.gate_proj.weight", f.ops[0].reason)]


# --- K3xx: shapes and attention ----------------------------------------------------------------------------------

def _fc(width_mult: float):
    def mut(t):
        t["fc.weight"] = ("BF16", (KIMI.hidden, int(width_mult * KIMI.hidden)), None)
    return mut


def test_fc_of_four_aux_states_with_three_ids_is_k301_at_kimi_shape(tmp_path):
    res = run(tmp_path, shape="kimi", target="kimi", tensors=_fc(4))
    f = the(res, "K301", "error")
    assert f.needs_decision and "--aux-ids" in f.needs_decision and f.ops == []
    assert f.evidence[0].observed == [7168, 4 * 7168] and f.evidence[0].expected == [7168, 3 * 7168]


def test_fc_width_of_another_target_is_k301_not_fixable(tmp_path):
    res = run(tmp_path, shape="kimi", target="kimi", tensors=lambda t: t.update({"fc.weight": ("BF16", (7168, 3 * 4096),
                                                                                                None)}))
    f = the(res, "K301", "error")
    assert not f.fixable and "another target" in f.message


def test_wrong_target_hidden_size_is_set_from_the_target(tmp_path):
    res = run(tmp_path, shape="kimi", target="kimi", config=lambda c: c.update(target_hidden_size=4096))
    f = the(res, "K301", "error")
    assert f.ops == [SetConfig(("target_hidden_size",), 7168, f.ops[0].reason)]


def test_fc_width_without_target_is_checked_against_the_config(tmp_path):
    res = run(tmp_path, target=None, tensors=lambda t: t.update({"fc.weight": ("BF16", (64, 128),
                                                                              np.zeros((64, 128), np.float32))}))
    f = the(res, "K301", "error")
    assert not f.fixable


def test_missing_head_dim_on_a_kimi_llama_draft_is_k302_and_set_to_128(tmp_path):
    res = run(tmp_path, shape="kimi", target="kimi", config=lambda c: c.pop("head_dim"))
    f = the(res, "K302", "error")
    assert "112" in f.message and "128" in f.message
    assert f.evidence[0].where == "head_dim" and f.evidence[0].observed is None and f.evidence[0].expected == 128
    assert f.ops == [SetConfig(("head_dim",), 128, f.ops[0].reason)]


def test_k_proj_rows_against_kv_heads_is_k302_not_fixable(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(num_key_value_heads=2))
    f = the(res, "K302", "error")
    assert not f.fixable


def test_mla_ranks_that_disagree_with_the_tensors_are_k302(tmp_path):
    res = run(tmp_path, family="mla", config=lambda c: c.update(kv_lora_rank=TINY.kv_lora * 2))
    fs = [f for f in res.findings if f.id == "K302" and f.severity == "error"]
    assert fs and all(not f.fixable for f in fs)
    assert any(f.evidence[0].where == "layers.0.self_attn.kv_a_proj_with_mqa.weight" for f in fs)


def _k304(res):
    return [f for f in res.findings if f.id == "K304"]


def _heads(n: int, kv: int):
    def cfg(c):
        c["num_attention_heads"] = n
        c["num_key_value_heads"] = kv
    return cfg


def test_kimi_shaped_draft_splits_over_eight_ranks(tmp_path):
    d = make_draft(tmp_path / "d", "specforge", shape="kimi")
    assert _k304(inspect(str(d), target="kimi-k2.5", decisions=Decisions(tp=8))) == []


def test_heads_that_do_not_divide_are_an_error_naming_what_vllm_says(tmp_path):
    d = make_draft(tmp_path / "d", "specforge")  # tiny: 2 heads
    (f,) = [f for f in _k304(inspect(str(d), decisions=Decisions(tp=8))) if f.severity == "error"]
    assert "2 attention heads do not divide by TP 8" in f.message
    assert "must be divisible by tensor parallel size (8)" in f.message
    assert not f.fixable


def test_a_draft_kept_on_one_rank_does_not_need_to_split(tmp_path):
    d = make_draft(tmp_path / "d", "specforge")
    assert _k304(inspect(str(d), decisions=Decisions(tp=8, draft_tp=1))) == []


def test_a_draft_tp_other_than_one_or_the_targets_is_refused(tmp_path):
    d = make_draft(tmp_path / "d", "specforge", shape="kimi")
    (f,) = _k304(inspect(str(d), decisions=Decisions(tp=8, draft_tp=4)))
    assert f.severity == "error" and "only 1 or the target's TP" in f.message


@pytest.mark.parametrize("heads,kv,tp,severity,fragment", [
    (6, 3, 2, "error", "3 KV heads do not divide by TP 2"),
    (8, 3, 8, "error", "cannot be replicated evenly over TP 8"),
    (8, 2, 8, "info", "replicates each on 4 ranks"),
])
def test_kv_heads_split_replicate_or_crash_as_vllm_does(tmp_path, heads, kv, tp, severity, fragment):
    d = make_draft(tmp_path / "d", "specforge", config=_heads(heads, kv),
                   tensors=lambda t: None)
    found = _k304(inspect(str(d), decisions=Decisions(tp=tp)))
    assert any(f.severity == severity and fragment in f.message for f in found), [f.message for f in found]


def test_mla_kv_heads_are_one_latent_head_whatever_the_tp(tmp_path):
    d = make_draft(tmp_path / "d", "torchspec", family="mla", config=_heads(8, 3))
    assert not [f for f in _k304(inspect(str(d), decisions=Decisions(tp=8))) if "KV heads" in f.message]


def test_a_draft_vocab_whose_padding_does_not_divide_either_is_refused(tmp_path):
    # tiny draft vocab 128, already a multiple of 64 (vLLM's padding): 128 % 3 = 2, so vLLM 0.32's
    # VocabParallelEmbedding asserts in divide(128, 3) (vocab_parallel_embedding.py, vllm/distributed/utils.py
    # ensure_divisibility: "128 is not divisible by 3"). The padded-and-loads case (100 -> 128 rows at TP 8) is
    # tests/test_rules_parallel.py's.
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(num_attention_heads=8,
                                                                         num_key_value_heads=8))
    res = inspect(str(d), decisions=Decisions(tp=3))
    vocab = [f for f in _k304(res) if "draft_vocab_size" in f.message]
    assert vocab and vocab[0].severity == "error" and "'128 is not divisible by 3'" in vocab[0].message


def test_without_a_tp_nothing_is_said(tmp_path):
    d = make_draft(tmp_path / "d", "specforge")
    assert _k304(inspect(str(d))) == []


def test_norm_of_another_width_is_k303(tmp_path):
    res = run(tmp_path, tensors=lambda t: t.update({"norm.weight": ("BF16", (32,), np.ones(32, np.float32))}))
    f = the(res, "K303", "error")
    assert not f.fixable and f.evidence[0].where == "norm.weight"


def test_missing_hidden_size_is_k303_and_set_from_fc_rows(tmp_path):
    res = run(tmp_path, config=lambda c: c.pop("hidden_size"))
    f = the(res, "K303", "error")
    assert f.ops == [SetConfig(("hidden_size",), TINY.hidden, f.ops[0].reason)]


# --- K4xx: aux layer ids ----------------------------------------------------------------------------------------

def test_missing_aux_ids_is_a_warning_that_needs_a_decision(tmp_path):
    res = run(tmp_path, config=set_ids(None, top=False, nested=False))
    f = the(res, "K401", "warning")
    assert f.ops == [] and f.fixable and "--aux-ids" in f.needs_decision


def test_missing_aux_ids_with_user_ids_writes_them_where_vllm_reads(tmp_path):
    res = run(tmp_path, config=set_ids(None, top=False, nested=False), decisions=Decisions(aux_ids=[2, 4, 5]))
    f = the(res, "K401", "warning")
    assert {(o.path, tuple(o.value)) for o in f.ops} == {((AUX,), (2, 4, 5)), (EC_AUX, (2, 4, 5))}


def test_missing_aux_ids_on_eagle_reference_is_info_with_the_defaults(tmp_path):
    res = run(tmp_path, "eagle")
    f = the(res, "K401", "info")
    assert {tuple(o.value) for o in f.ops} == {(2, TINY.layers // 2, TINY.layers - 3)}


def test_aux_id_past_the_last_layer_is_k402(tmp_path):
    # Stream L (after the last layer) exists and vLLM 0.32 collects it (llama.py/deepseek_v2.py/gpt_oss.py):
    # an id of L is valid there; L + 1 names no stream at all.
    res = run(tmp_path, config=set_ids([2, 4, TINY.layers + 1]))
    f = the(res, "K402", "error")
    assert f.ops == [] and f.fixable and "--aux-ids" in f.needs_decision
    assert "K402" not in ids(run(tmp_path, config=set_ids([2, 4, TINY.layers]), name="final"))


def test_final_boundary_id_on_an_engine_that_cannot_collect_it_is_k402_not_fixable(tmp_path):
    # SGLang's capture fires before layer i: stream L is collected on GPT-OSS targets only since PR #32334.
    res = run(tmp_path, engine="sglang", engine_version="post-32334", config=set_ids([2, 4, TINY.layers]))
    f = the(res, "K402", "error")
    assert not f.fixable and "collects at most stream" in f.message


def test_final_boundary_id_settles_the_input_reading_over_a_guessed_producer(tmp_path):
    # LlamaForCausalLMEagle3 alone is a SpecForge guess, not evidence; an id equal to L only exists as a stream
    # in the input reading.
    def mut(c):
        set_ids([2, 4, TINY.layers], top=False)(c)
    res = run(tmp_path, "specforge", config=mut, full_vocab=True,
              tensors=lambda t: rename_all(t, lambda k: k.replace("midlayer.", "layers.0.")))
    assert res.draft.aux.convention_strength == "weak"
    assert "K404" not in ids(res) and "K402" not in ids(res)


def test_duplicated_aux_ids_are_k402(tmp_path):
    res = run(tmp_path, target=None, config=set_ids([2, 2, 5]))
    f = the(res, "K402", "error")
    assert "repeat" in f.message


def test_malformed_aux_ids_are_k402(tmp_path):
    res = run(tmp_path, config=set_ids("2,4,5"))
    f = the(res, "K402", "error")
    assert f.evidence[0].observed == "2,4,5"


def test_aux_id_count_against_fc_width_is_k403(tmp_path):
    res = run(tmp_path, config=set_ids([2, 4]))
    f = the(res, "K403", "error")
    assert f.needs_decision and f.ops == [] and "3 ids" in str(f.evidence[0].expected)


def test_specforge_output_convention_ids_are_k404_on_vllm(tmp_path):
    res = run(tmp_path, "specforge")
    f = the(res, "K404", "error")
    want = [2, TINY.layers // 2, TINY.layers - 3]
    assert f.evidence[0].observed == [1, TINY.layers // 2 - 1, TINY.layers - 4] and f.evidence[0].expected == want
    assert {(o.path, tuple(o.value)) for o in f.ops} == {((AUX,), tuple(want)), (EC_AUX, tuple(want))}


def test_specforge_ids_are_right_on_sglang(tmp_path):
    assert "K404" not in ids(run(tmp_path, "specforge", engine="sglang"))


def test_unknown_producer_ids_need_the_convention_decided(tmp_path):
    res = run(tmp_path, "unknown")
    f = the(res, "K404", "warning")
    assert f.ops == [] and "--aux-convention" in f.needs_decision


def test_unknown_producer_ids_with_output_convention_are_converted(tmp_path):
    res = run(tmp_path, "unknown", decisions=Decisions(aux_convention="output"))
    f = the(res, "K404", "error")
    assert {tuple(o.value) for o in f.ops} == {(2, 4, 5)}


def test_input_ids_starting_at_1_cannot_be_expressed_on_sglang_post_25454(tmp_path):
    written = [1, 3, 4]
    kimi = load_profile("kimi-k2.5")  # the first-id rule is deepseek_v2.py's (tests/data/sglang_oracle.json)
    assert SGLANG_CURRENT.physical_ids(written, kimi) != written and SGLANG_CURRENT.written_ids(written, kimi) is None
    # The top-level key says input, the first id 1 says output: unsettled (was: an error on the top-level key's
    # word alone). Decided as input, streams starting at 1 cannot be written for SGLang after PR #25454.
    res = run(tmp_path, engine="sglang", engine_version="post-25454", config=set_ids(written))
    f = the(res, "K404", "warning")
    # each reading is evidence (the next lines say how to measure both: verify --diagnose is vLLM's only)
    assert "disagrees" in f.message and "--aux-convention" in f.needs_decision
    assert [e.where for e in f.evidence[1:3]] == ["read as input", "read as output"]
    res = run(tmp_path, engine="sglang", engine_version="post-25454", config=set_ids(written), name="decided",
              decisions=Decisions(aux_convention="input"))
    f = the(res, "K404", "error")
    assert not f.fixable and "cannot express" in f.message


def test_producer_and_first_id_disagreeing_is_a_warning_that_names_both_and_blocks_fix(tmp_path):
    # AQ-MedAI/Kimi-K25-eagle3's shape: SpecForge's signature, ids [2, L//2, L-3] (vLLM PR #35966 measured
    # 51.78% acceptance with it on vLLM).
    phys = [2, TINY.layers // 2, TINY.layers - 3]
    res = run(tmp_path, "specforge", config=set_ids(phys, top=False))
    f = the(res, "K404", "warning")
    # On a DeepSeek/Kimi target SpecForge's own ids settle nothing (SGLang's capture read them as output before
    # PR #25454 and as input after it), so only the weak first-id reading is left: unsettled, fix waits.
    # the message names both signs; the evidence says each whole, with the readings
    assert "specforge's code" in f.message and "the first id" in f.message
    said = {e.where: (e.observed, e.expected) for e in f.evidence}
    assert "#25454" in said["specforge's code"][0] and said["specforge's code"][1] == "not counted"
    assert said["the first id"] == ("the first id is 2 (SGLang's first-id rule, PR #25454)", "input (weak)")
    assert [e.where for e in f.evidence[1:3]] == ["read as input", "read as output"]
    assert f.ops == [] and "--aux-convention" in f.needs_decision


def test_specforge_ids_on_a_llama_target_are_output_of_layer_on_every_sglang_row(tmp_path):
    # SpecForge hands its ids to SGLang's capture unchanged; llama.py:941 adds +1 to every id in every SGLang
    # release (recorded from 0.5.23: tests/data/sglang_oracle.json), so [2, ...] trained the outputs of layer 2.
    from tests.factories import target_config

    folder = make_draft(tmp_path / "draft", "specforge", config=set_ids([2, 4, 5], top=False))
    tgt = tmp_path / "llama-target"
    tgt.mkdir()
    cfg = target_config(TINY)["text_config"] | {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    for key in ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
        cfg.pop(key)
    (tgt / "config.json").write_text(__import__("json").dumps(cfg))
    for version in ("post-25454", "post-32334", "0.5.23"):
        res = inspect(str(folder), target=str(tgt), engine="sglang", engine_version=version)
        assert "K404" not in ids(res), version  # fed = trained = [3, 5, 6]
    res = inspect(str(folder), target=str(tgt), engine="vllm", engine_version="0.32/v1")  # V1 reads eagle_config
    f = the(res, "K404")
    assert f.ops and f.ops[0].value == [3, 5, 6]  # vLLM needs the streams written in its input numbering


def test_sglang_adds_one_to_every_id_on_llama_targets_and_by_the_first_id_on_deepseek_targets():
    # SGLang 0.5.23, recorded by tests/sglang_oracle/record.py: llama.py:941 `[val + 1 for val in layer_ids]`;
    # deepseek_v2.py:3470 `if layer_ids and layer_ids[0] == 1` (PR #25454); gpt_oss.py:1349 max == L as given
    import json

    rec = json.loads((Path(__file__).parent / "data" / "sglang_oracle.json").read_text())["capture"]
    llama, kimi, gpt_oss = load_profile("llama-3.1-8b"), load_profile("kimi-k2.5"), load_profile("gpt-oss-120b")
    for version in ("post-25454", "post-32334", "0.5.23"):
        row = engine_rules("sglang", version)
        for probe in rec["llama"]["probes"]:
            if probe["ids"] is not None:
                assert row.physical_ids(probe["ids"], llama) == probe["layers_to_capture"], (version, probe)
        for probe in rec["deepseek_v2"]["probes"]:
            if probe["ids"] is not None:
                assert row.physical_ids(probe["ids"], kimi) == probe["layers_to_capture"], (version, probe)
    for probe in rec["gpt_oss"]["probes"]:
        if probe["ids"] is not None and probe["num_layers"] == gpt_oss.num_hidden_layers:
            assert engine_rules("sglang", "0.5.23").physical_ids(probe["ids"], gpt_oss) == probe["layers_to_capture"]


def test_a_one_layer_late_shift_is_a_warning_with_the_measured_cost(tmp_path):
    # SGLang before #25454 adds +1 to input-convention ids: one layer late (sglang PR #25454 measured ~0.10).
    res = run(tmp_path, engine="sglang", engine_version="pre-25454", config=set_ids([2, 4, 5]))
    f = the(res, "K404", "warning")
    assert "0.10" in f.message and f.ops


def test_a_one_layer_early_shift_is_an_error_with_the_measured_cost(tmp_path):
    res = run(tmp_path, "specforge")
    f = the(res, "K404", "error")
    assert "#43671" in f.message


def test_input_ids_are_shifted_down_for_sglang_pre_25454(tmp_path):
    phys = [2, 4, 5]
    res = run(tmp_path, engine="sglang", engine_version="pre-25454", config=set_ids(phys))
    f = the(res, "K404", "warning")  # one layer late (sglang PR #25454: ~0.10 accept length); was an error
    assert f.ops == [SetConfig(EC_AUX, SGLANG_LEGACY.written_ids(phys), f.ops[0].reason)]
    assert SGLANG_LEGACY.physical_ids(f.ops[0].value) == phys


def test_input_ids_not_starting_at_1_pass_unchanged_on_sglang_post_25454(tmp_path):
    phys = [3, 4, 5]
    kimi = load_profile("kimi-k2.5")
    assert SGLANG_CURRENT.physical_ids(phys, kimi) == phys == SGLANG_CURRENT.written_ids(phys, kimi)
    assert "K404" not in ids(run(tmp_path, engine="sglang", engine_version="post-25454", config=set_ids(phys)))


def test_input_ids_not_starting_at_1_are_k404_on_sglang_pre_25454(tmp_path):
    res = run(tmp_path, engine="sglang", engine_version="pre-25454", config=set_ids([3, 4, 5]))
    assert the(res, "K404", "warning").ops[0].value == [2, 3, 4]  # one layer late: a warning (was an error)


def test_ids_only_at_the_top_level_key_are_mirrored_into_eagle_config(tmp_path):
    res = run(tmp_path, config=set_ids([2, 4, 5], nested=False))
    f = the(res, "K405", "warning")
    assert [e.where for e in f.evidence] == [".".join(EC_AUX)]
    # Written at every key vLLM reads (re-setting the top-level key to the same value is harmless).
    assert {o.path for o in f.ops} >= {EC_AUX} and all(o.value == [2, 4, 5] for o in f.ops)


def test_different_ids_at_two_keys_are_a_k405_error(tmp_path):
    def mut(c):
        c[AUX] = [2, 4, 5]
        c["eagle_config"] = {AUX: [1, 3, 4]}

    res = run(tmp_path, config=mut)
    f = the(res, "K405", "error")
    assert f.ops == [] and f.needs_decision


def test_user_aux_ids_replace_recorded_ones_as_k405_info(tmp_path):
    res = run(tmp_path, decisions=Decisions(aux_ids=[3, 4, 6]))
    f = the(res, "K405", "info")
    assert {tuple(o.value) for o in f.ops} == {(3, 4, 6)}


# --- K5xx: vocabulary mapping -----------------------------------------------------------------------------------

def _d2t(values: np.ndarray, n: int | None = None):
    def mut(t):
        t["d2t"] = ("I64", (len(values) if n is None else n,), values)
    return mut


def test_draft_vocab_size_against_lm_head_rows_is_k501(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(draft_vocab_size=100))
    f = the(res, "K501", "error")
    assert f.ops == [SetConfig(("draft_vocab_size",), TINY.draft_vocab, f.ops[0].reason)]


def test_draft_vocab_size_defaulting_to_vocab_size_is_k501(tmp_path):
    res = run(tmp_path, config=lambda c: c.pop("draft_vocab_size"))
    f = the(res, "K501", "error")
    assert "defaulted" in f.message and f.ops[0].value == TINY.draft_vocab


def test_absolute_d2t_is_rewritten_to_offsets(tmp_path):
    d2t, _ = _vocab_map(TINY)
    res = run(tmp_path, tensors=_d2t(d2t + np.arange(TINY.draft_vocab)))
    f = the(res, "K502", "error")
    assert f.ops == [RewriteD2TOffsets("d2t", f.ops[0].reason)]


def test_d2t_outside_the_target_vocabulary_is_k502_not_fixable(tmp_path):
    d2t, _ = _vocab_map(TINY)
    d2t = d2t.copy()
    d2t[-1] = 10 * TINY.vocab
    res = run(tmp_path, tensors=_d2t(d2t))
    f = the(res, "K502", "error")
    assert not f.fixable and "outside" in f.message


def test_d2t_mapping_two_draft_ids_to_one_target_id_is_k502(tmp_path):
    d2t, _ = _vocab_map(TINY)
    d2t = d2t.copy()
    d2t[1] = d2t[0] - 1  # draft ids 0 and 1 -> the same target id
    res = run(tmp_path, tensors=_d2t(d2t))
    f = the(res, "K502", "error")
    assert not f.fixable


def test_d2t_of_another_length_than_lm_head_is_k502(tmp_path):
    d2t, _ = _vocab_map(TINY)
    res = run(tmp_path, tensors=_d2t(d2t[:100]))
    f = the(res, "K502", "error")
    assert f.evidence[0].observed == 100 and f.evidence[0].expected == TINY.draft_vocab


def test_pruned_head_without_d2t_is_k502(tmp_path):
    res = run(tmp_path, tensors=lambda t: (t.pop("d2t"), t.pop("t2d")))
    f = the(res, "K502", "error")
    assert not f.fixable and f.evidence[0].where == "d2t"


def test_full_vocab_head_without_d2t_is_fine(tmp_path):
    res = run(tmp_path, full_vocab=True)
    assert not {"K501", "K502", "K503"} & ids(res)


def test_t2d_of_another_length_is_rebuilt_at_kimi_shape(tmp_path):
    def short_t2d(t):
        dt, shape, data = t["t2d"]
        t["t2d"] = ("BOOL", (160000,), data[:160000])

    res = run(tmp_path, shape="kimi", target="kimi", tensors=short_t2d)
    f = the(res, "K503", "error")
    assert f.ops == [RebuildT2D("t2d", "d2t", KIMI.vocab, f.ops[0].reason)]
    assert f.evidence[0].observed == [160000] and f.evidence[0].expected == [KIMI.vocab]


def test_t2d_marking_more_ids_than_d2t_is_a_k503_warning(tmp_path):
    def extra_bit(t):
        dt, shape, data = t["t2d"]
        data = data.copy()
        data[np.flatnonzero(~data)[0]] = True
        t["t2d"] = (dt, shape, data)

    res = run(tmp_path, tensors=extra_bit)
    f = the(res, "K503", "warning")
    assert f.ops == [RebuildT2D("t2d", "d2t", TINY.vocab, f.ops[0].reason)]


def test_vocab_size_other_than_the_targets_is_k504(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(vocab_size=TINY.vocab * 2))
    f = the(res, "K504", "warning")
    assert f.ops == [SetConfig(("vocab_size",), TINY.vocab, f.ops[0].reason)]


# --- K6xx: norms --------------------------------------------------------------------------------------------------

def test_missing_hidden_norm_is_k601_not_fixable(tmp_path):
    res = run(tmp_path, tensors=lambda t: t.pop("midlayer.hidden_norm.weight"))
    f = the(res, "K601", "error")
    assert not f.fixable and [e.where for e in f.evidence] == ["layers.0.hidden_norm.weight"]
    assert "K202" not in ids(res)


def test_speculators_without_norm_before_residual_is_k602_on_vllm(tmp_path):
    res = run(tmp_path, "speculators", config=lambda c: c.pop("norm_before_residual"))
    f = the(res, "K602", "error")
    assert f.ops == [SetConfig(("norm_before_residual",), False, f.ops[0].reason)]


def test_speculators_without_norm_before_residual_is_fine_on_sglang(tmp_path):
    res = run(tmp_path, "speculators", engine="sglang", config=lambda c: c.pop("norm_before_residual"))
    assert "K602" not in ids(res)


def test_specforge_with_norm_before_residual_true_is_left_to_the_user(tmp_path):
    # no fix flag sets it (it once asked for `--set`, which fix does not have): the message says what to set and
    # what measures both readings
    res = run(tmp_path, "specforge", engine="sglang", config=lambda c: c.update(norm_before_residual=True))
    f = the(res, "K602", "warning")
    assert f.ops == [] and f.needs_decision is None and "`kconvert score --diagnose`" in f.message


def _input_norm(t):
    t["input_norm.weight"] = ("BF16", (3 * TINY.hidden,), np.ones(3 * TINY.hidden, np.float32))


def test_input_norm_without_norm_before_fc_is_k603_and_sets_the_flag(tmp_path):
    res = run(tmp_path, tensors=_input_norm)
    f = the(res, "K603", "error")
    assert f.ops == [SetConfig(("norm_before_fc",), True, f.ops[0].reason)]


def test_norm_before_fc_without_input_norm_is_k603_not_fixable(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(norm_before_fc=True))
    f = the(res, "K603", "error")
    assert not f.fixable


def test_fc_norm_tensors_without_flag_are_k604(tmp_path):
    def add(t):
        for i in range(3):
            t[f"fc_norm.{i}.weight"] = ("BF16", (TINY.hidden,), np.ones(TINY.hidden, np.float32))

    res = run(tmp_path, tensors=add)
    f = the(res, "K604", "error")
    assert f.ops == [SetConfig(("fc_norm",), True, f.ops[0].reason)]
    assert "K203" not in ids(res)


def test_fc_norm_flag_without_tensors_is_k604_not_fixable(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(fc_norm=True))
    assert not the(res, "K604", "error").fixable


def test_norm_output_from_specforge_is_a_k605_warning(tmp_path):
    res = run(tmp_path, "specforge", engine="sglang", config=lambda c: c.update(norm_output=True))
    f = the(res, "K605", "warning")
    assert not f.fixable and f.ops == []


def test_norm_output_from_speculators_is_k605_info(tmp_path):
    res = run(tmp_path, "speculators", config=lambda c: c.update(norm_output=True))
    assert the(res, "K605", "info").ops == []
    # false is every engine's default reading: nothing to say (was an info finding)
    assert "K605" not in ids(run(tmp_path, "speculators", name="off", config=lambda c: c.update(norm_output=False)))


def test_modelopt_last_layernorm_flag_is_k606(tmp_path):
    res = run(tmp_path, "modelopt", config=lambda c: c["eagle_config"].update(use_last_layernorm=True))
    f = the(res, "K606", "warning")
    assert not f.fixable and f.evidence[0].where == "eagle_config.use_last_layernorm"


# --- K7xx/K8xx: embeddings and lm_head ---------------------------------------------------------------------------

def test_embeddings_of_another_vocabulary_are_k701_and_dropped(tmp_path):
    def small(t):
        t["embed_tokens.weight"] = ("BF16", (256, TINY.hidden), np.zeros((256, TINY.hidden), np.float32))

    res = run(tmp_path, embeddings=True, tensors=small)
    f = the(res, "K701", "error")
    assert f.ops == [DropTensor("embed_tokens.weight", f.ops[0].reason)]


def test_randomly_initialised_embeddings_are_a_k701_error_on_vllm_and_nothing_on_sglang(tmp_path):
    # TorchSpec issue #38: vLLM keeps the draft's own (random) embed_tokens and acceptance collapses; SGLang
    # replaces them with the target's. (Was a warning on every engine.)
    def fresh(t):
        rng = np.random.default_rng(1)
        t["embed_tokens.weight"] = ("BF16", (TINY.vocab, TINY.hidden),
                                    rng.normal(0, 1, size=(TINY.vocab, TINY.hidden)).astype(np.float32))

    res = run(tmp_path, embeddings=True, tensors=fresh)
    f = the(res, "K701", "error")
    assert "std" in f.message and f.ops == [DropTensor("embed_tokens.weight", f.ops[0].reason)]
    assert "K701" not in ids(run(tmp_path, embeddings=True, tensors=fresh, engine="sglang", name="sg"))


def test_trained_embeddings_pass(tmp_path):
    assert "K701" not in ids(run(tmp_path, embeddings=True))


def test_k701_reads_the_rows_the_checkpoint_names_and_refuses_a_row_outside_the_table(tmp_path):
    # Checkpoint.row_sample (how the zoo's sparse replicas name the rows they hold values at): the rows named are
    # the rows read. A trained-looking table (N(0, 0.02)) whose rows 3 and 77 alone hold N(0, 1) values: named
    # those two, K701 sees a fresh init there; named two trained rows, nothing; a row past the table is refused
    # by the reader (K005 says the check could not run), never read from the bytes after it.
    from kconvert.commands.inspect import analyse, open_draft

    rng = np.random.default_rng(3)
    table = rng.normal(0, 0.02, size=(TINY.vocab, TINY.hidden)).astype(np.float32)
    table[[3, 77]] = rng.normal(0, 1, size=(2, TINY.hidden))

    def planted(t):
        t["embed_tokens.weight"] = ("BF16", (TINY.vocab, TINY.hidden), table)

    folder = make_draft(tmp_path / "d", "torchspec", embeddings=True, tensors=planted)
    target = load_target(str(make_target(tmp_path / "target", "tiny")))

    def with_rows(rows):
        ckpt = open_draft(str(folder))
        ckpt.row_sample = lambda n: rows(n)
        return analyse(ckpt, target, engine_rules("vllm"))

    assert "K701" in ids(with_rows(lambda n: [3, 77]))
    assert "K701" not in ids(with_rows(lambda n: [4, 78]))
    f = the(with_rows(lambda n: [n]), "K005", "warning")
    assert "embed_tokens" in f.message and "outside" in f.message
    assert [e.where for e in f.evidence] == ["embed_tokens.weight"]  # the tensor the check could not read


def test_missing_lm_head_with_draft_vocab_size_is_k801_error(tmp_path):
    res = run(tmp_path, tensors=lambda t: t.pop("lm_head.weight"))
    f = the(res, "K801", "error")
    assert not f.fixable and "acceptance will be 0" in f.message


def test_missing_full_vocab_lm_head_is_a_k801_warning(tmp_path):
    res = run(tmp_path, full_vocab=True, tensors=lambda t: t.pop("lm_head.weight"))
    assert not the(res, "K801", "warning").fixable


# --- K9xx: positions, rope, dtype --------------------------------------------------------------------------------

def test_max_positions_below_the_targets_is_info_on_vllm_which_raises_it(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(max_position_embeddings=2048))
    f = the(res, "K901", "info")
    assert f.ops == [SetConfig(("max_position_embeddings",), TINY.max_pos, f.ops[0].reason)]


def test_max_positions_below_the_targets_is_a_warning_on_sglang(tmp_path):
    res = run(tmp_path, engine="sglang", config=lambda c: c.update(max_position_embeddings=2048))
    assert the(res, "K901", "warning").ops[0].value == TINY.max_pos


def test_dropped_rope_scaling_is_restored_from_the_target_only_when_asked(tmp_path):
    res = run(tmp_path, config=lambda c: c.pop("rope_scaling"))
    f = the(res, "K902", "warning")
    assert f.ops == [] and f.needs_decision and "--rope-from-target" in f.needs_decision
    res = run(tmp_path, config=lambda c: c.pop("rope_scaling"), decisions=Decisions(rope_from_target=True), name="d2")
    f = the(res, "K902", "warning")
    assert f.ops[0].path == ("rope_scaling",) and f.ops[0].value["factor"] == 64.0


def test_other_rope_theta_is_reported_not_changed(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(rope_theta=10000))
    f = the(res, "K902", "warning")
    assert f.ops == [] and not f.fixable


def test_torch_dtype_float16_next_to_dtype_bfloat16_is_k911(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(torch_dtype="float16", dtype="bfloat16"))
    f = the(res, "K911", "warning")
    assert {(o.path, o.value) for o in f.ops} == {(("torch_dtype",), "bfloat16"), (("dtype",), "bfloat16")}


def test_fp16_tensors_next_to_a_bf16_target_are_k912_and_need_cast(tmp_path):
    res = run(tmp_path, tensors=to_f16, config=lambda c: c.update(torch_dtype="float16"))
    f = the(res, "K912", "warning")
    assert f.ops == [] and f.needs_decision and "--cast" in f.needs_decision
    assert f.evidence[0].expected == "BF16"


def test_fp16_tensors_with_cast_asked_get_cast_ops(tmp_path):
    res = run(tmp_path, tensors=to_f16, config=lambda c: c.update(torch_dtype="float16"),
              decisions=Decisions(cast_dtype="BF16"))
    f = the(res, "K912", "warning")
    assert f.ops and all(isinstance(o, CastTensor) and o.dtype == "BF16" for o in f.ops)
    assert "d2t" not in {o.name for o in f.ops}
    # K911 names the dtype the tensors will have after the cast, not before it (idempotent fix)
    k911 = the(res, "K911", "warning")
    assert {o.value for o in k911.ops} == {"bfloat16"}


# --- coverage and absence ---------------------------------------------------------------------------------------

def test_aux_states_switched_off_on_an_eagle3_draft_is_k406(tmp_path):
    def mut(c: dict) -> None:
        c["eagle_config"]["use_aux_hidden_state"] = False

    res = run(tmp_path, config=mut)
    f = the(res, "K406", "error")
    assert f.ops == [SetConfig(("eagle_config", "use_aux_hidden_state"), True, f.ops[0].reason)]


def test_num_aux_hidden_states_disagreeing_with_fc_is_k406(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(num_aux_hidden_states=4))
    f = the(res, "K406", "error")
    assert f.ops[0].path == ("num_aux_hidden_states",) and f.ops[0].value == 3


def test_draft_vocab_size_above_the_target_vocabulary_is_k501(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(draft_vocab_size=TINY.vocab * 2))
    f = the(res, "K501", "error")
    assert "larger than the target vocabulary" in f.message
    assert f.ops[0].value == TINY.draft_vocab


def test_an_installed_engine_release_without_a_row_is_k106(tmp_path, monkeypatch):
    # the installed vLLM as kconvert/engines/installed.py reads it: a release one minor past the newest row
    import kconvert.rules.config_hygiene as ch
    from kconvert.engines.expectations import KNOWN

    newest = max(tuple(int(x) for x in v.split("/")[0].split(".")) for v in KNOWN["vllm"])
    unknown = f"{newest[0]}.{newest[1] + 1}.0"
    monkeypatch.setattr(ch, "installed_version", lambda engine: unknown if engine == "vllm" else None)
    f = the(run(tmp_path, engine_version="0.34"), "K106", "warning")
    assert f"vllm {unknown} is installed here" in f.message and "vllm 0.34 row" in f.message


def test_the_engines_own_code_disagreeing_with_the_row_is_k107(tmp_path):
    # what vLLM 0.34.0's own code answered for the tiny speculators example (tests/data/vllm_oracle.json), held
    # against a 0.34 row that still reads eagle_config's ids as Model Runner V1 did: the draft's ids sit there only
    import json
    from dataclasses import replace

    from kconvert.commands.inspect import analyse, open_draft
    from kconvert.engines.expectations import engine_rules
    from kconvert.targets import load_target

    rec = json.loads((Path(__file__).parent / "data" / "vllm_oracle.json").read_text())
    key = "examples/drafts/llama-specforge"
    oracle = {"engine": "vllm", "release": "0.34.0", "runner": "v2", "functions": rec["releases"]["0.34"]["functions"],
              "answer": rec["drafts"][key]["answers"]["0.34"]}
    root = Path(__file__).parents[1]
    ckpt = open_draft(str(root / "examples/tiny/drafts/llama-specforge"))
    target = load_target(str(root / "examples/tiny/target"))
    assert not [f for f in analyse(ckpt, target, engine_rules("vllm", "0.34"), oracle=oracle).findings
                if f.id == "K107"]
    stale = replace(engine_rules("vllm", "0.34"), aux_read_paths=engine_rules("vllm", "0.33/v1").aux_read_paths)
    res = analyse(ckpt, target, stale, oracle=oracle)
    f = the(res, "K107", "error")
    assert "[1, 4, 6]" in f.message and "[2, 4, 5]" in f.message  # the row's streams and the engine's defaults


def test_a_replayed_line_that_serves_an_eagle3_draft_as_eagle1_is_k109(tmp_path):
    # the production line of issue #46: vLLM reads `eagle-` in the path as EAGLE-1 (config/speculative.py; the
    # table is held to vLLM's own detection in tests/test_method_detection.py)
    from kconvert.engines.method_detection import resolve

    line = {"model": "/models/kimi-eagle-draft", "num_speculative_tokens": 3}
    served = resolve(line, {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}, "0.32")
    f = the(run(tmp_path, decisions=Decisions(served=served)), "K109", "error")
    assert "'eagle' (EAGLE-1)" in f.message and '"method": "eagle3"' in f.message
    assert f.evidence[0].where == "speculative_config.method" and f.evidence[0].expected == "eagle3"
    # the same line with the method, a path vLLM reads as eagle3, or an SGLang row: no K106
    for other in ({**line, "method": "eagle3"}, {"model": "/models/kimi-eagle3", "num_speculative_tokens": 3}):
        res = run(tmp_path, decisions=Decisions(served=resolve(other, None, "0.32")), name="d2")
        assert "K109" not in ids(res)
    assert "K109" not in ids(run(tmp_path, engine="sglang", decisions=Decisions(served=served), name="d3"))


def test_a_dflash_checkpoint_is_k105_alone_not_a_cascade_of_eagle3_errors(tmp_path):
    # the DFlash shape of TorchSpec's configs/draft_models/qwen3_8b_dflash.json (tests/test_methods.py has the
    # other methods and engine rows); as an EAGLE-3 draft it drew K101, K203, K301, K302, K601 errors
    from tests.test_methods import dflash

    res = inspect(str(dflash(tmp_path / "d")), target="qwen3-8b", engine="vllm", engine_version="0.32")
    assert [(f.id, f.severity) for f in res.findings] == [("K105", "warning")]
    assert res.verdict == "pass" and res.exit_code == 0  # a warning: served, with another method string


COVERAGE: dict[str, list[str]] = {
    "K000": ["test_no_target_gives_k000_info_naming_the_skipped_checks"],
    "K001": ["test_pickle_files_are_reported_and_never_unpickled"],
    "K002": ["test_auto_map_is_reported_and_deleted_by_fix", "test_python_file_in_the_folder_is_reported_as_remote_code"],
    "K003": ["test_folder_without_safetensors_is_k003_error", "test_safetensors_file_outside_the_index_is_k003_info"],
    "K005": ["test_unreadable_small_tensor_values_are_k005_warning_not_a_silent_pass"],
    "K004": ["test_unknown_producer_is_k004_info"],
    "K101": ["test_deepseek_eagle3_architecture_is_not_mapped_by_vllm",
             "test_mla_tensors_under_a_llama_architecture_are_k101",
             "test_deepseek_v3_architecture_becomes_an_mtp_model_on_sglang",
             "test_speculators_architecture_on_sglang_is_fixable_k101"],
    "K102": ["test_mla_draft_with_model_type_deepseek_v3_is_refused_by_vllm",
             "test_mla_model_type_deepseek_v3_for_a_deepseek_target_becomes_deepseek_v2"],
    "K103": ["test_num_hidden_layers_copied_from_the_target_is_k103",
             "test_num_hidden_layers_in_speculators_is_set_in_the_nested_layer_config"],
    "K104": ["test_quantization_config_copied_from_the_target_is_an_error", "test_index_topk_alone_is_a_warning"],
    "K105": ["test_a_dflash_checkpoint_is_k105_alone_not_a_cascade_of_eagle3_errors"],
    "K106": ["test_an_installed_engine_release_without_a_row_is_k106"],
    "K107": ["test_the_engines_own_code_disagreeing_with_the_row_is_k107"],
    "K109": ["test_a_replayed_line_that_serves_an_eagle3_draft_as_eagle1_is_k109"],
    "K201": ["test_model_prefixed_keys_are_renamed_for_vllm", "test_layers0_keys_are_renamed_to_midlayer_for_sglang"],
    "K202": ["test_missing_projection_is_k202_and_not_fixable", "test_missing_fc_is_k202",
             "test_missing_mla_projection_is_k202"],
    "K203": ["test_bias_tensors_are_a_warning_and_dropped", "test_stray_tensor_is_an_error_and_dropped"],
    "K301": ["test_fc_of_four_aux_states_with_three_ids_is_k301_at_kimi_shape",
             "test_fc_width_of_another_target_is_k301_not_fixable",
             "test_wrong_target_hidden_size_is_set_from_the_target",
             "test_fc_width_without_target_is_checked_against_the_config"],
    "K304": ["test_heads_that_do_not_divide_are_an_error_naming_what_vllm_says",
             "test_kv_heads_split_replicate_or_crash_as_vllm_does",
             "test_a_draft_tp_other_than_one_or_the_targets_is_refused",
             "test_kimi_shaped_draft_splits_over_eight_ranks"],
    "K302": ["test_missing_head_dim_on_a_kimi_llama_draft_is_k302_and_set_to_128",
             "test_k_proj_rows_against_kv_heads_is_k302_not_fixable",
             "test_mla_ranks_that_disagree_with_the_tensors_are_k302"],
    "K303": ["test_norm_of_another_width_is_k303", "test_missing_hidden_size_is_k303_and_set_from_fc_rows"],
    "K401": ["test_missing_aux_ids_is_a_warning_that_needs_a_decision",
             "test_missing_aux_ids_with_user_ids_writes_them_where_vllm_reads",
             "test_missing_aux_ids_on_eagle_reference_is_info_with_the_defaults"],
    "K402": ["test_aux_id_past_the_last_layer_is_k402", "test_duplicated_aux_ids_are_k402",
             "test_final_boundary_id_on_an_engine_that_cannot_collect_it_is_k402_not_fixable",
             "test_malformed_aux_ids_are_k402"],
    "K403": ["test_aux_id_count_against_fc_width_is_k403"],
    "K404": ["test_specforge_output_convention_ids_are_k404_on_vllm",
             "test_unknown_producer_ids_need_the_convention_decided",
             "test_unknown_producer_ids_with_output_convention_are_converted",
             "test_input_ids_starting_at_1_cannot_be_expressed_on_sglang_post_25454",
             "test_input_ids_are_shifted_down_for_sglang_pre_25454",
             "test_input_ids_not_starting_at_1_are_k404_on_sglang_pre_25454",
             "test_producer_and_first_id_disagreeing_is_a_warning_that_names_both_and_blocks_fix",
             "test_a_one_layer_late_shift_is_a_warning_with_the_measured_cost",
             "test_a_one_layer_early_shift_is_an_error_with_the_measured_cost"],
    "K405": ["test_ids_only_at_the_top_level_key_are_mirrored_into_eagle_config",
             "test_different_ids_at_two_keys_are_a_k405_error", "test_user_aux_ids_replace_recorded_ones_as_k405_info"],
    "K406": ["test_aux_states_switched_off_on_an_eagle3_draft_is_k406",
             "test_num_aux_hidden_states_disagreeing_with_fc_is_k406"],
    "K501": ["test_draft_vocab_size_above_the_target_vocabulary_is_k501",
             "test_draft_vocab_size_against_lm_head_rows_is_k501",
             "test_draft_vocab_size_defaulting_to_vocab_size_is_k501"],
    "K502": ["test_absolute_d2t_is_rewritten_to_offsets", "test_d2t_outside_the_target_vocabulary_is_k502_not_fixable",
             "test_d2t_mapping_two_draft_ids_to_one_target_id_is_k502", "test_d2t_of_another_length_than_lm_head_is_k502",
             "test_pruned_head_without_d2t_is_k502"],
    "K503": ["test_t2d_of_another_length_is_rebuilt_at_kimi_shape",
             "test_t2d_marking_more_ids_than_d2t_is_a_k503_warning"],
    "K504": ["test_vocab_size_other_than_the_targets_is_k504"],
    "K601": ["test_missing_hidden_norm_is_k601_not_fixable"],
    "K602": ["test_speculators_without_norm_before_residual_is_k602_on_vllm",
             "test_specforge_with_norm_before_residual_true_is_left_to_the_user"],
    "K603": ["test_input_norm_without_norm_before_fc_is_k603_and_sets_the_flag",
             "test_norm_before_fc_without_input_norm_is_k603_not_fixable"],
    "K604": ["test_fc_norm_tensors_without_flag_are_k604", "test_fc_norm_flag_without_tensors_is_k604_not_fixable"],
    "K605": ["test_norm_output_from_specforge_is_a_k605_warning", "test_norm_output_from_speculators_is_k605_info"],
    "K606": ["test_modelopt_last_layernorm_flag_is_k606"],
    "K701": ["test_embeddings_of_another_vocabulary_are_k701_and_dropped",
             "test_randomly_initialised_embeddings_are_a_k701_error_on_vllm_and_nothing_on_sglang"],
    "K801": ["test_missing_lm_head_with_draft_vocab_size_is_k801_error",
             "test_missing_full_vocab_lm_head_is_a_k801_warning"],
    "K108": ["test_a_target_an_eagle3_draft_cannot_serve_is_k108_naming_what_serves_it"],
    "K305": ["test_a_llama_draft_next_to_an_mla_target_on_sglang_is_k305_naming_the_argument"],
    "K901": ["test_max_positions_below_the_targets_is_info_on_vllm_which_raises_it",
             "test_max_positions_below_the_targets_is_a_warning_on_sglang"],
    "K902": ["test_dropped_rope_scaling_is_restored_from_the_target_only_when_asked", "test_other_rope_theta_is_reported_not_changed"],
    "K911": ["test_torch_dtype_float16_next_to_dtype_bfloat16_is_k911"],
    "K912": ["test_fp16_tensors_next_to_a_bf16_target_are_k912_and_need_cast",
             "test_fp16_tensors_with_cast_asked_get_cast_ops"],
}


def test_every_registered_rule_has_a_provoking_test():
    assert set(COVERAGE) == set(REGISTRY), {"untested": set(REGISTRY) - set(COVERAGE),
                                            "unknown": set(COVERAGE) - set(REGISTRY)}
    g = globals()
    for rid, names in COVERAGE.items():
        assert names, rid
        for n in names:
            assert n in g and callable(g[n]), f"{rid}: no test named {n}"


def test_every_rule_is_documented_in_the_fixed_shape():
    for r in REGISTRY.values():
        assert r.summary and r.why and r.fix and r.name, r.id


# Clean drafts: each producer's natural output, for the engine it targets, against the tiny target.
CLEAN = {
    "torchspec-llama-vllm": ("torchspec", "vllm", {}),
    "torchspec-mla-vllm": ("torchspec", "vllm", {"family": "mla"}),
    "torchspec-embeddings-vllm": ("torchspec", "vllm", {"embeddings": True}),
    "torchspec-full-vocab-vllm": ("torchspec", "vllm", {"full_vocab": True}),
    "speculators-vllm": ("speculators", "vllm", {}),
    "specforge-sglang": ("specforge", "sglang", {}),
    "torchspec-sharded-sglang": ("torchspec", "sglang", {"shards": 3}),
}


@pytest.fixture(scope="module")
def clean_results(tmp_path_factory) -> dict[str, InspectResult]:
    root = tmp_path_factory.mktemp("clean")
    tgt = str(make_target(root / "target", "tiny"))
    out = {}
    for key, (producer, engine, kw) in CLEAN.items():
        folder = make_draft(root / key, producer, **kw)
        out[key] = inspect(str(folder), target=tgt, engine=engine)
    return out


def test_clean_drafts_have_no_finding_at_all(clean_results):
    # K305 is launch advice for the pair (a Llama layer next to the tiny MLA target on SGLang: name the draft's
    # attention backend), not a defect of the draft's files
    for key, res in clean_results.items():
        found = [f for f in res.findings if f.id != draft_attention_backend.id]
        assert found == [], (key, [(f.id, f.message) for f in found])


def test_a_llama_draft_next_to_an_mla_target_on_sglang_is_k305_naming_the_argument(tmp_path):
    folder = make_draft(tmp_path / "d", "specforge")
    res = inspect(str(folder), target=str(make_target(tmp_path / "t", "tiny")), engine="sglang",
                  engine_version="0.5.23")
    (f,) = [f for f in res.findings if f.id == draft_attention_backend.id]
    assert "--speculative-draft-attention-backend" in f.message and f.severity == "info"


def test_a_target_an_eagle3_draft_cannot_serve_is_k108_naming_what_serves_it(tmp_path):
    import json as _json

    t = make_target(tmp_path / "t", "tiny")
    cfg = _json.loads((t / "config.json").read_text())
    cfg["text_config"]["model_type"] = "kimi_k3"
    (t / "config.json").write_text(_json.dumps(cfg))
    res = inspect(str(make_draft(tmp_path / "d", "specforge")), target=str(t), engine="sglang",
                  engine_version="0.5.23")
    (f,) = [f for f in res.findings if f.id == target_not_served.id]
    assert f.severity == "error" and "What serves it:" in f.message


def _with_ids(ids_, archs=None):
    def mutate(c):
        c["eagle_aux_hidden_state_layer_ids"] = ids_
        if archs is not None:
            c["architectures"] = archs
    return mutate


def test_a_converted_speculators_draft_with_modelopts_default_ids_is_not_settled_by_its_format(tmp_path):
    # llama-3.1-8b has 32 layers. ModelOpt 0.47.0 (modelopt/torch/speculative/plugins/hf_eagle.py:63) captures the
    # outputs of sorted({1, 32//2 - 1, 32 - 4}) = [1, 15, 28] by default; speculators 0.9.0 convert writes the ids
    # it is given unshifted (eagle3_converter.py:146) under its legacy Eagle3Speculator class (:195). Read as vLLM's
    # input ids they are the streams [1, 15, 28]; as the capture's outputs, [2, 16, 29].
    res = run(tmp_path, "speculators", target="llama-3.1-8b", config=_with_ids([1, 15, 28]))
    assert res.draft.format.converted_by == "speculators convert"
    # a bf16 draft (the factory's torch_dtype): the class is the only habit, the float32 one is absent
    habits = res.draft.format.conversion_evidence
    assert len(habits) == 1 and "Eagle3Speculator" in habits[0]
    f = the(res, "K404", "warning")
    assert ("read as output", [2, 16, 29]) in [(e.where, e.expected) for e in f.evidence]
    assert "speculators convert" in f.message and any("ModelOpt" in str(e.observed) for e in f.evidence)
    assert f.needs_decision


def test_a_converted_draft_with_the_input_defaults_and_a_trained_one_with_modelopts_stay_settled(tmp_path):
    # speculators' own default [2, n//2, n-3] = [2, 16, 29] is no output-convention capture default: settled input
    res = run(tmp_path / "a", "speculators", target="llama-3.1-8b", config=_with_ids([2, 16, 29]))
    assert res.draft.format.converted_by and "K404" not in ids(res)
    # the trainer's class (speculators 0.9.0 speculators/models/eagle3/core.py Eagle3DraftModel) is no conversion
    res = run(tmp_path / "b", "speculators", target="llama-3.1-8b",
              config=_with_ids([1, 15, 28], ["Eagle3DraftModel"]))
    assert res.draft.format.converted_by is None and "K404" not in ids(res)
