"""Tiny EAGLE-3 draft checkpoints for the writer's tests, written with numpy only (no torch, no blobs).

`write_safetensors` writes any tensor set; a tensor whose data is None becomes a hole of a sparse file (the
header says it is there, the disk holds nothing), which is how "real-shape" checkpoints (a [163840, 7168] bf16
lm_head) cost no disk space.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F16": 2, "BF16": 2, "I16": 2, "F32": 4, "I32": 4, "I64": 8, "F64": 8}
NP = {"BOOL": np.bool_, "F16": "<f2", "F32": "<f4", "I32": "<i4", "I64": "<i8", "F64": "<f8", "U8": np.uint8}


def bf16_bytes(x: np.ndarray) -> bytes:
    """float32 -> bf16 by truncation (enough for fixtures)."""
    return (np.asarray(x, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()


def encode(arr: np.ndarray, dtype: str) -> bytes:
    if dtype == "BF16":
        return bf16_bytes(arr)
    return np.asarray(arr).astype(NP[dtype]).tobytes()


Tensor = tuple[str, tuple[int, ...], "bytes | np.ndarray | None"]


def write_safetensors(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> Path:
    """Write a safetensors file; data None leaves the tensor's span as a hole (sparse file)."""
    header: dict = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, (dtype, shape, _) in tensors.items():
        n = math.prod(shape) * SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    start = 8 + len(raw)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        pos = 0
        for name, (dtype, shape, data) in tensors.items():
            n = math.prod(shape) * SIZES[dtype]
            if data is not None:
                b = data if isinstance(data, bytes) else encode(data, dtype)
                assert len(b) == n, (name, len(b), n)
                f.seek(start + pos)
                f.write(b)
            pos += n
        f.truncate(start + off)
    return path


