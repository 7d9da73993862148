"""Drafts written by NVIDIA NeMo Automodel's own EAGLE-3 recipe (tests/data/producers-automodel, built by
tests/producers/build_automodel.py in a venv of its own: nemo-automodel 0.7.0; versions, calls and the facts read from
Automodel's code in provenance.json).

Expected values come from outside kconvert: the files (read here with json, yaml and safetensors), the facts
provenance.json recorded from Automodel's code when the files were written (its default_eagle3_aux_layer_ids, what its
serve helpers did), derivations written here (output of layer i = the stream entering layer i + 1, vLLM's numbering),
and the engines' own code as tests/data/vllm_oracle.json and tests/data/sglang_oracle.json recorded it over these very
drafts and over kconvert fix's outputs of them (tests/producers/automodel_drafts.py names them).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from safetensors import safe_open

from kconvert.cli import main
from tests.producers import automodel_drafts as am

ROOT = Path(__file__).resolve().parents[1]
DATA = am.DATA
PROV = json.loads((DATA / "provenance.json").read_text())
FACTS = PROV["producer_facts"]
STEP = am.STEP
RUNS = ("automodel-eagle3", "automodel-eagle3-ids", "automodel-eagle3-mla")
TARGET = {"automodel-eagle3": "llama", "automodel-eagle3-ids": "llama", "automodel-eagle3-mla": "deepseek",
          "automodel-vllm-export": "llama", "automodel-mla-vllm-export": "deepseek"}
VLLM = json.loads((ROOT / "tests" / "data" / "vllm_oracle.json").read_text())
SGLANG = json.loads((ROOT / "tests" / "data" / "sglang_oracle.json").read_text())


def epoch(name: str) -> Path:
    return DATA / name / STEP


def consolidated(name: str) -> Path:
    return epoch(name) / "model" / "consolidated"


def target(name: str) -> Path:
    return DATA / "targets" / TARGET[name]


def L(name: str) -> int:
    return json.loads((target(name) / "config.json").read_text())["num_hidden_layers"]


def run(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main([*args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def inspect(draft: Path, name: str, capsys, *args: str) -> dict:
    return run(capsys, "inspect", str(draft), "--target", str(target(name)), *args)[1]


def ids(rep: dict, severity: str | None = None) -> list[str]:
    return [f["id"] for f in rep["findings"] if severity is None or f["severity"] == severity]


def trained_streams(name: str) -> list[int]:
    """The streams the run trained on, in vLLM's numbering, from the run's own config.yaml and Automodel's default as
    provenance.json recorded its function's answer: the output of layer i is the stream entering layer i + 1."""
    recipe = yaml.safe_load((epoch(name) / "config.yaml").read_text())
    layers = recipe["recipe_args"].get("aux_layer_ids") or FACTS["default_aux_layer_ids"]["by_num_layers"][str(L(name))]
    return [i + 1 for i in layers]


