"""NVIDIA NeMo Automodel (`nemo-automodel`): the drafts its EAGLE-3 recipe writes
(`nemo_automodel/recipes/llm/train_eagle3.py`), read in the 0.7.0 wheel.

What its code writes (tests/data/producers-automodel, made by that recipe on CPU: tests/producers/build_automodel.py):
- a checkpoint folder `epoch_E_step_S/` (TrainEagle3Recipe.save_checkpoint): `model/` with the sharded (DCP) safetensors
  and `consolidate.sh` (Checkpointer.save_model, _maybe_write_offline_consolidation_script), `model/consolidated/` with
  `config.json`, `model-00001-of-00001.safetensors` and its index (only when checkpoint.save_consolidated exports
  them), `eagle_meta.pt` (_save_extra_state: global_step, epoch, selected_token_ids, selected_token_mask), the
  recipe's `config.yaml` (save_config), `optim/` and `rng/`;
- a config.json that is the target's text config (TrainEagle3Recipe.setup: `draft_base_config.to_dict()`) with
  `architectures` ["LlamaEagle3DraftModel"] for every draft class, the DeepSeek MLA one included (its model_type stays
  the target's, deepseek_v3), `draft_vocab_size`, `target_hidden_size`, `tie_word_embeddings` false, `fc_norm`,
  `norm_output` and `parallel_drafting`; `num_hidden_layers` stays the target's; no aux layer ids anywhere;
- tensors under the draft's `self.model` (`model.fc`, `model.layers.0.*`, `model.norm`, `model.embed_tokens`, optional
  `model.fc_norm.N`), with `lm_head`, `d2t` (offsets) and `t2d` at top level (draft_llama.py LlamaEagle3DraftModel,
  draft_deepseek.py DeepseekV3Eagle3DraftModel, set_vocab_mapping);
- the layers it trains on: `recipe_args.aux_layer_ids` of the recipe (only in config.yaml), else
  `default_eagle3_aux_layer_ids(L)` = [1, L//2-1, L-4]; the co-located target hooks `layers[i]` and keeps its output
  (eagle/target.py HFEagle3TargetModel), and the vLLM backend captures i + 1 to get the same streams
  (eagle/vllm_runner.py VLLMTargetRunner._build_llm): the output-of-layer convention.
Its serve helpers: `serve_vllm.py` strips `model.` into `vllm_export/` and writes `LlamaForCausalLMEagle3` whatever
the layer (the MLA draft too), leaving `num_hidden_layers`; `serve_sglang.py` looks in `model/` and the folder given,
never `model/consolidated/`, and still reads a hand-exported `draft_model.pt` with `eagle3_meta.pt`, writing
`speculative_token_map.pt`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kconvert.errors import InputError, KConvertError
from kconvert.formats.model import FormatGuess, KeyLayout, ProducerLayers
from kconvert.source.checkpoint import Checkpoint, read_small_file
from kconvert.source.config_fields import config_architectures
from kconvert.source.names import CONFIG_NAME

NAME = "automodel"
LAYOUT = KeyLayout(prefix="model.", layer="layers.0.")
# train_eagle3.py TrainEagle3Recipe.setup: draft_config["architectures"] = ["LlamaEagle3DraftModel"]
ARCHITECTURE = "LlamaEagle3DraftModel"
# The keys TrainEagle3Recipe.setup adds to the target's config (besides draft_vocab_size and target_hidden_size, which
# others write too): together, Automodel's signature, kept by its vLLM helper's export.
RECIPE_KEYS = ("fc_norm", "norm_output", "parallel_drafting")
SOURCE = "nemo-automodel 0.7.0"
DEFAULT_IDS = f"{SOURCE} components/speculative/eagle/target.py default_eagle3_aux_layer_ids"
CAPTURE = ("Automodel hooks the outputs of layers[i] (eagle/target.py HFEagle3TargetModel.generate_batch; its vLLM "
           "backend captures i + 1 for the same streams, eagle/vllm_runner.py)")
# The files of a checkpoint folder the recipe writes (TrainEagle3Recipe.save_checkpoint) and the older hand-exported
# layout its SGLang helper still reads (serve_sglang.py _maybe_export_training_checkpoint, _find_eagle_meta).
META = ("eagle_meta.pt", "eagle3_meta.pt")
RECIPE_FILE = "config.yaml"
CONSOLIDATE = "consolidate.sh"
OLD_WEIGHTS = "draft_model.pt"
TOKEN_MAP = "speculative_token_map.pt"
# checkpointing.py Checkpointer._maybe_log_final_offline_consolidation_hint, and the tool consolidate.sh runs
# (_maybe_write_offline_consolidation_script: CONSOLIDATION_TOOL, by default tools/offline_hf_consolidation.py of an
# Automodel checkout)
TOOL = "tools/offline_hf_consolidation.py"


def _default_ids(L: int) -> list[int]:
    return [1, L // 2 - 1, L - 4]


@dataclass(frozen=True)
class Folder:
    """An Automodel checkpoint folder around a draft: the epoch folder and what it holds."""

    root: Path  # epoch_E_step_S/ (or the folder of the older layout)
    meta: Path | None  # eagle_meta.pt, or the older eagle3_meta.pt
    recipe: Path | None  # config.yaml


def checkpoint_folder(ckpt: Checkpoint) -> Folder | None:
    """The Automodel checkpoint folder a local draft folder sits in: `epoch_E_step_S/model/consolidated/` (the
    recipe's export, or its `vllm_export/` that Automodel's vLLM helper writes) or the folder itself (the older
    `draft_model.pt` layout), when that folder holds the recipe's eagle_meta.pt or config.yaml. None for a Hub draft
    or any other folder."""
    if ckpt.kind != "local" or ckpt.root is None:
        return None
    root = ckpt.root
    if root.name == "vllm_export" and root.parent.name == "consolidated":
        root = root.parent  # Automodel's vLLM helper writes its export there (serve_vllm.py _export_for_vllm)
    epoch = root.parent.parent if root.name == "consolidated" and root.parent.name == "model" else root
    try:
        meta = next((epoch / m for m in META if (epoch / m).is_file()), None)
        recipe = epoch / RECIPE_FILE if (epoch / RECIPE_FILE).is_file() else None
    except OSError:
        return None  # a folder around the draft it cannot look into says nothing
    if meta is None and recipe is None:
        return None
    return Folder(epoch, meta, recipe)


def locate(path: Path) -> Path | None:
    """The draft folder inside an Automodel checkpoint folder given as `path` (`epoch_E_step_S/` or its `model/`):
    its `model/consolidated/`. None when `path` is not one (a draft folder itself included). A checkpoint with only
    the sharded weights (checkpoint.save_consolidated false, or not the final checkpoint under `final`) has nothing an
    engine loads: an InputError naming Automodel's own consolidation."""
    if (path / CONFIG_NAME).is_file() or not path.is_dir():
        return None
    model = path if path.name == "model" and (path / CONSOLIDATE).is_file() else path / "model"
    epoch = model.parent
    if not any((epoch / m).is_file() for m in (*META, RECIPE_FILE)) and not (model / CONSOLIDATE).is_file():
        return None
    consolidated = model / "consolidated"
    if (consolidated / CONFIG_NAME).is_file():
        return consolidated
    if (model / CONSOLIDATE).is_file():
        raise InputError(
            f"{path}: a NeMo Automodel checkpoint with only sharded (DCP) weights under model/ and no "
            "model/consolidated/ (checkpoint.save_consolidated was false, or this is not the final checkpoint under "
            "`final`): no engine loads it (Automodel issue #2898)",
            hint=consolidation_command(model) + f", then give {consolidated} (or {path}) to kconvert")
    return None


