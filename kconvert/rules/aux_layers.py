"""Aux layer ids: presence, range, duplicates, count, and the convention they are written in."""
from __future__ import annotations

from typing import Iterator

from kconvert.plan.ops import SetConfig
from kconvert.rules.base import Context, Evidence, Finding, rule

DECIDE_IDS = "--aux-ids L1,L2,L3 (layers in vLLM's input-of-layer numbering) or --aux-ids default"
DECIDE_CONV = "--aux-convention input|output (which convention the ids were trained in)"


def written_convention(ctx: Context) -> str | None:
    return ctx.options.aux_convention or ctx.draft.aux.convention


def physical_ids(ctx: Context) -> list[int] | None:
    """The residual streams the draft was trained on, in vLLM's input-of-layer numbering, if known."""
    if ctx.options.aux_ids is not None:
        return list(ctx.options.aux_ids)
    ids = ctx.draft.aux.ids
    if ids is None:
        if ctx.options.aux_ids_default and ctx.target is not None:
            return ctx.engine.default_physical_ids(ctx.target.num_hidden_layers)
        if ctx.draft.format.producer == "eagle" and ctx.target is not None:
            return ctx.engine.default_physical_ids(ctx.target.num_hidden_layers)
        return None
    conv = written_convention(ctx)
    if conv == "input":
        return list(ids)
    if conv == "output":
        return [i + 1 for i in ids]
    return None


def write_ops(ctx: Context, physical: list[int], reason: str) -> list[SetConfig]:
    written = ctx.engine.written_ids(physical)
    if written is None:
        return []
    ops = [SetConfig(p, written, reason) for p in ctx.engine.aux_write_paths]
    return ops


def _paths_disagree(ctx: Context) -> bool:
    vals = [tuple(v) if isinstance(v, list) else v for k, v in ctx.draft.aux.locations.items() if k != "_invalid"]
    return len(set(vals)) > 1


@rule("K401", "aux-ids-missing", "aux-layers", "warning",
      summary="No aux layer ids are recorded in the config.",
      why="Both engines then feed their default layers, the inputs of (2, L//2, L-3). A draft trained on other "
          "layers loads silently and collapses (vLLM PR #50170: missing ids gave 1.2% acceptance, slower than no "
          "draft). Only the EAGLE reference code hard-codes exactly those defaults.",
      fix="fix writes the ids where the engine reads them once you say which layers (--aux-ids); it does not "
          "guess. `--aux-ids default` records the engine defaults explicitly.", )
