"""Qwen3-layer EAGLE-3 drafts (q_norm/k_norm), as speculators writes them with `speculators train --draft-arch
qwen3` (vllm-project/speculators: scripts/train.py DRAFT_ARCH_CONFIGS: a Qwen3Config as transformer_layer_config; models/eagle3/
model_definitions.py: Qwen3DecoderEagle3FirstLayer keeps Qwen3's q_norm/k_norm). The layer config is built by
transformers' own Qwen3Config, not by hand. vLLM 0.32 builds such a draft (transformers_utils/configs/speculators/
algos.py maps transformer_layer_config.model_type qwen3 to Eagle3Qwen3ForCausalLM, model_executor/models/
qwen3_eagle3.py); SGLang's EAGLE-3 loaders build none (llama_eagle3.py skips unknown names)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kconvert.commands.fix import fix
from kconvert.commands.inspect import inspect
from tests.zoo.replica import hole, norm, qwen3_layer, reduced_vocab, write

H, HEADS, KV, HD, INTER, VOCAB, DRAFT_VOCAB = 4096, 32, 8, 128, 12288, 151936, 32000


def speculators_qwen3_draft(folder: Path, **top) -> Path:
    from transformers import Qwen3Config

    layer = Qwen3Config(hidden_size=H, intermediate_size=INTER, num_attention_heads=HEADS, num_key_value_heads=KV,
                        head_dim=HD, num_hidden_layers=1, vocab_size=VOCAB, max_position_embeddings=40960,
                        rms_norm_eps=1e-6,
                        # the verifier's rope (Qwen3-8B: rope_theta 1e6, the qwen3-8b profile), as a draft trained for
                        # it carries; Qwen3Config's own default is 10000, which K902 rightly flags against the target
                        rope_theta=1000000).to_dict()
    cfg = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
           "draft_vocab_size": DRAFT_VOCAB, "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False,
           "norm_output": False, "target_hidden_size": None, "eagle_aux_hidden_state_layer_ids": [2, 18, 33],
           "transformer_layer_config": layer,
           "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                  "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                  "verifier": {"name_or_path": "Qwen/Qwen3-8B", "architectures": ["Qwen3ForCausalLM"]}},
           "torch_dtype": "bfloat16"}
    cfg.update(top)
    t = qwen3_layer("layers.0.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16")
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", DRAFT_VOCAB, H)
    t.update(reduced_vocab(VOCAB, DRAFT_VOCAB, seed=5))
    return write(folder, cfg, t)


def not_info(res):
    return [(f.id, f.severity, f.message) for f in res.findings if f.severity != "info"]


@pytest.mark.parametrize("version", ["0.32", "0.33"])
def test_a_speculators_qwen3_layer_draft_inspects_clean_on_vllm(tmp_path, version):
    d = speculators_qwen3_draft(tmp_path / "d")
    res = inspect(str(d), target="qwen3-8b", engine="vllm", engine_version=version)
    assert res.draft.layer_family == "qwen3"
    assert not_info(res) == []
    assert res.exit_code == 0


def test_fix_keeps_q_norm_and_k_norm_on_vllm(tmp_path):
    d = speculators_qwen3_draft(tmp_path / "d")
    res = fix(str(d), None, target="qwen3-8b", engine="vllm", engine_version="0.32", dry_run=True)
    assert res.noop


def test_a_flat_qwen3_layer_draft_under_a_llama_architecture_is_given_vllm_s_qwen3_class(tmp_path):
    # SpecForge's Qwen3 training class name is not in vLLM's registry, nor is a Llama name right for the layer.
    d = speculators_qwen3_draft(tmp_path / "d")
    cfg = json.loads((d / "config.json").read_text())
    flat = dict(cfg["transformer_layer_config"], architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=DRAFT_VOCAB,
                eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 18, 33]})
    (d / "config.json").write_text(json.dumps(flat))
    res = inspect(str(d), target="qwen3-8b", engine="vllm", engine_version="0.32")
    k101 = [f for f in res.findings if f.id == "K101"]
    assert k101 and k101[0].severity == "error" and "K203" not in {f.id for f in res.findings}
    assert [op.value for op in k101[0].ops] == [["Eagle3Qwen3ForCausalLM"]]


@pytest.mark.parametrize("version", ["pre-25454", "post-25454", "post-32334"])
def test_sglang_builds_no_qwen3_layer_draft_and_fix_does_not_drop_the_norms(tmp_path, version):
    d = speculators_qwen3_draft(tmp_path / "d")
    res = inspect(str(d), target="qwen3-8b", engine="sglang", engine_version=version)
    k101 = [f for f in res.findings if f.id == "K101"]
    assert k101 and not k101[0].fixable and "q_norm" in k101[0].message
    assert "K203" not in {f.id for f in res.findings}


def test_a_qwen3_architecture_over_llama_tensors_is_given_the_llama_class(tmp_path):
    # vLLM would build Eagle3Qwen3ForCausalLM with q_norm/k_norm left at weight 1: norms nobody trained.
    d = speculators_qwen3_draft(tmp_path / "d")
    cfg = json.loads((d / "config.json").read_text())
    flat = dict(cfg["transformer_layer_config"], architectures=["Qwen3ForCausalLM"], draft_vocab_size=DRAFT_VOCAB,
                eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 18, 33]})
    (d / "config.json").write_text(json.dumps(flat))
    from tests.zoo.replica import llama_layer, write as write_replica

    t = llama_layer("layers.0.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16")
    t.update({"fc.weight": hole("BF16", H, 3 * H), "norm.weight": norm("BF16", H, 9),
              "lm_head.weight": hole("BF16", DRAFT_VOCAB, H), **reduced_vocab(VOCAB, DRAFT_VOCAB, seed=5)})
    write_replica(tmp_path / "llama", flat, t)
    res = inspect(str(tmp_path / "llama"), target="qwen3-8b", engine="vllm", engine_version="0.32")
    assert res.draft.layer_family == "llama"
    k101 = [f for f in res.findings if f.id == "K101"]
    assert k101 and [op.value for op in k101[0].ops] == [["LlamaForCausalLMEagle3"]]


def test_a_speculators_qwen3_model_type_over_llama_tensors_is_set_to_llama(tmp_path):
    d = speculators_qwen3_draft(tmp_path / "d")
    cfg = json.loads((d / "config.json").read_text())
    from tests.zoo.replica import llama_layer, write as write_replica

    t = llama_layer("layers.0.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16")
    t.update({"fc.weight": hole("BF16", H, 3 * H), "norm.weight": norm("BF16", H, 9),
              "lm_head.weight": hole("BF16", DRAFT_VOCAB, H), **reduced_vocab(VOCAB, DRAFT_VOCAB, seed=5)})
    write_replica(tmp_path / "llama", cfg, t)
    res = inspect(str(tmp_path / "llama"), target="qwen3-8b", engine="vllm", engine_version="0.32")
    k101 = [f for f in res.findings if f.id == "K101"]
    assert k101 and k101[0].ops[0].path == ("transformer_layer_config", "model_type") and k101[0].ops[0].value == "llama"