def consolidation_command(model: Path) -> str:
    """Automodel's own way to write model/consolidated/ from the shards: the script its checkpointer wrote beside
    them, which runs tools/offline_hf_consolidation.py of an Automodel checkout with the paths of the training run."""
    model_name = _script_value(model / CONSOLIDATE, "--model-name")
    direct = (f"python {TOOL} --backend gloo --model-name {model_name or '<the target model>'} --input-dir {model} "
              f"--output-dir {model / 'consolidated'}")
    return (f"from a checkout of NVIDIA-NeMo/Automodel run `bash {model / CONSOLIDATE}` (the script its checkpointer "
            f"wrote; it calls {TOOL} with the paths of the training run) or, if the folder moved, `{direct}`")


def _script_value(script: Path, flag: str) -> str | None:
    try:
        text = read_small_file(script, script.name).decode("utf-8", errors="replace")
    except KConvertError:
        return None
    m = re.search(re.escape(flag) + r' "([^"\n]*)"', text)
    return m.group(1) if m else None


def detect(ckpt: Checkpoint, layout: KeyLayout) -> FormatGuess | None:
    cfg = ckpt.config
    archs = config_architectures(cfg)
    keys = [k for k in RECIPE_KEYS if k in cfg]
    ev: list[str] = []
    if archs == [ARCHITECTURE]:
        ev.append(f"architectures {archs}: Automodel's draft class (train_eagle3.py TrainEagle3Recipe.setup), no "
                  "engine's")
    if len(keys) == len(RECIPE_KEYS):
        ev.append(f"config keys {', '.join(keys)} (TrainEagle3Recipe.setup adds them to the target's config)")
    if not ev:
        return None
    if layout.prefix == "model.":
        ev.append("tensor names model.* with lm_head, d2t and t2d at top level (LlamaEagle3DraftModel.model)")
    folder = checkpoint_folder(ckpt)
    if folder is not None:
        ev.append(f"in an Automodel checkpoint folder: {', '.join(_folder_files(folder))}")
        if folder.meta is not None:
            ev.append(vocab_record(ckpt, layout, folder.meta))
    if OLD_WEIGHTS in ckpt.files:
        ev.append(f"{OLD_WEIGHTS}: the older hand-exported layout Automodel's SGLang helper still reads "
                  "(serve_sglang.py _maybe_export_training_checkpoint)")
    if archs != [ARCHITECTURE] and keys:
        ev.append(f"architectures {archs}: rewritten as Automodel's vLLM helper does (serve_vllm.py "
                  "_vllm_config_updates)")
    confidence = 0.95 if archs == [ARCHITECTURE] and len(keys) == len(RECIPE_KEYS) else 0.85
    return FormatGuess(NAME, confidence, ev)


