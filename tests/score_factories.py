"""Traces and targets for the score tests, built by small functions (no shipped example, no engine).

- `write_trace`: a trace folder from explicit sequences and hidden states (kconvert.score.trace.TraceWriter);
- `random_trace`: random states and tokens;
- `consistent_trace`: a trace whose greedy continuation is what a given draft predicts at step 0 under a given
  reading (computed by tests/eagle3_reference.py, not by kconvert's runner), so that reading accepts (at least)
  the first drafted token everywhere and others do not;
- `tiny_hf_target`: a tiny HF transformers Llama target with a word-level tokenizer and a chat template.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from kconvert.score.trace import TraceMeta, TraceWriter

H, V, L = 64, 512, 8  # tests/factories.py TINY shape


def meta(*, layers=None, dtype="float32", hidden=H, vocab=V, num_layers=L, source="greedy", lookahead=4,
         max_tokens=None, config: dict | None = None) -> TraceMeta:
    from tests.factories import target_config, TINY

    return TraceMeta(
        target={"source": "tests/tiny-target", "revision": None, "commit": None,
                "config": config if config is not None else target_config(TINY)},
        dtype=dtype, layers=list(range(num_layers + 1)) if layers is None else list(layers), hidden_size=hidden,
        vocab_size=vocab, num_hidden_layers=num_layers,
        prompt_set={"name": "test", "num_prompts": 0, "sha256": None},
        continuation={"source": source, "max_tokens": max_tokens, "lookahead": lookahead},
        recorder={"tool": "tests", "version": "0"})


def write_trace(path: Path, seqs: list[dict[str, Any]], m: TraceMeta, embed: torch.Tensor, *, force=False,
                lm_head: torch.Tensor | None = None) -> Path:
    """seqs: [{"ids", "next", "prompt_len", "output_len", "hidden": {layer: [n, H]}}]."""
    with TraceWriter(path, m, force=force) as w:
        for s in seqs:
            w.add_sequence(s["ids"], s["next"], s["prompt_len"], s["output_len"], s["hidden"])
        return w.finish(lambda ids: embed[torch.tensor(ids)], lm_head)


def random_trace(path: Path, *, seqs=((5, 10),), seed=0, layers=None, dtype="float32", lookahead=4) -> Path:
    g = torch.Generator().manual_seed(seed)
    m = meta(layers=layers, dtype=dtype, lookahead=lookahead)
    embed = torch.randn(V, H, generator=g)
    out = []
    for P, n_out in seqs:
        n = P + n_out + lookahead
        ids = torch.randint(20, V, (n,), generator=g)
        nxt = torch.cat([torch.randint(20, V, (P - 1,), generator=g), ids[P:], torch.randint(20, V, (1,), generator=g)])
        out.append({"ids": ids.tolist(), "next": nxt.tolist(), "prompt_len": P, "output_len": n_out,
                    "hidden": {k: torch.randn(n, H, generator=g) for k in m.layers}})
    return write_trace(path, out, m, embed)


def consistent_trace(path: Path, draft: Path, reading: Any, *, n_seqs=12, prompt_len=6, output_len=24,
                     lookahead=4, seed=0, work: Path | None = None, scale=1.0) -> Path:
    """A trace whose tokens after the prompt follow the draft's own first drafted token under `reading`:
    x[t + 2] = draft(step 0 at position t). The "target's greedy token" is therefore that prediction.

    The prediction comes from tests/eagle3_reference.py (the EAGLE-3 Llama definition written out, weights read
    with safetensors), never from kconvert's score runner, which the traces are used to test. Llama drafts
    only; from `reading` it takes the aux ids and norm_before_residual (the other fields must be vLLM's defaults)."""
    import json

    from tests.eagle3_reference import ReferenceDraft

    assert (reading.d2t, reading.lm_head, reading.norm_before_fc, reading.fc_norm) \
        == ("offsets", "stored", False, False), reading
    cfg = json.loads((Path(draft) / "config.json").read_text())
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(V, H, generator=g) * scale
    m0 = meta(lookahead=lookahead)
    ref = ReferenceDraft(Path(draft), cfg, embed, dtype=torch.float32,
                         norm_before_residual=reading.norm_before_residual)
    del work
    seqs = []
    for _ in range(n_seqs):
        n = prompt_len + output_len + lookahead
        hidden = {k: torch.randn(n, H, generator=g) * scale for k in m0.layers}
        x = torch.randint(20, V, (n,), generator=g)
        aux = torch.cat([hidden[k] for k in reading.aux_ids], dim=-1)
        nxt = torch.randint(20, V, (n,), generator=g)
        for t in range(prompt_len - 1, n - 1):
            d1 = ref.propose(x[1:t + 2], aux[: t + 1], t, 1)[0]
            if t + 2 < n:
                x[t + 2] = d1
            nxt[t + 1] = d1
        nxt[prompt_len - 1] = x[prompt_len]
        seqs.append({"ids": x.tolist(), "next": nxt.tolist(), "prompt_len": prompt_len, "output_len": output_len,
                     "hidden": hidden})
    return write_trace(path, seqs, m0, embed)


def tiny_hf_target(folder: Path, *, layers=3, hidden=32, vocab=64, seed=0, eos_word="<eos>") -> Path:
    """A random Llama target saved by transformers as safetensors, with a word-level tokenizer whose chat
    template is `<user> {content} <assistant>`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    words = ["<pad>", eos_word, "<user>", "<assistant>"] + [f"w{i}" for i in range(vocab - 4)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos_word, pad_token="<pad>")
    fast.chat_template = ("{% for m in messages %}<user> {{ m['content'] }} {% endfor %}"
                          "{% if add_generation_prompt %}<assistant>{% endif %}")
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      eos_token_id=1, pad_token_id=0, bos_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    model.save_pretrained(folder, safe_serialization=True)
    fast.save_pretrained(folder)
    return folder


def prompts_file(path: Path, n: int, *, seed: int = 0, vocab: int = 64) -> Path:
    rng = np.random.default_rng(seed)
    lines = [" ".join(f"w{int(i)}" for i in rng.integers(0, vocab - 4, size=int(rng.integers(3, 8))))
             for _ in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path