def test_the_fixtures_record_automodel_that_wrote_them():
    assert PROV["packages"]["nemo-automodel"] == "0.7.0" and PROV["seed"] == 0
    total = sum(f.stat().st_size for f in DATA.rglob("*") if f.is_file())
    assert total < 3_000_000, total
    # Automodel's default, as its code states it (eagle/target.py default_eagle3_aux_layer_ids): [1, L//2-1, L-4],
    # written here from the formula, and what its function returned at the build; refused below 7 layers
    rec = FACTS["default_aux_layer_ids"]
    assert {n: [1, int(n) // 2 - 1, int(n) - 4] for n in rec["by_num_layers"]} == rec["by_num_layers"]
    assert all(v and v.startswith("ValueError") for v in rec["too_shallow"].values())
    assert rec["by_num_layers"]["8"] == [1, 3, 4] and rec["by_num_layers"]["61"] == [1, 29, 57]
    # the architectures the recipe and its helpers write
    assert FACTS["draft_architectures"] == {"recipe": ["LlamaEagle3DraftModel"], "serve_vllm": "LlamaForCausalLMEagle3",
                                           "serve_sglang": {"EAGLE3": "LlamaForCausalLMEagle3"}}
    assert FACTS["draft_classes"]["DeepseekV3ForCausalLM"] == "DeepseekV3Eagle3DraftModel"
    for name in RUNS:
        cfg = json.loads((consolidated(name) / "config.json").read_text())
        tcfg = json.loads((target(name) / "config.json").read_text())
        # the target's config, with the recipe's keys: no aux ids anywhere in the folder, num_hidden_layers the target's
        assert cfg["architectures"] == ["LlamaEagle3DraftModel"] and cfg["model_type"] == tcfg["model_type"]
        assert cfg["num_hidden_layers"] == tcfg["num_hidden_layers"]
        assert {"fc_norm", "norm_output", "parallel_drafting", "draft_vocab_size", "target_hidden_size"} <= set(cfg)
        texts = [p.read_text() for p in epoch(name).rglob("*.json")]
        assert not any("aux" in t for t in texts), name
        assert not (epoch(name) / "config.json").exists()
        # set_vocab_mapping: d2t[i] = selected_token_ids[i] - i, checked by the build with torch.load
        assert PROV["outputs"][name]["d2t_plus_arange_equals_selected_token_ids"] is True
    # Automodel's SGLang helper hands SGLang the epoch folder itself and writes nothing (it looks in model/ and the
    # folder, never model/consolidated/); its vLLM helper rewrites architectures only
    assert PROV["helpers"]["serve_sglang"]["returned"] == [".", None] and PROV["helpers"]["serve_sglang"]["wrote_nothing"]
    for name in ("automodel-vllm-export", "automodel-mla-vllm-export"):
        assert PROV["helpers"][name]["config_changes"] == {"architectures": ["LlamaForCausalLMEagle3"]}
    # the DCP-only run, consolidated offline by the function Automodel's tool calls, gives the inline export's names;
    # the line its checkpointer logs for such a final checkpoint names the script
    assert PROV["outputs"]["automodel-eagle3-dcp"]["offline_consolidation"]["same_tensor_names_as_inline_export"]
    assert FACTS["offline_consolidation_hint"].endswith("run bash %s.")


@pytest.mark.parametrize("name", RUNS)
def test_the_epoch_folder_and_model_consolidated_read_as_the_same_automodel_draft(name, capsys):
    reps = [inspect(p, name, capsys) for p in (epoch(name), epoch(name) / "model", consolidated(name))]
    assert len({json.dumps(r["findings"], sort_keys=True) for r in reps}) == 1
    rep = reps[0]
    assert rep["subject"]["source"] == str(consolidated(name))
    fmt = rep["format"]
    assert fmt["producer"] == "automodel" and fmt["confidence"] >= 0.9
    ev = " | ".join(fmt["evidence"])
    assert "LlamaEagle3DraftModel" in ev and "eagle_meta.pt" in ev and "config.yaml" in ev
    # kconvert's static reading of eagle_meta.pt agrees with the build's torch.load of it
    assert "selected_token_ids are d2t + arange" in ev
    with safe_open(str(consolidated(name) / "model-00001-of-00001.safetensors"), "np") as f:
        names = set(f.keys())
        d2t = f.get_tensor("d2t")
    assert (d2t + np.arange(len(d2t))).tolist() == PROV["outputs"][name]["eagle_meta"]["selected_token_ids"]
    # model.-prefixed names, lm_head/d2t/t2d at top level (LlamaEagle3DraftModel / DeepseekV3Eagle3DraftModel)
    assert {n for n in names if not n.startswith("model.")} == {"lm_head.weight", "d2t", "t2d"}
    d = rep["draft"]
    assert d["key_layout"] == "model.layers.0" and d["has_d2t"] and d["has_t2d"] and d["has_embeddings"]
    assert d["layer_family"] == ("mla" if name.endswith("mla") else "llama")


@pytest.mark.parametrize("name", RUNS)
def test_the_training_layers_come_from_config_yaml_or_automodels_default_and_say_which(name, capsys):
    rep = inspect(epoch(name), name, capsys, "--engine-version", "0.32/v1")
    streams = trained_streams(name)
    by = rep["draft"]["aux_layers_by_producer"]
    assert by["convention"] == "output"
    recipe = yaml.safe_load((epoch(name) / "config.yaml").read_text())["recipe_args"]
    if "aux_layer_ids" in recipe:
        assert by["ids"] == recipe["aux_layer_ids"] and "recipe_args.aux_layer_ids" in by["evidence"]
    else:
        assert by["ids"] is None and "names no recipe_args.aux_layer_ids" in by["evidence"]
        assert "default_eagle3_aux_layer_ids" in by["evidence"]
    [k401] = [f for f in rep["findings"] if f["id"] == "K401"]
    vllm_default = [2, L(name) // 2, L(name) - 3]  # interfaces.py get_eagle3_default_aux_hidden_state_layers
    assert str(streams) in k401["message"] and "config.yaml" in k401["message"]
    # the defaults feed the trained streams: info (fix writes them anyway); other streams: an error fix repairs
    assert k401["severity"] == ("info" if streams == vllm_default else "error")
    assert k401["fixable"]


def test_without_the_runs_config_yaml_the_layers_are_not_settled(tmp_path, capsys):
    # model/consolidated copied away from its checkpoint folder (as to the Hub): the recipe may have named other layers
    copy = tmp_path / "draft"
    shutil.copytree(consolidated("automodel-eagle3-ids"), copy)
    rep = inspect(copy, "automodel-eagle3-ids", capsys, "--engine-version", "0.32/v1")
    assert rep["format"]["producer"] == "automodel"
    [k401] = [f for f in rep["findings"] if f["id"] == "K401"]
    assert k401["severity"] == "warning" and k401["needs_decision"] and "no config.yaml beside" in k401["message"]


def test_a_dcp_only_checkpoint_is_explained_with_automodels_own_consolidation(capsys):
    folder = epoch("automodel-eagle3-dcp")
    assert not (folder / "model" / "consolidated").exists()
    script = (folder / "model" / "consolidate.sh").read_text()
    model_name = script.split('--model-name "', 1)[1].split('"', 1)[0]
    for given in (folder, folder / "model"):
        code, doc = run(capsys, "inspect", str(given))
        assert code == 2, doc
        text = doc["error"]["message"] + " " + (doc["error"].get("hint") or "")
        assert "sharded (DCP)" in text and "#2898" in text
        # the command Automodel's checkpointer logs (checkpointing.py _maybe_log_final_offline_consolidation_hint:
        # "run bash <model>/consolidate.sh") and the tool it runs, with this folder's paths
        assert f"bash {folder / 'model' / 'consolidate.sh'}" in text
        assert (f"python tools/offline_hf_consolidation.py --backend gloo --model-name {model_name} --input-dir "
                f"{folder / 'model'} --output-dir {folder / 'model' / 'consolidated'}") in text


def test_automodels_own_vllm_export_keeps_the_targets_layer_count_and_the_llama_class(capsys):
    # serve_vllm.py _vllm_config_updates: architectures LlamaForCausalLMEagle3 whatever the layer, num_hidden_layers
    # left; vLLM builds that many layers and loads one (vllm_oracle.json)
    ans = VLLM["drafts"]["automodel/automodel-vllm-export"]["answers"]["0.32"]["model"]
    assert {p.split(".")[2] for p in ans["params_not_loaded"] if p.startswith("model.layers.")} == \
        {str(i) for i in range(1, L("automodel-vllm-export"))}
    rep = inspect(DATA / "automodel-vllm-export", "automodel-vllm-export", capsys)
    assert rep["format"]["producer"] == "automodel"
    assert "rewritten as Automodel's vLLM helper does" in " ".join(rep["format"]["evidence"])
    assert "K103" in ids(rep, "error") and "K201" not in ids(rep)
    # its MLA export: the Llama class over MLA tensors, and model_type deepseek_v3, which vLLM refuses as an MTP model
    raised = VLLM["drafts"]["automodel/automodel-mla-vllm-export"]["answers"]["0.32"]["served"]["raises"]
    assert "Eagle3DeepSeekMTPModel" in raised
    rep = inspect(DATA / "automodel-mla-vllm-export", "automodel-mla-vllm-export", capsys)
    assert {"K101", "K102", "K103"} <= set(ids(rep, "error"))


@pytest.mark.parametrize("name", am.FIXED_FROM)
def test_fix_writes_a_draft_vllm_loads_feeding_the_trained_streams(name):
    """kconvert fix --engine vllm of the epoch folder, as vLLM's own code took it (vllm_oracle.json): the class of the
    draft's layer is built, every weight lands, and both runners feed the streams the run trained on."""
    raw = VLLM["drafts"][f"automodel/{name}"]["answers"]
    for rel in ("0.32", "0.33"):
        assert "not supported" in raw[rel]["served"]["raises"]  # Automodel's folder as written: refused
        a = VLLM["drafts"][f"automodel/fixed-vllm/{name}"]["answers"][rel]
        assert "raises" not in a["served"] and "load_weights" not in a["model"], a
        want = "Eagle3DeepseekV2ForCausalLM" if name.endswith("mla") else "Eagle3LlamaForCausalLM"
        assert a["model"]["class"] == want and a["model"]["dropped"] == ["t2d"]
        assert not [p for p in a["model"]["params_not_loaded"] if "layers." in p]
        assert a["v1"] == a["v2"] == trained_streams(name)


@pytest.mark.parametrize("name", am.FIXED_FROM)
def test_fix_writes_a_draft_sglang_loads_feeding_the_trained_streams(name):
    """kconvert fix --engine sglang, as SGLang 0.5.23's own code took it (sglang_oracle.json): every tensor loads
    (d2t becomes hot_token_id, t2d skipped) and the target's capture collects the streams the run trained on."""
    d = SGLANG["drafts"][f"automodel/fixed-sglang/{name}"]
    assert d["build"]["outcome"] == "built"
    for n, r in d["tensors"].items():
        want = "renamed" if n == "d2t" else "dropped" if n == "t2d" else "loaded"
        assert r["outcome"] == want, (n, r)
    assert d["capture"]["layers_to_capture"] == trained_streams(name)
    raw = SGLANG["drafts"][f"automodel/{name}"]
    if name.endswith("mla"):
        # the MLA draft as Automodel wrote it does not even build: num_hidden_layers is the target's
        # (deepseek_eagle3.py: "EAGLE3 currently only supports 1 layer"), kconvert's K103 on the SGLang row
        assert raw["build"] == {"outcome": "raises", "error": "ValueError: EAGLE3 currently only supports 1 layer"}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("name", am.FIXED_FROM)
def test_fix_of_the_epoch_folder_inspects_clean_for_its_engine(name, engine, tmp_path, capsys):
    out = tmp_path / "out"
    code, doc = run(capsys, "fix", str(epoch(name)), "-o", str(out), "--engine", engine, "--engine-version",
                    am.FIX_ROWS[engine], "--target", str(target(name)))
    assert code == 0, doc
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["architectures"] != ["LlamaEagle3DraftModel"]
    # the ids are written, in the engine's convention, so that the output says what the record beside it said
    written = cfg.get("eagle_aux_hidden_state_layer_ids") or cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert written == ([s - 1 for s in trained_streams(name)] if engine == "sglang" else trained_streams(name))
    rep = inspect(out, name, capsys, "--engine", engine, "--engine-version", am.FIX_ROWS[engine])
    assert rep["verdict"] == "pass" and not ids(rep, "error") and not ids(rep, "warning"), rep["findings"]


def older_layout(folder: Path, name: str = "automodel-eagle3") -> Path:
    """The older layout Automodel's SGLang helper still reads (serve_sglang.py _maybe_export_training_checkpoint,
    _find_eagle_meta, _regenerate_token_map): config.json and the draft's state dict as `draft_model.pt` (a hand
    export: torch.save of the tensors its helper then torch.loads and saves as safetensors), the vocabulary record as
    `eagle3_meta.pt`, and the token map that helper writes (torch.save of selected_token_ids). Made here from the
    recipe's files, since no 0.7.0 code writes this layout."""
    import torch
    from safetensors.torch import load_file

    folder.mkdir()
    shutil.copy(consolidated(name) / "config.json", folder / "config.json")
    torch.save(load_file(str(consolidated(name) / "model-00001-of-00001.safetensors")), folder / "draft_model.pt")
    shutil.copy(epoch(name) / "eagle_meta.pt", folder / "eagle3_meta.pt")
    meta = torch.load(folder / "eagle3_meta.pt", map_location="cpu", weights_only=True)
    torch.save(meta["selected_token_ids"], folder / "speculative_token_map.pt")
    return folder


def test_the_older_draft_model_pt_layout_is_recognised_and_its_records_are_no_weights(tmp_path, capsys):
    folder = older_layout(tmp_path / "old")
    rep = inspect(folder, "automodel-eagle3", capsys)
    assert rep["format"]["producer"] == "automodel"
    ev = " | ".join(rep["format"]["evidence"])
    assert "draft_model.pt: the older hand-exported layout" in ev
    assert "eagle3_meta.pt: selected_token_ids are d2t + arange" in ev
    # the weights are draft_model.pt's alone (read statically); the vocabulary record and SGLang's token map are
    # pickles (K001 names them) but no weights, so the bare tensor of speculative_token_map.pt stops nothing
    with safe_open(str(consolidated("automodel-eagle3") / "model-00001-of-00001.safetensors"), "np") as f:
        assert rep["draft"]["num_tensors"] == len(list(f.keys()))
    [k001] = [f for f in rep["findings"] if f["id"] == "K001"]
    assert {"draft_model.pt", "eagle3_meta.pt", "speculative_token_map.pt"} <= {e["where"] for e in k001["evidence"]}
    # fix converts draft_model.pt only when asked (--from-pickle) and then writes what the engine loads
    out = tmp_path / "out"
    code, doc = run(capsys, "fix", str(folder), "-o", str(out), "--target", str(target("automodel-eagle3")))
    assert code != 0 and "--from-pickle" in json.dumps(doc)
    code, doc = run(capsys, "fix", str(folder), "-o", str(out), "--target", str(target("automodel-eagle3")),
                    "--from-pickle")
    assert code == 0, doc
    assert not [p.name for p in out.iterdir() if p.suffix == ".pt"]
    rep = inspect(out, "automodel-eagle3", capsys)
    assert rep["verdict"] == "pass" and not ids(rep, "error"), rep["findings"]


def test_no_other_producers_draft_reads_as_automodel_and_every_automodel_one_does():
    """Over every draft another producer's code wrote (tests/data/producers, producers-modelopt) and every shipped
    example, detection names its own producer, never Automodel; every Automodel draft (kconvert fix's outputs
    apart, whose kconvert.json names it) reads as Automodel's."""
    from kconvert.formats.canonical import read_draft
    from kconvert.source.checkpoint import load_folder

    others = [p for d in ("tests/data/producers", "tests/data/producers-modelopt", "examples/tiny/drafts",
                          "examples/tiny/broken") for p in sorted((ROOT / d).iterdir()) if (p / "config.json").exists()]
    assert len(others) > 10
    for folder in others:
        assert read_draft(load_folder(folder, ref=str(folder))).format.producer != "automodel", folder
    for name, (rel, _) in am.WRITTEN.items():
        folder = DATA / rel
        assert read_draft(load_folder(folder, ref=str(folder))).format.producer == "automodel", name


def test_a_config_yaml_that_asks_to_build_objects_is_refused_and_never_run(tmp_path, capsys):
    """config.yaml is read with yaml.safe_load (SECURITY.md): a python/* tag that would call os.system is an unreadable
    record (the layers stay unsettled), never executed."""
    copy = tmp_path / STEP
    shutil.copytree(epoch("automodel-eagle3-ids"), copy)
    marker = tmp_path / "ran"
    (copy / "config.yaml").write_text(f"recipe_args: !!python/object/apply:os.system ['touch {marker}']\n")
    rep = inspect(copy, "automodel-eagle3-ids", capsys, "--engine-version", "0.32/v1")
    assert not marker.exists()
    [k401] = [f for f in rep["findings"] if f["id"] == "K401"]
    assert k401["severity"] == "warning" and "config.yaml cannot be read" in k401["message"], k401["message"]


def test_the_matrix_gathers_an_epoch_folder_as_the_draft_inside_and_keeps_its_step():
    from kconvert.matrix.gather import gather

    entries = {e.draft: e for e in gather([str(epoch("automodel-eagle3")), str(epoch("automodel-eagle3-dcp"))])}
    e = entries[str(consolidated("automodel-eagle3"))]
    assert e.error is None and e.folder == consolidated("automodel-eagle3") and e.step == 8  # epoch_1_step_8
    dcp = entries[str(epoch("automodel-eagle3-dcp"))]
    assert "sharded (DCP)" in dcp.error and dcp.step == 8
