"""Factories for the live tier: a tiny Llama target with a real tokenizer and EAGLE-3 drafts for it.

The target is random but built so that greedy decoding follows a fixed cycle over the vocabulary
(``next = perm(current)``: the embeddings pass almost unchanged through small layers and ``lm_head`` row
``perm(i)`` is embedding ``i``). The draft reads the target's residual stream (aux layers 1..3) and predicts
``perm(perm(current))``, which is right at the first draft position and mostly wrong after it, so a live run
shows real, partial acceptance (mean acceptance length near 2 at k=3) without any training.
Shapes follow docs/vllm-cpu.md#engine-settings: head_dim 64 (16 fails on CPU), explicit aux ids [1, 2, 3].
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 4
HEADS = 2
HEAD_DIM = 64
VOCAB = 512
AUX_LAYER_IDS = [1, 2, 3]
SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|end|>", "<|pad|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_CORPUS = (
    "The quick brown fox jumps over the lazy dog. What is 12 plus 30? Forty two. "
    "def square(x):\n    return x * x\n"
    "Hello, how are you today? I am fine, thank you. Please list three prime numbers: 2, 3, 5. "
    "A train travels 60 km in one hour; in three hours it travels 180 km. The sky is blue because of "
    "Rayleigh scattering of sunlight in the atmosphere. Bonjour means good morning in French. "
    "Jupiter is the largest planet in the solar system. import numpy as np; print(np.arange(10)) "
)


def _save(tensors: dict[str, np.ndarray], path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    out = {}
    for name, arr in tensors.items():
        t = torch.from_numpy(np.ascontiguousarray(arr))
        out[name] = t.to(torch.bfloat16) if t.is_floating_point() else t
    save_file(out, str(path), metadata={"format": "pt"})


def write_tokenizer(folder: Path, vocab_size: int = VOCAB) -> dict[str, int]:
    """Train a byte-level BPE on a small corpus; write tokenizer.json + tokenizer_config.json with a chat
    template. Returns the ids of the special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 20, trainer=trainer)
    assert tok.get_vocab_size() <= vocab_size, tok.get_vocab_size()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<|bos|>",
                "eos_token": "<|eos|>",
                "pad_token": "<|pad|>",
                "model_max_length": 2048,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
        )
    )
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    ids["__size__"] = tok.get_vocab_size()
    return ids


def _cycle(vocab: int, special_ids: list[int], rng: np.random.Generator) -> np.ndarray:
    """``perm``: one cycle through all normal tokens; special tokens lead into it and are never produced."""
    normal = np.array([i for i in range(vocab) if i not in set(special_ids)])
    order = rng.permutation(normal)
    perm = np.empty(vocab, dtype=np.int64)
    perm[order] = np.roll(order, -1)
    perm[special_ids] = order[0]
    return perm


def build_target(folder: str | Path, *, seed: int = 0, layer_std: float = 0.02) -> Path:
    """A 4-layer Llama target (hidden 128, 2 heads of 64, vocab 512, bf16) with a tokenizer."""
    folder = Path(folder)
    specials = write_tokenizer(folder)
    # Never produced: special tokens and the ids the small BPE left without a token.
    excluded = [specials[t] for t in SPECIAL_TOKENS] + list(range(specials.pop("__size__"), VOCAB))
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    perm = _cycle(VOCAB, excluded, rng)
    lm_head = np.zeros((VOCAB, HIDDEN), dtype=np.float32)
    normal = [i for i in range(VOCAB) if i not in set(excluded)]
    lm_head[perm[normal]] = emb[normal]
    t = {"model.embed_tokens.weight": emb, "model.norm.weight": np.ones(HIDDEN), "lm_head.weight": lm_head}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        for name, shape in {
            "self_attn.q_proj": (HEADS * HEAD_DIM, HIDDEN),
            "self_attn.k_proj": (HEADS * HEAD_DIM, HIDDEN),
            "self_attn.v_proj": (HEADS * HEAD_DIM, HIDDEN),
            "self_attn.o_proj": (HIDDEN, HEADS * HEAD_DIM),
            "mlp.gate_proj": (INTERMEDIATE, HIDDEN),
            "mlp.up_proj": (INTERMEDIATE, HIDDEN),
            "mlp.down_proj": (HIDDEN, INTERMEDIATE),
        }.items():
            t[p + name + ".weight"] = rng.normal(0, layer_std, shape).astype(np.float32)
        t[p + "input_layernorm.weight"] = np.ones(HIDDEN)
        t[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN)
    _save(t, folder / "model.safetensors")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": VOCAB,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": specials["<|bos|>"],
        "eos_token_id": specials["<|eos|>"],
        "pad_token_id": specials["<|pad|>"],
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "kconvert_factory.json").write_text(json.dumps({"perm": perm.tolist(), "excluded_ids": sorted(excluded), "seed": seed}))
    return folder


