"""What a model's `config.json` holds that kconvert reads as numbers and names: the bounds of its sizes, and how its
`architectures` is read. One table and one reader, used where a config is read into kconvert's model of it (the
draft: `kconvert.formats.canonical.read_draft` and the producers' detection; the target:
`kconvert.targets.from_config`), before any size reaches a rule, a numpy mask or a write.

Sizes: a size far beyond any model (`vocab_size` 10^10 in a `--target`, which can be anyone's Hub repository) sized
a numpy mask (`t2d`, one byte per target id) and a write: 1e9 wrote a 1 GB tensor, 1e10 exited 70 ("Unable to
allocate"). Each size is bounded here, naming the key: exit 2, unreadable input. The bounds are generous: each is at
least 16 times the largest value of a public model (cited per row), so that no real config is refused and nothing
sized by one grows past a few hundred MB. A size of the wrong JSON type is the rules' to name (K303 for hidden_size,
K302 for the MLA ranks); here it is no size at all.

`architectures`: a list of class names (transformers' PretrainedConfig). A bare string is one name, as vLLM's
registry reads it (model_executor/models/registry.py, `inspect_model_cls`: `if isinstance(architectures, str):
architectures = [architectures]`), though vLLM's EAGLE-3 config iterates it character by character
(transformers_utils/configs/eagle.py), which K101 names. Read as absent, a SpecForge draft's bare
"LlamaForCausalLMEagle3" hid its producer: fix wrote the list, the output then read as SpecForge's, whose aux ids
convention differed, and fix failed its own self-check ("this is a kconvert bug").
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kconvert.errors import InputError

# key -> (smallest, largest). A size is bounded above so that nothing it sizes grows past a few hundred MB; below,
# only where it sizes an allocation itself (a vocabulary: the t2d mask, np.zeros(vocab_size), refuses a negative
# size with a ValueError); other non-positive sizes are the rules' to judge (K303 names hidden_size 0 or -64 and
# writes the fc layer's width). Sources of the largest public values: Llama 3.1 405B config.json (hidden_size 16384,
# intermediate_size 53248, num_hidden_layers 126, num_attention_heads 128), Gemma 3 (vocab_size 262144), Llama 4
# Scout (max_position_embeddings 10485760), DeepSeek-V3 (kv_lora_rank 512, q_lora_rank 1536, qk_rope_head_dim 64,
# qk_nope_head_dim 128, v_head_dim 128).
SIZE_BOUNDS: dict[str, tuple[int | None, int]] = {
    "vocab_size": (1, 1 << 24),  # the t2d mask fix writes holds one byte per target id: at most 16 MB
    "draft_vocab_size": (1, 1 << 24),
    "hidden_size": (None, 1 << 16),
    "target_hidden_size": (None, 1 << 16),
    "intermediate_size": (None, 1 << 20),
    "num_hidden_layers": (None, 1 << 12),
    "num_attention_heads": (None, 1 << 12),
    "num_key_value_heads": (None, 1 << 12),
    "head_dim": (None, 1 << 14),
    "max_position_embeddings": (None, 1 << 30),
    "kv_lora_rank": (None, 1 << 16),
    "q_lora_rank": (None, 1 << 16),
    "qk_rope_head_dim": (None, 1 << 14),
    "qk_nope_head_dim": (None, 1 << 14),
    "v_head_dim": (None, 1 << 14),
}
def config_architectures(cfg: Mapping[str, Any]) -> list[str]:
    """The class names `cfg`'s `architectures` gives: a list's strings, a bare string as one name (vLLM's registry),
    none otherwise."""
    v = cfg.get("architectures")
    if isinstance(v, str):
        return [v]
    return [a for a in v if isinstance(a, str)] if isinstance(v, list) else []


def check_sizes(cfg: Mapping[str, Any], where: str) -> None:
    """Refuse (InputError, exit 2) the first size of `cfg` outside its bounds (SIZE_BOUNDS); `where` names the
    file (and section) in the message."""
    for key, (lo, hi) in SIZE_BOUNDS.items():
        v = cfg.get(key)
        if not isinstance(v, int) or isinstance(v, bool):
            continue  # absent, or no integer: not a size (the rules name a wrong type)
        if v > hi:
            raise InputError(f"{where}: {key} = {v} is above {hi}, beyond any model (a value this size would size "
                             "kconvert's own allocations)")
        if lo is not None and v < lo:
            raise InputError(f"{where}: {key} = {v} is below {lo}: no vocabulary")


__all__ = ["SIZE_BOUNDS", "check_sizes", "config_architectures"]
