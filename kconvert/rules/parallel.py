"""Tensor-parallel rules: whether the draft (and its target) split the way the engine splits them at the TP the
user will run (`verify --tp/--draft-tp`, `inspect --tp`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule

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


@rule("K304", "tensor-parallel-split", "attention", "error",
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
