"""Attention: the attention tensors' shapes and how heads, KV heads and the vocab split over the tensor-parallel ranks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, options_and_sources, rule
from kconvert.writer.ops import SetConfig


@rule("K302", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="q/k/v/o projections do not match heads x head_dim (Llama layer) or the MLA ranks (MLA layer).",
      why="vLLM builds attention from the config: head_dim defaults to hidden/heads (7168/64 = 112), while Kimi "
          "drafts use 128, so a missing `head_dim` makes every projection the wrong shape and loading fails; "
          "MLA drafts need q_lora_rank, kv_lora_rank, qk_nope/rope_head_dim and v_head_dim that match the tensors.",
      fix="fix sets head_dim when the tensors determine it (q_proj rows / heads); other mismatches are not fixable.")
def attention_shapes(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    H = d.effective_hidden
    if d.layer_family in ("llama", "qwen3"):
        q = d.shape("layers.0.self_attn.q_proj.weight")
        k = d.shape("layers.0.self_attn.k_proj.weight")
        o = d.shape("layers.0.self_attn.o_proj.weight")
        heads = d.num_attention_heads
        if not q or not heads or not H:
            return
        hd_cfg = d.head_dim or H // heads
        if q[0] % heads:
            yield attention_shapes.finding(f"q_proj has {q[0]} rows, not a multiple of {heads} heads",
                                           evidence=[Evidence("layers.0.self_attn.q_proj.weight", list(q), None)])
            return
        hd = q[0] // heads
        if hd != hd_cfg:
            yield attention_shapes.finding(
                f"q_proj implies head_dim {hd} but the config gives {hd_cfg}"
                + ("" if d.head_dim else f" (hidden {H} / {heads} heads: head_dim is not set)"),
                evidence=[Evidence("head_dim", d.head_dim, hd)],
                ops=[SetConfig(ctx.key_path("head_dim"), hd, "q_proj rows / num_attention_heads")])
        if q[1] != 2 * H:
            yield attention_shapes.finding(
                f"q_proj takes {q[1]} inputs; an EAGLE-3 layer takes 2 x hidden = {2 * H}",
                evidence=[Evidence("layers.0.self_attn.q_proj.weight", list(q), [q[0], 2 * H])])
        kvh = d.num_key_value_heads or heads
        if k and k[0] != kvh * hd:
            yield attention_shapes.finding(
                f"k_proj has {k[0]} rows; {kvh} kv heads x head_dim {hd} = {kvh * hd}",
                evidence=[Evidence("num_key_value_heads", d.num_key_value_heads, k[0] // hd if hd else None)])
        if o and o != (H, heads * hd):
            yield attention_shapes.finding(f"o_proj is {list(o)}, expected {[H, heads * hd]}",
                                           evidence=[Evidence("layers.0.self_attn.o_proj.weight", list(o), [H, heads * hd])])
        if d.layer_family == "qwen3":
            # Qwen3Attention.q_norm/k_norm are RMSNorm(head_dim) (vLLM 0.32 qwen3.py): another length fails to load.
            for n in (f"layers.{i}.self_attn.{w}_norm.weight" for i in d.decoder_layers for w in "qk"):
                sh = d.shape(n)
                if sh is not None and sh != (hd,):
                    yield attention_shapes.finding(f"{n} is {list(sh)}; a Qwen3 layer's per-head norm is [{hd}]",
                                                   evidence=[Evidence(n, list(sh), [hd])])
        for i in d.decoder_layers[1:]:
            # vLLM PR #26164: only layer 0 concatenates the embeddings; later layers take H inputs.
            qi = d.shape(f"layers.{i}.self_attn.q_proj.weight")
            if qi and (len(qi) != 2 or qi[1] != H):
                yield attention_shapes.finding(
                    f"layers.{i}.self_attn.q_proj takes {qi[-1]} inputs; layers after the first take hidden = {H}",
                    evidence=[Evidence(f"layers.{i}.self_attn.q_proj.weight", list(qi), [qi[0], H])])
        return
    # MLA layer
    cfg = d.config
    need = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "num_attention_heads")
    miss = [k for k in need if not isinstance(cfg.get(k), int)]
    if miss:
        yield attention_shapes.finding(f"MLA draft config lacks {', '.join(miss)}",
                                       evidence=[Evidence(k, None, "an integer") for k in miss])
        return
    heads, kv, rope, nope, v = (cfg["num_attention_heads"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"],
                                cfg["qk_nope_head_dim"], cfg["v_head_dim"])
    ql = cfg.get("q_lora_rank")
    exp = {
        "layers.0.self_attn.kv_a_proj_with_mqa.weight": (kv + rope, 2 * H),
        "layers.0.self_attn.kv_b_proj.weight": (heads * (nope + v), kv),
        "layers.0.self_attn.o_proj.weight": (H, heads * v),
    }
    if isinstance(ql, int):
        exp["layers.0.self_attn.q_a_proj.weight"] = (ql, 2 * H)
        exp["layers.0.self_attn.q_b_proj.weight"] = (heads * (nope + rope), ql)
    else:
        exp["layers.0.self_attn.q_proj.weight"] = (heads * (nope + rope), 2 * H)
    bad = [(n, d.shape(n), e) for n, e in exp.items() if d.shape(n) is not None and tuple(d.shape(n)) != e]
    for n, got, e in bad:
        yield attention_shapes.finding(f"{n} is {list(got)}; the MLA config implies {list(e)}",
                                       evidence=[Evidence(n, list(got), list(e))])
    if ctx.target is not None and ctx.target.mla:
        tm = ctx.target.mla
        diff = [k for k in ("kv_lora_rank", "qk_rope_head_dim") if tm.get(k) is not None and cfg.get(k) != tm.get(k)]
        if diff:
            yield attention_shapes.finding(
                f"MLA cache dims differ from the target's ({', '.join(diff)}): the engine shares one MLA cache "
                "layout between target and draft", severity="warning",
                evidence=[Evidence(k, cfg.get(k), tm.get(k)) for k in diff])


# vLLM pads every vocab-parallel embedding and head to a multiple of this before splitting it across ranks
# (vllm/model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE).
VLLM_VOCAB_PADDING = 64


@dataclass(frozen=True)
class SplitProblem:
    """One dimension that does not split at a TP, and what vLLM 0.32 does then."""

    where: str
    value: int
    tp: int
    fatal: bool  # the engine refuses to start or crashes while loading
    message: str


def draft_tp_in_effect(tp: int, draft_tp: int | None) -> int:
    """The draft's TP as vLLM 0.32 resolves it: `draft_tensor_parallel_size`, else the target's TP
    (config/speculative.py `_verify_and_get_draft_tp`)."""
    return tp if draft_tp is None else draft_tp


def draft_tp_problem(tp: int, draft_tp: int | None) -> str | None:
    """vLLM 0.32 accepts a draft TP of 1 or the target's TP only (`_verify_and_get_draft_tp`)."""
    if tp < 1 or (draft_tp is not None and draft_tp < 1):
        return "tensor-parallel sizes must be at least 1"
    if draft_tp is not None and draft_tp not in (1, tp):
        return (f"draft_tensor_parallel_size {draft_tp} with tensor_parallel_size {tp}: vLLM accepts only 1 or the "
                f"target's TP ('speculative_draft_tensor_parallel_size={draft_tp} cannot be other value than 1 or "
                f"target model tensor_parallel_size')")
    return None


