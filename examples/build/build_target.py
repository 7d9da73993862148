"""Build the tiny Kimi-K2.5-shaped target: tokenizer, configs, weights.

Design (why not a default small random init): with std 0.02 the residual streams entering adjacent
layers are nearly identical (cosine 0.6-0.9) and greedy output collapses into one repeated token, so a
draft reading the wrong layers loses almost nothing. Here every weight is drawn with std `init_std`
(0.085 by default: 0.07 still collapses into repeats, 0.1 is so chaotic a one-layer draft reaches only
~50 % token accuracy), and layer k's output projections (o_proj, dense/shared/routed down_proj) are
multiplied by LAYER_GAIN**k (2.0; o_proj also by sqrt(2 / NUM_HEADS)), so each layer adds more than the
stream it receives and hidden_states[k] and hidden_states[k+1] point in clearly different directions (cosine ~0.4-0.5).
Optional LM training (`--steps`) on the templated answers exists but did not converge in a CPU budget
(loss 3.7 after 500 steps), so the shipped target is untrained.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

import common as C

LAYER_GAIN = 2.0  # build_all.py --gain (the shipped target: 2.0)


def text_config_dict() -> dict:
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "kimi_k2",
        "vocab_size": C.VOCAB,
        "hidden_size": C.HIDDEN,
        "intermediate_size": 256,
        "moe_intermediate_size": 64,
        "num_hidden_layers": C.NUM_LAYERS,
        "num_attention_heads": C.NUM_HEADS,
        "num_key_value_heads": C.NUM_HEADS,
        "q_lora_rank": 64,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 64,
        "v_head_dim": 32,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.827,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 50000.0,
        "rope_scaling": {
            "type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
            "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
        },
        "max_position_embeddings": 131072,
        "num_nextn_predict_layers": 0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "bos_token_id": C.TOK_ID["[BOS]"],
        "eos_token_id": C.TOK_ID["<|im_end|>"],
        "pad_token_id": C.TOK_ID["[PAD]"],
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def hf_text_config():
    from transformers import DeepseekV3Config

    d = dict(text_config_dict())
    rs = d.pop("rope_scaling")
    for k in ("architectures", "model_type", "torch_dtype", "topk_method", "scoring_func", "moe_layer_freq"):
        d.pop(k)
    d["rope_parameters"] = {
        "rope_type": "yarn", "rope_theta": d.pop("rope_theta"), "factor": rs["factor"],
        "original_max_position_embeddings": rs["original_max_position_embeddings"],
        "beta_fast": rs["beta_fast"], "beta_slow": rs["beta_slow"], "mscale": rs["mscale"],
        "mscale_all_dim": rs["mscale_all_dim"],
    }
    cfg = DeepseekV3Config(**d)
    cfg._attn_implementation = "sdpa"
    return cfg


def wrapper_config_dict() -> dict:
    return {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": text_config_dict(),
        "vision_config": {
            "model_type": "kimi_k25_vision",
            "patch_size": 14,
            "init_pos_emb_height": 8,
            "init_pos_emb_width": 8,
            "init_pos_emb_time": 4,
            "pos_emb_height": 8,
            "pos_emb_width": 8,
            "pos_emb_time": 4,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "hidden_size": 64,
            "intermediate_size": 128,
            "hidden_act": "gelu_pytorch_tanh",
            "merge_kernel_size": [2, 2],
            "mm_hidden_size": 64,
            "text_hidden_size": C.HIDDEN,
        },
        "media_placeholder_token_id": C.TOK_ID["<|media_pad|>"],
        "image_token_id": C.TOK_ID["<|media_pad|>"],
        "video_token_id": C.TOK_ID["<|kimi_k25_video_placeholder|>"],
        "vision_start_token_id": C.TOK_ID["<|media_begin|>"],
        "vision_end_token_id": C.TOK_ID["<|media_end|>"],
        "projection_hidden_size": 64,
        "bos_token_id": C.TOK_ID["[BOS]"],
        "eos_token_id": C.TOK_ID["<|im_end|>"],
        "pad_token_id": C.TOK_ID["[PAD]"],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def build_tokenizer(train_rows: list[dict], out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=C.VOCAB, special_tokens=C.SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2,
    )
    texts = []
    for r in train_rows:
        texts += [r["prompt"], r["answer"], "user", "assistant", "system"]
    tok.train_from_iterator(texts, trainer=trainer)
    assert tok.get_vocab_size() == C.VOCAB, tok.get_vocab_size()
    for t, i in C.TOK_ID.items():
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t), i)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="[BOS]", eos_token="<|im_end|>", pad_token="[PAD]",
        unk_token="[UNK]", additional_special_tokens=C.SPECIAL_TOKENS[4:],
    )
    fast.chat_template = C.CHAT_TEMPLATE
    fast.model_max_length = 131072
    fast.save_pretrained(str(out))
    # Keep the directory free of files vLLM/transformers do not need and make the config stable.
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["chat_template"] = C.CHAT_TEMPLATE
    tc["add_bos_token"] = False
    tc["clean_up_tokenization_spaces"] = False
    tc_path.write_text(json.dumps(tc, indent=2, sort_keys=True) + "\n")
    cj = out / "chat_template.jinja"
    if cj.exists():
        cj.unlink()
    return fast


def encode_examples(tok, rows: list[dict]) -> list[list[int]]:
    seqs = []
    for r in rows:
        text = C.render_prompt(r["prompt"]) + r["answer"] + "<|im_end|>"
        seqs.append(tok(text, add_special_tokens=False)["input_ids"])
    return seqs


def train_target(seqs: list[list[int]], seed: int, steps: int, batch: int, lr: float, init_std: float = 0.02):
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    cfg = hf_text_config()
    cfg.initializer_range = init_std
    model = DeepseekV3ForCausalLM(cfg).float()
    with torch.no_grad():  # routers start from a small random init so experts differ from step 0
        for layer in model.model.layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate.weight.normal_(0, init_std)
    # Layer k's output projections start LAYER_GAIN**k larger than usual; Adam moves every weight by
    # about lr per step whatever its size, so the late, large layers keep their scale through training.
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            g = LAYER_GAIN ** i
            # o_proj sums NUM_HEADS heads: scaled by sqrt(2 / NUM_HEADS), the attention output keeps the size
            # the 2-head design (init_std, LAYER_GAIN) was tuned at.
            layer.self_attn.o_proj.weight.mul_(g * (2 / C.NUM_HEADS) ** 0.5)
            mlp = layer.mlp
            if hasattr(mlp, "experts"):
                mlp.experts.down_proj.mul_(g)
                mlp.shared_experts.down_proj.weight.mul_(g)
            else:
                mlp.down_proj.weight.mul_(g)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    pad = C.TOK_ID["[PAD]"]
    model.train()
    t0 = time.time()
    for step in range(steps):
        warm = 30
        if steps < warm:
            break
        f = (step + 1) / warm if step < warm else 0.5 * (1 + math.cos(math.pi * (step - warm) / (steps - warm)))
        for pg in opt.param_groups:
            pg["lr"] = lr * max(f, 0.02)
        idx = torch.randint(len(seqs), (batch,), generator=g).tolist()
        T = max(len(seqs[i]) for i in idx)
        ids = torch.full((batch, T), pad, dtype=torch.long)
        for b, i in enumerate(idx):
            ids[b, : len(seqs[i])] = torch.tensor(seqs[i])
        labels = ids.clone()
        labels[ids == pad] = -100
        out = model(input_ids=ids, labels=labels)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"  target step {step:4d} loss {out.loss.item():.4f} ({time.time() - t0:.0f}s)", flush=True)
    model.eval()
    return model


def save_target(model, out: Path) -> None:
    from safetensors.torch import save_file

    sd = {}
    E = model.config.n_routed_experts
    inter = model.config.moe_intermediate_size
    for name, t in model.state_dict().items():
        t = t.detach()
        if ".mlp.experts.gate_up_proj" in name:
            pre = "language_model." + name.replace("experts.gate_up_proj", "experts")
            for e in range(E):
                sd[f"{pre}.{e}.gate_proj.weight"] = t[e, :inter].clone()
                sd[f"{pre}.{e}.up_proj.weight"] = t[e, inter:].clone()
        elif ".mlp.experts.down_proj" in name:
            pre = "language_model." + name.replace("experts.down_proj", "experts")
            for e in range(E):
                sd[f"{pre}.{e}.down_proj.weight"] = t[e].clone()
        else:
            sd["language_model." + name] = t
    sd = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous() for k, v in sorted(sd.items())}
    # e_score_correction_bias is fp32 in DeepSeek-V3 checkpoints; keep every float in bf16 here for size.
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})


def load_hf_target(target_dir: Path, dtype=torch.float32):
    """The saved target as a transformers DeepseekV3ForCausalLM (bf16 weights, computed in `dtype`)."""
    from safetensors.torch import load_file
    from transformers import DeepseekV3ForCausalLM

    cfg = hf_text_config()
    with torch.device("meta"):
        model = DeepseekV3ForCausalLM(cfg)
    sd = load_file(str(target_dir / "model.safetensors"))
    E, inter = cfg.n_routed_experts, cfg.moe_intermediate_size
    new = {}
    for k, v in sd.items():
        k = k[len("language_model."):]
        new[k] = v
    for i, layer in enumerate(model.model.layers):
        if hasattr(layer.mlp, "experts"):
            p = f"model.layers.{i}.mlp.experts"
            gu = torch.stack([torch.cat([new.pop(f"{p}.{e}.gate_proj.weight"), new.pop(f"{p}.{e}.up_proj.weight")])
                              for e in range(E)])
            dn = torch.stack([new.pop(f"{p}.{e}.down_proj.weight") for e in range(E)])
            new[f"{p}.gate_up_proj"] = gu
            new[f"{p}.down_proj"] = dn
    new = {k: v.to(dtype) for k, v in new.items()}
    model.load_state_dict(new, strict=True, assign=True)
    # rotary inv_freq is a non-persistent buffer: rebuild it on CPU
    model.model.rotary_emb = type(model.model.rotary_emb)(cfg)
    model.eval()
    return model


def write_target_files(out: Path) -> None:
    C.write_json(out / "config.json", wrapper_config_dict())
    C.write_json(out / "generation_config.json", {
        "bos_token_id": C.TOK_ID["[BOS]"], "eos_token_id": C.TOK_ID["<|im_end|>"],
        "pad_token_id": C.TOK_ID["[PAD]"], "do_sample": False,
    })
    C.write_json(out / "preprocessor_config.json", {
        "media_proc_cfg": {
            "in_patch_limit": 256,
            "patch_size": 14,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "merge_kernel_size": 2,
            "fixed_output_tokens": None,
            "patch_limit_on_one_side": 64,
            "in_patch_limit_each_frame": 256,
            "in_patch_limit_video": None,
            "sample_fps": 2.0,
            "max_num_frames_each_video": None,
            "temporal_merge_kernel_size": 4,
            "timestamp_mode": "hh:mm:ss.fff",
            "config_type": "media_proc_cfg",
        }
    })


def build(seed: int, work: Path, steps: int, batch: int, lr: float, init_std: float = 0.02) -> None:
    torch.set_num_threads(1)
    out = C.TARGET_DIR
    out.mkdir(parents=True, exist_ok=True)
    rows = C.read_jsonl(work / "train.jsonl")
    t0 = time.time()
    tok = build_tokenizer(rows, out)
    seqs = encode_examples(tok, rows)
    lens = [len(s) for s in seqs]
    print(f"tokenizer: vocab {len(tok)}, example length mean {sum(lens) / len(lens):.1f} max {max(lens)}")
    model = train_target(seqs, seed, steps, batch, lr, init_std)
    save_target(model, out)
    write_target_files(out)
    print(f"target built in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", type=Path, default=C.DEFAULT_WORK)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--init-std", type=float, default=0.02)
    ap.add_argument("--gain", type=float, default=LAYER_GAIN)
    a = ap.parse_args()
    LAYER_GAIN = a.gain
    build(a.seed, a.work_dir, a.steps, a.batch, a.lr, a.init_std)
