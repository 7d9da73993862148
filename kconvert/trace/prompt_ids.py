"""The token ids a trace is recorded from: the prompt set rendered as the live engine renders it
(kconvert.runners.vllm_worker.render_prompts: the tokenizer's chat template with the generation prompt, encoded
without special tokens), or given continuations (token ids an engine produced) to teacher-force, with the prompt
set's record for trace.json.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kconvert.errors import InputError, UsageError
from kconvert.trace.request import TraceRequest


def render_prompts(tokenizer: Any, prompts: list[str], chat_template: bool | None) -> tuple[list[list[int]], bool]:
    from kconvert.runners.vllm_worker import render_prompts as render

    try:
        return render(tokenizer, prompts, chat_template)
    except ValueError as e:
        raise UsageError(str(e)) from None


@dataclass
class PromptInputs:
    """The token ids to record from: rendered prompts (and given continuations), and the prompt set's record."""

    prompt_ids: list[list[int]]
    given: list[list[int]] | None
    prompt_set: dict[str, Any]


def prompt_inputs(req: TraceRequest, tokenizer: Any, V: int) -> PromptInputs:
    if req.continuations is not None:
        items = req.continuations
        set_name = Path(req.continuations_from).stem if req.continuations_from else "given"
        prompt_ids = [list(map(int, it["prompt_token_ids"])) for it in items]
        given = [list(map(int, it["output_token_ids"])) for it in items]
        applied = bool(items and items[0].get("chat_template_applied", False))
        digest = hashlib.sha256(json.dumps([prompt_ids, given]).encode()).hexdigest()
    else:
        from kconvert.prompts import load_prompts

        set_name, prompts = load_prompts(req.prompts)
        prompts = prompts[: req.max_prompts or None]
        prompt_ids, applied = render_prompts(tokenizer, prompts, req.chat_template)
        given = None
        digest = hashlib.sha256("\n".join(prompts).encode()).hexdigest()
    for seq in prompt_ids + (given or []):
        if any(not 0 <= i < V for i in seq):
            raise InputError(f"token ids outside the target vocabulary 0..{V - 1}")
    return PromptInputs(prompt_ids, given, {"name": set_name, "num_prompts": len(prompt_ids), "sha256": digest,
                                            "chat_template_applied": applied})
