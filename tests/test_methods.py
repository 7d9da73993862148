"""Checkpoints of other speculative methods users mistake for EAGLE-3 drafts (K105): DFlash, DSpark, P-EAGLE and
a DeepSeek/Kimi MTP layer. Each is built here at a reduced size from a published config's shape (cited per test);
kconvert must name the method and what serves it, as one finding, instead of failing it as a broken EAGLE-3 draft.

The expected method strings are the engines' own, written out from their code: vLLM 0.32.0 (installed)
config/speculative.py `SpeculativeMethod`, speculators/base.py `build_vllm_speculative_config`; SGLang 0.5.23
srt/speculative/spec_info.py `SpeculativeAlgorithm` and spec_registry.py (NEXTN -> EAGLE)."""
from __future__ import annotations

import json

from kconvert.commands.fix import fix
from kconvert.commands.inspect import inspect
from tests.zoo.replica import hole, llama_layer, mla_layer, norm, qwen3_layer, write

H, HEADS, KV, HD, INTER, VOCAB = 64, 4, 2, 16, 128, 1024


def ids(res, sev=None):
    return sorted(f.id for f in res.findings if sev is None or f.severity == sev)


def only_k105(res) -> "object":
    assert [f.id for f in res.findings] == ["K105"], [(f.id, f.severity, f.message) for f in res.findings]
    return res.findings[0]


def dflash(folder):
    """lightseekorg/TorchSpec configs/draft_models/qwen3_8b_dflash.json: DFlashDraftModel, model_type qwen3,
    5 decoder layers, block_size 16, dflash_config {mask_token_id, target_layer_ids}; vLLM's qwen3_dflash.py
    loads layers.N.*, fc, hidden_norm, norm (the names an EAGLE-3 draft has too)."""
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "num_hidden_layers": 5,
           "num_attention_heads": HEADS, "num_key_value_heads": KV, "intermediate_size": INTER, "head_dim": HD,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000, "vocab_size": VOCAB, "block_size": 16,
           "num_target_layers": 36, "dflash_config": {"mask_token_id": VOCAB - 1, "target_layer_ids": [1, 9, 17, 25, 33]},
           "max_position_embeddings": 40960, "tie_word_embeddings": False}
    t = {}
    for i in range(5):
        t.update(qwen3_layer(f"layers.{i}.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16", first=False))
    t["fc.weight"] = hole("BF16", H, 5 * H)
    t["hidden_norm.weight"] = norm("BF16", H, 3)
    t["norm.weight"] = norm("BF16", H, 9)
    return write(folder, cfg, t)


def test_a_dflash_checkpoint_is_named_with_the_method_each_engine_serves_it_with(tmp_path):
    folder = dflash(tmp_path / "dflash")
    f = only_k105(inspect(str(folder), target="qwen3-8b", engine="vllm", engine_version="0.32"))
    assert f.severity == "warning" and "DFlash" in f.message and '"method": "dflash"' in f.message
    assert "architectures" in f.evidence[0].where
    f = only_k105(inspect(str(folder), target="qwen3-8b", engine="sglang", engine_version="0.5.23"))
    assert f.severity == "warning" and "--speculative-algorithm DFLASH" in f.message
    # a row whose method support nobody read says so, never a pass and never "broken EAGLE-3"
    f = only_k105(inspect(str(folder), target="qwen3-8b", engine="vllm", engine_version="0.33"))
    assert f.severity == "warning" and "has not read" in f.message
    # an SGLang row read for EAGLE-3 only: the same
    assert ids(inspect(str(folder), target="qwen3-8b", engine="sglang", engine_version="post-25454")) == ["K105"]


def test_dflash_config_alone_names_the_method(tmp_path):
    # config/speculative.py reads dflash_config; a draft that keeps a Llama architecture name is still DFlash
    folder = dflash(tmp_path / "d")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]
    (folder / "config.json").write_text(json.dumps(cfg))
    f = only_k105(inspect(str(folder), engine="vllm", engine_version="0.32"))
    assert f.evidence[0].where == "config" and "dflash_config" in f.evidence[0].observed


