"""Target families an EAGLE-3 draft cannot serve as written (issue #49 item 5), as data.

Each row names the target by the `model_type` its config declares (top level or `text_config`), says per engine
what that engine's own code does when an EAGLE-3 draft is served next to it (read in vLLM 0.32.0 as installed,
in SGLang 0.5.23 as tests/sglang_oracle installs it and in tokenspeed 0.1.1 as tests/tokenspeed_oracle installs it)
and what does serve the target. The rule K108
(kconvert/rules/architecture.py) reads this table; a new family is a new row.

Severity per engine: "error" where the engine refuses the pair or the public record measured a collapse, "warning"
where it loads but a documented mismatch makes acceptance likely to suffer and nothing public measured it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EngineVerdict:
    severity: str  # "error" | "warning"
    what: str  # what the engine's code does with an EAGLE-3 draft next to this target, with its source


@dataclass(frozen=True)
class TargetFamily:
    name: str
    model_types: frozenset[str]
    why: str  # what makes the target different, with its source
    engines: dict[str, EngineVerdict]
    served_by: str  # what does serve it, with its source
    sources: tuple[str, ...] = field(default=())


FAMILIES: tuple[TargetFamily, ...] = (
    TargetFamily(
        name="GLM-5.3-Flash (glm5_next, manifold hyper-connections)",
        model_types=frozenset({"glm5_next", "glm5_next_text"}),
        why="its residual stream is hc_mult (4) copies wide (mHC), so a hidden state is not one hidden_size vector "
            "(sglang issue #36829: hidden 4096, 45 layers, hc_mult 4)",
        engines={
            "sglang": EngineVerdict(
                "error", "SGLang hands the EAGLE-3 draft the mHC-flattened aux states (hc_mult x hidden wide): the "
                         "fc width does not match, and with the load worked around acceptance stays about 1.0 "
                         "(sglang issue #36829)"),
            "vllm": EngineVerdict(
                "warning", "vLLM 0.32 captures aux states for it and contracts the hc_mult-wide stream back to "
                           "hidden_size (vllm/models/glm5next/common/model.py Glm5NextModel._aux_hidden_state, "
                           "hc_contract), so an fc built for 3 x hidden loads; no EAGLE-3 draft for it has a public "
                           "measurement"),
            "tokenspeed": EngineVerdict(
                "error", "tokenspeed 0.1.1's GLM-5.3-Flash model forward never reads layers_to_capture "
                         "(runtime/models/glm53_flash.py Glm53FlashModel.forward returns the final hidden state only, "
                         "for its MTP head): an EAGLE-3 draft gets no per-layer aux states "
                         "(tests/data/tokenspeed_oracle.json)"),
        },
        served_by="its own MTP layer: vLLM method mtp (config/speculative.py turns glm5_next into glm5_next_mtp); "
                  "SGLang --speculative-algorithm EAGLE with the checkpoint's NextN head (sglang PR #36544, the "
                  "GLM-5.3-Flash cookbook)",
    ),
    TargetFamily(
        name="Kimi-K3 (kimi_k3: KDA linear attention with NoPE MLA)",
        model_types=frozenset({"kimi_k3"}),
        why="its full-attention layers are MLA without rotary embeddings (vllm/models/kimi_k3/nvidia/model.py asserts "
            "\"Kimi-K3 MLA is NoPE-only\"); NVIDIA-NeMo/Automodel PR #3286: neither the dense EAGLE-3 draft nor the "
            "DeepSeek MLA draft (which always rotates its rope slice) can represent it",
        engines={
            "sglang": EngineVerdict(
                "error", "SGLang 0.5.23's Kimi-K3 model classes (srt/models/kimi_k3.py) implement DSpark and DFlash "
                         "capture but not set_eagle3_layers_to_capture, and EAGLE-3 aux capture raises \"does not "
                         "implement set_eagle3_layers_to_capture\" at startup "
                         "(srt/model_executor/model_runner_components/attention_backend_setup.py:55)"),
            "vllm": EngineVerdict(
                "warning", "vLLM 0.32 captures aux states for it (vllm/models/kimi_k3/nvidia/model.py "
                           "KimiLinearModel, SupportsEagle3), but its EAGLE-3 draft classes rotate the draft's "
                           "queries and keys: deepseek_eagle3.py / deepseek_v2.py never read mla_use_nope (which "
                           "TorchSpec's configs/draft_models/kimi_k3_eagle3_mla.json sets), and a Llama layer "
                           "always applies RoPE, so a draft trained NoPE is served rotated"),
            "tokenspeed": EngineVerdict(
                "warning", "tokenspeed 0.1.1 captures aux states for it, its ids read as completed-layer counts "
                           "(runtime/models/kimi_k3.py KimiLinearForCausalLM.set_eagle3_layers_to_capture), but its "
                           "two EAGLE-3 draft classes rotate the draft's queries and keys (a Llama layer's rope; "
                           "deepseek_v3.py's MLA draft builds DeepseekScalingRotaryEmbedding), so a draft trained "
                           "NoPE is served rotated"),
        },
        served_by="its MTP layer (vLLM method mtp: config/speculative.py turns kimi_k3 into kimi_k3_mtp) or a DSpark "
                  "drafter (vLLM 0.32 registry K3DSparkModel; SGLang 0.5.23 set_dspark_layers_to_capture; "
                  "InferenceX golden_al_distribution/README.md lists Kimi K3 DSpark curves)",
    ),
    TargetFamily(
        name="DeepSeek-V4.1 (deepseek_v41: DSpark stages under mtp.*)",
        model_types=frozenset({"deepseek_v41"}),
        why="its checkpoints ship DSpark stages under mtp.* (main_proj / markov_head / confidence_head) and no "
            "classic MTP or EAGLE-3 head (vLLM 0.32 config/speculative.py)",
        engines={
            "sglang": EngineVerdict(
                "error", "SGLang 0.5.23 runs it as DeepseekV4ForCausalLM (srt/configs/deepseek_v41.py), which "
                         "implements DSpark capture but not set_eagle3_layers_to_capture: EAGLE-3 aux capture "
                         "raises at startup (srt/model_executor/model_runner_components/attention_backend_setup.py:55)"),
            "vllm": EngineVerdict(
                "warning", "vLLM 0.32's DeepseekV41ForCausalLM declares the EAGLE-3 interface "
                           "(vllm/models/deepseek_v41/nvidia/model.py, SupportsEagle3), but no EAGLE-3 draft for "
                           "it has a public record; vLLM raises for method mtp on it (\"DeepSeek V4.1 has no "
                           "classic-MTP draft\", config/speculative.py)"),
            "tokenspeed": EngineVerdict(
                "error", "tokenspeed 0.1.1's DeepSeek-V4.1 model forward implements DSpark capture but never reads "
                         "layers_to_capture (runtime/models/deepseek_v41.py DeepseekV41Model.forward): an EAGLE-3 "
                         "draft gets no aux states (tests/data/tokenspeed_oracle.json)"),
        },
        served_by="its own DSpark stages: vLLM --speculative-config '{\"method\": \"dspark\", ...}' "
                  "(DSparkV41DraftModel, config/speculative.py); SGLang --speculative-algorithm DSPARK",
    ),
)


def family_of(target: Any) -> TargetFamily | None:
    """The row whose model types the target declares (its top-level or text model_type), None for any other."""
    if target is None:
        return None
    types = {t for t in (getattr(target, "model_type", None), getattr(target, "text_model_type", None)) if t}
    for fam in FAMILIES:
        if types & fam.model_types:
            return fam
    return None
