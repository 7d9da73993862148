"""The file names and suffixes every stage agrees on: one definition, imported by source, writer and hub.

Two lists that drifted apart made kconvert contradict itself: `.pickle` was a pickle to the push gate but not to
the reader, so inspect never flagged an `optimizer.pickle`, fix copied it into its output, and push then refused
the folder fix had written.
"""
from __future__ import annotations

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
PROVENANCE_NAME = "kconvert.json"
README_NAME = "README.md"  # the model card on the Hub
SAFETENSORS_SUFFIX = ".safetensors"

# Files that carry pickle bytes. torch.save writes a zip whose data.pkl is a pickle (.bin/.pt/.pth/.ckpt, and
# whatever a trainer names its optimizer or RNG state); plain pickles are .pkl/.pickle. kconvert never loads
# them, fix does not copy them, push refuses them. Compared case-insensitively.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")

# The PyTorch zip checkpoints a static reader may describe (`kconvert.source.torch_zip`): the weight files
# engines load in place of safetensors (vLLM falls back to *.bin/*.pt when no safetensors file is present).
TORCH_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth")
TORCH_INDEX_NAME = "pytorch_model.bin.index.json"

TOKENIZER_FILES = frozenset({
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "tiktoken.model", "chat_template.jinja", "generation_config.json",
})


def is_pickle(name: str) -> bool:
    return name.lower().endswith(PICKLE_SUFFIXES)


# Pickles beside a draft that are no weights: a trainer's optimizer, scheduler, RNG and argument state, and NeMo
# Automodel's vocabulary records (train_eagle3.py _save_extra_state: eagle_meta.pt, earlier eagle3_meta.pt; its
# serve_sglang.py _regenerate_token_map: speculative_token_map.pt, SGLang's --speculative-token-map).
NOT_WEIGHTS = ("optimizer", "scheduler", "rng_state", "training_args", "eagle_meta", "eagle3_meta",
               "speculative_token_map")


def is_torch_weights(name: str) -> bool:
    """A file an engine would load as PyTorch weights (not optimizer state, which is pickle all the same)."""
    base = name.rsplit("/", 1)[-1].lower()
    return base.endswith(TORCH_WEIGHT_SUFFIXES) and not base.startswith(NOT_WEIGHTS)


__all__ = ["CONFIG_NAME", "INDEX_NAME", "NOT_WEIGHTS", "PICKLE_SUFFIXES", "PROVENANCE_NAME", "README_NAME", "SAFETENSORS_SUFFIX",
           "TOKENIZER_FILES", "TORCH_INDEX_NAME", "TORCH_WEIGHT_SUFFIXES", "is_pickle", "is_torch_weights"]