def head_problems(who: str, heads: int | None, kv_heads: int | None, tp: int, *, mla: bool) -> list[SplitProblem]:
    """Attention heads and KV heads that do not split across `tp` ranks."""
    out: list[SplitProblem] = []
    if tp <= 1:
        return out
    if heads and heads % tp:
        out.append(SplitProblem(
            f"{who}.num_attention_heads", heads, tp, True,
            f"{who}'s {heads} attention heads do not divide by TP {tp}: vLLM refuses to start ('Total number of "
            f"attention heads ({heads}) must be divisible by tensor parallel size ({tp})')"))
    # MLA decodes as MQA: one latent KV head per rank whatever the count (config/model.py get_num_kv_heads).
    if kv_heads and not mla:
        if kv_heads >= tp and kv_heads % tp:
            out.append(SplitProblem(
                f"{who}.num_key_value_heads", kv_heads, tp, True,
                f"{who}'s {kv_heads} KV heads do not divide by TP {tp}: vLLM's QKVParallelLinear asserts "
                f"num_kv_heads % tp == 0 while loading (the engine crashes at start)"))
        elif kv_heads < tp and tp % kv_heads:
            out.append(SplitProblem(
                f"{who}.num_key_value_heads", kv_heads, tp, True,
                f"{who}'s {kv_heads} KV heads cannot be replicated evenly over TP {tp}: vLLM asserts "
                f"tp % num_kv_heads == 0 while loading (the engine crashes at start)"))
        elif kv_heads < tp:
            out.append(SplitProblem(
                f"{who}.num_key_value_heads", kv_heads, tp, False,
                f"{who}'s {kv_heads} KV heads are fewer than TP {tp}: vLLM replicates each on {tp // kv_heads} "
                f"ranks (loads and runs; KV-cache memory per rank as for {tp // kv_heads}x the heads)"))
    return out


