"""The draft runner for one reading: the tensors vLLM's EAGLE-3 layers read, each checked against the shape vLLM
allocates, the lm_head and embeddings the reading names, the draft-to-target ids; a DraftRunner
(kconvert.score.draft) built from them, or DraftFailure where vLLM would fail to load or run the draft.
"""
from __future__ import annotations

from typing import Any, Callable

from kconvert.errors import UsageError
from kconvert.formats.model import DraftModel
from kconvert.score.reading import Reading
from kconvert.trace.format import Trace

import torch  # noqa: E402  (imported by kconvert.score only once torch is known to be there)

from kconvert.score.draft import DraftFailure, DraftRunner, EmbeddingTable, draft_spec  # noqa: E402
from kconvert.score.weights import WeightCache, layer_raw_name  # noqa: E402


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
        # the example is a layer's name (`layers.N.` or torchspec's `midlayer.`) where one is prefixed, else the
        # first prefixed name: detect_layout sets a prefix only when names carry it, so `prefixed` is never empty
        prefixed = sorted((raw, canon) for canon, raw in d.raw_names.items() if raw.startswith(d.key_layout.prefix))
        example = next((raw for raw, canon in prefixed if canon.startswith("layers.")), prefixed[0][0])
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

