"""Positions, rope and dtype."""
from __future__ import annotations

from typing import Any, Iterator

from kconvert.writer.ops import CastTensor, SetConfig
from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule

SAFETENSORS_TO_TORCH = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
TORCH_TO_SAFETENSORS = {v: k for k, v in SAFETENSORS_TO_TORCH.items()}


@rule("K901", "max-positions", "positions", "warning",
      fix_availability=FixAvailability.ALWAYS,
      summary="`max_position_embeddings` is below the target's.",
      why="A draft limited to fewer positions than the target fails or degrades on long prompts; vLLM raises it "
          "to the target's max length in recent versions only, SGLang does not (SpecForge issue #249: 2048 copied "
          "into a long-context draft).",
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
        yield max_positions.finding(
            f"{have}, below the target's {t.max_position_embeddings}"
            + ("; vLLM raises it to the target's" if ctx.engine.raises_max_positions else ""),
            severity="info" if ctx.engine.raises_max_positions else "warning",
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
