"""Drafts written by the producers' own code (tests/data/producers, built by tests/producers/build.py in a venv of
its own: specforge 0.2.0, speculators 0.9.0; versions and code paths in provenance.json).

The expected values come from the producers: the files themselves (read with safetensors and json, not kconvert),
and the facts provenance.json records from the producers' code when the files were written (SpecForge's default
capture layers as `resolve_eagle_capture_layers` returns them, the vocabulary SpecForge's preprocessing chose).
kconvert's `inspect` must read each file the way its producer wrote it. About 2 s.
"""
from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from kconvert.cli import main

DATA = Path(__file__).parent / "data" / "producers"
PROV = json.loads((DATA / "provenance.json").read_text())
FACTS = PROV["producer_facts"]


def tensors(name: str) -> dict[str, np.ndarray]:
    import torch

    out = {}
    with safe_open(str(DATA / name / "model.safetensors"), "pt") as f:
        for k in f.keys():
            t = f.get_tensor(k)
            out[k] = t.to(torch.float32).numpy() if t.is_floating_point() else t.numpy()
    return out


def dtypes(name: str) -> dict[str, str]:
    with safe_open(str(DATA / name / "model.safetensors"), "pt") as f:
        return {k: f.get_slice(k).get_dtype() for k in f.keys()}


def config(name: str) -> dict:
    return json.loads((DATA / name / "config.json").read_text())


_reports: dict[str, dict] = {}


def report(name: str, capsys) -> dict:
    if name not in _reports:
        capsys.readouterr()
        main(["inspect", str(DATA / name), "--json"])
        _reports[name] = json.loads(capsys.readouterr().out)
    return _reports[name]


def test_the_fixtures_record_the_producers_that_wrote_them():
    assert PROV["packages"]["specforge"] == "0.2.0" and PROV["packages"]["speculators"] == "0.9.0"
    assert all(o["returncode"] == 0 for o in PROV["outputs"].values()), PROV["outputs"]
    total = sum(f.stat().st_size for f in DATA.rglob("*") if f.is_file())
    assert total < 2_000_000