def aux_ids_missing(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if d.aux.ids is not None or "_invalid" in d.aux.locations:
        return
    L = ctx.target.num_hidden_layers if ctx.target else None
    default = ctx.engine.default_physical_ids(L) if L else None
    if d.format.producer == "eagle":
        ops = write_ops(ctx, default, "EAGLE hard-codes the engines' default layers") if default else []
        yield aux_ids_missing.finding(
            "no aux ids recorded; the EAGLE reference code trains on the engines' default layers, so this is "
            "consistent", severity="info", evidence=[Evidence("eagle_aux_hidden_state_layer_ids", None, default)],
            ops=ops)
        return
    phys = physical_ids(ctx)
    if phys is not None:
        yield aux_ids_missing.finding(
            f"no aux ids recorded; writing {phys} as decided", evidence=[Evidence("eagle_aux_hidden_state_layer_ids",
                                                                                 None, phys)],
            ops=write_ops(ctx, phys, "aux ids decided by the user"))
        return
    yield aux_ids_missing.finding(
        "no aux layer ids recorded: the engine will feed its defaults"
        + (f" (inputs of layers {default})" if default else "")
        + "; if the draft was trained on other layers acceptance collapses",
        evidence=[Evidence("eagle_aux_hidden_state_layer_ids", None, "the layers the draft was trained on")],
        needs_decision=DECIDE_IDS)


@rule("K402", "aux-ids-invalid", "aux-layers", "error",
      summary="Aux ids are malformed, out of the target's layer range, or duplicated.",
      why="vLLM collects hidden states only for ids within the target's layers (and 0 is the embedding output); "
          "an id past the last layer is never collected and the draft's fc gets fewer states than it needs; "
          "duplicates feed the same stream twice.",
      fix="Not fixable without knowing the trained layers: pass --aux-ids.", needs_target=False)
def aux_ids_invalid(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if "_invalid" in d.aux.locations:
        yield aux_ids_invalid.finding(f"aux ids at {d.aux.source} are not a list of integers",
                                      evidence=[Evidence(d.aux.source or "?", d.aux.locations["_invalid"], "[int]")],
                                      needs_decision=DECIDE_IDS)
        return
    ids = d.aux.ids
    if ids is None:
        return
    if len(set(ids)) != len(ids):
        yield aux_ids_invalid.finding(f"aux ids {ids} repeat a layer", evidence=[Evidence(d.aux.source, ids, None)],
                                      needs_decision=DECIDE_IDS)
    if ctx.target is None:
        return
    L = ctx.target.num_hidden_layers
    phys = physical_ids(ctx)
    if phys is None:
        return
    bad = [p for p in phys if not 1 <= p <= L - 1]
    if bad:
        yield aux_ids_invalid.finding(
            f"aux ids {ids} ({written_convention(ctx)} convention) name streams {phys}; a {L}-layer target has "
            f"inputs of layers 1..{L - 1}", evidence=[Evidence(d.aux.source, ids, f"within 1..{L - 1}")],
            needs_decision=DECIDE_IDS)


@rule("K403", "aux-ids-count", "aux-layers", "error",
      summary="The number of aux ids disagrees with the width of `fc`.",
      why="fc concatenates one target hidden state per id; vLLM sizes fc from the id count it reads (3 when it "
          "reads none), so a disagreement fails at load or mixes streams.",
      fix="Not fixable without knowing the trained layers: pass --aux-ids with as many ids as fc expects.",
      needs_target=True)
def aux_ids_count(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    fc_in = d.fc_in
    ids = ctx.options.aux_ids if ctx.options.aux_ids is not None else d.aux.ids
    if ids is None or not fc_in or ctx.target is None:
        return
    th = ctx.target.hidden_size
    if fc_in % th == 0 and fc_in // th != len(ids):
        yield aux_ids_count.finding(
            f"{len(ids)} aux ids but fc takes {fc_in // th} hidden states ({fc_in} = {fc_in // th} x {th})",
            evidence=[Evidence(d.aux.source or "--aux-ids", ids, f"{fc_in // th} ids")], needs_decision=DECIDE_IDS)


@rule("K404", "aux-ids-convention", "aux-layers", "error",
      summary="Aux ids are written in another engine's convention, so the engine feeds the wrong layers.",
      why="vLLM reads id k as the residual entering layer k; SGLang historically added +1 (output of layer k) and, "
          "since PR #25454, adds it only when the first id is 1. SpecForge writes SGLang's convention, so "
          "[1, 29, 57] is right on SGLang and one layer early on vLLM. The draft loads silently and acceptance "
          "drops (vLLM PR #43671: position-0 acceptance ~10% instead of ~45%).",
      fix="fix rewrites the ids so that the chosen engine feeds the layers the draft was trained on (safe when the "
          "producer's convention is known; otherwise fix asks for --aux-convention).")
def aux_ids_convention(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    ids = d.aux.ids
    if ids is None or len(set(ids)) != len(ids):
        return
    if ctx.options.aux_ids is not None:
        return  # K405 writes the user's ids
    conv = written_convention(ctx)
    if conv is None:
        yield aux_ids_convention.finding(
            f"cannot tell which convention the aux ids {ids} follow ({d.aux.convention_evidence})",
            severity="warning", evidence=[Evidence(d.aux.source, ids, None)], needs_decision=DECIDE_CONV)
        return
    phys = physical_ids(ctx)
    fed = ctx.engine.physical_ids(list(ids))
    if phys == fed:
        return
    written = ctx.engine.written_ids(phys)
    if written is None:
        yield aux_ids_convention.finding(
            f"{ctx.engine.engine} {ctx.engine.version} cannot express streams {phys}: ids starting at 1 are "
            "shifted by its first-id rule", evidence=[Evidence(d.aux.source, ids, phys)])
        return
    yield aux_ids_convention.finding(
        f"aux ids {ids} are in the {conv} convention ({d.aux.convention_evidence}); {ctx.engine.engine} would "
        f"feed streams {fed} instead of {phys}",
        evidence=[Evidence(d.aux.source, ids, written)],
        ops=write_ops(ctx, phys, f"convert {conv}-convention ids for {ctx.engine.engine}"))


@rule("K405", "aux-ids-location", "aux-layers", "warning",
      summary="Aux ids are not written (or not consistently) at every config key the engine version reads.",
      why="vLLM 0.32's V1 runner reads the top-level key, then eagle_config; its fc sizing reads only "
          "eagle_config (else assumes 3); the V2 runner reads the top-level key or eagle_config.layer_ids; SGLang "
          "reads eagle_config. Ids at one key only, or different ids at two keys, make runners disagree.",
      fix="fix writes the same ids at every key the engine reads (safe once the ids are settled).")
def aux_ids_location(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if ctx.options.aux_ids is not None and d.aux.ids is not None:
        phys = list(ctx.options.aux_ids)
        yield aux_ids_location.finding(
            f"aux ids replaced by --aux-ids: {d.aux.ids} -> streams {phys}", severity="info",
            evidence=[Evidence(d.aux.source, d.aux.ids, phys)], ops=write_ops(ctx, phys, "--aux-ids"))
        return
    if d.aux.ids is None:
        return
    phys = physical_ids(ctx)
    if _paths_disagree(ctx):
        yield aux_ids_location.finding(
            f"aux ids differ between config keys: {d.aux.locations}", severity="error",
            evidence=[Evidence(k, v, None) for k, v in d.aux.locations.items()], needs_decision=DECIDE_IDS)
        return
    if phys is None or ctx.engine.physical_ids(list(d.aux.ids)) != phys:
        return  # K404 rewrites them everywhere
    if d.is_speculators and ctx.engine.engine == "vllm":
        return  # vLLM's speculators adapter places the top-level ids itself
    missing = [".".join(p) for p in ctx.engine.aux_write_paths if ".".join(p) not in d.aux.locations]
    if missing:
        yield aux_ids_location.finding(
            f"aux ids are only at {', '.join(d.aux.locations)}; {ctx.engine.engine} {ctx.engine.version} also "
            f"reads {', '.join(missing)}",
            evidence=[Evidence(m, None, d.aux.ids) for m in missing],
            ops=write_ops(ctx, phys, "mirror ids at every key the engine reads"))


@rule("K406", "aux-states-disabled", "aux-layers", "error",
      summary="The config switches the aux hidden states off (`eagle_config.use_aux_hidden_state: false`) or "
              "declares `num_aux_hidden_states` that disagrees with fc, so the draft runs as plain EAGLE.",
      why="vLLM drops `fc.*` when use_aux_hidden_state is false (llama_eagle3.py load_weights) and feeds only the "
          "last hidden state; an EAGLE-3 draft served like that skips its fc and accepts almost nothing "
          "(sglang issue #21272: acceptance length exactly 1.0). vLLM sizes fc from num_aux_hidden_states when it "
          "is set, before looking at the ids.",
      fix="fix sets use_aux_hidden_state to true and num_aux_hidden_states to the count fc implies (safe: the "
          "fc weight is the evidence).")
def aux_states_disabled(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    ec = d.config.get("eagle_config") if isinstance(d.config.get("eagle_config"), dict) else {}
    if "fc.weight" in d.tensors and ec.get("use_aux_hidden_state") is False:
        yield aux_states_disabled.finding(
            "eagle_config.use_aux_hidden_state is false but the draft has an fc layer: the engine would drop it",
            evidence=[Evidence("eagle_config.use_aux_hidden_state", False, True)],
            ops=[SetConfig(("eagle_config", "use_aux_hidden_state"), True, "the draft is an EAGLE-3 draft")])
    n = d.config.get("num_aux_hidden_states")
    th = ctx.target.hidden_size if ctx.target else (d.target_hidden_size or d.hidden_size)
    if isinstance(n, int) and d.fc_in and th and d.fc_in % th == 0 and d.fc_in // th != n:
        yield aux_states_disabled.finding(
            f"num_aux_hidden_states is {n} but fc takes {d.fc_in // th} hidden states",
            evidence=[Evidence("num_aux_hidden_states", n, d.fc_in // th)],
            ops=[SetConfig(("num_aux_hidden_states",), d.fc_in // th, "fc width / target hidden size")])
