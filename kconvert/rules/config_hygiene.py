"""Config hygiene: fields a draft config should not carry, or carries wrong, and target checks skipped."""
from __future__ import annotations

from typing import Iterator

from kconvert.rules.base import (
    Context,
    Evidence,
    Finding,
    FixAvailability,
    rule,
    skipped_without_target,
)
from kconvert.engines.expectations import row_for
from kconvert.engines.installed import installed_version
from kconvert.engines.learned import LEARNABLE
from kconvert.rules.tensor_names import draft_layers
from kconvert.writer.ops import DeleteConfig, SetConfig


@rule("K000", "info",
      fix_availability=FixAvailability.NEVER,
      summary="Checks that compare the draft with its target were skipped because no --target was given.",
      why="Aux-id range, fc width, vocabulary, embeddings, positions and rope can only be judged against the "
          "target's config; without it kconvert says what it did not check rather than pass silently.",
      fix="Nothing to fix: pass --target (a profile such as kimi-k2.5, a folder, or a Hub id).")
def target_skipped(ctx: Context) -> Iterator[Finding]:
    skipped = skipped_without_target(ctx)
    if skipped:
        yield target_skipped.finding(
            f"no --target given: {len(skipped)} checks that compare with the target were skipped "
            f"({', '.join(skipped)})", evidence=[Evidence("--target", None, "a profile, folder or Hub id")])


@rule("K106", "warning",
      fix_availability=FixAvailability.NEVER, any_method=True,
      summary="The engine installed here is a release kconvert has no row for: another release's row judged the "
              "draft.",
      why="A row is what one release's code does with a draft (kconvert/engines/learned/: its config, loader and "
          "runner functions asked over kconvert's probe set); releases change it: vLLM 0.34 removed Model Runner V1, "
          "so 0.33's V1 row would read ids 0.34 never reads, and refuses P-EAGLE, which 0.33 served. Judging the "
          "installed release by another's row without saying so would state facts nobody read "
          "(kconvert/engines/installed.py reads the installed version; a patch release is its minor's row).",
      fix="Nothing to fix in the draft. Settle the row: `kconvert engines learn ENGINE==VERSION` runs that release's "
          "own code and writes its row (vLLM), or `--oracle` asks the installed engine's code about this draft and "
          "reports where it disagrees with the row applied.")
def engine_release_unknown(ctx: Context) -> Iterator[Finding]:
    import shlex

    engine = ctx.engine.engine
    version = installed_version(engine)
    if not version or row_for(engine, version) is not None:
        return
    release = version.split("+")[0]  # a local build tag (+cu128) is not a release on the index
    again = ["kconvert", "inspect", ctx.draft.checkpoint.ref]
    if ctx.target is not None:
        again += ["--target", ctx.target.name]
    if engine in LEARNABLE:
        settle = (f"settle it with `kconvert engines learn {engine}=={release}` (that release's own code answers the "
                  f"row's facts) or `{shlex.join(again + ['--oracle'])}` (the installed engine's code asked about "
                  "this draft)")
    else:
        settle = (f"kconvert learns {', '.join(LEARNABLE)} releases only; name the row that reads drafts as "
                  f"{engine} {version} does with --engine-version")
    yield engine_release_unknown.finding(
        f"{engine} {version} is installed here and kconvert has no row for it: this report applies the "
        f"{ctx.engine.key} row instead; {settle}",
        evidence=[Evidence("installed engine", f"{engine} {version}", f"a row ({ctx.engine.key} applied)")])


@rule("K103", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="`num_hidden_layers` disagrees with the decoder layers in the tensors (often copied from the "
              "target), or the engine version cannot build a draft of that many layers.",
      why="vLLM builds `num_hidden_layers` draft decoder layers (llama_eagle3.py and deepseek_eagle3.py: `for "
          "layer_idx in range(config.num_hidden_layers)`); since vLLM PR #26164 layer 0 takes 2H inputs and "
          "later layers H, so a multi-layer draft (nm-testing/random-weights-llama3.1.8b-2layer-eagle3, its "
          "smoke test) is valid there. Layers without weights stay uninitialised memory and run on every draft "
          "step, silently. SGLang's Llama draft raised for num_hidden_layers != 1 until PR #24663 (multi-layer "
          "drafts); its DeepSeek/MLA draft (deepseek_eagle3.py) still raises.",
      fix="fix sets num_hidden_layers to the number of decoder layers present in the tensors when that count is "
          "what the engine builds (safe); a multi-layer draft on an engine version that builds one layer is not "
          "fixable (dropping trained layers would make another draft).")
def num_hidden_layers(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    n = d.num_hidden_layers
    if not d.decoder_layers:
        return
    count = draft_layers(d)[0]
    # (A speculators draft reaches SGLang through fix's conversion to the flat layout, which keeps the layers.)
    multi_ok = d.layer_family in ctx.engine.multi_layer
    if count > 1 and not multi_ok:
        yield num_hidden_layers.finding(
            f"the draft has {count} decoder layers; {ctx.engine.key} builds a one-layer {d.layer_family} draft "
            "and refuses num_hidden_layers != 1 (use vLLM, or SGLang with PR #24663 for a Llama draft)",
            evidence=[Evidence("num_hidden_layers", n, 1)], fixable=False)
        return
    if n is not None and n != count:
        same = ctx.target is not None and n == ctx.target.num_hidden_layers
        layers = "1 layer" if count == 1 else f"{count} layers"
        yield num_hidden_layers.finding(
            f"num_hidden_layers is {n}{' (the target’s layer count)' if same else ''} but the draft has {layers}",
            evidence=[Evidence("num_hidden_layers", n, count)],
            ops=[SetConfig(ctx.key_path("num_hidden_layers"), count,
                           f"the draft has {layers} in its tensors")])


# MoE fields are left alone: vLLM's DeepSeek layer reads them even for the dense draft layer.
TARGET_ONLY = ("quantization_config", "index_topk", "index_head_dim", "index_n_heads")


@rule("K104", "warning",
      fix_availability=FixAvailability.ALWAYS,
      summary="Fields that describe the target, not the draft, were copied into the draft config.",
      why="`quantization_config` makes the engine load the bf16 draft as quantised (crash or garbage); "
          "`index_topk` switches DeepSeek-V3.2 sparse attention on. Seen in published drafts (docs/formats-and-engines.md#defects-seen-in-the-wild).",
      fix="fix removes them (safe: the draft's single dense layer uses none of them).")
def target_only_fields(ctx: Context) -> Iterator[Finding]:
    cfg = ctx.draft.checkpoint.config
    present = [k for k in TARGET_ONLY if k in cfg]
    sev = "error" if "quantization_config" in present else None
    if present:
        yield target_only_fields.finding(
            f"target-only fields in the draft config: {', '.join(present)}", severity=sev,
            evidence=[Evidence(k, "present", "absent") for k in present],
            ops=[DeleteConfig((k,), "describes the target, not the draft") for k in present])
