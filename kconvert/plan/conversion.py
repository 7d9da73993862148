"""Plan steps that follow from the format asked for and the engine rather than from a defect: whole-format
conversion (speculators ↔ the flat SpecForge/vLLM layout) with the engine's tensor layout, and the vLLM-only key an
SGLang output drops. They apply to the config as the rules' ops left it."""
from __future__ import annotations

from typing import Any

from kconvert.engines.expectations import ENGINE_LABELS, EngineRules
from kconvert.errors import UsageError
from kconvert.formats import speculators
from kconvert.formats.aux import AUX_KEY, get_path
from kconvert.formats.layouts import renames
from kconvert.formats.model import DraftModel, KeyLayout
from kconvert.targets import TargetModel
from kconvert.writer.ops import DeleteConfig, Op, RenameTensor, SetConfig

FORMATS = ("flat", "speculators")


def wanted_format(draft: DraftModel, engine: EngineRules, to_format: str | None) -> str | None:
    """The format to write: the one asked for, else flat where the speculators format would not load as meant."""
    if to_format is not None:
        if to_format not in FORMATS:
            raise UsageError(f"--to-format {to_format!r}: choose flat or speculators")
        return to_format
    if draft.is_speculators and (not engine.reads_speculators_format or draft.layer_family == "mla"):
        # SGLang and tokenspeed do not read the speculators format, and vLLM builds a Llama or Qwen3 layer for a
        # speculators draft (configs/speculators/algos.py): an MLA layer must leave it for the flat layout, whose
        # architecture selects the MLA class.
        return "flat"
    return None


def conversion_ops(draft: DraftModel, engine: EngineRules, target: TargetModel | None, config: dict[str, Any],
                   rule_ops: list[Op], to_format: str | None) -> list[Op]:
    """The ops that turn `config` (the config after `rule_ops`) into the wanted format for `engine`, and rename the
    tensors into that format's layout (names a rule op already renames are left to it)."""
    want = wanted_format(draft, engine, to_format)
    ops: list[Op] = []
    layout: KeyLayout | None = None
    if want == "flat" and draft.is_speculators:
        new = speculators.to_flat(config, architecture=engine.preferred_arch.get(draft.layer_family,
                                                                                 "LlamaForCausalLMEagle3"))
        ops += diff_ops(config, new, "speculators -> flat layout")
        config, layout = new, engine.layout
    elif want == "speculators" and not engine.reads_speculators_format:
        # SGLang and tokenspeed do not read the speculators format (tokenspeed's config reader refuses a config
        # without a top-level model_type), and the step below deletes the top-level ids, the only place the
        # speculators format keeps them: the output would have lost its aux ids.
        raise UsageError(f"--to-format speculators: {ENGINE_LABELS[engine.engine]} does not read the speculators "
                         "format; use --engine vllm")
    elif want == "speculators" and not draft.is_speculators:
        if draft.layer_family == "mla":
            raise UsageError("--to-format speculators: vLLM reads Llama- and Qwen3-layer drafts in the speculators "
                             "format only (configs/speculators/algos.py)")
        new = speculators.to_speculators(config, verifier=target.name if target else None,
                                         verifier_architectures=target.architectures if target else None,
                                         layer=draft.layer_family)
        ops += diff_ops(config, new, "flat -> speculators layout")
        config, layout = new, speculators.LAYOUT
    if AUX_KEY in config and (AUX_KEY,) not in engine.aux_write_paths and (
            (AUX_KEY,) not in engine.aux_read_paths
            or any(isinstance(get_path(config, p), list) for p in engine.read_paths_for(config))):
        # The top-level key in vLLM's convention, where fix writes nothing for this row: SGLang never reads it;
        # tokenspeed reads it only without an eagle_config (execution/factory.py _eagle_aux_layer_ids), so it goes
        # once eagle_config holds the ids fix wrote in the row's numbering, where a stale copy would contradict them.
        ops.append(DeleteConfig((AUX_KEY,), f"vLLM-only key; {ENGINE_LABELS[engine.engine]} reads eagle_config"))
    if layout is not None:
        already = {o.old for o in rule_ops if isinstance(o, RenameTensor)}
        ops += [RenameTensor(old, new, f"{layout.name}.* layout") for old, new in renames(draft.raw_names, layout)
                if old not in already]
    return ops


def diff_ops(old: dict[str, Any], new: dict[str, Any], reason: str) -> list[Op]:
    """Top-level SetConfig/DeleteConfig ops turning `old` into `new` (for whole-config conversions)."""
    ops: list[Op] = [DeleteConfig((k,), reason) for k in old if k not in new]
    ops += [SetConfig((k,), v, reason) for k, v in new.items() if old.get(k, object()) != v]
    return ops
