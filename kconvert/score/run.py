"""Score one reading of a draft over a trace: load the draft's weights (streamed, one tensor at a time), run
the draft on every sequence, and walk the verify steps an engine would take.

The walk (greedy, vLLM's scheduler and rejection sampler, `v1/core/sched/scheduler.py`): after the prefill the
engine has emitted one token; each verify step checks the k drafted tokens against the target's greedy tokens,
accepts the longest matching prefix and emits it plus the target's own next token; steps continue while the
request has emitted fewer than its output length (max_tokens, or up to and including EOS). The counters count
every step's k drafted tokens and every accepted one, also those that land past the end of the output (the
scheduler counts them before the output is truncated): that is why a trace carries lookahead tokens.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from kconvert.errors import InputError, UsageError
from kconvert.formats.model import DraftModel
from kconvert.engines.acceptance import summarize
from kconvert.score.reading import Reading
from kconvert.score.trace import Sequence, Trace

import torch  # noqa: E402  (imported by kconvert.score only once torch is known to be there)

from kconvert.score.draft import (  # noqa: E402
    DTYPES, DraftFailure, DraftRunner, EmbeddingTable, SequenceInput, draft_spec)

# Rows (positions) the first pass runs at once, summed over the sequences batched together: enough for the
# matmuls to run near their peak (one thread, float32, Kimi-shaped weights: ~40-70 GFLOP/s at one sequence's
# 63-94 rows, ~80-110 at 512-1880; bench/NOTES.md), few enough that the activations stay small next to the
# weights (~0.5 MB a row for a Kimi-shaped draft in float32).
BATCH_ROWS = 1024

FLOAT_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}


# ---------------------------------------------------------------------------------------------- weights ---

def read_tensor(d: DraftModel, raw_name: str, as_dtype: torch.dtype | None = None) -> torch.Tensor:
    """One tensor of the draft by byte range from its validated header (never the whole file); a floating one in
    `as_dtype` when given."""
    ck = d.checkpoint
    info = ck.tensors.get(raw_name)
    if info is None:
        raise InputError(f"{raw_name}: not in the draft's files")
    p = ck.local_path(info.file)
    if p is None:
        raise UsageError(f"{ck.ref}: score needs the draft's weights on disk ({info.file} is not local); "
                         "download the draft first")
    return read_span(p, info, as_dtype=as_dtype)


READ_CHUNK = 32 << 20  # bytes read at a time when converting while reading


def read_span(path: Any, info: Any, first_row: int = 0, rows: int | None = None, *,
              as_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Rows `first_row .. first_row + rows` (all by default) of a tensor whose span a validated safetensors
    header gave (kconvert.source.safetensors_header.TensorInfo), read with pread. A floating tensor is returned
    in `as_dtype` when given: read in chunks of READ_CHUNK bytes into one reused buffer and converted into the
    result, so the file's bytes are never held whole beside it (a Kimi-shaped draft: 1.8 GB of bf16 beside 3.6
    GB of float32). Buffers are torch.empty, not zero-filled: every byte is read or the read fails."""
    shape = tuple(info.shape)
    row_elems = 1
    for n in shape[1:]:
        row_elems *= n
    if info.dtype in FLOAT_DTYPES:
        dt = FLOAT_DTYPES[info.dtype]
    else:
        dt = {"I64": torch.int64, "I32": torch.int32, "BOOL": torch.bool}.get(info.dtype)
        if dt is None:
            raise InputError(f"{info.name}: dtype {info.dtype} is not one score reads")
    size = torch.empty(0, dtype=dt).element_size()
    total_rows = shape[0] if shape else 1
    count = total_rows - first_row if rows is None else rows
    if not 0 <= first_row <= first_row + count <= total_rows:
        raise InputError(f"{info.name}: rows {first_row}..{first_row + count} outside 0..{total_rows}")
    start = info.start + first_row * row_elems * size
    nbytes = count * row_elems * size if shape else info.nbytes
    out_shape = (count,) + shape[1:] if shape else ()
    convert = as_dtype is not None and dt.is_floating_point and as_dtype != dt
    if not nbytes:
        return torch.empty(out_shape, dtype=as_dtype if convert else dt)
    if convert:
        out = torch.empty(nbytes // size, dtype=as_dtype)
        buf = torch.empty(min(nbytes, READ_CHUNK - READ_CHUNK % size), dtype=torch.uint8)
    else:
        out = buf = torch.empty(nbytes, dtype=torch.uint8)
    view = memoryview(buf.numpy())
    got = 0
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            while got < nbytes:
                want = min(len(view), nbytes - got) if convert else nbytes - got
                part = view[:want] if convert else view[got:]
                filled = 0
                while filled < want:
                    n = os.preadv(fd, [part[filled:]], start + got + filled)
                    if n <= 0:
                        break
                    filled += n
                if convert and filled:
                    e0 = got // size
                    out[e0:e0 + filled // size].copy_(buf[:filled].view(dt))
                got += filled
                if filled < want:
                    break
        finally:
            os.close(fd)
    except OSError as e:
        raise InputError(f"{info.file} [{info.name}]: cannot read: {e.strerror or e}") from None
    if got != nbytes:
        raise InputError(f"{info.file} [{info.name}]: only {got} of {nbytes} bytes (truncated)")
    return (out if convert else buf.view(dt)).reshape(out_shape)


def layer_raw_name(d: DraftModel, canonical: str) -> str | None:
    """The file's name for a canonical tensor, layers past the first included (multi-layer drafts)."""
    if canonical in d.raw_names:
        return d.raw_names[canonical]
    if canonical.startswith("layers."):
        _, idx, rest = canonical.split(".", 2)
        for cand in (f"{d.key_layout.prefix}layers.{idx}.{rest}", f"layers.{idx}.{rest}",
                     f"{d.key_layout.prefix}midlayers.{idx}.{rest}"):
            if cand in d.checkpoint.tensors:
                return cand
    return None


def required_weights(family: str, num_layers: int, q_lora: bool) -> list[str]:
    names = ["fc.weight", "norm.weight"]
    for l in range(num_layers):
        p = f"layers.{l}."
        if family in ("llama", "qwen3"):
            names += [p + f"self_attn.{n}_proj.weight" for n in "qkvo"]
            if family == "qwen3":
                names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
        else:
            q = ["q_a_proj", "q_a_layernorm", "q_b_proj"] if q_lora else ["q_proj"]
            names += [p + f"self_attn.{n}.weight" for n in q + ["kv_a_proj_with_mqa", "kv_a_layernorm",
                                                                 "kv_b_proj", "o_proj"]]
        names += [p + f"mlp.{n}_proj.weight" for n in ("gate", "up", "down")]
        names += [p + f"{n}.weight" for n in ("input_layernorm", "post_attention_layernorm")]
        if l == 0:
            names.append(p + "hidden_norm.weight")
    return names


def expected_shape(name: str, s: Any, inter: int | None) -> tuple[int, ...] | None:
    """The shape vLLM allocates for a draft tensor (None: not checked here)."""
    H = s.hidden_size
    if name == "norm.weight":
        return (H,)
    if not name.startswith("layers."):
        return None
    l = int(name.split(".")[1])
    inp = 2 * H if l == 0 else H
    rest = name.split(".", 2)[2]
    if rest.endswith("layernorm.weight") and "self_attn" not in rest or rest == "hidden_norm.weight":
        return (H,)
    if rest.startswith("mlp."):
        if inter is None:
            return None
        return {"mlp.gate_proj.weight": (inter, H), "mlp.up_proj.weight": (inter, H),
                "mlp.down_proj.weight": (H, inter)}.get(rest)
    if s.family in ("llama", "qwen3"):
        hd = s.head_dim
        return {"self_attn.q_proj.weight": (s.num_heads * hd, inp), "self_attn.k_proj.weight": (s.num_kv_heads * hd, inp),
                "self_attn.v_proj.weight": (s.num_kv_heads * hd, inp),
                "self_attn.o_proj.weight": (H, s.num_heads * hd),
                "self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,)}.get(rest)
    qk = s.qk_nope_head_dim + s.qk_rope_head_dim
    table = {"self_attn.kv_a_proj_with_mqa.weight": (s.kv_lora_rank + s.qk_rope_head_dim, inp),
             "self_attn.kv_a_layernorm.weight": (s.kv_lora_rank,),
             "self_attn.kv_b_proj.weight": (s.num_heads * (s.qk_nope_head_dim + s.v_head_dim), s.kv_lora_rank),
             "self_attn.o_proj.weight": (H, s.num_heads * s.v_head_dim)}
    if s.q_lora_rank:
        table.update({"self_attn.q_a_proj.weight": (s.q_lora_rank, inp),
                      "self_attn.q_a_layernorm.weight": (s.q_lora_rank,),
                      "self_attn.q_b_proj.weight": (s.num_heads * qk, s.q_lora_rank)})
    else:
        table["self_attn.q_proj.weight"] = (s.num_heads * qk, inp)
    return table.get(rest)


class WeightCache:
    """The draft's weights in the compute dtype, read once and shared by every reading tried."""

    def __init__(self, d: DraftModel, dtype: torch.dtype, device: torch.device):
        self.d = d
        self.dtype = dtype
        self.device = device
        self._t: dict[str, torch.Tensor] = {}
        self.bytes_read = 0

    def get(self, canonical: str, *, float_: bool = True) -> torch.Tensor | None:
        if canonical not in self._t:
            raw = layer_raw_name(self.d, canonical)
            if raw is None:
                return None
            t = read_tensor(self.d, raw, as_dtype=self.dtype if float_ else None)
            self.bytes_read += self.d.checkpoint.tensors[raw].nbytes
            self._t[canonical] = t.to(self.device, self.dtype) if float_ and t.is_floating_point() else t
        return self._t[canonical]


# ------------------------------------------------------------------------------------------- the runner ---

def _config_float(cfg: dict[str, Any], key: str, default: float) -> float:
    v = cfg.get(key, default)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def build_runner(d: DraftModel, reading: Reading, trace: Trace, weights: WeightCache,
                 lm_head_source: Callable[[str], torch.Tensor] | None = None) -> DraftRunner:
    """A DraftRunner for one reading. Raises DraftFailure where vLLM would fail to load or run the draft."""
    m = trace.meta
    V = m.vocab_size
    if reading.keys == "as written" and d.key_layout.prefix:
        # llama_eagle3 / deepseek_eagle3 load_weights prefix every name but lm_head with `model.`: a file name
        # `model.layers.0...` becomes `model.model.layers.0...`, which the loader does not know and raises on.
        example = next(iter(sorted(n for n in d.raw_names.values()
                                   if n.startswith(d.key_layout.prefix) and "layers" in n)), "")
        raise DraftFailure(f"tensor names carry the prefix {d.key_layout.prefix!r} (e.g. {example}): vLLM's EAGLE-3 "
                           "loader raises on names it does not know")
    fc = weights.get("fc.weight")
    if fc is None:
        raise DraftFailure("the draft has no fc.weight: vLLM would leave it uninitialised (EAGLE-3 needs it)")
    num_aux = len(reading.aux_ids)
    draft_vocab = d.draft_vocab_size or d.vocab_size or V
    spec = draft_spec(d.config, d.layer_family, target_vocab=V, target_hidden=m.hidden_size, num_aux=num_aux,
                      draft_vocab=draft_vocab, fc_in=fc.shape[1])
    if spec.target_hidden_size != m.hidden_size:
        raise DraftFailure(f"the draft expects target hidden size {spec.target_hidden_size}, the trace's target has "
                           f"{m.hidden_size}")
    if fc.shape != (spec.hidden_size, num_aux * m.hidden_size):
        raise DraftFailure(f"fc.weight is {list(fc.shape)} but the reading feeds {num_aux} aux states of width "
                           f"{m.hidden_size} ({list(reading.aux_ids)}): vLLM fails to load it (shape mismatch)")
    w = _layer_weights(d, reading, spec, weights)
    head, rows = _lm_head(d, reading, trace, weights, draft_vocab, lm_head_source)
    if head.shape[1] != spec.hidden_size:
        raise DraftFailure(f"lm_head is {list(head.shape)}; the draft's hidden size is {spec.hidden_size}")
    target_ids = _target_ids(d, reading, rows, draft_vocab, V, weights)
    return DraftRunner(spec, w, dtype=weights.dtype, device=weights.device,
                       embed=_embeddings(reading, trace, weights, spec), lm_head=head,
                       target_ids=target_ids, norm_before_residual=reading.norm_before_residual,
                       norm_before_fc=reading.norm_before_fc, fc_norm=reading.fc_norm,
                       norm_output=reading.norm_output, logit_scale=_config_float(d.config, "logit_scale", 1.0))


def _layer_weights(d: DraftModel, reading: Reading, spec: Any, weights: WeightCache) -> dict[str, torch.Tensor]:
    """The layers' tensors (and the input norms the reading applies), each of the shape vLLM allocates."""
    names = required_weights(spec.family, spec.num_layers, bool(spec.q_lora_rank))
    missing = [n for n in names if layer_raw_name(d, n) is None]
    if missing:
        raise DraftFailure(f"the draft lacks {', '.join(missing[:4])}: vLLM leaves missing tensors "
                           "uninitialised, score does not guess them")
    w: dict[str, torch.Tensor] = {n: weights.get(n) for n in names}  # type: ignore[misc]
    for n, t in w.items():
        want = expected_shape(n, spec, d.intermediate_size)
        if want is not None and tuple(t.shape) != want:
            raise DraftFailure(f"{n} is {list(t.shape)}, the config implies {list(want)}: vLLM fails to load it")
    if reading.norm_before_fc:
        t = weights.get("input_norm.weight")
        if t is None:
            raise DraftFailure("norm_before_fc is set but input_norm.weight is missing")
        w["input_norm.weight"] = t
    if reading.fc_norm:
        for i in range(len(reading.aux_ids)):
            t = weights.get(f"fc_norm.{i}.weight")
            if t is None:
                raise DraftFailure(f"fc_norm is set but fc_norm.{i}.weight is missing")
            w[f"fc_norm.{i}.weight"] = t
    return w


def _lm_head(d: DraftModel, reading: Reading, trace: Trace, weights: WeightCache, draft_vocab: int,
             lm_head_source: Callable[[str], torch.Tensor] | None) -> tuple[torch.Tensor, int]:
    """(lm_head rows in the compute dtype, how many): the target's, re-selected from a full head, or the draft's."""
    V = trace.meta.vocab_size
    if reading.lm_head == "target":
        head = trace.lm_head()
        if head is None:
            raise UsageError("the draft has no lm_head, so the engine shares the target's; this trace does not "
                             "hold it: record the trace with --lm-head")
        return head.to(weights.device, weights.dtype), V
    if reading.lm_head == "reselected":
        if lm_head_source is None or reading.lm_head_source is None:
            raise UsageError("re-selecting lm_head rows needs --lm-head-from DIR (a full-vocabulary head)")
        full = lm_head_source(reading.lm_head_source)
        sel = _draft_rows_for(d, weights, draft_vocab)
        if full.shape[0] != V or int(sel.min()) < 0 or int(sel.max()) >= V:
            raise UsageError(f"--lm-head-from: its lm_head has {full.shape[0]} rows; re-selection needs the full "
                             f"target vocabulary ({V}) and d2t offsets inside it")
        return full[sel].to(weights.device, weights.dtype), draft_vocab
    head = weights.get("lm_head.weight")
    if head is None:
        raise DraftFailure("the draft has no lm_head.weight")
    return head, head.shape[0]


def _embeddings(reading: Reading, trace: Trace, weights: WeightCache, spec: Any) -> EmbeddingTable:
    """The embedding rows the draft reads: its own table, or the target's as the trace keeps them."""
    V, Ht = trace.meta.vocab_size, trace.meta.hidden_size
    if reading.embeddings == "draft":
        emb = weights.get("embed_tokens.weight")
        if emb is None:
            raise UsageError("reading embeddings=draft: the draft has no embed_tokens")
        if emb.shape != (V, spec.hidden_size):
            raise DraftFailure(f"embed_tokens is {list(emb.shape)}, expected [{V}, {spec.hidden_size}]")
        return EmbeddingTable(emb, None, V, weights.device)
    if spec.hidden_size != Ht:
        raise DraftFailure(f"the draft's hidden size {spec.hidden_size} differs from the target's "
                           f"{Ht}: it cannot share the target's embeddings and has none of its own")
    ids, rows_t = trace.embedding_rows()
    return EmbeddingTable(rows_t.to(weights.dtype), torch.from_numpy(ids.copy()), V, weights.device)


def _target_ids(d: DraftModel, reading: Reading, rows: int, draft_vocab: int, V: int,
                weights: WeightCache) -> torch.Tensor | None:
    if reading.lm_head == "target":
        return None
    if reading.d2t == "none":
        if rows != V:
            raise DraftFailure(f"lm_head has {rows} rows but no draft-to-target mapping applies (the draft "
                               f"vocabulary equals the target's {V}): vLLM fails its logits shape check")
        return None
    if rows != draft_vocab:
        raise DraftFailure(f"lm_head has {rows} rows, draft_vocab_size is {draft_vocab}: vLLM fails to load it")
    d2t = weights.get("d2t", float_=False)
    if d2t is None:
        # vLLM keeps its zero-initialised draft_id_to_target_id when no d2t is loaded
        d2t = torch.zeros(draft_vocab, dtype=torch.long)
    d2t = d2t.to(torch.long).cpu()
    if d2t.shape != (draft_vocab,):
        raise DraftFailure(f"d2t is {list(d2t.shape)}, expected [{draft_vocab}]: vLLM fails to load it")
    ids = d2t if reading.d2t == "absolute" else d2t + torch.arange(draft_vocab)
    bad = ids[(ids < 0) | (ids >= V)]
    if bad.numel():
        raise DraftFailure(f"d2t read as {reading.d2t} maps draft ids to target ids outside 0..{V - 1} (e.g. "
                           f"{int(bad[0])}): vLLM indexes past the vocabulary ('index {int(bad[0])} is out of "
                           f"bounds for dimension 0 with size {V}')")
    return ids.to(weights.device)


def _draft_rows_for(d: DraftModel, weights: WeightCache, draft_vocab: int) -> torch.Tensor:
    """Rows of a full-vocabulary head for the draft vocabulary: full[d2t + arange] (offsets, as vLLM reads
    d2t), the selection kconvert fix --lm-head-from writes."""
    d2t = weights.get("d2t", float_=False)
    if d2t is None:
        raise UsageError("re-selecting lm_head rows needs the draft's d2t")
    return d2t.to(torch.long).cpu() + torch.arange(draft_vocab)


# ------------------------------------------------------------------------------------------------ walks ---

@dataclass
class SequenceScore:
    index: int
    steps: list[int] = field(default_factory=list)  # accepted drafts per verify step
    positions: int = 0  # cursors the draft ran at
    unknown: int = 0  # drafted tokens past the trace's lookahead (counted as rejected)


def replay(seq: Sequence, drafts: np.ndarray, first_cursor: int, k: int) -> SequenceScore:
    """The engine's verify steps over a greedy trace: drafts[c - first_cursor] are the k tokens drafted at
    cursor c (the position whose next token was the last one emitted)."""
    x = seq.input_ids
    N = x.shape[0]
    out = SequenceScore(seq.index, positions=drafts.shape[0])
    c = seq.prompt_len - 1
    while c + 2 < seq.stop:  # the request has emitted c - P + 2 tokens, fewer than its output
        d = drafts[c - first_cursor]
        a = 0
        while a < k:
            idx = c + 2 + a
            if idx >= N:
                out.unknown += k - a
                break
            if d[a] != x[idx]:
                break
            a += 1
        out.steps.append(a)
        c += a + 1
    return out


def every_position(seq: Sequence, drafts: np.ndarray, cursors: np.ndarray, k: int) -> SequenceScore:
    """Teacher-forced estimate for traces whose tokens are not the target's greedy continuation (offline
    training dumps): each cursor whose next token is the target's own is one step; drafted token j is accepted
    while it equals the target's greedy token and the tokens before it in the trace are the target's own."""
    x, y = seq.input_ids, seq.next_token
    N = x.shape[0]
    out = SequenceScore(seq.index, positions=len(cursors))
    for row, c in enumerate(cursors.tolist()):
        a = 0
        while a < k:
            pos = c + 1 + a  # position whose greedy token drafted token a must match
            if pos >= N or (a > 0 and x[pos] != y[pos - 1]):
                out.unknown += k - a
                break
            if drafts[row, a] != y[pos]:
                break
            a += 1
        out.steps.append(a)
    return out


def sequence_inputs(trace: Trace, seq: Sequence, layers: tuple[int, ...], mode: str):
    """(tokens_next, aux, cursors, first_cursor) for one sequence: the positions whose KV the draft needs and
    the cursors at which it drafts."""
    P = seq.prompt_len
    if mode == "replay":
        last = seq.stop - 3  # the last cursor a step can start from
        if last < P - 1:
            return None
        T = last + 1
        cursors = np.arange(P - 1, last + 1)
    else:
        last = min(seq.stop - 2, seq.length - 2)
        if last < P - 1:
            return None
        T = last + 1
        span = np.arange(P - 1, last + 1)
        cursors = span[seq.input_ids[span + 1] == seq.next_token[span]]
        if cursors.size == 0:
            return None
    tokens_next = torch.from_numpy(seq.input_ids[1:T + 1].copy())
    aux = torch.cat([trace.hidden(seq, k, count=T) for k in layers], dim=-1)
    return tokens_next, aux, cursors, int(cursors[0])


def reference_tokens(seq: Sequence, cursors: np.ndarray, k: int, mode: str) -> np.ndarray:
    """[C, k]: the token each drafted token must equal to be accepted (-1: none can be, e.g. past the trace)."""
    x, y = seq.input_ids, seq.next_token
    N = x.shape[0]
    ref = np.full((len(cursors), k), -1, dtype=np.int64)
    for j in range(k):
        if mode == "replay":
            idx = cursors + 2 + j
            ok = idx < N
            ref[ok, j] = x[idx[ok]]
        else:
            pos = cursors + 1 + j
            ok = pos < N
            if j > 0:
                ok &= np.where(ok, x[np.minimum(pos, N - 1)] == y[np.minimum(pos - 1, N - 1)], False)
            ref[ok, j] = y[pos[ok]]
            if j > 0:
                ref[:, j] = np.where(ref[:, j - 1] < 0, -1, ref[:, j])
    return ref


@dataclass
class ReadingScore:
    reading: Reading
    sequences: list[SequenceScore] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    k: int = 3
    mode: str = "replay"
    flops: int = 0
    chained_rows: int = 0  # chains run by the chained steps, summed over the steps

    def counters(self) -> dict[str, Any]:
        steps = [a for s in self.sequences for a in s.steps]
        per_pos = [sum(1 for a in steps if a > i) for i in range(self.k)]
        return {"drafts": len(steps), "draft_tokens": len(steps) * self.k, "accepted": int(sum(steps)),
                "accepted_per_pos": per_pos}

    def acceptance(self) -> dict[str, Any] | None:
        if self.error is not None:
            return None
        c = self.counters()
        return summarize(c["drafts"], c["draft_tokens"], c["accepted"], c["accepted_per_pos"], self.k)

    @property
    def mean_acceptance_length(self) -> float | None:
        acc = self.acceptance()
        return acc["mean_acceptance_length"] if acc else None

    @property
    def positions(self) -> int:
        return sum(s.positions for s in self.sequences)

    @property
    def unknown(self) -> int:
        return sum(s.unknown for s in self.sequences)


def score_reading(d: DraftModel, reading: Reading, trace: Trace, weights: WeightCache, *, k: int, mode: str,
                  lm_head_source: Callable[[str], torch.Tensor] | None = None,
                  sequences: list[int] | None = None, progress: Callable[[int, int], None] | None = None
                  ) -> ReadingScore:
    if k < 1:
        raise UsageError("-k must be at least 1")
    out = ReadingScore(reading, k=k, mode=mode)
    t0 = time.perf_counter()
    missing = [i for i in reading.aux_ids if i not in trace.meta.layers]
    if missing:
        raise UsageError(f"the reading feeds target layers {list(reading.aux_ids)}, the trace holds "
                         f"{trace.meta.layers} (missing {missing}); record the trace with --layers including them")
    try:
        runner = build_runner(d, reading, trace, weights, lm_head_source)
    except DraftFailure as e:
        out.error = str(e)
        out.seconds = time.perf_counter() - t0
        return out
    idx = list(range(trace.num_sequences) if sequences is None else sequences)
    for batch in _batches(trace, idx, reading.aux_ids, mode, k):
        items = [b for b in batch if b[1] is not None]
        drafts = runner.propose_many([b[1] for b in items], k) if items else []
        got = {b[0].index: dr.numpy() for b, dr in zip(items, drafts)}
        for seq, inputs, first in batch:
            if inputs is None:
                out.sequences.append(SequenceScore(seq.index))
            elif mode == "replay":
                out.sequences.append(replay(seq, got[seq.index], first, k))
            else:
                out.sequences.append(every_position(seq, got[seq.index], inputs.cursors.numpy(), k))
            if progress:
                progress(len(out.sequences), len(idx))
    out.seconds = time.perf_counter() - t0
    out.flops = runner.flops
    out.chained_rows = runner.chained_rows
    return out


def _batches(trace: Trace, idx: list[int], layers: tuple[int, ...], mode: str, k: int):
    """Groups of (sequence, SequenceInput or None, first cursor), in order, each up to BATCH_ROWS positions
    (a longer sequence alone)."""
    group: list = []
    rows = 0
    for i in idx:
        seq = trace.sequence(i)
        inputs = sequence_inputs(trace, seq, layers, mode)
        if inputs is None:
            group.append((seq, None, 0))
            continue
        tokens_next, aux, cursors, first = inputs
        n = tokens_next.shape[0]
        if rows and rows + n > BATCH_ROWS:
            yield group
            group, rows = [], 0
        ref = torch.from_numpy(reference_tokens(seq, cursors, k, mode))
        group.append((seq, SequenceInput(tokens_next, aux, torch.from_numpy(cursors), ref), first))
        rows += n
    if group:
        yield group


def set_threads(n: int | None) -> None:
    if n is None:
        return
    if n < 1:
        raise UsageError("--threads must be at least 1")
    torch.set_num_threads(n)


def resolve_device(name: str | None) -> torch.device:
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name!r}: cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no GPU is visible to torch")
    return dev


def resolve_dtype(name: str | None, trace: Trace) -> torch.dtype:
    key = name or trace.meta.dtype
    if key not in DTYPES:
        raise UsageError(f"--dtype {key!r}: choose bfloat16, float16 or float32")
    return DTYPES[key]


def lm_head_loader() -> Callable[[str], Any]:
    """Full-vocabulary lm_head weights by draft folder (--lm-head-from), each read once."""
    cache: dict[str, Any] = {}

    def load(path: str):
        if path not in cache:
            from kconvert.formats.read import read_draft
            from kconvert.commands.inspect import open_draft

            src = read_draft(open_draft(path))
            if "lm_head.weight" not in src.raw_names:
                raise UsageError(f"--lm-head-from {path}: no lm_head.weight there")
            cache[path] = read_tensor(src, src.raw_names["lm_head.weight"])
        return cache[path]

    return load
