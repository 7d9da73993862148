"""`kconvert trace`: record a trace by running the target in HF transformers (CPU or one GPU).

The target is loaded by kconvert.trace.hf_target, the prompts rendered by kconvert.trace.prompt_ids, and continued
greedily here with a KV cache. The residual streams are captured by hooks (kconvert.trace.capture) in the same
forwards that produce each greedy token, so a trace is self-consistent in any dtype: the recorded next token at
position t is the argmax of the very forward whose states are recorded at t. With `continuations` (token ids an
engine produced, e.g. the outputs of a live `verify`), those tokens are teacher-forced instead and the greedy
lookahead continues after them.
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Callable

from kconvert._version import __version__
from kconvert.source.checkpoint import read_small_file
from kconvert.source.names import CONFIG_NAME
from kconvert.trace.capture import Capture, decoder_layers
from kconvert.trace.format import TraceMeta, TraceWriter, request_inputs
from kconvert.trace.hf_target import LoadedTarget, load_target_model, load_torch
from kconvert.trace.prompt_ids import PromptInputs, prompt_inputs
from kconvert.trace.request import TraceRequest, check_request, resolve_layers


def record_trace(req: TraceRequest, progress: Callable[[str], None] | None = None) -> Path:
    """Record a trace folder in HF transformers; returns its path."""
    torch = load_torch()
    import transformers

    from kconvert.trace.device import resolve_device, set_threads

    say = progress or (lambda _s: None)
    check_request(req)
    device = resolve_device(req.device)
    set_threads(req.threads)
    t0 = time.perf_counter()
    say("loading the target")
    tgt = load_target_model(req.target, req.dtype, device, need_tokenizer=req.continuations is None)
    L, H, V = (int(tgt.text_config[k]) for k in ("num_hidden_layers", "hidden_size", "vocab_size"))
    layers = resolve_layers(req, L)
    inp = prompt_inputs(req, tgt.tokenizer, V)
    given = inp.given
    meta = TraceMeta(
        target={"source": tgt.source, "revision": tgt.revision, "commit": tgt.commit,
                "architectures": [a for a in tgt.config.get("architectures") or [] if isinstance(a, str)],
                "model_type": tgt.config.get("model_type"),
                "config_sha256": hashlib.sha256(read_small_file(tgt.root / CONFIG_NAME, CONFIG_NAME)).hexdigest(),
                "weights": tgt.weight_files, "config": tgt.config},
        dtype=req.dtype, layers=layers, hidden_size=H, vocab_size=V, num_hidden_layers=L, prompt_set=inp.prompt_set,
        continuation={"source": "given" if given is not None else "greedy",
                      "max_tokens": None if given is not None else req.max_tokens, "lookahead": req.lookahead,
                      "eos_token_ids": tgt.eos_ids, "from": req.continuations_from},
        recorder={"tool": "kconvert trace", "version": __version__, "backend": f"transformers {transformers.__version__}",
                  "torch": torch.__version__, "device": str(device)},
        notes=list(req.notes))
    with TraceWriter(req.out, meta, force=req.force, shard_size=req.shard_size,
                     inputs=request_inputs(req)) as writer:
        _record_sequences(torch, req, tgt, layers, inp, writer, device, say)
        emb = tgt.model.get_input_embeddings().weight.detach()
        head = None
        if req.lm_head:
            out_emb = tgt.model.get_output_embeddings()
            head = out_emb.weight.detach().cpu() if out_emb is not None else None
        meta.recorder["seconds"] = round(time.perf_counter() - t0, 3)
        return writer.finish(lambda ids: emb[torch.tensor(ids, device=emb.device)].cpu(), head)


def _record_sequences(torch, req: TraceRequest, tgt: LoadedTarget, layers: list[int], inp: PromptInputs,
                      writer: TraceWriter, device: Any, say: Callable[[str], None]) -> None:
    """Generate (or teacher-force) batch by batch, shortest prompts first, and add the sequences in prompt order."""
    prompt_ids, given = inp.prompt_ids, inp.given
    cap = Capture(decoder_layers(tgt.model), layers)
    try:
        order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
        results: dict[int, tuple] = {}
        for s in range(0, len(order), req.batch_size):
            idx = order[s: s + req.batch_size]
            starts = [prompt_ids[i] + (given[i] if given is not None else []) for i in idx]
            # greedy: until EOS (inclusive) or max_tokens, then lookahead; given: lookahead only
            budgets = [req.lookahead if given is not None else req.max_tokens + req.lookahead for _ in idx]
            outs = _generate(torch, tgt.model, cap, starts, budgets, tgt.eos_ids,
                             req.max_tokens if given is None else None, req.lookahead, device)
            for j, i in enumerate(idx):
                results[i] = (len(prompt_ids[i]),) + outs[j]
            say(f"recorded {min(s + req.batch_size, len(order))}/{len(order)} sequences")
        for i in range(len(prompt_ids)):
            P, ids, nxt, hidden, out_len = results[i]
            writer.add_sequence(ids, nxt, P, len(given[i]) if given is not None else out_len, hidden)
    finally:
        cap.close()


def _generate(torch, model, cap: Capture, starts: list[list[int]], budgets: list[int], eos: list[int],
              max_tokens: int | None, lookahead: int, device) -> list[tuple]:
    """Prefill `starts` (a left-padded batch) and decode greedily with a KV cache. Per sequence: (ids,
    next_token, hidden per layer [n, H] on CPU, output length). A greedy sequence stops emitting at EOS
    (inclusive) or max_tokens and is decoded `lookahead` tokens further; a given one only `lookahead`. The state
    recorded at every position comes from the forward that also produced the greedy token after it."""
    from transformers import DynamicCache

    B = len(starts)
    P = max(len(s) for s in starts)
    ids = torch.zeros((B, P), dtype=torch.long)
    mask = torch.zeros((B, P), dtype=torch.long)
    for b, s in enumerate(starts):
        ids[b, P - len(s):] = torch.tensor(s)
        mask[b, P - len(s):] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    seq_ids = [list(s) for s in starts]
    nxt: list[list[int]] = [[] for _ in range(B)]
    hid: dict[int, list[list[Any]]] = {k: [[] for _ in range(B)] for k in cap.wanted}
    out_len: list[int | None] = [None] * B
    target_len = [len(s) + budgets[b] for b, s in enumerate(starts)]
    recorded = [0] * B
    cur_ids, cur_pos, first = ids, pos, True
    with torch.no_grad():
        while True:
            greedy = model(input_ids=cur_ids, attention_mask=mask, position_ids=cur_pos, past_key_values=cache,
                           use_cache=True).logits.argmax(-1)
            for b in range(B):
                if recorded[b] >= target_len[b]:
                    continue
                sl = slice(P - len(starts[b]), P) if first else slice(0, 1)
                labels = greedy[b, sl].tolist()
                nxt[b] += labels
                for k in cap.wanted:
                    hid[k][b].append(cap.out[k][b, sl].cpu())
                recorded[b] += len(labels)
            new = greedy[:, -1]
            for b in range(B):
                if len(seq_ids[b]) >= target_len[b]:
                    continue
                t = int(new[b])
                seq_ids[b].append(t)
                if max_tokens is not None and out_len[b] is None:
                    emitted = len(seq_ids[b]) - len(starts[b])
                    if t in eos or emitted >= max_tokens:
                        out_len[b] = emitted
                        target_len[b] = len(seq_ids[b]) + lookahead
            if all(recorded[b] >= target_len[b] for b in range(B)):
                break
            mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=device)], 1)
            cur_ids, cur_pos, first = new[:, None], cur_pos[:, -1:] + 1, False
    out = []
    for b in range(B):
        n = target_len[b]
        hidden = {k: torch.cat(hid[k][b])[:n] for k in cap.wanted}
        ol = out_len[b] if out_len[b] is not None else n - len(starts[b]) - lookahead
        out.append((seq_ids[b][:n], nxt[b][:n], hidden, ol))
    return out
