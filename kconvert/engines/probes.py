"""The probe set `kconvert engines learn` asks a vLLM release about: tiny EAGLE-3 drafts (configs and the names,
dtypes and shapes of their tensors) that differ from a base in one fact each, so that the release's answer to each
probe settles one fact of an engine row (`kconvert/engines/derive.py` reads the answers).

Pure: the drafts are data; `kconvert.runners.engine_oracle` writes them to a temporary folder and runs the
release's code over them. Sizes are those of the shipped tiny examples (`examples/tiny/drafts/llama-specforge`,
`mla-torchspec`: hidden 128, 8 heads of 64, vocabulary 512, draft vocabulary 256; tests/test_engine_learn.py holds
these shapes against the examples' own safetensors headers), on an 8-layer tiny Kimi-K2-shaped target whose context
is 131072 tokens.

Each probe is (name, family, config, tensors): the family is the draft class it is meant for (llama, qwen3, mla).
"""
from __future__ import annotations

import copy
from typing import Any

H = 128  # draft hidden = target hidden
HEADS, HEAD_DIM, INTER = 8, 64, 256
VOCAB, DRAFT_VOCAB = 512, 256
TARGET_LAYERS = 8
TARGET_CONTEXT = 131072
# MLA draft (Kimi-K2 shaped, tiny): the ranks of examples/tiny/drafts/mla-torchspec
Q_LORA, KV_LORA, NOPE, ROPE_DIM, V_HEAD = 64, 512, 32, 64, 32
IDS = [1, 3, 6]  # none of them a default of an 8-layer target ((2, L//2, L-3) = (2, 4, 5))
OTHER_IDS = [0, 2, 7]
YARN = {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 1.0, "beta_slow": 1.0,
        "mscale": 1.0, "mscale_all_dim": 1.0}

# The three places a draft's config may hold aux ids (kconvert.formats.aux AUX_PATHS and vLLM V2's
# eagle_config.layer_ids): which a runner reads, and in which order, is a row's aux_read_paths.
ID_PATHS: dict[str, tuple[str, ...]] = {
    "top": ("eagle_aux_hidden_state_layer_ids",),
    "eagle_config": ("eagle_config", "eagle_aux_hidden_state_layer_ids"),
    "eagle_config.layer_ids": ("eagle_config", "layer_ids"),
}
# How a draft names its decoder layers, and the prefix an engine row's layer_names lists for it.
LAYER_NAMES = {"midlayer": "midlayer.", "layers": "layers."}
# Target config: the text model of examples/tiny/target (DeepseekV3ForCausalLM, kimi_k2), which sets the context
TARGET_CONFIG: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "vocab_size": VOCAB, "hidden_size": H,
    "intermediate_size": INTER, "moe_intermediate_size": 64, "num_hidden_layers": TARGET_LAYERS,
    "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "q_lora_rank": Q_LORA, "kv_lora_rank": KV_LORA,
    "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE_DIM, "v_head_dim": V_HEAD, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1,
    "topk_group": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
    "routed_scaling_factor": 2.827, "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 50000.0,
    "rope_scaling": YARN, "max_position_embeddings": TARGET_CONTEXT, "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 4, "pad_token_id": 2,
    "torch_dtype": "bfloat16"}

_LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": H,
    "intermediate_size": INTER, "num_hidden_layers": 1, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
    "head_dim": HEAD_DIM, "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "max_position_embeddings": TARGET_CONTEXT, "attention_bias": False, "mlp_bias": False,
    "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 4, "torch_dtype": "bfloat16",
    "draft_vocab_size": DRAFT_VOCAB, "target_hidden_size": H, "eagle_config": {"use_aux_hidden_state": True}}
