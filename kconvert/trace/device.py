"""torch's device and CPU threads for the commands that run torch (`score`, `trace`): `--device` and `--threads`
checked and applied the same way by both. Here, below kconvert.score, because the trace recorders use it too and
must not import kconvert.score.

torch is imported at module level: only code that knows torch is there imports this module.
"""
from __future__ import annotations

import torch

from kconvert.errors import UsageError


def set_threads(n: int | None) -> None:
    if n is None:
        return
    if n < 1:
        raise UsageError("--threads must be at least 1")
    torch.set_num_threads(n)


def resolve_device(name: str | None) -> torch.device:
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name!r}: cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no GPU is visible to torch")
    return dev