def vocab_record(ckpt: Checkpoint, layout: KeyLayout, meta: Path) -> str:
    """What the run's eagle_meta.pt (TrainEagle3Recipe._save_extra_state) says of the draft vocabulary, read by
    kconvert's static reader (never unpickled: SECURITY.md), against the d2t in the weights: set_vocab_mapping writes
    d2t[i] = selected_token_ids[i] - i, so the two agree in a draft Automodel wrote."""
    from kconvert.source.checkpoint import decode
    from kconvert.source.torch_zip import read_torch_zip

    rel = meta.name
    try:
        z = read_torch_zip(meta, rel)
        info = z.tensors.get("selected_token_ids")
        if info is None or info.dtype != "I64" or len(info.shape) != 1:
            return f"{rel}: no selected_token_ids vector of int64 in it"
        if "selected_token_ids" in z.unreadable:
            return f"{rel}: selected_token_ids not readable by byte range ({z.unreadable['selected_token_ids']})"
        with open(meta, "rb") as fh:
            fh.seek(info.start)
            data = fh.read(info.nbytes)
        ids = decode(data, info.dtype, info.shape)
    except (KConvertError, OSError) as e:
        return f"{rel}: not readable statically ({getattr(e, 'message', e)})"
    d2t_name = next((n for n in (layout.prefix + "d2t", "d2t") if n in ckpt.tensors), None)
    if d2t_name is None:
        # the older layout: the selection only here; Automodel's SGLang helper hands it to SGLang as
        # --speculative-token-map (serve_sglang.py _regenerate_token_map), vLLM reads d2t from the weights only
        return (f"{rel}: selected_token_ids of {len(ids)} target ids, and no d2t in the weights (Automodel's SGLang "
                f"helper passes them as --speculative-token-map; vLLM reads only a d2t in the weights)")
    try:
        d2t = ckpt.read_array(d2t_name)
    except KConvertError as e:
        return f"{rel}: selected_token_ids not compared with d2t ({e.message})"
    import numpy as np  # deferred, as decode's

    agree = d2t.shape == ids.shape and bool(np.array_equal(d2t.astype(np.int64) + np.arange(len(d2t)), ids))
    return (f"{rel}: selected_token_ids {'are' if agree else 'are NOT'} d2t + arange "
            f"({len(ids)} ids; set_vocab_mapping writes d2t[i] = selected_token_ids[i] - i)")


