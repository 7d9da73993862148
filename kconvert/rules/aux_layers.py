"""Aux layer ids: presence, range, duplicates, count, location, and the convention they are written in.

Which residual streams a draft was trained on is rarely written down; the ids are, in one of two conventions.
`settle_convention` weighs what the files say about it:

- kconvert.json (a previous `kconvert fix` recorded the streams) or --aux-convention: decisive;
- the producer's code, when the producer is recognised by a stamp or its full signature (SpecForge, TorchSpec,
  ModelOpt hook layer outputs; speculators and TorchSpec's vLLM export write vLLM's input ids): strong;
- ids at the top-level key only vLLM reads: strong (whoever wrote them wrote them for vLLM);
- an id equal to the target's layer count: strong for the input reading (the output of layer L does not exist);
- the first id (SGLang PR #25454: 1 = output of layer 1, 2 = input of layer 2): weak;
- a producer guessed from the architecture name alone: not counted;
- a converted draft (`speculators convert`'s habits, `kconvert.formats.speculators.conversion_habits`) whose ids
  equal the output-convention producers' capture defaults for the target: strong for the output reading, against
  the format's own (the converter copies ids through unshifted), so such a draft is never settled silently.

The convention is settled when strong evidence points one way and nothing points the other. Disagreement, or
weak evidence alone, is reported as such (each sign named in the message, said whole in the evidence), the next
lines name the measurement that settles it (`kconvert verify --diagnose`, `kconvert score --diagnose`:
kconvert.results.next_steps), and fix waits for --aux-convention or --aux-ids instead of guessing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from kconvert.engines.expectations import target_family
from kconvert.formats.speculators import CONVERTER_SOURCE
from kconvert.writer.ops import SetConfig
from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule
from kconvert.rules.measured import measured_reading

DECIDE_IDS = "--aux-ids L1,L2,L3 (layers in vLLM's input-of-layer numbering) or --aux-ids default"
DECIDE_CONV = "--aux-convention input|output (which convention the ids were trained in)"

# Measured costs the severity of a one-layer shift rests on.
COST_LATE = ("one layer late: about 0.10 accept length lost on Kimi-K2.5 (61 layers; "
             "lightseekorg/kimi-k2.5-eagle3-mla on SGLang, sglang PR #25454)")
COST_EARLY = ("one layer early: position-0 acceptance ~10% instead of ~45% on MiniMax-M2.5 (62 layers; vLLM PR "
              "#43671)")
# The same, as a message carries them: the figure and its source (the rule's why gives the whole measurement).
COST_LATE_SHORT = "one layer late: ~0.10 accept length lost on Kimi-K2.5 (sglang PR #25454)"
COST_EARLY_SHORT = "one layer early: position-0 acceptance ~10% instead of ~45% (vLLM PR #43671)"

# The ids the output-convention producers capture by default for an L-layer target (the outputs of layers
# [1, L//2-1, L-4], i.e. the inputs of vLLM's defaults): SpecForge 0.2.0 (resolve_eagle_capture_layers), ModelOpt
# 0.47.0 (modelopt/torch/speculative/plugins/hf_eagle.py:63, `sorted({1, L//2-1, L-4})`, written unchanged into
# eagle_config by modelopt/torch/export/plugins/hf_spec_export.py EagleExporter._export_config) and TorchSpec
# (torchspec/utils/misc.py:88, lightseekorg/TorchSpec 6f21829). A converter that copies ids through unshifted
# (speculators 0.9.0 convert: eagle3_converter.py:146) turns them into ids of a format whose own convention is
# vLLM's: equal ids on a converted draft are evidence that they were captured in the output convention.
OUTPUT_CAPTURE_DEFAULTS = (
    # (producer, the code that says so, its defaults for L layers)
    ("SpecForge 0.2.0", "resolve_eagle_capture_layers", lambda L: [1, L // 2 - 1, L - 4]),
    ("ModelOpt 0.47.0", "modelopt/torch/speculative/plugins/hf_eagle.py:63",
     lambda L: sorted({1, max(0, L // 2 - 1), max(0, L - 4)})),
    ("TorchSpec", "torchspec/utils/misc.py:88", lambda L: [1, L // 2 - 1, L - 4]),
)
# K404's why: the sources of the sign `converted_output_defaults` names
CONVERTED_DEFAULTS_WHY = (
    "A converted draft whose ids equal the output-convention producers' capture defaults [1, L//2-1, L-4] ("
    + "; ".join(f"{name} {src}" for name, src, _ in OUTPUT_CAPTURE_DEFAULTS) + ") counts for the output reading, "
    "against the format's own: " + CONVERTER_SOURCE + ".")


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


@dataclass(frozen=True)
class Sign:
    """One thing the files say about the convention of their ids. The finding's message names it in a few words
    (`name`); its evidence says it whole: where = the name, observed = what it rests on, expected = the convention
    it points to ("output (weak)"; "not counted" for one that is named but not weighed)."""

    name: str
    said: str
    convention: str | None
    strength: str = "strong"  # "strong", "weak" or "not counted"

    def evidence(self) -> Evidence:
        points = {"strong": self.convention, "weak": f"{self.convention} (weak)"}.get(self.strength, "not counted")
        return Evidence(self.name, self.said, points)


def converted_output_defaults(ctx: Context) -> Sign | None:
    """The sign that the ids of a converted draft may be another producer's output-convention capture defaults,
    or None."""
    d = ctx.draft
    ids = d.aux.ids
    if not d.format.converted_by or not ids or ctx.target is None:
        return None
    L = ctx.target.num_hidden_layers
    names = [name for name, _, layers in OUTPUT_CAPTURE_DEFAULTS if layers(L) == list(ids)]
    if not names:
        return None
    return Sign(f"capture defaults through {d.format.converted_by}",
                f"the ids equal the output-convention capture defaults [1, L//2-1, L-4] for a target of {L} layers "
                f"({', '.join(names)}) and the draft shows {_possessive(d.format.converted_by)} habits "
                f"({'; '.join(d.format.conversion_evidence)}); the converter copies ids unshifted, so they may be "
                "the source producer's output-of-layer ids", "output")


PRODUCER_DEFAULT_CONFIDENCE = 0.75  # SpecForge's signature without the ids key: architecture, midlayer.*, d2t, t2d


def producer_default_streams(ctx: Context) -> tuple[list[int], str] | None:
    """The streams (vLLM's input-of-layer numbering) a recognised producer trained on when the config names no
    ids, with the record or code that says so (`DraftModel.aux.producer_layers`, from the producer's format module:
    SpecForge's defaults, NeMo Automodel's config.yaml or defaults); None when nothing settles it. Only a producer
    recognised by its full signature counts (a guess from the architecture name does not)."""
    d = ctx.draft
    pl = d.aux.producer_layers
    if pl is None or ctx.target is None or d.format.confidence < PRODUCER_DEFAULT_CONFIDENCE:
        return None
    streams = pl.streams(ctx.target.num_hidden_layers)
    return (streams, pl.said) if streams is not None else None


@dataclass
class Settled:
    convention: str | None  # "input" | "output" | None (not settled)
    signs: list[Sign] = field(default_factory=list)  # what the files say, weighed or named
    nothing: str = ""  # what the files say when no sign counts

    def counted(self, strength: str) -> dict[str, list[Sign]]:
        out: dict[str, list[Sign]] = {}
        for s in self.signs:
            if s.strength == strength:
                out.setdefault(s.convention, []).append(s)
        return out

    @property
    def votes(self) -> dict[str, list[Sign]]:
        """convention -> its strong signs"""
        return self.counted("strong")

    @property
    def weak(self) -> dict[str, list[Sign]]:
        return self.counted("weak")

    @property
    def why(self) -> str:
        """What the convention rests on, a few words per sign, for the finding's message (each sign is said whole
        in its evidence: `evidence`)."""
        def names(conv: str) -> str:
            return ", ".join(s.name for s in self.votes.get(conv, []) + self.weak.get(conv, []))

        aside = [s.name for s in self.signs if s.strength == "not counted"]
        tail = f"; not counted: {', '.join(aside)}" if aside else ""
        sides = [c for c in ("input", "output") if c in self.votes or c in self.weak]
        if self.convention is not None:
            return names(self.convention) + tail
        if not sides:
            # a sign named but not weighed is no account of the convention: say that nothing counts
            return ("nothing in the files counts" if aside else self.nothing or "nothing in the files says") + tail
        parts = " | ".join(f"{c}: {names(c)}" for c in sides)
        kind = "the evidence disagrees" if self.votes else "only weak evidence"
        return f"{kind} ({parts}){tail}"

    def evidence(self) -> list[Evidence]:
        return [s.evidence() for s in self.signs]


def settle_convention(ctx: Context) -> Settled:
    d = ctx.draft
    ids = d.aux.ids
    if d.aux.convention_strength == "record" and d.aux.convention:
        # kconvert.json names the streams of these very ids (fix wrote them): a --aux-convention passed back was
        # the decision about the input's ids, already applied, not a second one about the written ids.
        return Settled(d.aux.convention, [Sign("kconvert.json", d.aux.convention_evidence, d.aux.convention)])
    if ctx.decisions.aux_convention:
        return Settled(ctx.decisions.aux_convention,
                       [Sign("--aux-convention", "decided on the command line", ctx.decisions.aux_convention)])
    signs: list[Sign] = []
    producer_code = f"{_possessive(d.format.producer)} code"
    if (d.aux.convention and d.aux.convention_strength == "producer" and d.format.producer == "specforge"
            and ids and ids[0] != 1 and ctx.target is not None and target_family(ctx.target) == "deepseek"):
        # SpecForge passes its ids unchanged to SGLang's set_eagle3_layers_to_capture (0.2.0,
        # specforge/offline_capture/sglang_backend/capture.py): on a DeepSeek/Kimi target, ids not starting at 1 were +1
        # before sglang PR #25454 (output) and as given after it (input), so SpecForge's code settles nothing
        # here; on Llama/Qwen targets SGLang adds +1 to every id (llama.py:941), so there it stays strong.
        signs.append(Sign(producer_code, "SpecForge's ids on a DeepSeek/Kimi target not starting at 1 mean output "
                                         "before sglang PR #25454 and input after it", None, "not counted"))
    elif d.aux.convention and d.aux.convention_strength == "producer":
        signs.append(Sign(producer_code, d.aux.convention_evidence, d.aux.convention))
    elif d.aux.convention and d.format.producer != "unknown" and d.aux.convention_strength == "weak" \
            and not d.aux.convention_evidence.startswith("ids at the top-level key"):
        # Named in the message, never weighed: the guess rests on an architecture name half the ecosystem writes.
        signs.append(Sign(f"{_possessive(d.format.producer)} guessed convention",
                          f"{d.aux.convention_evidence} ({d.aux.convention}), the producer being guessed from the "
                          "architecture alone", None, "not counted"))
    converted = converted_output_defaults(ctx)
    if converted is not None:
        # The format's convention is the converter's, not the capture's: weighed against the producer's own
        # (a disagreement, so the finding names both readings and what measures them), never settled by it.
        signs.append(converted)
    if "eagle_aux_hidden_state_layer_ids" in d.aux.locations:
        signs.append(Sign("the top-level key", "the ids sit at the top-level key that only vLLM reads", "input"))
    if ids:
        if ctx.target is not None and max(ids) == ctx.target.num_hidden_layers:
            signs.append(Sign("the final-boundary id",
                              f"id {max(ids)} is the {ctx.target.num_hidden_layers}-layer target's final boundary "
                              f"(there is no layer {max(ids)} whose output it could name)", "input"))
        # The first-id convention exists only where SGLang's capture applies it: DeepSeek/Kimi targets
        # (deepseek_v2.py:3470, PR #25454); on Llama/Qwen/GPT-OSS targets SGLang 0.5.23 still shifts by its own
        # rule (tests/data/sglang_oracle.json), so there the first id says nothing.
        first_id_counts = ctx.target is None or target_family(ctx.target) == "deepseek"
        if first_id_counts and ids[0] in (1, 2):
            signs.append(Sign("the first id", f"the first id is {ids[0]} (SGLang's first-id rule, PR #25454)",
                              "output" if ids[0] == 1 else "input", "weak"))
    st = Settled(None, signs, d.aux.convention_evidence)
    strong, weak = set(st.votes), set(st.weak)
    if len(strong) == 1:
        conv = next(iter(strong))
        if ("output" if conv == "input" else "input") not in weak:
            st.convention = conv
    return st


def trained_physical_ids(ctx: Context) -> list[int] | None:
    """The residual streams the draft was trained on, in vLLM's input-of-layer numbering (physical ids), if known.
    `EngineRules.physical_ids` answers the other question: which streams an engine feeds for ids as written."""
    if ctx.decisions.aux_ids is not None:
        return list(ctx.decisions.aux_ids)
    ids = ctx.draft.aux.ids
    if ids is None:
        if ctx.decisions.aux_ids_default and ctx.target is not None:
            return ctx.engine.default_physical_ids(ctx.target.num_hidden_layers)
        if ctx.draft.format.producer == "eagle" and ctx.target is not None:
            return ctx.engine.default_physical_ids(ctx.target.num_hidden_layers)
        # the producer's record or code (SpecForge's defaults, Automodel's config.yaml): what fix's record keeps
        by_producer = producer_default_streams(ctx)
        return by_producer[0] if by_producer is not None else None
    conv = settle_convention(ctx).convention
    if conv == "input":
        return list(ids)
    if conv == "output":
        return [i + 1 for i in ids]
    if conv == "recorded" and ctx.draft.aux.recorded_streams is not None:
        return list(ctx.draft.aux.recorded_streams)  # kconvert.json names the streams of these very ids
    return None


def ids_unread(ctx: Context) -> bool:
    """The draft's ids sit at none of the keys this vLLM row's model runner reads, so it feeds the target's defaults.
    Model Runner V2 reads only the top-level key and eagle_config.layer_ids
    (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config returns None otherwise, and
    the runner falls back to the model's get_eagle3_default_aux_hidden_state_layers; tests/data/vllm_oracle.json
    records both answers for every shipped draft)."""
    locs = ctx.draft.aux.locations
    return (ctx.engine.engine == "vllm" and ctx.target is not None and ctx.draft.aux.ids is not None
            and not any(".".join(p) in locs for p in ctx.engine.aux_read_paths))


def read_keys(row) -> set[str]:
    """The config keys (dotted) a row reads aux ids from."""
    return {".".join(p) for p in row.aux_read_paths}


def v2_sibling(row):
    """The Model Runner V2 row of the same vLLM release (itself for a V2 row; None for SGLang): a V1 row's finding
    says what the runner GPUs run would do with the same files."""
    from kconvert.engines.expectations import KNOWN

    if row.engine != "vllm":
        return None
    release = row.version.split("/", 1)[0]
    return next((r for r in KNOWN.get("vllm", {}).values() if r.runner == "v2" and r.version == release), None)


def fed_physical_ids(ctx: Context) -> list[int] | None:
    """The streams the engine feeds for the ids as written: the runner's defaults where it reads none of the keys
    that hold them (`ids_unread`)."""
    ids = ctx.draft.aux.ids
    if ids is None:
        return None
    if ids_unread(ctx):
        return list(ctx.engine.default_physical_ids(ctx.target.num_hidden_layers))
    return ctx.engine.physical_ids(list(ids), ctx.target)


def ids_at_key(ctx: Context, physical: list[int] | None, key: str = "eagle_aux_hidden_state_layer_ids"
               ) -> list[int] | None:
    """The ids a finding's evidence names at `key`: the streams, or, where fix writes that key for this row in
    another numbering (tokenspeed's top-level key: +1 on explicit ids), what fix writes there, so that the
    evidence at a key and fix agree (tests/test_messages.py)."""
    if physical is None or key not in {".".join(p) for p in ctx.engine.aux_write_paths}:
        return physical
    written = ctx.engine.written_ids(physical, ctx.target)
    return physical if written is None else written


def write_ops(ctx: Context, physical: list[int], reason: str) -> list[SetConfig]:
    written = ctx.engine.written_ids(physical, ctx.target)
    if written is None:
        return []
    return [SetConfig(p, written, reason) for p in ctx.engine.aux_write_paths]


def _paths_disagree(ctx: Context) -> bool:
    vals = [tuple(v) if isinstance(v, list) else v for k, v in ctx.draft.aux.locations.items() if k != "_invalid"]
    return len(set(vals)) > 1


def _no_aux_head(ctx: Context) -> bool:
    ec = ctx.draft.config.get("eagle_config") if isinstance(ctx.draft.config.get("eagle_config"), dict) else {}
    return ec.get("use_aux_hidden_state") is False and "fc.weight" not in ctx.draft.tensors


@rule("K401", "warning",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="No aux layer ids are recorded in the config.",
      why="Every engine then feeds its default layers, the inputs of (2, L//2, L-3) (vLLM, SGLang; tokenspeed "
          "0.1.1: models/base/causal_lm.py set_eagle3_layers_to_capture). A draft trained on other "
          "layers loads silently and collapses (vLLM PR #50170: nvidia/Llama-3.3-70B-Instruct-Eagle3 omits the "
          "ids; 1.21% acceptance against 58.9% when configured, slower than no draft). The files cannot tell "
          "which layers it was trained on (SpecForge's, TorchSpec's and ModelOpt's defaults [1, L//2-1, L-4] in "
          "the output convention are the engines' defaults; the nvidia head was trained elsewhere), so this stays "
          "a warning and `kconvert verify` measures it. Where the producer's code fixes the layers, that code is "
          "the evidence: the EAGLE reference code hard-codes the defaults, and SpecForge 0.2.0 trains on the "
          "outputs of [1, L//2-1, L-4] when no ids are given (specforge/algorithms/model_providers.py, "
          "resolve_eagle_capture_layers), i.e. the inputs of [2, L//2, L-3], the defaults of vLLM "
          "(interfaces.py get_eagle3_default_aux_hidden_state_layers) and SGLang: info when the engine's "
          "defaults feed those streams, an error when they do not. NeMo Automodel 0.7.0 never writes ids into "
          "config.json (recipes/llm/train_eagle3.py TrainEagle3Recipe.setup); it trains on the outputs of the "
          "recipe's aux_layer_ids, which only the run's config.yaml records, else of [1, L//2-1, L-4] "
          "(components/speculative/eagle/target.py default_eagle3_aux_layer_ids, HFEagle3TargetModel hooks "
          "layers[i]): kconvert reads that file beside the draft and says which it found.",
      fix="Where the producer's code settles the layers and the engine's defaults feed other streams, fix writes "
          "the producer's layers where the engine reads them (safe: the code is the evidence); where a record "
          "beside the folder settles them (Automodel's config.yaml), fix writes them in any case, since a copy of "
          "the folder leaves the record behind. Otherwise fix "
          "leaves the config as it is (no ids written, the engine keeps its defaults), says so and records it in "
          "kconvert.json; --aux-ids L1,L2,L3 writes the layers you name, `--aux-ids default` the engine's "
          "defaults explicitly. It never guesses, and never refuses the other repairs for this warning.", )
def aux_ids_missing(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if d.aux.ids is not None or "_invalid" in d.aux.locations or _no_aux_head(ctx):
        return
    L = ctx.target.num_hidden_layers if ctx.target else None
    default = ctx.engine.default_physical_ids(L) if L else None
    if d.format.producer == "eagle":
        ops = write_ops(ctx, default, "EAGLE hard-codes the engines' default layers") if default else []
        yield aux_ids_missing.finding(
            "no aux ids recorded; the EAGLE reference code trains on the engines' default layers, so this is "
            "consistent", severity="info",
            evidence=[Evidence("eagle_aux_hidden_state_layer_ids", None, ids_at_key(ctx, default))],
            ops=ops)
        return
    decided = ctx.decisions.aux_ids is not None or (ctx.decisions.aux_ids_default and ctx.target is not None)
    by_producer = producer_default_streams(ctx) if not decided else None
    pl = d.aux.producer_layers
    if by_producer is not None and default and pl is not None:
        streams, source = by_producer
        said = (f"{d.format.producer} trains on streams {streams} when none are given ({source})" if pl.ids is None
                else f"{d.format.producer} trained on streams {streams} ({source})")
        why = (f"{d.format.producer}'s default training layers ({source})" if pl.ids is None
               else f"{d.format.producer}'s training layers ({source})")
        if streams == default:
            # A record beside the folder (Automodel's config.yaml) stays behind in any copy: fix writes the ids, so
            # that its output still says which layers the draft was trained on.
            yield aux_ids_missing.finding(
                f"no aux ids recorded; {said}, the streams {ctx.engine.key}'s defaults feed"
                + ("; fix writes them, since a copy of the folder leaves the record behind" if pl.external else ""),
                severity="info",
                evidence=[Evidence("eagle_aux_hidden_state_layer_ids", None, ids_at_key(ctx, streams))],
                ops=write_ops(ctx, streams, why) if pl.external else [])
        else:
            yield aux_ids_missing.finding(
                f"no aux ids recorded; {said}, but {ctx.engine.key}'s defaults feed {default}: the draft would run "
                "on other layers than it was trained on", severity="error",
                evidence=[Evidence("eagle_aux_hidden_state_layer_ids", None, ids_at_key(ctx, streams))],
                ops=write_ops(ctx, streams, why))
        return
    phys = trained_physical_ids(ctx) if decided else None
    if phys is not None:
        yield aux_ids_missing.finding(
            f"no aux ids recorded; writing {phys} as decided",
            evidence=[Evidence("eagle_aux_hidden_state_layer_ids", None, ids_at_key(ctx, phys))],
            ops=write_ops(ctx, phys, "aux ids decided by the user"))
        return
    unsettled = (f"; {d.format.producer}: {pl.said}" if pl is not None and d.format.confidence
                 >= PRODUCER_DEFAULT_CONFIDENCE else "")
    yield aux_ids_missing.finding(
        "no aux layer ids recorded: the engine will feed its defaults"
        + (f" (inputs of layers {default})" if default else "") + unsettled
        + "; a draft trained on other layers collapses (vLLM PR #50170), which only `kconvert verify` can see",
        evidence=[Evidence("eagle_aux_hidden_state_layer_ids", None, "the layers the draft was trained on")],
        needs_decision=DECIDE_IDS)


@rule("K402", "error",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="Aux ids are malformed, duplicated, or name streams the engine cannot collect from this target.",
      why="vLLM 0.32/0.33 collect streams 0..L: 0 is the embedding output and L the stream after the last layer, "
          "before the final norm (llama.py and gpt_oss.py call _maybe_add_hidden_state(idx + 1) after every "
          "layer; deepseek_v2.py adds `end_layer`). SGLang's capture fires before layer i, so it collects "
          "0..L-1, and since PR #32334 also L on GPT-OSS targets; before it, nvidia/gpt-oss-120b-Eagle3-v3's "
          "[24, 30, 36] became [25, 31, 37], only two states were collected and the draft crashed (8,640 vs "
          "5,760 wide). A stream never collected gives fc fewer states than it was trained on; duplicates feed "
          "the same stream twice.",
      fix="An error whose repair is the ids themselves: fix refuses (writes nothing) until --aux-ids names the "
          "trained layers. A stream the engine version cannot "
          "collect needs another engine version (the ids are right).", needs_target=False)
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
        return
    if ctx.target is None:
        return
    L = ctx.target.num_hidden_layers
    lo, hi = ctx.engine.collectable(L, ctx.target)
    phys = trained_physical_ids(ctx)
    bad = [p for p in phys if not 0 <= p <= L] if phys is not None else []
    if bad:
        yield aux_ids_invalid.finding(
            f"aux ids {ids} ({settle_convention(ctx).convention} convention) name streams {phys}; a {L}-layer "
            f"target has streams 0..{L}", evidence=[Evidence(d.aux.source, ids, f"streams within 0..{L}")],
            needs_decision=DECIDE_IDS)
        return
    fed = fed_physical_ids(ctx) or []
    if fed and max(fed) > hi:
        # Whatever convention the ids were trained in, this engine asks for a stream it never collects.
        repairable = phys is not None and max(phys) <= hi and \
            (w := ctx.engine.written_ids(phys, ctx.target)) is not None and \
            max(ctx.engine.physical_ids(w, ctx.target)) <= hi
        if not repairable:
            yield aux_ids_invalid.finding(
                f"{ctx.engine.key} reads the aux ids {ids} as streams {fed} and collects at most stream {hi} on a "
                f"{L}-layer {target_family(ctx.target)} target: fc gets {sum(1 for f in fed if f <= hi)} of "
                f"{len(fed)} states and the draft fails (sglang PR #32334: crash)",
                evidence=[Evidence(d.aux.source, ids, f"streams within {lo}..{hi} on {ctx.engine.key}")],
                fixable=False)
            return
    if phys is None:
        return
    beyond = [p for p in phys if p > hi]
    if beyond:
        yield aux_ids_invalid.finding(
            f"the draft was trained on stream {beyond[0]} (after the last of {L} layers); {ctx.engine.key} does not "
            f"collect it on a {target_family(ctx.target)} target, so fc gets {len(phys) - len(beyond)} of "
            f"{len(phys)} states and the draft fails (sglang PR #32334)",
            evidence=[Evidence(d.aux.source, ids, f"streams within {lo}..{hi} on {ctx.engine.key}")],
            fixable=False)


@rule("K403", "error",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="The number of aux ids disagrees with the width of `fc`.",
      why="fc concatenates one target hidden state per id; vLLM sizes fc from the id count it reads (3 when it "
          "reads none), so a disagreement fails at load or mixes streams.",
      fix="An error whose repair is the ids themselves: fix refuses (writes nothing) until --aux-ids names as "
          "many layers as fc expects.",
      needs_target=True)
def aux_ids_count(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    fc_in = d.fc_in
    ids = ctx.decisions.aux_ids if ctx.decisions.aux_ids is not None else d.aux.ids
    if ids is None or not fc_in or ctx.target is None:
        return
    th = ctx.target.hidden_size
    if fc_in % th == 0 and fc_in // th != len(ids):
        yield aux_ids_count.finding(
            f"{len(ids)} aux ids but fc takes {fc_in // th} hidden states ({fc_in} = {fc_in // th} x {th})",
            evidence=[Evidence(d.aux.source or "--aux-ids", ids, f"{fc_in // th} ids")], needs_decision=DECIDE_IDS)


@rule("K404", "error",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="The engine feeds other streams than the draft was trained on, because the aux ids are read in "
              "another convention; or the files cannot settle which convention they follow.",
      why="vLLM reads id k as the stream entering layer k; SGLang adds +1 (output of layer k) in the target's "
          "set_eagle3_layers_to_capture: on every explicit id for Llama, Qwen, GLM-4-MoE and MiniMax targets "
          "(llama.py:941 in 0.5.23); on DeepSeek/Kimi targets since PR #25454 only when the first id is 1 "
          "(deepseek_v2.py:3470); on GPT-OSS since PR #32334 unless the largest id is the layer count "
          "(gpt_oss.py:1349; all recorded from SGLang 0.5.23's own code run on CPU). SpecForge "
          "hands its ids to that capture unchanged (specforge/offline_capture/sglang_backend/capture.py, 0.2.0), "
          "so on a Llama/Qwen target its ids are output-of-layer (strong), and on a DeepSeek/Kimi target ids not "
          "starting at 1 depend on whether the training SGLang had #25454 (not counted). kconvert weighs the "
          "producer's code, the top-level key, a final-boundary id and, on DeepSeek/Kimi targets, the first id "
          "(see `settle_convention`). " + CONVERTED_DEFAULTS_WHY + " Severity follows the measured damage of a one-layer shift: " + COST_EARLY
          + " (error); " + COST_LATE + " (warning); larger shifts are errors. When the evidence disagrees or is "
          "weak only (AQ-MedAI/Kimi-K25-eagle3: SpecForge ids [2, 30, 58] on Kimi, the first id 2 says input, and "
          "it measured 51.78% acceptance on vLLM, vLLM PR #35966) the finding is a warning naming both readings; "
          "an error where the row feeds streams that are neither reading (Model Runner V2 ignores ids at "
          "eagle_config and feeds its defaults, vLLM PR #50170), since the draft as written is then served on "
          "streams it was not trained on whichever reading is right.",
      fix="fix rewrites the ids so that the chosen engine feeds the streams the draft was trained on, when the "
          "convention is settled. When it is not and the row feeds one of the readings (a warning), fix leaves the "
          "ids exactly as they are, applies "
          "every other repair, says so and records it in kconvert.json; --aux-convention input|output decides "
          "(the finding names the reading a public run measured, when one did: AQ-MedAI/Kimi-K25-eagle3, input, "
          "vLLM PR #35966), and `kconvert verify --diagnose` or `kconvert score --diagnose` measure both. It "
          "never guesses.")
def aux_ids_convention(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    ids = d.aux.ids
    if ids is None or len(set(ids)) != len(ids):
        return
    if ctx.decisions.aux_ids is not None:
        return  # K405 writes the user's ids
    st = settle_convention(ctx)
    fed = fed_physical_ids(ctx)
    eng = ctx.engine.key
    if st.convention is None:
        # Each reading is evidence: the streams this row feeds (observed) against those the draft was trained on
        # under that reading (expected); so is each sign (what it rests on, whole) and the public record. The
        # message keeps to the question, the signs by name and the record (issue #48: whole concise lines); how to
        # measure both readings is the next lines' (verify --diagnose on vLLM, score --diagnose:
        # kconvert.results.next_steps).
        readings = [Evidence(f"read as {conv}", fed, list(ids) if conv == "input" else [i + 1 for i in ids])
                    for conv in ("input", "output")]
        measured = measured_reading(ctx, "aux-convention")
        record = (f"; {measured.brief()}, so {measured.flag} is recommended" if measured else
                  "; no public run measured either reading")
        publicly = [Evidence("public record", measured.sentence(), measured.reading)] if measured else []
        # The question is which reading the draft was trained in; but where this row feeds streams that are
        # neither reading (Model Runner V2 ignores ids at eagle_config and feeds its defaults, vLLM PR #50170; or
        # ids no reading can collect), the draft as written is served on streams it was not trained on whichever
        # the answer: an error, not a warning, so that the gate cannot pass it as written.
        neither = fed is not None and all(r.expected != fed for r in readings)
        yield aux_ids_convention.finding(
            f"cannot settle which convention the aux ids {ids} follow: {st.why}" + record
            + (f"; {eng} feeds {fed}, neither reading" if neither else ""),
            severity="error" if neither else "warning",
            evidence=[Evidence(d.aux.source, ids, None), *readings, *st.evidence(), *publicly],
            needs_decision=DECIDE_CONV)
        return
    phys = trained_physical_ids(ctx)
    if phys is None or phys == fed:
        return
    if ids_unread(ctx):
        return  # the ids are not read at all on this row: K405 says so and mirrors them where it reads
    written = ctx.engine.written_ids(phys, ctx.target)
    if written is None:
        yield aux_ids_convention.finding(
            f"{eng} cannot express streams {phys}: ids starting at 1 are shifted by its first-id rule",
            evidence=[Evidence(d.aux.source, ids, phys)])
        return
    shifts = {f - p for f, p in zip(fed, phys)}
    hi = ctx.engine.collectable(ctx.target.num_hidden_layers, ctx.target)[1] if ctx.target else None
    if hi is not None and max(fed) > hi:
        severity, cost = "error", f"stream {max(fed)} is never collected, so fc gets fewer states than it needs"
    elif shifts == {1}:
        severity, cost = "warning", COST_LATE_SHORT
    elif shifts == {-1}:
        severity, cost = "error", COST_EARLY_SHORT
    else:
        severity, cost = "error", "a shift of more than one layer"
    yield aux_ids_convention.finding(
        f"aux ids {ids} are in the {st.convention} convention ({st.why}); {eng} would feed streams {fed} instead "
        f"of {phys}: {cost}", severity=severity,
        evidence=[Evidence(d.aux.source, ids, written), *st.evidence()],
        ops=write_ops(ctx, phys, f"convert {st.convention}-convention ids for {ctx.engine.engine}"))


@rule("K405", "warning",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="Aux ids are not written (or not consistently) at every config key the engine version reads.",
      why="vLLM 0.32/0.33's V1 model runner (rows 0.32/v1, 0.33/v1) reads the top-level key, then eagle_config "
          "(gpu_model_runner.py _get_eagle3_aux_layers_from_config); fc is sized from eagle_config (else 3). Model "
          "Runner V2 (rows 0.32, 0.33), the default wherever Triton runs (GPUs; config/vllm.py "
          "use_v2_model_runner), reads only the top-level key or eagle_config.layer_ids "
          "(gpu/spec_decode/eagle/eagle3_utils.py) and otherwise feeds the defaults (2, L//2, L-3): ids only in "
          "eagle_config that differ from those are ignored there, which collapses acceptance as in vLLM PR "
          "#50170 (error). SGLang reads eagle_config. Different ids at two keys make runners disagree.",
      fix="fix writes the same ids at every key the engine reads (safe once the ids are settled). Different ids at "
          "two keys are an error whose repair is choosing one: fix refuses until --aux-ids names them.")
def aux_ids_location(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if ctx.decisions.aux_ids is not None and d.aux.ids is not None:
        phys = list(ctx.decisions.aux_ids)
        ops = write_ops(ctx, phys, "--aux-ids")
        if ops and all(d.aux.locations.get(".".join(o.path)) == o.value for o in ops):
            return  # the flag repeats what the files already say (e.g. passed back to a fixed output)
        yield aux_ids_location.finding(
            f"aux ids replaced by --aux-ids: {d.aux.ids} -> streams {phys}", severity="info",
            evidence=[Evidence(d.aux.source, d.aux.ids, phys)], ops=write_ops(ctx, phys, "--aux-ids"))
        return
    if d.aux.ids is None:
        return
    if _paths_disagree(ctx):
        yield aux_ids_location.finding(
            f"aux ids differ between config keys: {d.aux.locations}", severity="error",
            evidence=[Evidence(k, v, None) for k, v in d.aux.locations.items()], needs_decision=DECIDE_IDS)
        return
    phys = trained_physical_ids(ctx)
    # ids at none of the keys the row's runner reads are not read: it feeds the target's defaults (ids_unread)
    unread = ids_unread(ctx)
    if phys is None or (fed_physical_ids(ctx) != phys and not unread):
        return  # K404 rewrites them everywhere (or asks first)
    if d.is_speculators and ctx.engine.engine == "vllm":
        return  # vLLM's speculators adapter places the top-level ids itself
    missing = [".".join(p) for p in ctx.engine.aux_write_paths if ".".join(p) not in d.aux.locations]
    if not missing:
        return
    severity = None
    at = ", ".join(d.aux.locations)
    # One fact per message, each key named only where the named row reads it (issue #48: "V2 also reads X ... V2
    # does not read eagle_config" in one message). The runners read different keys, so a row is named with its
    # runner (runner_name); tests/test_messages.py holds every "reads"/"does not read" to the rows' aux_read_paths.
    name = ctx.engine.runner_name
    if all(m in read_keys(ctx.engine) for m in missing):
        message = f"aux ids are only at {at}; {name} reads {', '.join(missing)} too"
    else:
        message = f"aux ids are only at {at}; fix mirrors them at {', '.join(missing)}, where other runners read"
    if ctx.engine.engine == "vllm" and ctx.target is not None:
        dflt = ctx.engine.default_physical_ids(ctx.target.num_hidden_layers)
        v2 = v2_sibling(ctx.engine)
        if unread and dflt != phys:
            severity = "error"
            message = f"{name} does not read {at}: it feeds its defaults {dflt}, not {phys}"
        elif unread:
            message = f"{name} does not read {at}: it feeds its defaults {dflt}, which are these streams"
        elif v2 is not None and v2 is not ctx.engine and dflt != phys and \
                not any(loc in read_keys(v2) for loc in d.aux.locations):
            message = (f"{name} reads {', '.join(k for k in d.aux.locations if k in read_keys(ctx.engine))}; "
                       f"{v2.runner_name} does not read {at} and would feed its defaults {dflt}, not {phys}")
    ops = write_ops(ctx, phys, "mirror ids at every key the engine reads")
    # The evidence is what fix changes, key by key: the ids found there (or none) and the ids it writes.
    found = {".".join(o.path): d.aux.locations.get(".".join(o.path)) for o in ops}
    yield aux_ids_location.finding(
        message, severity=severity, ops=ops,
        evidence=[Evidence(k, found[k], o.value) for o in ops if found[(k := ".".join(o.path))] != o.value])


@rule("K406", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="`eagle_config.use_aux_hidden_state` disagrees with the tensors, `num_aux_hidden_states` disagrees "
              "with fc, or the engine version does not honour a head without aux states.",
      why="A head trained without aux states (use_aux_hidden_state false, no fc: nvidia/gpt-oss-120b-Eagle3-v2) "
          "reads the target's last hidden state like EAGLE-1 (vLLM PR #27688, sglang PR #14920). vLLM drops "
          "`fc.*` when the flag is false (llama_eagle3.py load_weights), so an EAGLE-3 draft that has an fc but "
          "the flag false runs without it and accepts almost nothing (sglang issue #21272: acceptance length "
          "exactly 1.0). vLLM 0.32's Model Runner V2 (the default on GPUs) collects aux states regardless "
          "(0.32 gpu/model_runner.py sets use_aux_hidden_state_outputs for every eagle3 draft) and lowers a "
          "no-aux head's acceptance (vLLM issue #40551); 0.33's honours the flag "
          "(eagle3_utils.requires_aux_hidden_states). vLLM sizes fc from num_aux_hidden_states when it is set.",
      fix="fix sets use_aux_hidden_state to true when the draft has an fc, and num_aux_hidden_states to the count "
          "fc implies (safe: the fc weight is the evidence). The runner issue is not a file defect: run vLLM 0.32 "
          "with VLLM_USE_V2_MODEL_RUNNER=0 (the 0.32/v1 row), or 0.33.")
def aux_states_disabled(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    ec = d.config.get("eagle_config") if isinstance(d.config.get("eagle_config"), dict) else {}
    if "fc.weight" in d.tensors and ec.get("use_aux_hidden_state") is False:
        yield aux_states_disabled.finding(
            "eagle_config.use_aux_hidden_state is false but the draft has an fc layer: the engine would drop it",
            evidence=[Evidence("eagle_config.use_aux_hidden_state", False, True)],
            ops=[SetConfig(("eagle_config", "use_aux_hidden_state"), True, "the draft is an EAGLE-3 draft")])
    elif _no_aux_head(ctx) and ctx.engine.no_aux_heads != "yes":
        yield aux_states_disabled.finding(
            f"a head without aux states (use_aux_hidden_state false): {ctx.engine.runner_name}, what GPUs run, "
            "collects aux states anyway and acceptance drops (vLLM issue #40551); Model Runner V1 honours the flag",
            severity="warning",
            evidence=[Evidence("eagle_config.use_aux_hidden_state", False, None)], fixable=False)
    n = d.config.get("num_aux_hidden_states")
    th = ctx.target.hidden_size if ctx.target else (d.target_hidden_size or d.hidden_size)
    if isinstance(n, int) and d.fc_in and th and d.fc_in % th == 0 and d.fc_in // th != n:
        yield aux_states_disabled.finding(
            f"num_aux_hidden_states is {n} but fc takes {d.fc_in // th} hidden states",
            evidence=[Evidence("num_aux_hidden_states", n, d.fc_in // th)],
            ops=[SetConfig(("num_aux_hidden_states",), d.fc_in // th, "fc width / target hidden size")])