def _target_tables(target: Path) -> tuple[np.ndarray, np.ndarray, list[int]]:
    import torch  # bf16 has no numpy dtype
    from safetensors.torch import load_file as load_torch

    emb = load_torch(str(target / "model.safetensors"))["model.embed_tokens.weight"].to(torch.float32).numpy()
    perm = np.array(json.loads((target / "kconvert_factory.json").read_text())["perm"])
    specials = json.loads((target / "kconvert_factory.json").read_text())["excluded_ids"]
    return emb, perm, specials


def build_draft(
    folder: str | Path,
    target: str | Path,
    *,
    draft_vocab_size: int | None = None,
    d2t_absolute: bool = False,
    seed: int = 1,
    layer_std: float = 0.02,
) -> Path:
    """A 1-layer EAGLE-3 Llama draft (``LlamaForCausalLMEagle3``) for :func:`build_target`'s target.

    ``draft_vocab_size`` < 512 keeps that many target ids (every other id, high ones included) and writes
    ``d2t`` (offsets: target id - draft id) and ``t2d``. ``d2t_absolute=True`` writes ``d2t`` as absolute
    target ids, the known producer bug: vLLM computes ``arange + d2t`` and indexes past the vocabulary.
    """
    folder, target = Path(folder), Path(target)
    folder.mkdir(parents=True, exist_ok=True)
    emb, perm, excluded = _target_tables(target)
    rng = np.random.default_rng(seed)
    vocab = emb.shape[0]
    dv = draft_vocab_size or vocab
    target_ids = np.arange(vocab) if dv == vocab else np.sort(np.arange(1, vocab, 2)[:dv])
    assert len(target_ids) == dv, "draft_vocab_size too large for the odd-id subset"
    normal = np.array([i for i in range(vocab) if i not in set(excluded)])
    inv2 = np.zeros(vocab, dtype=np.int64)
    inv2[perm[perm[normal]]] = normal  # perm is a bijection on the normal ids
    lm_head = emb[inv2[target_ids]]
    reachable = np.zeros(vocab, dtype=bool)
    reachable[perm[normal]] = True
    lm_head[~reachable[target_ids]] = 0.0  # tokens the target never produces
    fc = np.zeros((HIDDEN, HIDDEN * len(AUX_LAYER_IDS)), dtype=np.float32)
    fc[:, :HIDDEN] = np.eye(HIDDEN)  # aux layer 1 ~ the current token's embedding
    t = {
        "fc.weight": fc,
        "norm.weight": np.ones(HIDDEN),
        "lm_head.weight": lm_head,
        "midlayer.input_layernorm.weight": np.ones(HIDDEN),
        "midlayer.hidden_norm.weight": np.ones(HIDDEN),
        "midlayer.post_attention_layernorm.weight": np.ones(HIDDEN),
    }
    for name, shape in {
        "self_attn.q_proj": (HEADS * HEAD_DIM, 2 * HIDDEN),
        "self_attn.k_proj": (HEADS * HEAD_DIM, 2 * HIDDEN),
        "self_attn.v_proj": (HEADS * HEAD_DIM, 2 * HIDDEN),
        "self_attn.o_proj": (HIDDEN, HEADS * HEAD_DIM),
        "mlp.gate_proj": (INTERMEDIATE, HIDDEN),
        "mlp.up_proj": (INTERMEDIATE, HIDDEN),
        "mlp.down_proj": (HIDDEN, INTERMEDIATE),
    }.items():
        t["midlayer." + name + ".weight"] = rng.normal(0, layer_std, shape).astype(np.float32)
    if dv != vocab:
        t["d2t"] = target_ids if d2t_absolute else target_ids - np.arange(dv)
        t2d = np.zeros(vocab, dtype=bool)
        t2d[target_ids] = True
        t["t2d"] = t2d
    _save(t, folder / "model.safetensors")
    tcfg = json.loads((target / "config.json").read_text())
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": vocab,
        "draft_vocab_size": dv,
        "target_hidden_size": HIDDEN,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": tcfg["bos_token_id"],
        "eos_token_id": tcfg["eos_token_id"],
        "eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS, "use_aux_hidden_state": True},
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def build_pair(root: str | Path, **draft_kwargs) -> tuple[Path, Path]:
    root = Path(root)
    target = build_target(root / "target")
    return target, build_draft(root / "draft", target, **draft_kwargs)
