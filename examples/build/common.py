"""Shared constants and helpers of the tiny-example build (no heavy imports at module level)."""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY = Path(os.environ.get("KCONVERT_TINY_DIR", REPO / "examples" / "tiny"))
TARGET_DIR = TINY / "target"
DRAFTS_DIR = TINY / "drafts"
BROKEN_DIR = TINY / "broken"
PROMPTS_DIR = REPO / "kconvert" / "prompts"
DEFAULT_WORK = Path(os.environ.get("KCONVERT_TINY_WORK", "/tmp/kconvert-tiny-build"))

# ---- target shape -------------------------------------------------------------------------------
NUM_LAYERS = 8
HIDDEN = 128
VOCAB = 512
# Attention heads of the target's MLA layers and of every draft: 8, so that the target, the drafts and the
# draft vocabulary (256) divide by every tensor-parallel size up to 8 (the seed deployment runs Kimi-K2.5 at TP=8).
NUM_HEADS = 8
# Head size of the Llama-layer drafts (vLLM's CPU attention needs head_dim >= 64: 16 fails).
LLAMA_HEAD_DIM = 64
# vLLM's input-of-layer convention: id k = residual stream entering layer k = HF hidden_states[k].
# vLLM's default for 8 layers is (2, 4, 5); these are deliberately different.
AUX_IDS_VLLM = [2, 5, 7]
# SpecForge writes output-of-layer ids (vLLM id - 1) for SGLang.
AUX_IDS_SPECFORGE = [k - 1 for k in AUX_IDS_VLLM]
DRAFT_VOCAB = 256

# Special tokens: ids 0..N-1 of the tokenizer, in this order.
SPECIAL_TOKENS = [
    "[BOS]", "[EOS]", "[PAD]", "[UNK]",
    "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
    "<|media_begin|>", "<|media_content|>", "<|media_end|>", "<|media_pad|>",
    "<|kimi_k25_video_placeholder|>",
]
TOK_ID = {t: i for i, t in enumerate(SPECIAL_TOKENS)}

# Kimi-like chat template: each role opens with its marker and the role name, then <|im_middle|>.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}<|im_system|>system<|im_middle|>"
    "{%- elif message['role'] == 'user' -%}<|im_user|>user<|im_middle|>"
    "{%- else -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
    "{{ message['content'] }}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
)


def render_prompt(prompt: str) -> str:
    """The chat template applied to one user message with the generation prompt (no jinja needed)."""
    return f"<|im_user|>user<|im_middle|>{prompt}<|im_end|><|im_assistant|>assistant<|im_middle|>"


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")


def verification_prompts() -> list[dict]:
    rows: list[dict] = []
    for name in ("math", "chat", "code"):
        rows += read_jsonl(PROMPTS_DIR / f"{name}.jsonl")
    return rows
