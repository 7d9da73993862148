"""RedHatAI/Qwen3-8B-speculator.eagle3 (target Qwen/Qwen3-8B), as speculators' Eagle3Converter writes a converted
draft (vllm-project/speculators: src/speculators/convert/eagle/eagle3_converter.py): a speculators config whose transformer_layer_config is a LlamaConfig
(model_type llama) at the verifier's dimensions, norm_before_residual as given to the converter (true in the
speculators test that converts nm-testing/Speculator-Qwen3-8B-Eagle3), ids [2, 18, 33] (speculators' default
[2, n//2, n-3] for 36 layers; the published config was not read), layers.0.* tensors, d2t/t2d over a 32000-token
draft vocabulary, no embed_tokens. Dimensions of the layer: Qwen3-8B's config.json (kconvert/targets/profiles)."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import hole, llama_layer, norm, reduced_vocab, write

TARGET = "qwen3-8b"
H, HEADS, KV, HD, INTER, VOCAB, DRAFT_VOCAB = 4096, 32, 8, 128, 12288, 151936, 32000


def config() -> dict:
    layer = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
             "intermediate_size": INTER, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD,
             "num_hidden_layers": 1, "vocab_size": VOCAB, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
             "rope_theta": 1000000, "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.3.0",
            "draft_vocab_size": DRAFT_VOCAB, "norm_before_residual": True, "target_hidden_size": None,
            "eagle_aux_hidden_state_layer_ids": [2, 18, 33], "transformer_layer_config": layer,
            "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                   "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                   "verifier": {"name_or_path": "Qwen/Qwen3-8B",
                                                "architectures": ["Qwen3ForCausalLM"]}},
            "torch_dtype": "bfloat16"}


def tensors() -> dict:
    t = llama_layer("layers.0.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16")
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", DRAFT_VOCAB, H)
    t.update(reduced_vocab(VOCAB, DRAFT_VOCAB, seed=41))
    return t


def build(folder: Path) -> Path:
    return write(folder, config(), tensors())
