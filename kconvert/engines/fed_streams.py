"""Which target streams an engine feeds a draft: the aux ids its config declares (the first of the engine's read
paths that holds a list) in the engine's numbering, or the engine's defaults. Shared by `score` (the reading it
scores) and `trace --for-drafts` (the only layers to record), so it sits with the engine's other facts.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kconvert.engines.expectations import EngineRules
from kconvert.formats.aux import get_path

if TYPE_CHECKING:
    from kconvert.formats.model import DraftModel


def declared_ids(d: "DraftModel | Any", engine: EngineRules) -> list[int] | None:
    """The ids the engine reads from the config (first path that holds a list wins)."""
    for path in engine.read_paths_for(d.config):
        v = get_path(d.config, path)
        if isinstance(v, list) and v and all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            return list(v)
    return None


def fed_ids(d: "DraftModel | Any", engine: EngineRules, num_target_layers: int,
            target: Any = None) -> tuple[tuple[int, ...], str | None]:
    """(the physical streams the engine feeds the draft, input-of-layer numbering, in the order fc reads them; a
    note when they are the engine's defaults because the config declares none). `target`: the target's facts,
    where the engine's reading depends on its family (SGLang's first-id rule holds on DeepSeek/Kimi targets only,
    `EngineRules.aux_rule_for`); without it, a Llama-style target of `num_target_layers` layers, since a reading
    can depend on the layer count (tokenspeed's id L)."""
    from types import SimpleNamespace

    note = None
    ids = declared_ids(d, engine)
    if ids is None:
        fed = engine.default_physical_ids(num_target_layers)
        note = f"no aux ids in the config: the engine feeds its defaults {fed}"
    else:
        fed = engine.physical_ids(ids, target if target is not None else SimpleNamespace(
            num_hidden_layers=num_target_layers, model_type=None, text_model_type=None, mla=None))
    # vLLM collects the aux states layer by layer (`set_aux_hidden_state_layers`: sorted(set(ids))), so fc
    # always sees them in layer order, whatever order the config lists them in.
    return (tuple(sorted(set(fed))) if engine.engine == "vllm" else tuple(fed)), note
