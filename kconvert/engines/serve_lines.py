"""The command lines that serve a target with an EAGLE-3 draft on vLLM and on SGLang, ready to paste.

Every argument is quoted with :func:`shlex.quote`, so paths with spaces and the JSON of vLLM's
``--speculative-config`` survive a POSIX shell. The aux-id note says where each engine reads the draft's
aux layer ids and in which numbering (docs/eagle3-facts.md section 4).
"""
from __future__ import annotations

import json
import shlex
from typing import Sequence

VLLM_AUX_NOTE = (
    "vLLM reads the aux layer ids from the draft's top-level `eagle_aux_hidden_state_layer_ids`, else "
    "`eagle_config.eagle_aux_hidden_state_layer_ids` (0.32 V1 runner; the V2 runner reads the top-level key or "
    "`eagle_config.layer_ids`); id k = the residual stream entering layer k (input-of-layer), no shift applied; "
    "default (2, L//2, L-3)."
)
SGLANG_AUX_NOTE = (
    "SGLang reads `eagle_config.eagle_aux_hidden_state_layer_ids` in the output-of-layer numbering: before "
    "sglang PR #25454 every explicit id gets +1; since then the +1 is applied only when the first id is 1, "
    "so which physical layers are read depends on the SGLang version."
)


def _join(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


def vllm_serve_argv(draft_ref: str, target_ref: str, *, k: int, tp: int, draft_tp: int | None = None) -> list[str]:
    spec: dict[str, object] = {"model": draft_ref, "method": "eagle3", "num_speculative_tokens": int(k)}
    if draft_tp is not None:
        spec["draft_tensor_parallel_size"] = int(draft_tp)
    return ["vllm", "serve", target_ref, "--tensor-parallel-size", str(int(tp)), "--speculative-config", json.dumps(spec)]


def sglang_launch_argv(draft_ref: str, target_ref: str, *, k: int, tp: int) -> list[str]:
    # topk 1 makes the draft a chain of k tokens, verified as k + 1 tokens (the chain plus the root): the
    # setting whose accept_length compares to vLLM's mean acceptance length at num_speculative_tokens = k.
    return [
        "python", "-m", "sglang.launch_server",
        "--model-path", target_ref,
        "--tp", str(int(tp)),
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", draft_ref,
        "--speculative-num-steps", str(int(k)),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(int(k) + 1),
    ]


def serve_lines(
    draft_ref: str,
    target_ref: str,
    *,
    k: int,
    tp: int,
    draft_tp: int | None = None,
    engine_aux_note: bool = True,
) -> dict[str, str]:
    """``{"vllm": ..., "sglang": ...}`` command lines, plus ``vllm_aux_ids`` / ``sglang_aux_ids`` notes when
    ``engine_aux_note`` is true.

    ``draft_ref``/``target_ref`` are hub ids (``org/name``) or local paths, passed as given. ``draft_tp``
    sets vLLM's ``draft_tensor_parallel_size`` (omitted: vLLM uses the target's); SGLang has no separate
    draft TP. Raises ``ValueError`` for k or tp below 1.
    """
    if int(k) < 1 or int(tp) < 1 or (draft_tp is not None and int(draft_tp) < 1):
        raise ValueError("k, tp and draft_tp must be at least 1")
    out = {
        "vllm": _join(vllm_serve_argv(draft_ref, target_ref, k=k, tp=tp, draft_tp=draft_tp)),
        "sglang": _join(sglang_launch_argv(draft_ref, target_ref, k=k, tp=tp)),
    }
    if engine_aux_note:
        out["vllm_aux_ids"] = VLLM_AUX_NOTE
        out["sglang_aux_ids"] = SGLANG_AUX_NOTE
    return out
