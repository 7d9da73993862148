"""`kconvert fix --from-pickle`: PyTorch weight files -> safetensors, only when asked.

The bytes go through `torch.load(weights_only=True)`, torch's own restricted unpickler, which rebuilds tensors and
refuses any other global. kconvert first reads every file statically (kconvert.source.torch_zip: the same checks
inspect made, so a file with a foreign global never reaches torch.load at all) and afterwards requires torch to
have produced exactly the tensors the static reading described (names, dtypes, shapes). torch is not a dependency
of kconvert's core install: it is imported here only, and its absence is a one-line usage error.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from kconvert.errors import InputError, MissingPackageError, UsageError
from kconvert.source.checkpoint import Checkpoint, sha256_file
from kconvert.source.names import INDEX_NAME, TORCH_INDEX_NAME, is_pickle

_TORCH_DTYPES = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                 "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def _torch():
    try:  # deferred: torch (~0.8 s) only for a --from-pickle conversion
        import torch
        from safetensors.torch import save_file
    except ImportError:
        raise MissingPackageError("fix --from-pickle", "torch", "pickle") from None
    return torch, save_file


def convert_to_safetensors(ckpt: Checkpoint, dest: Path) -> dict[str, Any]:
    """Write `ckpt`'s PyTorch weights as safetensors into the empty folder `dest`, with its other files (config,
    tokenizer; no pickle) copied as bytes. Returns the provenance of the conversion."""
    if not ckpt.torch_files or ckpt.root is None:
        raise UsageError(f"--from-pickle: {ckpt.ref} holds no PyTorch weight file kconvert reads")
    torch, save_file = _torch()
    by_file: dict[str, dict[str, Any]] = {}
    for name, info in ckpt.tensors.items():
        by_file.setdefault(info.file, {})[name] = info
    n = len(ckpt.torch_files)
    out_names = {f: ("model.safetensors" if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors")
                 for i, f in enumerate(ckpt.torch_files)}
    weight_map: dict[str, str] = {}
    record: dict[str, Any] = {}
    for rel in ckpt.torch_files:
        path = ckpt.root / rel
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as e:  # noqa: BLE001 - torch raises many types; every one is a refusal of this file
            raise InputError(f"{rel}: torch.load(weights_only=True) refused it: {str(e).splitlines()[0][:200]}",
                             ) from None
        described = by_file.get(rel, {})
        if not isinstance(state, dict) or set(k for k, v in state.items() if torch.is_tensor(v)) != set(described):
            raise InputError(f"{rel}: torch.load returned other tensors than the static reading described; "
                             "refused")
        tensors = {}
        for name, info in described.items():
            t = state[name]
            if str(t.dtype).replace("torch.", "") != _TORCH_DTYPES.get(info.dtype) or tuple(t.shape) != info.shape:
                raise InputError(f"{rel} [{name}]: torch.load gave {t.dtype} {list(t.shape)}, the static reading "
                                 f"{info.dtype} {list(info.shape)}; refused")
            # A fresh contiguous copy: safetensors refuses views and tensors that share storage.
            tensors[name] = t.detach().contiguous().clone()
            weight_map[name] = out_names[rel]
        save_file(tensors, str(dest / out_names[rel]), metadata={"format": "pt"})
        record[rel] = {"sha256": sha256_file(path), "to": out_names[rel], "tensors": len(tensors)}
        del state, tensors
    if n > 1:
        (dest / INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    for rel in sorted(ckpt.files):
        if is_pickle(rel) or rel == TORCH_INDEX_NAME:
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        src = ckpt.root / rel
        try:
            os.link(src, dest / rel)
        except OSError:
            shutil.copyfile(src, dest / rel)
    return {"converted_from_pickle": record, "through": f"torch.load(weights_only=True), torch {torch.__version__}"}
