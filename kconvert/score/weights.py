"""A draft's weights for scoring: each tensor read by byte range (kconvert.source.tensor_read) from its validated
header in the compute dtype, once, and shared by every reading tried (WeightCache); the compute dtype; the full
lm_head of another folder (--lm-head-from).
"""
from __future__ import annotations

from typing import Any, Callable

from kconvert.errors import InputError, UsageError
from kconvert.formats.model import DraftModel
from kconvert.trace.format import Trace

import torch  # noqa: E402  (imported by kconvert.score only once torch is known to be there)

from kconvert.score.draft import DTYPES  # noqa: E402
from kconvert.source.tensor_read import read_span  # noqa: E402


def read_tensor(d: DraftModel, raw_name: str, as_dtype: torch.dtype | None = None) -> torch.Tensor:
    """One tensor of the draft by byte range from its validated header (never the whole file); a floating one in
    `as_dtype` when given."""
    ck = d.checkpoint
    info = ck.tensors.get(raw_name)
    if info is None:
        raise InputError(f"{raw_name}: not in the draft's files")
    p = ck.local_path(info.file)
    if p is None:
        raise UsageError(f"{ck.ref}: score needs the draft's weights on disk ({info.file} is not local); "
                         "download the draft first")
    return read_span(p, info, as_dtype=as_dtype)



def layer_raw_name(d: DraftModel, canonical: str) -> str | None:
    """The file's name for a canonical tensor, layers past the first included (multi-layer drafts)."""
    if canonical in d.raw_names:
        return d.raw_names[canonical]
    if canonical.startswith("layers."):
        _, idx, rest = canonical.split(".", 2)
        for cand in (f"{d.key_layout.prefix}layers.{idx}.{rest}", f"layers.{idx}.{rest}",
                     f"{d.key_layout.prefix}midlayers.{idx}.{rest}"):
            if cand in d.checkpoint.tensors:
                return cand
    return None


class WeightCache:
    """The draft's weights in the compute dtype, read once and shared by every reading tried."""

    def __init__(self, d: DraftModel, dtype: torch.dtype, device: torch.device):
        self.d = d
        self.dtype = dtype
        self.device = device
        self._t: dict[str, torch.Tensor] = {}
        self.bytes_read = 0

    def get(self, canonical: str, *, float_: bool = True) -> torch.Tensor | None:
        if canonical not in self._t:
            raw = layer_raw_name(self.d, canonical)
            if raw is None:
                return None
            t = read_tensor(self.d, raw, as_dtype=self.dtype if float_ else None)
            self.bytes_read += self.d.checkpoint.tensors[raw].nbytes
            self._t[canonical] = t.to(self.device, self.dtype) if float_ and t.is_floating_point() else t
        return self._t[canonical]


def resolve_dtype(name: str | None, trace: Trace) -> torch.dtype:
    key = name or trace.meta.dtype
    if key not in DTYPES:
        raise UsageError(f"--dtype {key!r}: choose bfloat16, float16 or float32")
    return DTYPES[key]


def lm_head_loader() -> Callable[[str], Any]:
    """Full-vocabulary lm_head weights by draft folder (--lm-head-from), each read once."""
    cache: dict[str, Any] = {}

    def load(path: str):
        if path not in cache:
            from kconvert.formats.canonical import read_draft
            from kconvert.commands.inspect import open_draft

            src = read_draft(open_draft(path))
            if "lm_head.weight" not in src.raw_names:
                raise UsageError(f"--lm-head-from {path}: no lm_head.weight there")
            cache[path] = read_tensor(src, src.raw_names["lm_head.weight"])
        return cache[path]

    return load
