"""The two RoPE schemas of a config.json, and how each engine row reads a draft's or a target's rope from them.

transformers 5 writes `rope_parameters` (`{"rope_type", "factor", "rope_theta", ...}`) and drops the top-level
`rope_theta`; transformers 4 stacks write and read `rope_scaling` plus a top-level `rope_theta` (SpecForge #742,
speculators #921; transformers 5 moved `rope_theta` under `rope_parameters`: NVIDIA-NeMo/Automodel PR #2920,
deepspeedai/DeepSpeed PR #8345). An engine row names the schema its config loader applies (`EngineRules.rope_schema`);
`read_rope` answers what that loader makes of one config, so the rules compare readings, never raw keys.

How transformers 5.19 builds `rope_parameters` (vLLM 0.32/0.33 pin transformers >=5.16.1,<5.20/5.21, SGLang 0.5.23
pins ==5.19.0; each engine's model code reads `config.rope_parameters`: vLLM transformers_utils/config.py
patch_rope_parameters -> PreTrainedConfig.standardize_rope_params, SGLang srt/models/llama_eagle3.py:132 and
deepseek_v2.py:2605) was measured by loading configs through `AutoConfig.from_pretrained` and vLLM 0.32's own
`get_config` (tests/test_rules_rope.py runs the same check against the installed transformers):
- a non-empty `rope_scaling` dict in config.json replaces `rope_parameters` whole: its type and factor, and its
  base from itself or the top-level `rope_theta` (never `rope_parameters.rope_theta`); `rope_scaling: null` does not;
- else `rope_parameters`, whose `rope_theta` wins over a top-level `rope_theta`;
- no base anywhere: the class default (10000 for Llama and DeepSeek-V3 configs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

DEFAULT_THETA = 10000.0  # LlamaConfig / DeepseekV3Config's default base, in transformers 4 and 5 alike


@dataclass(frozen=True)
class RopeSchema:
    name: str
    # (config key, where the base is read when that key's dict is used): the first key holding a non-empty dict
    # supplies the rope type and factor, and its base comes from the first number found on its paths
    sources: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]
    # where the base is read when no source dict is present
    bare_theta: tuple[tuple[str, ...], ...]
    source: str


SCHEMAS: dict[str, RopeSchema] = {
    "transformers5": RopeSchema(
        name="transformers 5 (rope_parameters)",
        sources=(("rope_scaling", (("rope_scaling", "rope_theta"), ("rope_theta",))),
                 ("rope_parameters", (("rope_parameters", "rope_theta"), ("rope_theta",)))),
        bare_theta=(("rope_theta",),),
        source="transformers 5.19 PreTrainedConfig.standardize_rope_params as vLLM 0.32 "
               "(transformers_utils/config.py patch_rope_parameters) and SGLang 0.5.23 (srt/models/llama_eagle3.py:132, "
               "deepseek_v2.py:2605) load a config: a rope_scaling dict replaces rope_parameters whole (its base from "
               "itself or the top-level rope_theta); else rope_parameters, whose rope_theta overrides a top-level one"),
    "transformers4": RopeSchema(
        name="transformers 4 (rope_scaling + rope_theta)",
        sources=(("rope_scaling", (("rope_theta",),)),),
        bare_theta=(("rope_theta",),),
        source="transformers 4.x LlamaConfig / DeepseekV3Config: rope_scaling and a top-level rope_theta, "
               "rope_parameters unknown (SpecForge #742, speculators #921)"),
}
# The stacks the engine rows do not cover but a draft meets on its way: trainers and converters on transformers 4
# (SpecForge 0.2, speculators before #921) read a draft the old way.
OLDER_STACKS = "transformers4"


@dataclass(frozen=True)
class RopeReading:
    rope_type: str
    factor: float | None
    theta: float
    theta_from: str  # the key path the base came from, or "class default"

    def label(self) -> str:
        scaling = self.rope_type if self.factor is None else f"{self.rope_type} x{self.factor:g}"
        return f"{scaling}, rope_theta {self.theta:g}" + (" (class default)" if self.theta_from == "class default"
                                                         else "")

    def same(self, other: RopeReading) -> bool:
        return (self.rope_type, self.factor, self.theta) == (other.rope_type, other.factor, other.theta)


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _first_number(cfg: Mapping[str, Any], paths: tuple[tuple[str, ...], ...]) -> tuple[float, str] | None:
    for path in paths:
        v: Any = cfg
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if (n := _number(v)) is not None:
            return n, ".".join(path)
    return None


def read_rope(cfg: Mapping[str, Any], schema: str | RopeSchema) -> RopeReading:
    """What a loader applying `schema` makes of a config's rope: type, factor and base."""
    s = SCHEMAS[schema] if isinstance(schema, str) else schema
    rope_type, factor, theta_paths = "default", None, s.bare_theta
    for key, paths in s.sources:
        d = cfg.get(key)
        if isinstance(d, dict) and d:
            rope_type = str(d.get("rope_type") or d.get("type") or "default")
            factor = _number(d.get("factor"))
            theta_paths = paths
            break
    found = _first_number(cfg, theta_paths)
    if found is None:
        return RopeReading(rope_type, factor, DEFAULT_THETA, "class default")
    return RopeReading(rope_type, factor, found[0], found[1])


def schemas_present(cfg: Mapping[str, Any]) -> list[str]:
    """Which schemas' keys a config writes: the new `rope_parameters`, the old `rope_scaling`/`rope_theta`."""
    out = []
    if isinstance(cfg.get("rope_parameters"), dict) and cfg["rope_parameters"]:
        out.append("rope_parameters")
    if (isinstance(cfg.get("rope_scaling"), dict) and cfg["rope_scaling"]) or _number(cfg.get("rope_theta")) is not None:
        out.append("rope_scaling/rope_theta")
    return out
