"""How big a trace will be, before it is recorded, from the target's config alone; and the layers drafts need.

A trace's bytes are its tensors (kconvert.trace.format.tensor_shapes) plus one safetensors header per file (a few
hundred bytes) and trace.json (the target's config, a few kB):

    hidden states   positions x layers x hidden_size x bytes(dtype)
    embedding rows  unique tokens x hidden_size x bytes(dtype)     (unique tokens <= min(vocab, 2 x positions):
                                                                    the tokens and the target's next tokens)
    lm_head         vocab_size x hidden_size x bytes(dtype)         (only with --lm-head)
    index tensors   (2 x positions + 3 x sequences + 1 + unique tokens) x 8   (int64)

Nothing here needs the weights: a built-in profile (`kimi-k2.5`) or a config.json is enough.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from kconvert.errors import UsageError
from kconvert.trace.format import HIDDEN_DTYPES, shard_groups, tensor_shapes
from kconvert.source.safetensors_header import DTYPE_SIZES


@dataclass
class TraceEstimate:
    target: str
    hidden_size: int
    vocab_size: int
    num_hidden_layers: int
    layers: list[int]
    dtype: str
    positions: int
    sequences: int
    unique_tokens: int
    unique_tokens_bound: bool  # True: an upper bound (min(vocab, 2 x positions)), not a count
    lm_head: bool
    shard_size: int | None
    tensor_bytes: dict[str, int] = field(default_factory=dict)  # by part: hidden, embed_tokens, lm_head, index
    shards: int = 1
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.tensor_bytes.values())

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "hidden_size": self.hidden_size, "vocab_size": self.vocab_size,
                "num_hidden_layers": self.num_hidden_layers, "layers": self.layers, "dtype": self.dtype,
                "positions": self.positions, "sequences": self.sequences, "unique_tokens": self.unique_tokens,
                "unique_tokens_is_upper_bound": self.unique_tokens_bound, "lm_head": self.lm_head,
                "shard_size": self.shard_size, "shards": self.shards, "bytes": self.tensor_bytes,
                "total_bytes": self.total, "per_position_bytes": self.per_position, "notes": self.notes}

    @property
    def per_position(self) -> int:
        """Bytes each further position adds: its hidden states and its two int64 tokens."""
        return len(self.layers) * self.hidden_size * DTYPE_SIZES[HIDDEN_DTYPES[self.dtype]] + 16


def estimate(target: str, *, positions: int, sequences: int, layers: list[int] | str | None = None,
             aux_ids: list[int] | None = None, dtype: str = "bfloat16", lm_head: bool = False,
             unique_tokens: int | None = None, shard_size: int | None = None) -> TraceEstimate:
    """The bytes of a trace of `target` (a profile, folder or Hub id: config.json only) over `positions` tokens in
    `sequences` sequences, at `layers` (None: the recorder's defaults, the engines' aux ids ±1)."""
    from kconvert.trace.request import default_layers
    from kconvert.targets import load_target

    if dtype not in HIDDEN_DTYPES:
        raise UsageError(f"--dtype {dtype!r}: choose bfloat16, float16 or float32")
    if positions < 1 or sequences < 1 or sequences > positions:
        raise UsageError("--positions must be at least the number of sequences (and positive)")
    t = load_target(target)
    L, H, V = t.num_hidden_layers, t.hidden_size, t.vocab_size
    lay = list(range(L + 1)) if layers == "all" else sorted(set(layers)) if layers else default_layers(L, aux_ids)
    bad = [k for k in lay if not 0 <= k <= L]
    if bad:
        raise UsageError(f"--layers {bad}: a {L}-layer target has streams 0..{L} (k = input of layer k)")
    bound = unique_tokens is None
    U = min(V, 2 * positions) if bound else unique_tokens
    st = HIDDEN_DTYPES[dtype]
    shapes = tensor_shapes(positions, sequences, U, H, lay, st, V if lm_head else None)
    parts: dict[str, int] = {"hidden": 0, "embed_tokens": 0, "lm_head": 0, "index": 0}
    entries = []
    for name, (dt, shape) in shapes.items():
        n = math.prod(shape) * DTYPE_SIZES[dt]
        part = "hidden" if name.startswith("hidden.") else name if name in parts else "index"
        parts[part] += n
        entries.append((name, dt, shape, n))
    est = TraceEstimate(target=t.name, hidden_size=H, vocab_size=V, num_hidden_layers=L, layers=lay, dtype=dtype,
                        positions=positions, sequences=sequences, unique_tokens=U, unique_tokens_bound=bound,
                        lm_head=lm_head, shard_size=shard_size, tensor_bytes=parts,
                        shards=len(shard_groups(entries, shard_size)))
    if bound:
        est.notes.append(f"embedding rows counted for at most {U} distinct tokens (min(vocab, 2 x positions)); "
                         "the recorded trace keeps only those it uses")
    if dtype == "float32":
        est.notes.append("float32 doubles the bfloat16 size; a target served in bf16 computes bf16 states, so "
                         "bfloat16 storage loses nothing there")
    return est


def layers_for_drafts(drafts: Iterable[str], num_hidden_layers: int, *, engine: str = "vllm",
                      engine_version: str | None = None) -> tuple[list[int], dict[str, list[int]]]:
    """The streams the engine feeds these drafts (their aux ids as the engine reads them, in input-of-layer
    numbering; the engine's defaults for a draft that declares none): the only layers `score` reads for them."""
    from kconvert.commands.inspect import open_draft
    from kconvert.engines.expectations import engine_rules
    from kconvert.engines.fed_streams import fed_ids
    from kconvert.formats.canonical import read_draft

    rules = engine_rules(engine, engine_version)
    per: dict[str, list[int]] = {}
    for ref in drafts:
        d = read_draft(open_draft(ref))
        aux_ids, _ = fed_ids(d, rules, num_hidden_layers)
        bad = [k for k in aux_ids if not 0 <= k <= num_hidden_layers]
        if bad:
            raise UsageError(f"--for-drafts {ref}: the engine would feed it streams {list(aux_ids)}, outside "
                             f"0..{num_hidden_layers} of this target (run `kconvert inspect` on it)")
        per[ref] = list(aux_ids)
    if not per:
        raise UsageError("--for-drafts needs at least one draft")
    return sorted({k for ids in per.values() for k in ids}), per


def draft_layers(target: str, drafts: list[str]) -> list[int]:
    """`--for-drafts`: the streams the engine feeds these drafts (references, repeated or comma-separated) on
    `target` (a profile, folder or Hub id: its layer count from config.json)."""
    from kconvert.targets import load_target

    refs = [d for item in drafts for d in item.split(",") if d]
    layers, _ = layers_for_drafts(refs, load_target(target).num_hidden_layers)
    return layers


def human_bytes(n: int) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


__all__ = ["TraceEstimate", "draft_layers", "estimate", "human_bytes", "layers_for_drafts"]
