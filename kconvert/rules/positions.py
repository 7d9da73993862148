"""Positions: the context length the draft is served at."""
from __future__ import annotations

from typing import Any, Iterator

from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule
from kconvert.writer.ops import SetConfig


def rope_types(cfg: dict[str, Any]) -> set[str]:
    """The draft's rope types, as vLLM 0.33 transformers_utils/config.py iter_rope_parameters yields them (one per
    layer type when nested); "default" when none is set."""
    layer = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else cfg
    rp, rs = layer.get("rope_parameters"), layer.get("rope_scaling")
    src = rp if isinstance(rp, dict) and rp else rs
    if not isinstance(src, dict) or not src:
        return {"default"}
    parts = [v for v in src.values() if v] if all(isinstance(v, dict) for v in src.values()) else [src]
    return {p.get("rope_type") or p.get("type") or "default" for p in parts}


# max_position_embeddings of the config class a draft's model_type builds when the key is absent (transformers
# 5.19 LlamaConfig, DeepseekV3Config, DeepseekV2Config, Qwen3Config; vLLM transformers_utils/config.py maps kimi_k2 to
# DeepseekV3Config). Recorded: zoo/lightseekorg_kimi_k25_eagle3_mla (no key, kimi_k2) reads 4096 in vLLM 0.32/0.33.
CLASS_DEFAULT_POSITIONS = {"llama": 2048, "deepseek_v3": 4096, "kimi_k2": 4096, "deepseek_v2": 2048, "qwen3": 32768}


def effective_positions(cfg: dict[str, Any], declared: int | None) -> int | None:
    """The draft's max_position_embeddings as its config class reads it: the declared value, else the class's
    default (None when kconvert does not know the class)."""
    if declared is not None:
        return declared
    layer = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else cfg
    return CLASS_DEFAULT_POSITIONS.get(layer.get("model_type") or "llama")


def vllm_positions(engine: Any, cfg: dict[str, Any], draft_positions: int | None,
                   target_len: int) -> tuple[int | None, int, bool]:
    """What a vLLM row does with a draft's max_position_embeddings next to a target served at target_len:
    (the draft's positions after vLLM's adjustment, the served max_model_len, raised?).
    config/speculative.py _maybe_override_draft_max_position_embeddings (0.32: any draft below the target's;
    0.33: only when every rope type is cache-only) and, 0.33 Model Runner V2, config/vllm.py
    _limit_max_model_len_to_draft (the served length lowered to the draft's when it was not raised)."""
    draft_positions = effective_positions(cfg, draft_positions)
    if not engine.raises_max_positions or (draft_positions is not None and draft_positions >= target_len):
        return draft_positions, target_len, False
    # an absent key reads as the config class's default, below any target kconvert ships
    allowed = engine.raises_max_positions_rope
    if allowed is None or rope_types(cfg) <= allowed:
        return target_len, target_len, True
    limited = engine.limits_served_to_draft and draft_positions is not None
    return draft_positions, (draft_positions if limited else target_len), False


@rule("K901", "warning",
      fix_availability=FixAvailability.ALWAYS,
      summary="`max_position_embeddings` is below the target's.",
      why="A draft limited to fewer positions than the target fails or degrades on long prompts; SGLang does not "
          "raise it (SpecForge issue #249: 2048 copied into a long-context draft). vLLM 0.32 raises it to the "
          "target's max_model_len (config/speculative.py _maybe_override_draft_max_position_embeddings); vLLM 0.33 "
          "only when every rope type is cache-only (default, linear, llama3, ntk, proportional: "
          "_CACHE_ONLY_ROPE_TYPES), and otherwise Model Runner V2 lowers the served max_model_len to the draft's "
          "(config/vllm.py _limit_max_model_len_to_draft), as vLLM 0.33's own code answered when run on the "
          "project's drafts.",
      fix="fix sets it to the target's (safe: rope scaling, not this number, shapes the positions).",
      needs_target=True)
def max_positions(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    t = ctx.target
    if t is None or t.max_position_embeddings is None:
        return
    if d.max_position_embeddings is None or d.max_position_embeddings < t.max_position_embeddings:
        # An absent key reads as the config class's default (LlamaConfig 2048, DeepseekV3Config 4096), not None.
        have = ("max_position_embeddings is not set (the config class's default applies)"
                if d.max_position_embeddings is None else f"max_position_embeddings {d.max_position_embeddings}")
        _, served, raised = vllm_positions(ctx.engine, d.config, d.max_position_embeddings,
                                           t.max_position_embeddings)
        if raised:
            tail = "; vLLM raises it to the target's"
        elif ctx.engine.raises_max_positions and effective_positions(d.config, d.max_position_embeddings):
            kinds = "/".join(sorted(rope_types(d.config)))
            tail = (f"; vLLM {ctx.engine.version} does not raise it for {kinds} rope"
                    + (f" and serves at most {served} tokens (the draft's)" if served < t.max_position_embeddings
                       else ""))
        else:
            tail = ""
        yield max_positions.finding(
            f"{have}, below the target's {t.max_position_embeddings}" + tail,
            severity="info" if raised else "warning",
            evidence=[Evidence("max_position_embeddings", d.max_position_embeddings, t.max_position_embeddings)],
            ops=[SetConfig(ctx.key_path("max_position_embeddings"), t.max_position_embeddings, "target's maximum")])
