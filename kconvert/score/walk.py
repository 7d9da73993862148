"""Score one reading of a draft over a trace: run the draft (kconvert.score.runner) on every sequence, batched,
and walk the verify steps an engine would take.

The walk (greedy, vLLM's scheduler and rejection sampler, `v1/core/sched/scheduler.py`): after the prefill the
engine has emitted one token; each verify step checks the k drafted tokens against the target's greedy tokens,
accepts the longest matching prefix and emits it plus the target's own next token; steps continue while the
request has emitted fewer than its output length (max_tokens, or up to and including EOS). The counters count
every step's k drafted tokens and every accepted one, also those that land past the end of the output (the
scheduler counts them before the output is truncated): that is why a trace carries lookahead tokens.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from kconvert.errors import UsageError
from kconvert.formats.model import DraftModel
from kconvert.engines.acceptance import summarize
from kconvert.score.reading import Reading
from kconvert.trace.format import Sequence, Trace

import torch  # noqa: E402  (imported by kconvert.score only once torch is known to be there)

from kconvert.score.draft import DraftFailure, SequenceInput  # noqa: E402
from kconvert.score.runner import build_runner  # noqa: E402
from kconvert.score.weights import WeightCache  # noqa: E402

# Rows (positions) the first pass runs at once, summed over the sequences batched together: enough for the
# matmuls to run near their peak (one thread, float32, Kimi-shaped weights: ~40-70 GFLOP/s at one sequence's
# 63-94 rows, ~80-110 at 512-1880; bench/NOTES.md), few enough that the activations stay small next to the
# weights (~0.5 MB a row for a Kimi-shaped draft in float32).
BATCH_ROWS = 1024


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

