"""`kconvert score`: a draft's acceptance from a recorded target trace, without the target.

Record a trace once where the target runs (`kconvert trace`, or from an offline training dump), then score any
candidate draft anywhere: the draft alone runs in torch the way vLLM runs it next to the target (its KV for
verified positions from the target's states, chained steps on its own outputs, greedy acceptance against the
target's tokens) and the report has verify's acceptance fields. `score --diagnose` tries other readings of the
files (aux ids shifted, d2t as absolute ids, whose embeddings, re-selected lm_head rows, norm_before_residual)
and names the best by measured acceptance.

Layers: kconvert.score uses kconvert.trace (the traces it reads, torch's device setup), formats, source, targets,
rules (through kconvert.commands.inspect), engines and results; torch is needed only here and in kconvert.trace
(transformers only for recording).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from kconvert.errors import UsageError
from kconvert.commands.inspect import analyse, open_draft
from kconvert.engines.expectations import engine_rules
from kconvert.results.score import ScoreResult, ScoreSettings, build_score_report, score_section
from kconvert.results.thresholds import evaluate
from kconvert.rules import Options
from kconvert.score.diagnose_offline import run_diagnosis
from kconvert.score.reading import engine_reading
from kconvert.trace.sources import require_torch
from kconvert.targets import from_config, load_target

Progress = Callable[[str], None]


def target_from_trace(trace: Any):
    cfg = trace.meta.target.get("config")
    if not isinstance(cfg, dict):
        return None
    return from_config(cfg, name=str(trace.meta.target.get("source")), origin="folder")


def _embeddings_equal(d: Any, trace: Any) -> bool:
    """vLLM shares the target's embeddings when the draft's equal them (llm_base_proposer
    `_maybe_share_embeddings`): compared on the rows the trace keeps."""
    # deferred: torch (~0.8 s) is loaded only once a draft is really scored (numpy with it)
    import numpy as np
    import torch

    from kconvert.source.tensor_read import read_span

    info = d.tensors.get("embed_tokens.weight")
    if info is None or info.shape != (trace.meta.vocab_size, trace.meta.hidden_size):
        return False
    ids, rows = trace.embedding_rows()
    # up to 256 of the rows the trace keeps, each read by byte range (a Kimi-sized table is 2.3 GB)
    pick = np.linspace(0, len(ids) - 1, num=min(256, len(ids))).round().astype(int) if len(ids) else []
    path = d.checkpoint.local_path(info.file)
    if path is None:
        return False
    for i in pick:
        own = read_span(path, info, int(ids[i]), 1)[0]
        if not torch.equal(own.to(rows.dtype), rows[i]):
            return False
    return True


def score(draft: str, trace: str, *, engine: str = "vllm", engine_version: str | None = None,
          settings: ScoreSettings | None = None, thresholds: Any = None, options: Any = None,
          target: str | None = None, progress: Progress | None = None, selection: Any = None,
          diagnose: bool = False, readings: set[str] | None = None, search_aux: bool | None = None,
          report_ref: str | None = None) -> ScoreResult:
    """Score `draft` against the trace folder `trace` as the engine would load it.

    With `diagnose`, also score the readings the static findings leave open (or those named in `readings`, from
    `kconvert.score.diagnose_offline.CHOICES` or "all"; `settings.lm_head_from` adds the re-selected lm_head rows) and
    name the best in `diagnosis`, as `kconvert score --diagnose` does. The draft is then scored whatever the
    static checks say (the readings are what decides them); `static_blocked` still tells whether they would have
    blocked it. `search_aux` forces the search of the recorded layers on or off (default: when the config declares
    no ids); `report_ref`, the report file the caller writes, is named in the fix command (`--decided-by`)."""
    if (readings or search_aux) and not diagnose:
        raise UsageError("--try, --search-aux and --lm-head-from go with --diagnose")
    # deferred: the trace reader loads numpy; torch comes below, once the static checks let the draft be scored
    from kconvert.trace.format import open_trace

    st = settings or ScoreSettings()
    say = progress or (lambda _s: None)
    t0 = time.perf_counter()
    tr = open_trace(trace, check_data_sha256=st.check_trace_sha256)
    tgt = load_target(target) if target else target_from_trace(tr)
    if tgt is not None and (tgt.hidden_size != tr.meta.hidden_size or tgt.vocab_size != tr.meta.vocab_size):
        raise UsageError(f"--target {tgt.name} (hidden {tgt.hidden_size}, vocab {tgt.vocab_size}) is not the trace's "
                         f"target (hidden {tr.meta.hidden_size}, vocab {tr.meta.vocab_size})")
    rules = engine_rules(engine, engine_version)
    ckpt = open_draft(draft)
    res = analyse(ckpt, tgt, rules, options or Options(), selection=selection)
    out = ScoreResult(inspect=res, trace=tr, settings=st, thresholds=thresholds)
    out.timings["open_s"] = time.perf_counter() - t0
    # Another method's checkpoint (K105): the EAGLE-3 proposer's arithmetic on it would be a figure of nothing,
    # so no reading is scored (nor diagnosed), --skip-static or not.
    out.refused = res.refusal("score", skip_static=st.skip_static)
    if out.refused:
        return out
    if res.errors and not st.skip_static:
        out.static_blocked = True
        if not diagnose:
            return out
    if ckpt.root is None:
        raise UsageError(f"{draft}: score needs the draft's weights; download the draft first")
    # Only now torch: a refusal and a static block above need none, so a core install says them (exit 1) instead
    # of asking for torch (exit 3) to be told the same afterwards.
    require_torch()
    # deferred: torch (~0.8 s), loaded only after require_torch() said it is there
    from kconvert.score.walk import score_reading
    from kconvert.score.weights import WeightCache, lm_head_loader, resolve_dtype
    from kconvert.trace.device import resolve_device, set_threads

    set_threads(st.threads)
    d = res.draft
    # the target's facts too: SGLang's reading of the ids depends on the target's family (its first-id rule holds
    # on DeepSeek/Kimi targets only), as inspect's findings read them
    reading = engine_reading(d, rules, tr.meta.num_hidden_layers, tr.meta.vocab_size,
                             embeddings_equal_target=d.has_embeddings and _embeddings_equal(d, tr), target=tgt)
    if st.aux_ids is not None:
        reading = reading.with_(aux_ids=tuple(st.aux_ids))
    out.reading = reading
    device = resolve_device(st.device)
    dtype = resolve_dtype(st.dtype, tr)
    out.device, out.dtype = str(device), str(dtype).replace("torch.", "")
    mode = st.mode or ("every-position" if tr.meta.continuation.get("source") == "dataset" else "replay")
    if mode not in ("replay", "every-position"):
        raise UsageError(f"--mode {mode!r}: replay or every-position")
    if mode == "replay" and tr.meta.lookahead < st.num_speculative_tokens:
        say(f"warning: the trace's lookahead ({tr.meta.lookahead}) is shorter than k; drafted tokens past it count "
            "as rejected")
    weights = WeightCache(d, dtype, device)
    seqs = list(range(min(tr.num_sequences, st.max_sequences))) if st.max_sequences else None
    say("scoring")
    t1 = time.perf_counter()
    out.result = score_reading(d, reading, tr, weights, k=st.num_speculative_tokens, mode=mode,
                               lm_head_source=lm_head_loader(), sequences=seqs,
                               progress=lambda i, n: say(f"scoring: {i}/{n} sequences"))
    out.timings["score_s"] = time.perf_counter() - t1
    out.timings["weights_bytes"] = float(weights.bytes_read)
    out.timings["flops"] = float(out.result.flops)
    out.weights = weights
    acc = out.acceptance
    if thresholds is not None and acc is not None:
        out.checks = evaluate(thresholds, acc)
    out.timings["total_s"] = time.perf_counter() - t0
    if diagnose:
        out.diagnosis = run_diagnosis(out, asked=set(readings or ()), lm_head_from=st.lm_head_from,
                                      search=search_aux, progress=progress, draft_ref=draft,
                                      target_ref=target or str(tr.meta.target.get("source")), report_ref=report_ref)
    return out


__all__ = ["ScoreSettings", "ScoreResult", "score", "build_score_report", "score_section", "require_torch"]
