"""Dtype: the declared and the stored tensor dtypes."""
from __future__ import annotations

from typing import Iterator

from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule
from kconvert.writer.ops import CastTensor, SetConfig

SAFETENSORS_TO_TORCH = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


TORCH_TO_SAFETENSORS = {v: k for k, v in SAFETENSORS_TO_TORCH.items()}


@rule("K911", "warning",
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


@rule("K912", "warning",
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
