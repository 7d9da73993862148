"""Write the distilled drafts in their producer layouts, and the broken variants derived from them."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import build_target as BT
import common as C

TORCHSPEC_VERSION = "0.1.0"
SPECULATORS_VERSION = "0.3.0"
DRAFT_INTER = 256


def _save(out: Path, cfg: dict, tensors: dict[str, torch.Tensor]) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    C.write_json(out / "config.json", cfg)
    tensors = {k: v.contiguous() for k, v in sorted(tensors.items())}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


def _pruned(full: dict[str, torch.Tensor], d2t: torch.Tensor, t2d: torch.Tensor) -> dict[str, torch.Tensor]:
    out = dict(full)
    rows = d2t + torch.arange(len(d2t))
    out["lm_head.weight"] = full["lm_head.weight"][rows].clone()
    out["d2t"] = d2t.clone()
    out["t2d"] = t2d.clone()
    return out


def _rekey(t: dict[str, torch.Tensor], old: str, new: str) -> dict[str, torch.Tensor]:
    return {(new + k[len(old):] if k.startswith(old) else k): v for k, v in t.items()}


def mla_config() -> dict:
    tc = BT.text_config_dict()
    cfg = {
        "architectures": ["Eagle3DeepseekV3ForCausalLM"],
        "model_type": "kimi_k2",
        "_torchspec_version": TORCHSPEC_VERSION,
        "vocab_size": C.VOCAB,
        "draft_vocab_size": C.DRAFT_VOCAB,
        "hidden_size": C.HIDDEN,
        "target_hidden_size": C.HIDDEN,
        "intermediate_size": DRAFT_INTER,
        "num_hidden_layers": 1,
        "num_attention_heads": tc["num_attention_heads"],
        "num_key_value_heads": tc["num_key_value_heads"],
        "q_lora_rank": tc["q_lora_rank"],
        "kv_lora_rank": tc["kv_lora_rank"],
        "qk_nope_head_dim": tc["qk_nope_head_dim"],
        "qk_rope_head_dim": tc["qk_rope_head_dim"],
        "v_head_dim": tc["v_head_dim"],
        "head_dim": tc["qk_rope_head_dim"],
        "hidden_act": "silu",
        "rms_norm_eps": tc["rms_norm_eps"],
        "rope_theta": tc["rope_theta"],
        "rope_scaling": copy.deepcopy(tc["rope_scaling"]),
        "max_position_embeddings": tc["max_position_embeddings"],
        "attention_bias": False,
        "tie_word_embeddings": False,
        "norm_before_residual": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(C.AUX_IDS_VLLM), "use_aux_hidden_state": True},
        "eagle_aux_hidden_state_layer_ids": list(C.AUX_IDS_VLLM),
        "bos_token_id": C.TOK_ID["[BOS]"],
        "eos_token_id": C.TOK_ID["<|im_end|>"],
        "torch_dtype": "bfloat16",
    }
    return cfg


def llama_layer_config(vocab: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": C.HIDDEN,
        "intermediate_size": DRAFT_INTER,
        "num_hidden_layers": 1,
        "num_attention_heads": C.NUM_HEADS,
        "num_key_value_heads": C.NUM_HEADS,
        "head_dim": C.LLAMA_HEAD_DIM,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 131072,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": C.TOK_ID["[BOS]"],
        "eos_token_id": C.TOK_ID["<|im_end|>"],
        "torch_dtype": "bfloat16",
    }


def speculators_config() -> dict:
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": SPECULATORS_VERSION,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                  "accept_tolerance": 0.0, "verifier_accept_k": 1}],
            "verifier": {"name_or_path": "examples/tiny/target",
                         "architectures": ["KimiK25ForConditionalGeneration"]},
        },
        "transformer_layer_config": llama_layer_config(C.VOCAB),
        "draft_vocab_size": C.DRAFT_VOCAB,
        "target_hidden_size": C.HIDDEN,
        "norm_before_residual": False,
        "eagle_aux_hidden_state_layer_ids": list(C.AUX_IDS_VLLM),
        "torch_dtype": "bfloat16",
    }


def specforge_llama_config() -> dict:
    cfg = llama_layer_config(C.VOCAB)
    cfg["architectures"] = ["LlamaForCausalLMEagle3"]
    cfg["draft_vocab_size"] = C.DRAFT_VOCAB
    cfg["target_hidden_size"] = C.HIDDEN
    cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(C.AUX_IDS_SPECFORGE),
                           "use_aux_hidden_state": True}
    return cfg


def torchspec_llama_fullvocab_config() -> dict:
    cfg = llama_layer_config(C.VOCAB)
    cfg["architectures"] = ["LlamaForCausalLMEagle3"]
    cfg["_torchspec_version"] = TORCHSPEC_VERSION
    cfg["draft_vocab_size"] = C.VOCAB
    cfg["target_hidden_size"] = C.HIDDEN
    cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(C.AUX_IDS_VLLM), "use_aux_hidden_state": True}
    cfg["eagle_aux_hidden_state_layer_ids"] = list(C.AUX_IDS_VLLM)
    return cfg


def write_drafts(res: dict) -> None:
    d2t, t2d = res["d2t"], res["t2d"]
    D, B = C.DRAFTS_DIR, C.BROKEN_DIR
    if "mla" in res:
        mla = _pruned(res["mla"], d2t, t2d)
        _save(D / "mla-torchspec", mla_config(), mla)
    if "llama" in res:
        full = res["llama"]
        _save(D / "llama-fullvocab", torchspec_llama_fullvocab_config(), dict(full))
        pruned = _pruned(full, d2t, t2d)
        _save(D / "llama-speculators", speculators_config(), _rekey(pruned, "midlayer.", "layers.0."))
        _save(D / "llama-specforge", specforge_llama_config(), pruned)
    write_broken()


def _load(name: str, where: Path | None = None) -> tuple[dict, dict]:
    p = (where or C.DRAFTS_DIR) / name
    return json.loads((p / "config.json").read_text()), load_file(str(p / "model.safetensors"))


def write_broken() -> None:
    B = C.BROKEN_DIR
    if B.exists():
        shutil.rmtree(B)
    B.mkdir(parents=True)
    D = C.DRAFTS_DIR
    if (D / "mla-torchspec").exists():
        cfg, t = _load("mla-torchspec")
        # 1. aux ids in SpecForge/SGLang output convention, eagle_config only
        c = copy.deepcopy(cfg)
        c.pop("eagle_aux_hidden_state_layer_ids")
        c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(C.AUX_IDS_SPECFORGE)
        _save(B / "aux-ids-sglang-convention", c, t)
        # 2. d2t holds absolute target ids
        tt = dict(t)
        tt["d2t"] = t["d2t"] + torch.arange(len(t["d2t"]))
        _save(B / "d2t-absolute", cfg, tt)
        # 3. no aux ids anywhere (vLLM falls back to its default (2, L//2, L-3))
        c = copy.deepcopy(cfg)
        c.pop("eagle_aux_hidden_state_layer_ids")
        c["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
        _save(B / "no-aux-ids", c, t)
    if (D / "llama-speculators").exists():
        cfg, t = _load("llama-speculators")
        # 4. speculators config without the explicit norm_before_residual=false (vLLM then defaults to true)
        c = copy.deepcopy(cfg)
        c.pop("norm_before_residual")
        _save(B / "norm-before-residual-missing", c, t)
        # 5. every tensor key prefixed "model." except lm_head (HF CausalLM habit)
        tt = {(k if k.startswith("lm_head") else "model." + k): v for k, v in t.items()}
        _save(B / "model-prefixed-keys", cfg, tt)
        # 6. lm_head pruned with full[d2t] instead of full[d2t + arange]
        _, full = _load("llama-fullvocab")
        tt = dict(t)
        tt["lm_head.weight"] = full["lm_head.weight"][t["d2t"]].clone()
        _save(B / "lm-head-wrong-prune", cfg, tt)


if __name__ == "__main__":
    write_broken()
