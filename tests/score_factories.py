"""Traces and targets for the score tests, built by small functions (no shipped example, no engine).

- `write_trace`: a trace folder from explicit sequences and hidden states (kconvert.trace.format.TraceWriter);
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

from kconvert.trace.format import TraceMeta, TraceWriter

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


def greedy_verify_steps(x: list[int], prompt_len: int, output_len: int, k: int, propose) -> list[int]:
    """The verify steps vLLM takes on a greedy trace, walked here from its rule (vLLM 0.32
    v1/sample/rejection_sampler.py rejection_greedy_sample_kernel), not by kconvert: at cursor c (the position
    whose next token x[c + 1] was just emitted) drafted token j is accepted while it and the ones before it equal
    the target's tokens x[c + 2 + j]; the step emits one more token, so the next cursor is c + a + 1; the request
    drafts while it has emitted fewer than its output_len tokens. `propose(c)` gives the k drafted tokens."""
    steps, c = [], prompt_len - 1
    while c - prompt_len + 2 < output_len:
        d = propose(c)
        a = 0
        while a < k and c + 2 + a < len(x) and d[a] == x[c + 2 + a]:
            a += 1
        steps.append(a)
        c += a + 1
    return steps


def consistent_trace(path: Path, draft: Path, reading: Any, *, n_seqs=12, prompt_len=6, output_len=24,
                     lookahead=4, seed=0, work: Path | None = None, scale=1.0,
                     steps_out: dict | None = None, k: int = 3) -> Path:
    """A trace whose tokens after the prompt follow the draft's own first drafted token under `reading`:
    x[t + 2] = draft(step 0 at position t). The "target's greedy token" is therefore that prediction.

    The prediction comes from tests/eagle3_reference.py (the EAGLE-3 Llama definition written out, weights read
    with safetensors), never from kconvert's score runner, which the traces are used to test. Llama drafts
    only; from `reading` it takes the aux ids and norm_before_residual (the other fields must be vLLM's defaults).

    With `steps_out` ({aux ids: []}), the verify steps of each sequence at k drafted tokens, for the draft fed
    those aux ids (None: the reading's), are appended to its list: the reference's own k proposals walked by
    greedy_verify_steps, the figures a score of the draft so read must equal (lookahead >= k: a last step's
    drafts all lie inside the trace)."""
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
        for ids, out in (steps_out or {}).items():
            assert lookahead >= k
            fed = aux if ids is None else torch.cat([hidden[i] for i in ids], dim=-1)
            out.append(greedy_verify_steps(
                x.tolist(), prompt_len, output_len, k, lambda c: ref.propose(x[1:c + 2], fed[: c + 1], c, k)))
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


# ------------------------------------------------------------------ a proposer whose steps a hand can derive ---

def constant_proposer(folder: Path, *, token: int | None = None, aux_ids=(2, 5, 7), producer: str = "torchspec"
                      ) -> tuple[Path, int]:
    """A factory draft (tests/factories.py make_draft) that drafts one target token z at every step, whatever
    its inputs: its lm_head is all zeros, so every logit is exactly 0 and the greedy pick is draft id 0 (vLLM's
    proposer takes `argmax`; torch documents that ties give the first maximal index), which d2t maps to the
    target id 0 + d2t[0]. With `token`, d2t[0] and t2d are rewritten so that id 0 maps to `token` instead.

    Returns (folder, z), z read back from the written file with `safetensors` (not through kconvert)."""
    from safetensors import safe_open

    from tests.factories import make_draft

    def tensors(t: dict) -> None:
        dt, shape, _ = t["lm_head.weight"]
        t["lm_head.weight"] = (dt, shape, np.zeros(shape, np.float32))
        if token is not None:
            d2t = t["d2t"][2].copy()
            t2d = t["t2d"][2].copy()
            old = int(d2t[0])
            assert not t2d[token] and token < 1 + int(d2t[1]), "the token must keep d2t's ids sorted and distinct"
            t2d[old], t2d[token] = False, True
            d2t[0] = token
            t["d2t"] = (t["d2t"][0], t["d2t"][1], d2t)
            t["t2d"] = (t["t2d"][0], t["t2d"][1], t2d)

    def config(c: dict) -> None:
        if "eagle_aux_hidden_state_layer_ids" in c:
            c["eagle_aux_hidden_state_layer_ids"] = list(aux_ids)
        if isinstance(c.get("eagle_config"), dict):
            c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(aux_ids)

    folder = make_draft(folder, producer, config=config, tensors=tensors)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        d2t = f.get_tensor("d2t")
    return folder, int(d2t[0]) + 0


def pattern_trace(path: Path, checked: list[list[int]], *, avoid: set[int], prompt_len=4, output_len=12,
                  lookahead=4, seed=0) -> Path:
    """A greedy trace whose tokens from x[P + 1] on are given, one list per sequence (`checked`, each
    output_len + lookahead - 1 long): those are the tokens a replayed verify step compares drafts with (the
    draft at cursor c, the position whose next token x[c + 1] was just emitted, proposes x[c + 2], ...). The
    prompt and the first output token x[P] are random tokens outside `avoid`; the hidden states are random."""
    g = torch.Generator().manual_seed(seed)
    m = meta(lookahead=lookahead)
    embed = torch.randn(V, H, generator=g)
    pool = [t for t in range(20, V) if t not in avoid]
    seqs = []
    for u in checked:
        assert len(u) == output_len + lookahead - 1, len(u)
        head = [pool[int(i)] for i in torch.randint(0, len(pool), (prompt_len + 1,), generator=g)]
        x = head + list(u)
        n = len(x)
        nxt = [pool[int(i)] for i in torch.randint(0, len(pool), (prompt_len - 1,), generator=g)]
        nxt += x[prompt_len:] + [pool[0]]  # the target's greedy label at t >= P - 1 is the token it emitted next
        seqs.append({"ids": x, "next": nxt, "prompt_len": prompt_len, "output_len": output_len,
                     "hidden": {k: torch.randn(n, H, generator=g) for k in m.layers}})
    return write_trace(path, seqs, m, embed)


def hand_pattern(z: int, w: int) -> tuple[list[list[int]], list[list[int]]]:
    """Three sequences' checked tokens (pattern_trace, output_len 12, lookahead 4: 15 tokens each) for a draft
    that proposes z at every step with k = 3, and the verify steps vLLM takes on them, derived by hand here.

    vLLM's greedy verify (vLLM 0.32 v1/sample/rejection_sampler.py rejection_greedy_sample_kernel): drafted
    token j is accepted while it and every
    drafted token before it equal the target's own token; the step then emits one more token (the target's
    correction, or the bonus token after k accepted), so the next step compares from a + 1 tokens on. With u
    the checked tokens and s where a step starts in u (0 first), a step accepts the run of z's at u[s..s+2],
    then s += a + 1, and the request stops once it has emitted its 12 tokens (a step starts while s < 11).

      seq 0  u = z z z w z w w z z w z z z z w
             s=0: z z z -> 3 (u3 emitted); s=4: z w -> 1; s=6: w -> 0; s=7: z z w -> 2; s=10: z z z -> 3;
             s=14: stop                                                          steps [3, 1, 0, 2, 3]
      seq 1  u = w * 15: every step at s = 0..10 rejects the first token          steps [0] * 11
      seq 2  u = z * 15: s=0 -> 3, s=4 -> 3, s=8 -> 3, s=12: stop                 steps [3, 3, 3]

    In all: 19 drafts, 57 draft tokens, 18 accepted, per position (steps with a > i) [7, 6, 5];
    AL = 1 + 18/19, per position [7/19, 6/19, 5/19], rate 18/57."""
    seq0 = [z, z, z, w, z, w, w, z, z, w, z, z, z, z, w]
    return [seq0, [w] * 15, [z] * 15], [[3, 1, 0, 2, 3], [0] * 11, [3, 3, 3]]


HAND_COUNTERS = {"drafts": 19, "draft_tokens": 57, "accepted": 18, "accepted_per_pos": [7, 6, 5]}  # hand_pattern


def reference_proposals(tr: Any, aux_ids: Any, ref: Any, k: int = 3) -> tuple[list[Any], list[list[list[int]]]]:
    """Every verify cursor of every sequence of trace `tr` as the runner's SequenceInput, and what `ref` (the
    EAGLE-3 definition in tests/eagle3_reference.py) proposes there: k tokens a cursor. The cursors run from the
    prompt's last token to the output's second-to-last (T = stop - 2 tokens of input, as the engine verifies)."""
    from kconvert.score.draft import SequenceInput
    items, want = [], []
    for i in range(tr.num_sequences):
        seq = tr.sequence(i)
        T = seq.stop - 2
        tokens_next = torch.from_numpy(seq.input_ids[1:T + 1].copy())
        aux = torch.cat([tr.hidden(seq, a, count=T).double() for a in aux_ids], -1)
        cursors = torch.arange(seq.prompt_len - 1, T)
        items.append(SequenceInput(tokens_next, aux, cursors))
        want.append([ref.propose(tokens_next, aux, int(c), k) for c in cursors])
    return items, want