def _folder_files(folder: Folder) -> list[str]:
    names = [p.name for p in (folder.meta, folder.recipe) if p is not None]
    for extra in ("model/" + CONSOLIDATE, "optim", "rng", TOKEN_MAP):
        if (folder.root / extra).exists():
            names.append(extra)
    return names


def aux_convention(cfg: dict[str, Any], layout: KeyLayout) -> tuple[str | None, str]:
    if "eagle_aux_hidden_state_layer_ids" in cfg:
        return "input", "ids at the top-level key that only vLLM reads"
    # Automodel writes no ids into config.json (TrainEagle3Recipe.setup); ids there were written by someone else, in
    # a convention its code does not fix (a `kconvert fix` output records its own in kconvert.json).
    return None, "Automodel writes no aux ids into config.json; these were added by someone else"


def trained_layers(ckpt: Checkpoint, cfg: dict[str, Any]) -> ProducerLayers | None:
    """The layers the recipe trained on: `recipe_args.aux_layer_ids` of the run's config.yaml, else Automodel's
    default; without the checkpoint folder's config.yaml (a consolidated folder copied elsewhere, a Hub upload) the
    files cannot say whether the run named other layers."""
    folder = checkpoint_folder(ckpt)
    if folder is None or folder.recipe is None:
        return ProducerLayers(ids=None, default=None, convention="output",
                              source=f"no {RECIPE_FILE} beside the folder to say which layers the run named",
                              evidence=f"{CAPTURE}; [1, L//2-1, L-4] unless the recipe's aux_layer_ids named others, "
                                       f"which only the run's {RECIPE_FILE} records ({DEFAULT_IDS}), and there is no "
                                       f"{RECIPE_FILE} beside this folder")
    rel = f"{folder.recipe.parent.name}/{RECIPE_FILE}"
    try:
        recipe = _read_recipe(folder.recipe)
    except KConvertError as e:
        return ProducerLayers(ids=None, default=None, convention="output",
                              source=f"{rel} cannot be read ({e.message[:160]})",
                              evidence=f"{CAPTURE}; {rel} cannot be read ({e.message}), so whether the run named "
                                       "aux_layer_ids is not known")
    args = recipe.get("recipe_args") if isinstance(recipe.get("recipe_args"), dict) else {}
    ids = args.get("aux_layer_ids")
    if ids is None:
        return ProducerLayers(ids=None, default=_default_ids, convention="output", external=True,
                              source=f"{rel} names no aux_layer_ids: Automodel's default [1, L//2-1, L-4], outputs",
                              evidence=f"{rel} names no recipe_args.aux_layer_ids, so the run used "
                                       f"{DEFAULT_IDS} [1, L//2-1, L-4]; {CAPTURE}")
    if not (isinstance(ids, list) and ids and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
        return ProducerLayers(ids=None, default=None, convention="output",
                              source=f"{rel} recipe_args.aux_layer_ids is no list of layer indices",
                              evidence=f"{rel} recipe_args.aux_layer_ids is {ids!r:.200}, not a list of layer indices")
    return ProducerLayers(ids=list(ids), default=None, convention="output", external=True,
                          source=f"{rel} recipe_args.aux_layer_ids {ids}, outputs",
                          evidence=f"{rel} recipe_args.aux_layer_ids {ids} (the recipe passes them to its target "
                                   f"backend, train_eagle3.py _setup_colocated_target); {CAPTURE}")


def _read_recipe(path: Path) -> dict[str, Any]:
    """The recipe's config.yaml (checkpointing.py save_config: yaml.dump of the run's config), read with
    yaml.safe_load: plain data only, no tag that builds an object (a python/* tag is an error, never executed)."""
    import yaml  # deferred: only an Automodel checkpoint folder has a recipe to read

    raw = read_small_file(path, path.name)
    try:
        doc = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        # the problem only, not PyYAML's excerpt of the file
        raise InputError(f"{path.name}: not plain YAML ({getattr(e, 'problem', None) or type(e).__name__})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path.name}: not a YAML mapping")
    return doc