def draft_tensors(*, hidden: int = 8, vocab: int = 16, target_vocab: int = 64, prefix: str = "",
                  layer: str = "midlayer.", seed: int = 0, d2t_absolute: bool = True,
                  dtype: str = "BF16") -> dict[str, Tensor]:
    """An EAGLE-3 draft's tensors (llama layout) with random weights; d2t holds absolute target ids
    (a sorted random subset) unless d2t_absolute=False (then offsets, as vLLM reads them)."""
    rng = np.random.default_rng(seed)
    inter = 2 * hidden

    def w(*shape: int) -> tuple[str, tuple[int, ...], bytes]:
        return (dtype, shape, encode(rng.standard_normal(shape).astype(np.float32), dtype))

    ids = np.sort(rng.choice(target_vocab, size=vocab, replace=False)).astype(np.int64)
    d2t = ids if d2t_absolute else ids - np.arange(vocab)
    t2d = np.zeros(target_vocab, dtype=np.bool_)
    t2d[ids] = True
    lp = prefix + layer
    return {
        prefix + "fc.weight": w(hidden, 3 * hidden),
        lp + "hidden_norm.weight": w(hidden),
        lp + "input_layernorm.weight": w(hidden),
        lp + "self_attn.q_proj.weight": w(hidden, 2 * hidden),
        lp + "self_attn.k_proj.weight": w(hidden // 2, 2 * hidden),
        lp + "self_attn.v_proj.weight": w(hidden // 2, 2 * hidden),
        lp + "self_attn.o_proj.weight": w(hidden, hidden),
        lp + "post_attention_layernorm.weight": w(hidden),
        lp + "mlp.gate_proj.weight": w(inter, hidden),
        lp + "mlp.up_proj.weight": w(inter, hidden),
        lp + "mlp.down_proj.weight": w(hidden, inter),
        prefix + "norm.weight": w(hidden),
        prefix + "lm_head.weight": w(vocab, hidden),
        "d2t": ("I64", (vocab,), d2t.tobytes()),
        "t2d": ("BOOL", (target_vocab,), t2d.astype(np.uint8).tobytes()),
    }


def draft_config(*, hidden: int = 8, vocab: int = 16, target_vocab: int = 64) -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "num_hidden_layers": 1,
        "vocab_size": target_vocab,
        "draft_vocab_size": vocab,
        "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]},
    }


def write_draft(folder: Path, tensors: dict[str, Tensor] | None = None, *, shards: int = 1,
                config: dict | None = None, extra_files: bool = True, pickle: bool = False,
                **kw) -> Path:
    """A draft folder: config.json, tensors in `shards` files (with an index when > 1), tokenizer files."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = tensors if tensors is not None else draft_tensors(**kw)
    cfg = config if config is not None else draft_config(**{k: v for k, v in kw.items()
                                                             if k in ("hidden", "vocab", "target_vocab")})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    names = list(tensors)
    if shards == 1:
        write_safetensors(folder / "model.safetensors", tensors, {"format": "pt"})
    else:
        per = math.ceil(len(names) / shards)
        wm = {}
        total = 0
        for i in range(shards):
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: tensors[n] for n in names[i * per:(i + 1) * per]}
            write_safetensors(folder / fname, part, {"format": "pt"})
            for n, (dt, shape, _) in part.items():
                wm[n] = fname
                total += math.prod(shape) * SIZES[dt]
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": wm}, indent=2))
    if extra_files:
        (folder / "tokenizer_config.json").write_text('{"model_max_length": 4096}\n')
        (folder / "README.md").write_text("# tiny draft\n")
        (folder / "generation_config.json").write_text('{"do_sample": false}\n')
    if pickle:
        (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    return folder


def write_full_lm_head(folder: Path, *, vocab: int = 64, hidden: int = 8, dtype: str = "F32") -> Path:
    """A target-like checkpoint whose lm_head row r is filled with the value r (easy to check selection)."""
    rows = np.repeat(np.arange(vocab, dtype=np.float32)[:, None], hidden, axis=1)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"vocab_size": vocab, "hidden_size": hidden}) + "\n")
    write_safetensors(folder / "model.safetensors", {
        "model.embed_tokens.weight": (dtype, (vocab, hidden), rows),
        "lm_head.weight": (dtype, (vocab, hidden), rows),
    }, {"format": "pt"})
    return folder


def write_real_shape_draft(folder: Path, *, vocab: int = 163840, hidden: int = 7168, shards: int = 2,
                           lm_head_data: bool = False) -> Path:
    """A Kimi-K2.5-shaped draft whose large tensors are holes (headers only): a full-vocabulary bf16 lm_head
    of [163840, 7168] takes 2.3 GB of address space and no disk. Small tensors hold real bytes."""
    rng = np.random.default_rng(1)
    ids = np.sort(rng.choice(vocab, size=vocab // 4, replace=False)).astype(np.int64)
    tensors: dict[str, Tensor] = {
        "fc.weight": ("BF16", (hidden, 3 * hidden), None),
        "midlayer.self_attn.q_proj.weight": ("BF16", (8192, 2 * hidden), None),
        "midlayer.self_attn.o_proj.weight": ("BF16", (hidden, 8192), None),
        "midlayer.input_layernorm.weight": ("BF16", (hidden,), np.ones(hidden, np.float32)),
        "norm.weight": ("BF16", (hidden,), np.ones(hidden, np.float32)),
        "lm_head.weight": ("BF16", (vocab, hidden), None),
        "d2t": ("I64", (len(ids),), ids.tobytes()),
        "t2d": ("BOOL", (vocab,), None),
    }
    return write_draft(folder, tensors, shards=shards,
                       config=draft_config(hidden=hidden, vocab=len(ids), target_vocab=vocab))


def sha256_tree(folder: Path) -> dict[str, str]:
    import hashlib

    out = {}
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file():
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for b in iter(lambda: f.read(1 << 22), b""):
                    h.update(b)
            out[p.relative_to(folder).as_posix()] = h.hexdigest()
    return out