def test_fix_plans_nothing_on_a_dflash_checkpoint_and_refuses_it(tmp_path):
    # K105's fix text: "Nothing to fix: it is another method's checkpoint"; exit 1 as the README's table gives a fix
    # that cannot be done (tests/test_other_method_commands.py covers the CLI and every flag)
    res = fix(str(dflash(tmp_path / "d")), None, target="qwen3-8b", engine="vllm", engine_version="0.32",
              dry_run=True)
    assert res.refused["rule"] == "K105" and res.refused["method"] == "dflash"
    assert res.ops == [] and res.written is None and res.exit_code == 1


def test_a_dspark_checkpoint_is_named_as_dspark(tmp_path):
    """lightseekorg/TorchSpec configs/ci/qwen3_8_27b_dspark_draft.json: Qwen3DSparkModel, one layer,
    target_layer_ids, mask_token_id, markov_rank, markov_head_type vanilla, confidence head."""
    cfg = {"architectures": ["Qwen3DSparkModel"], "model_type": "qwen3_dspark", "hidden_size": H,
           "intermediate_size": INTER, "num_hidden_layers": 1, "num_attention_heads": HEADS,
           "num_key_value_heads": KV, "head_dim": HD, "vocab_size": VOCAB, "rms_norm_eps": 1e-6,
           "max_position_embeddings": 262144, "rope_theta": 10000000.0, "num_target_layers": 5,
           "target_hidden_size": H, "target_num_hidden_layers": 64, "target_layer_ids": [3, 15, 31, 47, 59],
           "mask_token_id": VOCAB - 2, "markov_rank": 8, "markov_head_type": "vanilla",
           "enable_confidence_head": True, "confidence_head_with_markov": True, "tie_word_embeddings": False}
    t = qwen3_layer("layers.0.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16", first=False)
    t["fc.weight"] = hole("BF16", H, 5 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    folder = write(tmp_path / "dspark", cfg, t)
    f = only_k105(inspect(str(folder), engine="vllm", engine_version="0.32"))
    assert "DSpark" in f.message and '"method": "dspark"' in f.message
    f = only_k105(inspect(str(folder), engine="sglang", engine_version="0.5.23"))
    assert "--speculative-algorithm DSPARK" in f.message


def peagle_config() -> dict:
    """speculators' P-EAGLE format as vLLM 0.32's speculators/algos.py update_peagle reads it:
    speculators_model_type peagle, mask_token_id (required, becomes pard_token), eagle_aux_hidden_state_layer_ids,
    a Llama transformer_layer_config."""
    return {"architectures": ["PEagleDraftModel"], "speculators_model_type": "peagle", "speculators_version": "0.4.0",
            "draft_vocab_size": VOCAB, "mask_token_id": VOCAB - 1, "norm_before_residual": False,
            "eagle_aux_hidden_state_layer_ids": [2, 4, 5], "target_hidden_size": H,
            "speculators_config": {"algorithm": "peagle", "default_proposal_method": "greedy",
                                   "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                   "verifier": {"name_or_path": "tiny", "architectures": ["LlamaForCausalLM"]}},
            "transformer_layer_config": {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                         "hidden_size": H, "intermediate_size": INTER, "num_attention_heads": HEADS,
                                         "num_key_value_heads": KV, "head_dim": HD, "num_hidden_layers": 1,
                                         "vocab_size": VOCAB, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                                         "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}}


def peagle_folder(folder, cfg: dict):
    t = llama_layer("layers.0.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16")
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", VOCAB, H)
    return write(folder, cfg, t)


def test_verify_serves_a_peagle_draft_with_parallel_drafting_as_vllm_derives_it_and_score_refuses_it(
        tmp_path, capsys):
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

    from kconvert.cli import main

    cfg = peagle_config()
    derived = SpeculatorsConfig.build_vllm_speculative_config(cfg)  # vLLM's own serving of this checkpoint
    folder = peagle_folder(tmp_path / "peagle", cfg)
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "num_hidden_layers": 8,
        "num_attention_heads": HEADS, "num_key_value_heads": KV, "intermediate_size": INTER, "vocab_size": VOCAB,
        "max_position_embeddings": 4096}))

    def planned(*extra: str) -> dict:
        capsys.readouterr()
        rc = main(["verify", str(folder), "--target", str(target), "--dry-run", "--json", *extra])
        doc = json.loads(capsys.readouterr().out)
        assert rc in (0, 1) and doc.get("refused") is None, doc
        return doc["dry_run"]

    plan = planned()
    spec = plan["engine_args"]["speculative_config"]
    assert (spec["method"], spec["parallel_drafting"]) == (derived["method"], derived["parallel_drafting"]) \
        == ("eagle3", True)
    assert '"parallel_drafting": true' in plan["serve_line"]
    # a replayed production serve line that says otherwise keeps its word
    line = json.dumps({"method": "eagle3", "model": "org/peagle", "num_speculative_tokens": 3,
                       "parallel_drafting": False})
    assert planned("--speculative-config", line)["engine_args"]["speculative_config"]["parallel_drafting"] is False
    # the control: an EAGLE-3 draft of the same shapes gets no such key
    eagle = dict(cfg, speculators_model_type="eagle3", architectures=["Eagle3Speculator"])
    eagle.pop("mask_token_id")
    eagle["speculators_config"] = dict(cfg["speculators_config"], algorithm="eagle3")
    folder = peagle_folder(tmp_path / "eagle3", eagle)
    assert "parallel_drafting" not in planned()["engine_args"]["speculative_config"]

    # score replays sequential drafting: it refuses the P-EAGLE draft instead of printing its figure
    from tests.score_factories import random_trace

    folder = tmp_path / "peagle"
    capsys.readouterr()
    rc = main(["score", str(folder), "--trace", str(random_trace(tmp_path / "trace")), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["refused"]["method"] == "peagle" and doc.get("score") is None
    assert "parallel" in doc["refused"]["reason"] and "kconvert verify" in doc["refused"]["reason"]


def test_a_peagle_draft_is_eagle3_with_parallel_drafting_on_vllm_and_unserved_on_sglang(tmp_path):
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

    cfg = peagle_config()
    # vLLM's own code: the speculative config it derives from this checkpoint (the outside oracle for the text)
    derived = SpeculatorsConfig.build_vllm_speculative_config(cfg)
    assert derived["method"] == "eagle3" and derived["parallel_drafting"] is True
    folder = peagle_folder(tmp_path / "peagle", cfg)
    res = inspect(str(folder), engine="vllm", engine_version="0.32")
    k105 = [f for f in res.findings if f.id == "K105"]
    assert [f.severity for f in k105] == ["info"]
    assert '"method": "eagle3", "parallel_drafting": true' in k105[0].message
    # the code the options were read from is evidence (Model Runner V2 does not run it, so V1 does)
    assert any("Model Runner V2" in str(e.expected) for e in k105[0].evidence)
    # the EAGLE-3 rules still judge it there (vLLM loads it with Eagle3LlamaForCausalLM): K000 says the target
    # checks were skipped, which only the EAGLE-3 run reports
    assert "K000" in ids(res)
    f = only_k105(inspect(str(folder), engine="sglang", engine_version="0.5.23"))
    assert f.severity == "error" and "serves no peagle" in f.message
    # no SGLang class loads it: fix refuses it as another method's checkpoint (exit 1, nothing planned)
    res = fix(str(folder), None, engine="sglang", engine_version="0.5.23", dry_run=True)
    assert res.refused["method"] == "peagle" and res.ops == [] and res.exit_code == 1
    # on vLLM 0.32 its EAGLE-3 classes load it: fix is not refused there
    assert fix(str(folder), None, engine="vllm", engine_version="0.32", dry_run=True).refused is None


def mtp(folder, *, model_type: str, archs: list[str]):
    """A Kimi-K2.5 MTP layer as k-l-lambda/Kimi-K2.5-MTP's card describes it (via modularai/Kimi-K2.5-MTP):
    layer 61, enorm + hnorm -> eh_proj (2x7168 -> 7168) -> one decoder layer (MLA) -> shared_head; the tensor
    names of vLLM's deepseek_mtp.py. Reduced sizes; a dense MLP stands in for the MoE."""
    cfg = {"architectures": archs, "model_type": model_type, "hidden_size": H, "num_hidden_layers": 61,
           "num_nextn_predict_layers": 1, "num_attention_heads": HEADS, "kv_lora_rank": 16, "q_lora_rank": 32,
           "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "intermediate_size": INTER,
           "vocab_size": VOCAB, "rms_norm_eps": 1e-5, "rope_theta": 50000.0, "max_position_embeddings": 262144}
    p = "model.layers.61."
    t = {k: v for k, v in mla_layer(p, H=H, heads=HEADS, q_lora=32, kv_lora=16, rope=8, nope=16, v=16, inter=INTER,
                                    dtype="BF16").items() if "hidden_norm" not in k}
    t[p + "enorm.weight"] = norm("BF16", H, 1)
    t[p + "hnorm.weight"] = norm("BF16", H, 2)
    t[p + "eh_proj.weight"] = hole("BF16", H, 2 * H)
    t[p + "shared_head.norm.weight"] = norm("BF16", H, 3)
    t[p + "shared_head.head.weight"] = hole("BF16", VOCAB, H)
    return write(folder, cfg, t)


def test_an_mtp_layer_is_named_and_vllm_serves_it_only_for_the_model_types_it_maps(tmp_path):
    kimi = mtp(tmp_path / "kimi", model_type="kimi_k2", archs=["DeepseekV3ForCausalLM"])
    f = only_k105(inspect(str(kimi), engine="vllm", engine_version="0.32"))
    # config/speculative.py hf_config_override rewrites deepseek_v3 (and kimi_k3) to an MTP model, not kimi_k2
    assert f.severity == "error" and "MTP" in f.message and "kimi_k2" in f.message
    assert ("num_nextn_predict_layers", "1") in [(e.where, e.observed) for e in f.evidence]
    f = only_k105(inspect(str(kimi), engine="sglang", engine_version="0.5.23"))
    assert f.severity == "warning" and "NEXTN" in f.message
    ds = mtp(tmp_path / "ds", model_type="deepseek_v3", archs=["DeepseekV3ForCausalLM"])
    f = only_k105(inspect(str(ds), engine="vllm", engine_version="0.32"))
    assert f.severity == "warning" and '"method": "mtp"' in f.message


def test_an_eagle3_mla_draft_with_model_type_deepseek_v3_is_still_k102_not_mtp(tmp_path):
    from tests.factories import make_draft

    folder = make_draft(tmp_path / "d", "torchspec", family="mla", config=lambda c: c.update(model_type="deepseek_v3"))
    res = inspect(str(folder), engine="vllm", engine_version="0.32")
    assert "K102" in ids(res) and "K105" not in ids(res)


def test_specforges_flat_peagle_config_is_named_too(tmp_path):
    """sgl-project/SpecForge configs/qwen3-8b-peagle.json: a flat config, architectures PEagleDraftModel,
    model_type llama, 4 decoder layers (reduced sizes here)."""
    cfg = {"architectures": ["PEagleDraftModel"], "model_type": "llama", "hidden_size": H, "head_dim": HD,
           "intermediate_size": INTER, "num_attention_heads": HEADS, "num_key_value_heads": KV,
           "num_hidden_layers": 4, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_scaling": None,
           "rope_theta": 1000000, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": VOCAB,
           "draft_vocab_size": VOCAB}
    t = {}
    for i in range(4):
        t.update(llama_layer(f"layers.{i}.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16", first=i == 0))
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    folder = write(tmp_path / "peagle-flat", cfg, t)
    res = inspect(str(folder), engine="vllm", engine_version="0.32")
    assert [f.severity for f in res.findings if f.id == "K105"] == ["info"]
    f = only_k105(inspect(str(folder), engine="sglang", engine_version="0.5.23"))
    assert f.severity == "error" and f.evidence[0].where == "architectures"


def test_the_next_step_for_another_methods_checkpoint_is_the_rule_not_an_eagle3_verify(tmp_path):
    doc = inspect(str(dflash(tmp_path / "d")), target="qwen3-8b", engine="vllm", engine_version="0.32").to_dict()
    assert [s["command"] for s in doc["next_steps"]] == ["kconvert rules K105"]
    assert not doc.get("not_checked")
    assert doc["draft"]["method"] == "dflash"
