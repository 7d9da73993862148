"""Positions, rope and dtype."""
from __future__ import annotations

from typing import Any, Iterator

from kconvert.writer.ops import CastTensor, SetConfig
from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule

SAFETENSORS_TO_TORCH = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
TORCH_TO_SAFETENSORS = {v: k for k, v in SAFETENSORS_TO_TORCH.items()}


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


@rule("K901", "max-positions", "positions", "warning",
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


def _rope_kind(rs: Any) -> tuple[Any, Any]:
    if not isinstance(rs, dict):
        return (None, None)
    return (rs.get("rope_type") or rs.get("type"), rs.get("factor"))


@rule("K902", "rope", "rope", "warning",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="Rope settings differ from the target's, or `rope_scaling` and `rope_parameters` disagree.",
      why="The draft attends over the target's positions; a different rope_theta or a dropped yarn scaling "
          "(speculators PR #574: a converter dropped rope_scaling) rotates its queries differently from training "
          "on long inputs. transformers 5 reads rope_parameters, older code rope_scaling: both should say the same.",
      fix="With --rope-from-target, fix copies the target's rope_scaling into a draft that has none (when a "
          "converter dropped it). Never by default: a draft trained without scaling would change its math, and "
          "the files cannot tell which happened. A different rope_theta is reported, not changed.")
def rope(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    rs, rp = d.config.get("rope_scaling"), d.config.get("rope_parameters")
    t = ctx.target
    if t is not None:
        if d.config.get("rope_theta") is not None and t.rope_theta is not None and \
                float(d.config["rope_theta"]) != float(t.rope_theta):
            yield rope.finding(f"rope_theta {d.config['rope_theta']} != the target's {t.rope_theta}",
                               evidence=[Evidence("rope_theta", d.config["rope_theta"], t.rope_theta)])
        if t.rope_scaling and not rs and not (isinstance(rp, dict) and rp.get("factor")):
            restore = ctx.decisions.rope_from_target
            # The EAGLE reference trainer's config template (eagle/traineagle3/config.json) has no rope keys at all:
            # its drafts were trained with LlamaConfig's defaults, not stripped by a converter.
            if ("rope_scaling" in d.config or d.format.producer == "eagle") and not restore:
                # `rope_scaling: null` written out is the producer's statement (SpecForge's Kimi-K2.5 template,
                # configs/kimi-k25-eagle3.json); a key that is absent may have been dropped by a converter.
                stated = "states rope_scaling null" if "rope_scaling" in d.config else \
                    "comes from the EAGLE reference trainer, whose config has no rope_scaling"
                yield rope.finding(
                    f"the draft {stated}: it was trained without the target's "
                    f"{_rope_kind(t.rope_scaling)[0]} scaling, so positions past the original window are rotated "
                    "differently from the target (a training choice; kconvert keeps it)", severity="info",
                    evidence=[Evidence("rope_scaling", None, t.rope_scaling)])
            else:
                yield rope.finding(f"the target uses {_rope_kind(t.rope_scaling)[0]} rope scaling and the draft config "
                                   "has no rope_scaling key (dropped by a converter, or trained without it?)",
                                   evidence=[Evidence("rope_scaling", None, t.rope_scaling)],
                                   ops=[SetConfig(ctx.key_path("rope_scaling"), t.rope_scaling,
                                                  "--rope-from-target")] if restore else [],
                                   needs_decision=None if restore else "--rope-from-target (if a converter dropped it)")
        elif t.rope_scaling and rs and _rope_kind(rs) != _rope_kind(t.rope_scaling):
            yield rope.finding(f"rope scaling {_rope_kind(rs)} != the target's {_rope_kind(t.rope_scaling)}",
                               evidence=[Evidence("rope_scaling", rs, t.rope_scaling)])
    if isinstance(rs, dict) and isinstance(rp, dict) and rp.get("factor") is not None and \
            _rope_kind(rs) != _rope_kind(rp):
        yield rope.finding("rope_scaling and rope_parameters disagree",
                           evidence=[Evidence("rope_parameters", rp, rs)])


@rule("K911", "config-dtype", "dtype", "warning",
      fix_availability=FixAvailability.ALWAYS,
      summary="`torch_dtype` and `dtype` disagree, or disagree with the tensors.",
      why="transformers 5 reads `dtype`, older stacks `torch_dtype`; engines pick the model dtype from them when "
          "--dtype is auto (lightseekorg/kimi-k2.5-eagle3 ships torch_dtype float16 next to dtype bfloat16).",
      fix="fix sets both to the dtype the tensors are stored in (safe: no tensor changes).")
def config_dtype(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    dts = {k: v for k, v in d.tensor_dtypes.items() if k in SAFETENSORS_TO_TORCH}
    stored = SAFETENSORS_TO_TORCH[max(dts, key=dts.get)] if dts else None
    if ctx.decisions.cast_dtype in SAFETENSORS_TO_TORCH and dts:
        # With --cast the tensors fix writes are in the cast dtype (K912's ops); naming the pre-cast dtype left
        # an fp16 config over bf16 tensors, which the next fix then changed again (not idempotent).
        stored = SAFETENSORS_TO_TORCH[ctx.decisions.cast_dtype]
    vals = {k: v for k, v in (("torch_dtype", d.torch_dtype), ("dtype", d.dtype)) if v is not None}
    wrong = {k: v for k, v in vals.items() if stored and v != stored}
    if (len(set(vals.values())) > 1) or wrong:
        target_val = stored or d.dtype or d.torch_dtype
        yield config_dtype.finding(
            f"config dtypes {vals} disagree" + (f" with the stored tensors ({stored})" if wrong else ""),
            evidence=[Evidence(k, v, target_val) for k, v in vals.items()],
            ops=[SetConfig(ctx.key_path(k), target_val, "dtype of the stored tensors") for k in ("torch_dtype", "dtype")
                 if k in vals or k == "torch_dtype"])


@rule("K912", "tensor-dtype", "dtype", "warning",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="The draft's weights are stored in another float dtype than the target's, or in several.",
      why="An fp16 draft next to a bf16 target overflows where bf16 does not (sglang issue #3431); engines cast "
          "the draft to the model dtype at load, so fp32 only costs disk.",
      fix="fix casts the floating-point tensors when asked (--cast bf16|fp16|fp32); a cast is lossy from fp32 and "
          "between fp16 and bf16, so it is never done unasked.")
def tensor_dtype(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    floats = {k: v for k, v in d.tensor_dtypes.items() if k in SAFETENSORS_TO_TORCH}
    want = None
    if ctx.decisions.cast_dtype:
        want = ctx.decisions.cast_dtype
    elif ctx.target is not None and ctx.target.torch_dtype in TORCH_TO_SAFETENSORS:
        want = TORCH_TO_SAFETENSORS[ctx.target.torch_dtype]
    if not floats:
        return
    off = [k for k in floats if want and k != want]
    if not off and len(floats) <= 1:
        return
    ops = []
    if ctx.decisions.cast_dtype:
        ops = [CastTensor(raw, ctx.decisions.cast_dtype, "--cast") for c, raw in sorted(d.raw_names.items())
               if d.tensors[c].dtype in SAFETENSORS_TO_TORCH and d.tensors[c].dtype != ctx.decisions.cast_dtype]
    yield tensor_dtype.finding(
        f"weights stored as {', '.join(f'{k} x{v}' for k, v in floats.items())}"
        + (f"; the target is {SAFETENSORS_TO_TORCH.get(want, want)}" if want and not ctx.decisions.cast_dtype else ""),
        evidence=[Evidence("tensors", floats, want)], ops=ops,
        needs_decision=None if ops else "--cast bf16|fp16|fp32")