def vocab_problem(draft_vocab: int | None, tp: int) -> SplitProblem | None:
    if not draft_vocab or tp <= 1 or draft_vocab % tp == 0:
        return None
    padded = -(-draft_vocab // VLLM_VOCAB_PADDING) * VLLM_VOCAB_PADDING
    if padded % tp:
        # vLLM 0.32 vocab_parallel_embedding.py VocabParallelEmbedding.__init__: `divide(self.num_embeddings_padded,
        # self.tp_size)`, whose ensure_divisibility asserts (vllm/distributed/utils.py); padding to 64 only helps a TP
        # that divides 64
        return SplitProblem(
            "draft_vocab_size", draft_vocab, tp, True,
            f"draft_vocab_size {draft_vocab} does not divide by TP {tp}, nor does its padding to {padded} rows: "
            f"vLLM's vocab-parallel lm_head fails to load ('{padded} is not divisible by {tp}')")
    return SplitProblem(
        "draft_vocab_size", draft_vocab, tp, False,
        f"draft_vocab_size {draft_vocab} does not divide by TP {tp}: vLLM pads the vocab-parallel lm_head to "
        f"{padded} rows ({padded // tp} per rank) and drops the padding from the logits before d2t maps them "
        f"(loads and runs)")


@rule("K304", "error",
      fix_availability=FixAvailability.NEVER,
      summary="The draft's attention heads, KV heads or draft vocabulary do not split over the tensor-parallel "
              "size it will run at (given with `--tp`/`--draft-tp`).",
      why="vLLM splits the draft's heads over `draft_tensor_parallel_size` (default: the target's TP; only 1 or "
          "the target's TP are accepted, config/speculative.py `_verify_and_get_draft_tp`). Heads that do not "
          "divide make the engine refuse to start (config/model.py `verify_with_parallel_config`, called for the "
          "draft in SpeculativeConfig); KV heads that neither divide the TP nor are divided by it fail an "
          "assertion in QKVParallelLinear while loading; fewer KV heads than ranks are replicated. The draft "
          "vocabulary itself need not divide: ParallelLMHead pads it to a multiple of 64 and the logits processor "
          "drops the padding, but the padded size must divide (VocabParallelEmbedding `divide(num_embeddings_padded, "
          "tp_size)` asserts), which it does at any TP that divides 64. Source: vLLM 0.32 config/speculative.py, config/model.py, "
          "model_executor/layers/linear.py, model_executor/layers/vocab_parallel_embedding.py.",
      fix="Not fixable by rewriting files: run the draft at a TP its heads divide by (`--draft-tp 1` keeps the "
          "draft on one rank), or use a draft trained with a head count that divides.",
      needs_target=False)
def tensor_parallel_split(ctx: Context) -> Iterator[Finding]:
    tp = ctx.decisions.tp
    if not tp or tp < 1:
        return
    dtp = draft_tp_in_effect(tp, ctx.decisions.draft_tp)
    bad_tp = draft_tp_problem(tp, ctx.decisions.draft_tp)
    if bad_tp:
        yield tensor_parallel_split.finding(
            bad_tp, evidence=[Evidence("--draft-tp", ctx.decisions.draft_tp, [1, tp])], fixable=False)
        return
    d = ctx.draft
    problems = head_problems("draft", d.num_attention_heads, d.num_key_value_heads, dtp, mla=d.layer_family == "mla")
    vp = vocab_problem(d.draft_vocab_size or d.vocab_size, dtp)
    if vp:
        problems.append(vp)
    for p in problems:
        yield tensor_parallel_split.finding(
            p.message, severity="error" if p.fatal else "info",
            evidence=[Evidence(p.where, p.value, f"divisible by draft TP {p.tp}")], fixable=False)


@rule("K305", "info",
      fix_availability=FixAvailability.NEVER,
      summary="A Llama-layer (non-MLA) draft next to an MLA target needs a non-MLA attention backend of its own: the "
              "finding names the engine's argument.",
      why="A draft layer with ordinary attention cannot run on an MLA kernel. SGLang runs a draft on the target's "
          "attention backends unless --speculative-draft-attention-backend names one "
          "(srt/model_executor/model_runner_components/attention_backend_setup.py resolve_attention_backend_strs); "
          "for an MLA target those are MLA kernels: trtllm_mla raises \"can only be used with MLA models\" "
          "(srt/layers/attention/attention_registry.py), and lightseekorg/kimi-k2.6-eagle3 next to Kimi-K2.6 on GB300 "
          "failed to start until --speculative-draft-attention-backend trtllm_mha was given (sglang #23490; sglang PR "
          "#20298's automatic fallback was closed unmerged); flashmla crashes at the draft's init (a public Kimi-K2.6 "
          "launch script records it). Hopper's default for MLA targets served such drafts (sglang PR #19689, H200). "
          "vLLM 0.32 gives the "
          "draft the target's --attention-backend when one is named, and an MLA backend on a non-MLA layer raises "
          "\"Selected backend ... is not valid\" (v1/attention/selector.py, vllm/platforms/cuda.py); "
          "speculative_config.attention_backend sets the draft's own (config/speculative.py "
          "_DRAFT_VLLM_CONFIG_OVERRIDES; vLLM PR #39126).",
      fix="Nothing in the files: it is a launch argument. Give the engine the draft's backend the finding names. "
          "Reported (info: the launch fails or not by GPU) where the engine's default runs the draft on the target's "
          "backends (SGLang); on vLLM, whose default picks a backend per layer, "
          "only a forced target backend needs speculative_config.attention_backend, and no finding is made.")
def draft_attention_backend(ctx: Context) -> Iterator[Finding]:
    if ctx.target is None or not ctx.target.is_mla or ctx.draft.layer_family == "mla":
        return
    how = ctx.engine.draft_attention
    if how is None:
        return
    inherits, arg = how
    if inherits != "always":
        # the engine picks a backend per layer unless one is forced for the target (vLLM): its default serves the
        # pair, and the argument for a forced backend is in the rule's text and docs/formats-and-engines.md
        return
    # info, not a defect of the files: whether the launch fails depends on the GPU (Hopper's default served such
    # drafts, sglang PR #19689; Blackwell's trtllm_mla did not, sglang #23490)
    # the message names the argument to give (issue #48: whole in a concise line); which backends fail and the
    # sources of the argument are its evidence
    options, sources = options_and_sources(arg)
    yield draft_attention_backend.finding(
        f"a {ctx.draft.layer_family} draft layer next to an MLA target: {ctx.engine.key} runs the draft on the "
        f"target's attention backends, and the MLA-only ones fail at draft load; give the draft its own: {options}",
        fixable=False,
        evidence=[Evidence("draft attention", f"{ctx.draft.layer_family} layer", "an MLA target's backend"),
                  Evidence("MLA-only backends", "trtllm_mla (chosen on Blackwell), cutedsl_mla, flashmla",
                           "fail at draft load"),
                  Evidence(f"{ctx.engine.key} draft backend", options, sources)])