def test_specforge_default_capture_layers_are_what_its_code_says_and_what_kconvert_assumes(capsys):
    # resolve_eagle_capture_layers, with no ids in the run or the draft config: [1, L//2 - 1, L - 4];
    # for the 8-layer target: [1, 3, 4]
    fact = FACTS["specforge_default_capture_layers"]
    L = fact["target_num_hidden_layers"]
    assert fact["value"] == [1, L // 2 - 1, L - 4] == [1, 3, 4]
    # SpecForge's export writes no ids when the draft config names none; kconvert says so (K401) and, for a
    # SpecForge draft, names SpecForge's default in its evidence for the output convention
    assert "eagle_config" not in config("specforge-sglang")
    rep = report("specforge-sglang", capsys)
    assert rep["format"]["producer"] == "specforge"
    assert rep["draft"]["aux_layer_ids"] is None and "K401" in {f["id"] for f in rep["findings"]}
    ids = report("specforge-sglang-ids", capsys)
    k404 = [f for f in ids["findings"] if f["id"] == "K404"]
    # the message names SpecForge's code among the signs; the evidence says it whole, the default included
    assert k404 and "specforge's code" in k404[0]["message"]
    assert any(e["where"] == "specforge's code" and "[1, L//2-1, L-4]" in e["observed"] and e["expected"] == "output"
               for e in k404[0]["evidence"]), k404[0]["evidence"]


def test_specforge_sglang_export_is_its_serving_layout_and_kconvert_reads_it_so(capsys):
    names = set(dtypes("specforge-sglang"))
    required = set(FACTS["specforge_sglang_serving_keys"]["value"])  # export_to_sglang's own list
    assert required <= names and not any("embed" in n for n in names)
    assert all(n in required or n.startswith("midlayer.") for n in names)
    rep = report("specforge-sglang", capsys)["draft"]
    assert rep["key_layout"] == "midlayer" and rep["has_d2t"] and rep["has_t2d"] and not rep["has_embeddings"]
    # the draft was built in bf16 (materialize_draft: torch_dtype=torch.bfloat16)
    floats = [d for n, d in dtypes("specforge-sglang").items() if n not in ("d2t", "t2d")]
    assert set(floats) == {"BF16"} and rep["tensor_dtypes"] == {"BF16": len(floats)}
    assert rep["draft_vocab_size"] == PROV["draft_config_given_to_specforge"]["draft_vocab_size"]


def test_specforge_hf_export_adds_the_targets_embedding_and_nothing_else():
    sg, hf = tensors("specforge-sglang"), tensors("specforge-hf")
    assert set(hf) - set(sg) == {"embed_tokens.weight"}
    assert all(np.array_equal(sg[k], hf[k]) for k in sg)


def test_specforge_d2t_holds_offsets_and_kconvert_reads_them_as_offsets(capsys):
    t = tensors("specforge-sglang")
    used = FACTS["specforge_d2t"]["draft_ids_to_target_ids"]  # the vocabulary SpecForge's preprocessing chose
    # process_token_dict_to_mappings: d2t[i] = used[i] - i (offsets), t2d[j] = j in used
    assert (t["d2t"] + np.arange(len(used))).tolist() == used
    assert np.flatnonzero(t["t2d"]).tolist() == used
    rep = report("specforge-sglang", capsys)
    # no d2t finding: kconvert reads SpecForge's offsets as offsets (target = draft id + d2t, vLLM's reading)
    assert not [f for f in rep["findings"] if f["id"].startswith("K50")], rep["findings"]


def test_speculators_convert_passes_the_ids_it_is_given_through_unchanged(capsys):
    ids = PROV["explicit_ids_variant"]
    assert config("speculators-from-specforge-kwargs")["eagle_aux_hidden_state_layer_ids"] == ids
    rep = report("speculators-from-specforge-kwargs", capsys)
    assert rep["format"]["producer"] == "speculators"
    assert rep["draft"]["aux_layer_ids"] == ids and rep["draft"]["aux_convention"] == "input"


def test_speculators_convert_drops_the_ids_of_a_specforge_eagle_config_and_kconvert_says_so(capsys):
    # the SpecForge draft names [2, 4, 5] in eagle_config; speculators 0.9.0's converter reads ids only from its
    # arguments (eagle3_converter.py), so the converted draft has none: kconvert must flag that, not invent ids
    assert config("specforge-sglang-ids")["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == \
        PROV["explicit_ids_variant"]
    assert config("speculators-from-specforge-ids")["eagle_aux_hidden_state_layer_ids"] is None
    rep = report("speculators-from-specforge-ids", capsys)
    assert rep["draft"]["aux_layer_ids"] is None and "K401" in {f["id"] for f in rep["findings"]}


def test_speculators_writes_float32_from_a_bf16_specforge_draft_with_the_same_values(capsys):
    src, out = tensors("specforge-sglang"), tensors("speculators-from-specforge")
    assert set(dtypes("specforge-sglang").values()) == {"BF16", "I64", "BOOL"}
    assert set(dtypes("speculators-from-specforge").values()) == {"F32", "I64", "BOOL"}
    assert config("speculators-from-specforge")["dtype"] == "float32"
    # midlayer.* -> layers.0.*, every value carried over exactly (bf16 -> f32 is exact)
    renamed = {k.replace("midlayer.", "layers.0."): v for k, v in src.items()}
    assert set(renamed) == set(out) and all(np.array_equal(renamed[k], out[k]) for k in out)
    rep = report("speculators-from-specforge", capsys)["draft"]
    assert rep["dtype"] == "float32" and rep["key_layout"] == "layers.0"
    assert rep["tensor_dtypes"] == {"F32": len(out) - 2}


def test_speculators_remote_code_reference_is_flagged_and_never_imported(capsys):
    import sys

    # speculators writes auto_map -> config.Eagle3SpeculatorConfig (and a config.py, not shipped: library code)
    assert config("speculators-from-specforge")["auto_map"] == {"": "config.Eagle3SpeculatorConfig"}
    before = set(sys.modules)
    rep = report("speculators-from-specforge", capsys)
    assert "K002" in {f["id"] for f in rep["findings"]}
    assert not [m for m in set(sys.modules) - before if m == "config" or m.endswith(".config.py")]


@pytest.mark.parametrize("name", ["specforge-sglang", "specforge-hf", "speculators-from-specforge",
                                  "speculators-from-specforge-kwargs", "speculators-from-specforge-defaults"])
def test_kconvert_sees_every_tensor_the_producer_wrote(name, capsys):
    rep = report(name, capsys)
    assert rep["draft"]["num_tensors"] == len(dtypes(name))


def target_folder(tmp_path: Path) -> Path:
    """The tiny target the fixtures were built against (provenance.json records its config)."""
    t = tmp_path / "target"
    t.mkdir()
    (t / "config.json").write_text(json.dumps(PROV["target"]))
    return t


def inspect_with_target(draft: Path, tmp_path: Path, capsys) -> dict:
    capsys.readouterr()
    main(["inspect", str(draft), "--target", str(target_folder(tmp_path)), "--json"])
    return json.loads(capsys.readouterr().out)


def test_speculators_convert_marks_its_output_and_kconvert_reads_the_marks(capsys):
    # eagle3_converter.py (speculators 0.9.0) saves its legacy Eagle3Speculator class (:12, :195), and casts to the
    # source's `torch_dtype` only (:184, :223-225); SpecForge's transformers-5 export names `dtype`, so bf16 -> f32
    src = config("specforge-sglang")
    assert src["dtype"] == "bfloat16" and "torch_dtype" not in src
    for name in ("speculators-from-specforge", "speculators-from-specforge-defaults"):
        out = config(name)
        assert out["architectures"] == FACTS["speculators_convert_habits"]["architectures"] == ["Eagle3Speculator"]
        assert out["dtype"] == "float32" and set(dtypes(name).values()) == {"F32", "I64", "BOOL"}
        assert not {"dtype", "torch_dtype"} & set(out["transformer_layer_config"])
        fmt = report(name, capsys)["format"]
        assert fmt["producer"] == "speculators" and fmt["converted_by"] == "speculators convert"
    # a SpecForge export is not a conversion
    assert report("specforge-sglang", capsys)["format"]["converted_by"] is None


def test_a_converted_draft_with_specforges_default_ids_is_not_settled_silently(tmp_path, capsys):
    # The converter writes the ids it is given unchanged (eagle3_converter.py:146): given SpecForge's own capture
    # defaults for the 8-layer target (resolve_eagle_capture_layers: [1, L//2-1, L-4] = [1, 3, 4], outputs of
    # those layers), its output holds [1, 3, 4] in a format vLLM reads as inputs of [1, 3, 4]: one layer early.
    default = FACTS["specforge_default_capture_layers"]["value"]
    assert FACTS["speculators_convert_habits"]["specforge_default_ids_passed"] == default == [1, 3, 4]
    assert config("speculators-from-specforge-defaults")["eagle_aux_hidden_state_layer_ids"] == default
    rep = inspect_with_target(DATA / "speculators-from-specforge-defaults", tmp_path, capsys)
    k404 = [f for f in rep["findings"] if f["id"] == "K404"]
    assert k404 and k404[0]["severity"] == "warning", rep["findings"]
    # both readings are evidence, with the streams each means against those vLLM feeds ([1, 3, 4] as written):
    # input = [1, 3, 4], output = [2, 4, 5]
    ev = {e["where"]: (e["observed"], e["expected"]) for e in k404[0]["evidence"]}
    assert ev["read as input"] == (default, default) and ev["read as output"] == (default, [i + 1 for i in default])
    # the message names what points each way, the converter among them; the evidence says each whole
    assert "speculators convert" in k404[0]["message"] and "no public run measured either reading" in k404[0]["message"]
    assert any(w.endswith("speculators convert") and "for a target of 8 layers" in o and x == "output"
               for w, (o, x) in ev.items())
    assert k404[0]["needs_decision"]
    # the route to settle it is the next lines': the live diagnosis on vLLM and the offline one, on the draft as it
    # is (it passes statically)
    steps = [s["command"] for s in rep["next_steps"]]
    draft = str(DATA / "speculators-from-specforge-defaults")
    assert any(c.startswith(f"kconvert verify {draft} ") and "--diagnose" in shlex.split(c) for c in steps), steps
    assert any(c.startswith(f"kconvert score {draft} ") and "--diagnose" in shlex.split(c) for c in steps), steps
    # and each runs as printed (tests/printed.py: verify as a dry run, score up to the trace it names)
    from tests import printed

    c = printed.Collector()
    c.emit(["inspect", draft, "--target", str(tmp_path / "target")], "inspect", tmp_path)
    ran = {shlex.split(o.printed.command)[1] for o in c.outcomes}
    assert not c.failed() and {"verify", "score"} <= ran, c.summary()


def test_a_converted_draft_with_other_ids_keeps_the_formats_convention(tmp_path, capsys):
    # [2, 4, 5] are no producer's output-convention default for 8 layers ([1, 3, 4]): the format's reading stands
    rep = inspect_with_target(DATA / "speculators-from-specforge-kwargs", tmp_path, capsys)
    assert rep["format"]["converted_by"] == "speculators convert"
    assert rep["draft"]["aux_convention"] == "input" and not [f for f in rep["findings"] if f["id"] == "K404"]


def test_a_speculators_trained_draft_with_those_ids_is_not_taken_for_a_conversion(tmp_path, capsys):
    # speculators' own trainer saves Eagle3DraftModel (speculators 0.9.0 speculators/models/eagle3/core.py;
    # transformers' save_pretrained writes the class name) and trains in vLLM's numbering: the same files under that
    # class carry no conversion habit, so the format's input reading settles [1, 3, 4]
    draft = tmp_path / "draft"
    shutil.copytree(DATA / "speculators-from-specforge-defaults", draft)
    cfg = config("speculators-from-specforge-defaults")
    cfg["architectures"] = ["Eagle3DraftModel"]
    (draft / "config.json").write_text(json.dumps(cfg))
    rep = inspect_with_target(draft, tmp_path, capsys)
    assert rep["format"]["converted_by"] is None
    assert not [f for f in rep["findings"] if f["id"] == "K404"], rep["findings"]


def test_fix_leaves_a_converted_drafts_ambiguous_ids_as_is_until_the_convention_is_decided(tmp_path, capsys):
    target = target_folder(tmp_path)
    src = DATA / "speculators-from-specforge-defaults"
    capsys.readouterr()
    main(["fix", str(src), "-o", str(tmp_path / "out"), "--target", str(target), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert "K404" in [f["id"] for f in doc["fix"]["left_as_is"]] and doc["fix"]["ops"] == []
    assert not (tmp_path / "out").exists()  # nothing to write: the ids stay as the converter wrote them
    # decided as SpecForge captured them (outputs of layers 1, 3, 4 = inputs of layers 2, 4, 5 in vLLM's numbering)
    main(["fix", str(src), "-o", str(tmp_path / "out2"), "--target", str(target), "--aux-convention", "output",
          "--json"])
    capsys.readouterr()
    out = json.loads((tmp_path / "out2" / "config.json").read_text())
    captured = FACTS["specforge_default_capture_layers"]["value"]
    assert out["eagle_aux_hidden_state_layer_ids"] == [i + 1 for i in captured]
