"""Which parts of a target the engine loads only with --trust-remote-code (issue #46: Kimi-K2.x targets).

Read in vLLM 0.32.0 (installed, with transformers 5.19) and checked by running its own loaders on replicas of the
Kimi files (tests/test_remote_code.py):

- the tokenizer: vLLM loads it with transformers' AutoTokenizer (vllm/tokenizers/hf.py CachedHfTokenizer), which runs a
  class that tokenizer_config.json names by `auto_map` (Kimi-K2 and K2.5: tokenization_kimi.TikTokenTokenizer)
  only with trust_remote_code; without it transformers 5.19 falls back to its generic TokenizersBackend, which
  cannot build Kimi's tiktoken vocabulary ("Couldn't instantiate the backend tokenizer", measured);
- the config: a config.json `auto_map` AutoConfig is run only where vLLM has no class of its own for the model type
  (transformers_utils/config.py HFConfigParser: a type in _CONFIG_REGISTRY is "not considered remote code
  anymore"): vLLM registers kimi_k2 (DeepseekV3Config) and kimi_k25 (Kimi_K25Config), so Kimi's configuration_*.py
  never runs;
- the model code (`auto_map` AutoModel...): vLLM builds the model from its own registry by architecture and never
  imports the repository's modeling file.

Pure: reads the TargetModel kconvert.targets built.
"""
from __future__ import annotations

from typing import Any

# Model types vLLM 0.32-0.34 give a config class of their own (transformers_utils/config.py _CONFIG_REGISTRY), so a
# config.json auto_map of theirs is never run. A subset: the Kimi and DeepSeek types kconvert's targets use
# (tests/test_remote_code.py checks each is registered in every release).
VLLM_OWN_CONFIG_TYPES = frozenset({"kimi_k2", "kimi_k25", "kimi_linear", "kimi_vl", "kimi_k3", "deepseek_v32"})


def _tokenizer_class(auto_map: Any) -> str | None:
    """The class an AutoTokenizer auto_map names (a dict's "AutoTokenizer" or the legacy list; fast class first,
    as transformers 5 prefers it: models/auto/tokenization_auto.py)."""
    ref = auto_map.get("AutoTokenizer") if isinstance(auto_map, dict) else auto_map
    if isinstance(ref, str):
        return ref
    if isinstance(ref, (list, tuple)):
        named = [r for r in ref if isinstance(r, str)]
        return named[-1] if named else None
    return None


def remote_code_parts(target: Any) -> list[str]:
    """What of `target` (a kconvert.targets.TargetModel) the engine runs from the target's repository, each with
    the file that names it; [] when it needs no remote code."""
    maps = getattr(target, "auto_maps", None) or {}
    parts = []
    tok = _tokenizer_class(maps.get("tokenizer_config.json"))
    if tok:
        parts.append(f"its tokenizer {tok}, named by tokenizer_config.json auto_map")
    cfg = maps.get("config.json")
    model_type = getattr(target, "model_type", None)
    if isinstance(cfg, dict) and isinstance(cfg.get("AutoConfig"), str) and model_type not in VLLM_OWN_CONFIG_TYPES:
        parts.append(f"its config class {cfg['AutoConfig']}, named by config.json auto_map")
    if not parts and getattr(target, "remote_code", False):
        # a built-in profile that says so without naming the file (its config.json was not readable when written)
        parts.append("code in its repository (its profile says remote_code; which file names it was not read)")
    return parts


__all__ = ["VLLM_OWN_CONFIG_TYPES", "remote_code_parts"]
