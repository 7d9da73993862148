"""Building blocks for the zoo's replicas: decoder layers at real shapes (holes), norms with values, a realistic
reduced vocabulary (d2t offsets / t2d mask), and sparse embedding rows.

The embedding rows: a published embed_tokens is 0.5-2.3 GB of values (N(0, 1) everywhere for a fresh
nn.Embedding, TorchSpec issue #38), which a sparse replica cannot hold. The replica writes values at the rows this
module draws with a seed of its own (`embed_rows`, chosen here, not by kconvert) and leaves the rest a hole; the
tests open it with `open_replica`, which names those rows to the checks that sample (`Checkpoint.row_sample`), so
K701 reads values the record describes wherever its sampling points, and a rule that reads other rows than it was
given sees the holes (zeros) and fails the zoo's record test. K701's own seeded draw is tested on dense tables
(tests/test_rules.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kconvert.commands.inspect import open_draft
from kconvert.source.checkpoint import Checkpoint
from kconvert.source.safetensors_header import read_header
from tests.torch_factories import save_state_dict
from tests.writer_factories import encode, write_safetensors

EMBED_SEED = 20261201  # the replicas' own draw, unrelated to any seed in kconvert
EMBED_COUNT = 24


def embed_rows(n_rows: int) -> list[int]:
    """The rows of an n_rows-row embed_tokens that a replica writes values at: the first and last (special tokens
    sit at both ends of a vocabulary) and a seeded uniform draw over the rest."""
    rng = np.random.default_rng(EMBED_SEED)
    return sorted({0, n_rows - 1, *rng.choice(n_rows, size=min(EMBED_COUNT, n_rows), replace=False).tolist()})


def open_replica(folder: Path) -> Checkpoint:
    """The replica as kconvert opens a draft (`kconvert.commands.inspect.open_draft`), with the rows it holds
    embedding values at named to the checks that sample rows."""
    ckpt = open_draft(str(folder))
    ckpt.row_sample = embed_rows
    return ckpt


def hole(dtype: str, *shape: int) -> tuple:
    return (dtype, tuple(shape), None)


def norm(dtype: str, n: int, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed + n)
    return (dtype, (n,), (1 + rng.normal(0, 0.05, size=n)).astype(np.float32))


def llama_layer(prefix: str, *, H: int, heads: int, kv: int, hd: int, inter: int, dtype: str, first: bool = True,
                hidden_norm: bool = True) -> dict[str, tuple]:
    i = 2 * H if first else H
    t = {f"{prefix}self_attn.q_proj.weight": hole(dtype, heads * hd, i),
         f"{prefix}self_attn.k_proj.weight": hole(dtype, kv * hd, i),
         f"{prefix}self_attn.v_proj.weight": hole(dtype, kv * hd, i),
         f"{prefix}self_attn.o_proj.weight": hole(dtype, H, heads * hd),
         f"{prefix}mlp.gate_proj.weight": hole(dtype, inter, H),
         f"{prefix}mlp.up_proj.weight": hole(dtype, inter, H),
         f"{prefix}mlp.down_proj.weight": hole(dtype, H, inter),
         f"{prefix}input_layernorm.weight": norm(dtype, H, 1),
         f"{prefix}post_attention_layernorm.weight": norm(dtype, H, 2)}
    if first and hidden_norm:
        t[f"{prefix}hidden_norm.weight"] = norm(dtype, H, 3)
    return t


def qwen3_layer(prefix: str, *, H: int, heads: int, kv: int, hd: int, inter: int, dtype: str,
                first: bool = True) -> dict[str, tuple]:
    """A Qwen3 decoder layer as transformers' Qwen3DecoderLayer names it: the Llama layer plus the per-head
    q_norm/k_norm [head_dim] (speculators' Qwen3DecoderEagle3FirstLayer keeps them)."""
    t = llama_layer(prefix, H=H, heads=heads, kv=kv, hd=hd, inter=inter, dtype=dtype, first=first)
    t[f"{prefix}self_attn.q_norm.weight"] = norm(dtype, hd, 6)
    t[f"{prefix}self_attn.k_norm.weight"] = norm(dtype, hd, 7)
    return t


def mla_layer(prefix: str, *, H: int, heads: int, q_lora: int, kv_lora: int, rope: int, nope: int, v: int,
              inter: int, dtype: str) -> dict[str, tuple]:
    return {f"{prefix}self_attn.q_a_proj.weight": hole(dtype, q_lora, 2 * H),
            f"{prefix}self_attn.q_a_layernorm.weight": norm(dtype, q_lora, 4),
            f"{prefix}self_attn.q_b_proj.weight": hole(dtype, heads * (nope + rope), q_lora),
            f"{prefix}self_attn.kv_a_proj_with_mqa.weight": hole(dtype, kv_lora + rope, 2 * H),
            f"{prefix}self_attn.kv_a_layernorm.weight": norm(dtype, kv_lora, 5),
            f"{prefix}self_attn.kv_b_proj.weight": hole(dtype, heads * (nope + v), kv_lora),
            f"{prefix}self_attn.o_proj.weight": hole(dtype, H, heads * v),
            f"{prefix}mlp.gate_proj.weight": hole(dtype, inter, H),
            f"{prefix}mlp.up_proj.weight": hole(dtype, inter, H),
            f"{prefix}mlp.down_proj.weight": hole(dtype, H, inter),
            f"{prefix}input_layernorm.weight": norm(dtype, H, 1),
            f"{prefix}hidden_norm.weight": norm(dtype, H, 3),
            f"{prefix}post_attention_layernorm.weight": norm(dtype, H, 2)}


def reduced_vocab(target_vocab: int, draft_vocab: int, seed: int = 0) -> dict[str, tuple]:
    """d2t as offsets (target id - draft id) over a sorted draft vocabulary, t2d the mask over the target's:
    the shape SpecForge and the EAGLE reference trainer write (most frequent ids, sorted)."""
    rng = np.random.default_rng(seed)
    # Frequent tokens cluster at low ids in BPE vocabularies: a Zipf-like draw without replacement.
    weights = 1.0 / (np.arange(target_vocab) + 200.0)
    ids = np.sort(rng.choice(target_vocab, size=draft_vocab, replace=False, p=weights / weights.sum()))
    d2t = ids - np.arange(draft_vocab, dtype=np.int64)
    t2d = np.zeros(target_vocab, dtype=bool)
    t2d[ids] = True
    return {"d2t": ("I64", (draft_vocab,), d2t), "t2d": ("BOOL", (target_vocab,), t2d)}


def write(folder: Path, config: dict[str, Any], tensors: dict[str, tuple], *, shards: int = 1,
          embed_std: float | None = None, embed_name: str = "embed_tokens.weight") -> Path:
    """config.json and safetensors shards; `embed_std` fills the rows `embed_rows` names with N(0, std) values."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    names = list(tensors)
    per = -(-len(names) // shards)
    wm: dict[str, str] = {}
    for i in range(shards):
        part = {n: tensors[n] for n in names[i * per:(i + 1) * per]}
        fn = "model.safetensors" if shards == 1 else f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(folder / fn, part, {"format": "pt"})
        wm.update({n: fn for n in part})
    if shards > 1:
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    if embed_std is not None:
        fn = wm.get(embed_name, "model.safetensors")
        info = read_header(folder / fn, fn).tensors[embed_name]
        rows, width = info.shape
        rng = np.random.default_rng(7)
        row_bytes = width * 2
        with open(folder / fn, "r+b") as f:
            for r in embed_rows(rows):
                f.seek(info.start + r * row_bytes)
                f.write(encode(rng.normal(0, embed_std, size=width).astype(np.float32), info.dtype))
    return folder


def write_bin(folder: Path, config: dict[str, Any], tensors: dict[str, tuple]) -> Path:
    """config.json and a torch.save-shaped pytorch_model.bin (storages of big tensors as holes)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_state_dict(folder / "pytorch_model.bin", tensors)
    return folder