_QWEN3_CONFIG: dict[str, Any] = {**_LLAMA_CONFIG, "architectures": ["Eagle3Qwen3ForCausalLM"], "model_type": "qwen3"}
_MLA_CONFIG: dict[str, Any] = {
    "architectures": ["Eagle3DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "vocab_size": VOCAB,
    "draft_vocab_size": DRAFT_VOCAB, "hidden_size": H, "target_hidden_size": H, "intermediate_size": INTER,
    "num_hidden_layers": 1, "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "q_lora_rank": Q_LORA,
    "kv_lora_rank": KV_LORA, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE_DIM, "v_head_dim": V_HEAD,
    "head_dim": HEAD_DIM, "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 50000.0, "rope_scaling": YARN,
    "max_position_embeddings": TARGET_CONTEXT, "attention_bias": False, "tie_word_embeddings": False,
    "norm_before_residual": False, "eagle_config": {"use_aux_hidden_state": True}, "bos_token_id": 0,
    "eos_token_id": 4, "torch_dtype": "bfloat16"}
BASE_CONFIGS = {"llama": _LLAMA_CONFIG, "qwen3": _QWEN3_CONFIG, "mla": _MLA_CONFIG}


def layer_tensors(family: str, index: int, prefix: str) -> dict[str, list]:
    """One decoder layer's tensors: layer 0 takes 2H inputs (embedding and fc output side by side), later layers H
    (vLLM PR #26164)."""
    width = 2 * H if index == 0 else H
    t: dict[str, list] = {}
    if family == "mla":
        t.update({"self_attn.q_a_proj.weight": [Q_LORA, width], "self_attn.q_a_layernorm.weight": [Q_LORA],
                  "self_attn.q_b_proj.weight": [HEADS * (NOPE + ROPE_DIM), Q_LORA],
                  "self_attn.kv_a_proj_with_mqa.weight": [KV_LORA + ROPE_DIM, width],
                  "self_attn.kv_a_layernorm.weight": [KV_LORA],
                  "self_attn.kv_b_proj.weight": [HEADS * (NOPE + V_HEAD), KV_LORA],
                  "self_attn.o_proj.weight": [H, HEADS * V_HEAD]})
    else:
        t.update({f"self_attn.{p}_proj.weight": [HEADS * HEAD_DIM, width] for p in ("q", "k", "v")})
        t["self_attn.o_proj.weight"] = [H, HEADS * HEAD_DIM]
        if family == "qwen3":
            t.update({"self_attn.q_norm.weight": [HEAD_DIM], "self_attn.k_norm.weight": [HEAD_DIM]})
    t.update({"mlp.gate_proj.weight": [INTER, H], "mlp.up_proj.weight": [INTER, H], "mlp.down_proj.weight": [H, INTER],
              "input_layernorm.weight": [H], "post_attention_layernorm.weight": [H]})
    if index == 0:
        t["hidden_norm.weight"] = [H]
    return {prefix + k: ["BF16", v] for k, v in t.items()}


def draft_tensors(family: str, *, layers: int = 1, names: str = "midlayer", n_aux: int = 3,
                  fc: bool = True) -> dict[str, list]:
    """A draft's tensors as its producer writes them: `names` "midlayer" (SpecForge's midlayer.*, one layer) or
    "layers" (layers.N.*)."""
    out: dict[str, list] = {}
    for i in range(layers):
        out.update(layer_tensors(family, i, "midlayer." if names == "midlayer" else f"layers.{i}."))
    out.update({"norm.weight": ["BF16", [H]], "lm_head.weight": ["BF16", [DRAFT_VOCAB, H]],
                "d2t": ["I64", [DRAFT_VOCAB]], "t2d": ["BOOL", [VOCAB]]})
    if fc:
        out["fc.weight"] = ["BF16", [H, n_aux * H]]
    return dict(sorted(out.items()))


def _merge(cfg: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(cfg)
    for k, v in change.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _set(cfg: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    change: dict[str, Any] = {path[-1]: value}
    for p in reversed(path[:-1]):
        change = {p: change}
    return _merge(cfg, change)


def speculators_config(family: str = "llama", **top: Any) -> dict[str, Any]:
    """A speculators-format config (vllm-project/speculators: nested transformer_layer_config) of the llama or qwen3
    layer, as examples/tiny/drafts/llama-speculators (norm_before_residual left out: its default is a fact)."""
    layer = {k: v for k, v in BASE_CONFIGS[family].items()
             if k not in ("architectures", "draft_vocab_size", "target_hidden_size", "eagle_config")}
    layer["architectures"] = ["Qwen3ForCausalLM" if family == "qwen3" else "LlamaForCausalLM"]
    cfg: dict[str, Any] = {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.3.0",
        "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                                     "accept_tolerance": 0.0, "verifier_accept_k": 1}],
                               "verifier": {"name_or_path": "target", "architectures": ["DeepseekV3ForCausalLM"]}},
        "transformer_layer_config": layer, "draft_vocab_size": DRAFT_VOCAB, "target_hidden_size": H,
        "eagle_aux_hidden_state_layer_ids": [2, 4, 5], "torch_dtype": "bfloat16"}
    cfg.update(top)
    return cfg


def vllm_probes() -> dict[str, dict[str, Any]]:
    """name -> {"family", "config", "tensors", "asks"}: the probes of a vLLM release (derive.py names, for each row
    fact, the probes that settle it). `asks` lists the config attributes the child reads back from vLLM's hf config."""
    P: dict[str, dict[str, Any]] = {}

    def add(name: str, family: str, config: dict[str, Any], tensors: dict[str, list] | None = None,
            **extra: Any) -> None:
        P[name] = {"family": family, "config": config,
                   "tensors": tensors if tensors is not None else draft_tensors(family), **extra}

    llama = _LLAMA_CONFIG
    # where each runner reads the ids, and which key wins where two hold them
    add("ids-none", "llama", llama)
    for key, path in ID_PATHS.items():
        add(f"ids-at-{key}", "llama", _set(llama, path, IDS))
    keys = list(ID_PATHS)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            add(f"ids-at-{a}-vs-{b}", "llama", _set(_set(llama, ID_PATHS[a], IDS), ID_PATHS[b], OTHER_IDS))
    # heads without aux states: eagle_config.use_aux_hidden_state false, no fc (nvidia/gpt-oss-120b-Eagle3-v2)
    add("no-aux-head", "llama", _merge(llama, {"eagle_config": {"use_aux_hidden_state": False}}),
        draft_tensors("llama", fc=False))
    # how many aux states the draft class sizes fc for
    add("num-aux-4", "llama", {**llama, "num_aux_hidden_states": 4}, draft_tensors("llama", n_aux=4))
    add("ids-4", "llama", _set(llama, ID_PATHS["eagle_config"], [1, 2, 4, 6]), draft_tensors("llama", n_aux=4))
    add("num-aux-3-ids-4", "llama", _set({**llama, "num_aux_hidden_states": 3}, ID_PATHS["eagle_config"],
                                         [1, 2, 4, 6]), draft_tensors("llama", n_aux=3))
    # per draft class: the layer names it loads, a second layer, EAGLE 3.1's norms
    for fam, cfg in BASE_CONFIGS.items():
        for names in LAYER_NAMES:
            add(f"{fam}-names-{names}", fam, cfg, draft_tensors(fam, names=names))
        add(f"{fam}-names-model-prefixed", fam, cfg,
            {"model." + n: v for n, v in draft_tensors(fam, names="layers").items()})
        add(f"{fam}-two-layers", fam, {**cfg, "num_hidden_layers": 2}, draft_tensors(fam, layers=2, names="layers"))
        add(f"{fam}-norm-before-fc", fam,
            _merge(cfg, {"norm_before_fc": True, "eagle_config": {"norm_before_fc": True}}),
            {**draft_tensors(fam), "input_norm.weight": ["BF16", [3 * H]]})
        add(f"{fam}-fc-norm", fam, {**cfg, "fc_norm": True},
            {**draft_tensors(fam), **{f"fc_norm.{i}.weight": ["BF16", [H]] for i in range(3)}})
        add(f"{fam}-norm-output", fam, {**cfg, "norm_output": True}, norm_output=True)
    # an MLA draft whose model_type names DeepSeek-V3 (vLLM's MTP model types)
    add("mla-model-type-deepseek_v3", "mla", {**_MLA_CONFIG, "model_type": "deepseek_v3"})
    # the speculators format, its norm_before_residual default, and its qwen3 layer
    add("speculators-llama", "llama", speculators_config("llama"), draft_tensors("llama", names="layers"),
        asks=["norm_before_residual"])
    add("speculators-qwen3", "qwen3", speculators_config("qwen3"), draft_tensors("qwen3", names="layers"))
    # a draft shorter than the target: a cache-only rope type (default) and yarn
    add("short-default-rope", "llama", {**llama, "max_position_embeddings": 2048})
    add("short-yarn-rope", "llama", {**llama, "max_position_embeddings": 2048, "rope_scaling": YARN})
    # P-EAGLE (speculators peagle: an EAGLE-3 layer trained for parallel drafting with a mask token)
    add("peagle-speculators", "llama", speculators_config("llama", speculators_model_type="peagle",
                                                          architectures=["PEagleDraftModel"], mask_token_id=3),
        draft_tensors("llama", names="layers"))
    return P


# Architecture names kconvert's rows have known (vLLM 0.32's hand-read map before rows were learned, and SGLang's):
# asked of every release besides the names its own registry holds, so that a name a release dropped shows as dropped.
ARCH_CANDIDATES = (
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV3ForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM",
    "Eagle3DeepseekV3ForCausalLM", "Eagle3LlamaForCausalLM", "Eagle3MiniMaxM2ForCausalLM", "Eagle3Qwen2_5vlForCausalLM",
    "Eagle3Qwen3ForCausalLM", "Eagle3Qwen3vlForCausalLM", "Eagle3Speculator", "LlamaForCausalLM",
    "LlamaForCausalLMEagle3", "PEagleDraftModel", "PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM")


def arch_candidates() -> list[str]:
    return list(ARCH_CANDIDATES)
