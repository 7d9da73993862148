"""kconvert's SGLang expectations held against what SGLang 0.5.23's own code did (tests/data/sglang_oracle.json,
recorded by tests/sglang_oracle/record.py; README there). No SGLang is needed here: the recording is the oracle,
the `sglang 0.5.23` engine row (kconvert/engines/expectations.py) is what is tested. ~1 s.
"""
from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from kconvert.engines.expectations import engine_rules, target_family
from kconvert.targets import from_config, load_target
from tests.producers import automodel_drafts

ROOT = Path(__file__).resolve().parents[1]
REC = json.loads((ROOT / "tests" / "data" / "sglang_oracle.json").read_text())
ROW = engine_rules("sglang", "0.5.23")
# SGLang's model file -> the target it stands for (model_type as its config.json writes it)
MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "deepseek_v2": "deepseek_v3",
               "glm4_moe": "glm4_moe", "glm4_moe_lite": "glm4_moe_lite", "minimax_m2": "minimax_m2",
               "gpt_oss": "gpt_oss"}
DRAFTS = {k: v for k, v in REC["drafts"].items()}


def _load(ref: str):
    """The target a recorded draft stood beside: an example folder, a profile, or the producers' tiny target, whose
    config tests/data/producers/provenance.json records."""
    if ref.startswith("tests/data/producers/provenance.json"):
        prov = json.loads((ROOT / "tests" / "data" / "producers" / "provenance.json").read_text())
        return from_config(prov["target"], name="producers-target", origin=ref)
    return load_target(str(ROOT / ref) if ref.startswith("examples/") else ref)


def _target(model_type: str, num_layers: int):
    return SimpleNamespace(model_type=model_type, text_model_type=None, mla=None, num_hidden_layers=num_layers)


def test_the_recording_is_sglang_0_5_23_and_names_the_source_line_of_each_behaviour():
    assert REC["versions"]["sglang"] == "0.5.23" == ROW.version
    where = re.compile(r"^python/sglang/srt/models/[a-z0-9_]+\.py:\d+$")
    assert all(where.match(c["source"]) for c in REC["capture"].values())
    assert all(where.match(d["loader"]) for d in DRAFTS.values())
    # every zoo replica and every shipped example draft is in it
    # (a zoo row of another method, METHOD in its build.py as its record states, has no EAGLE-3 loader to record)
    zoo = {p.parent.name for p in (ROOT / "tests" / "zoo").glob("*/build.py")
           if getattr(importlib.import_module(f"tests.zoo.{p.parent.name}.build"), "METHOD", "eagle3") == "eagle3"}
    examples = {f"{p.parent.name}/{p.name}" for p in (ROOT / "examples" / "tiny").glob("*/*")
                if p.parent.name in ("drafts", "broken") and (p / "config.json").exists()}
    assert {k.split("/", 1)[1] for k in DRAFTS if k.startswith("zoo/")} == zoo
    assert {k.split("/", 1)[1] for k in DRAFTS if k.startswith("examples/")} == examples
    # and every draft the producers' own code wrote (tests/data/producers)
    producers = {p.name for d in ("producers", "producers-modelopt") for p in (ROOT / "tests" / "data" / d).iterdir()
                 if (p / "config.json").exists()}
    assert {k.split("/", 1)[1] for k in DRAFTS if k.startswith("producers/")} == producers
    # and NeMo Automodel's drafts, with kconvert fix's output of each for each engine
    # (tests/producers/automodel_drafts.py)
    assert {k.split("/", 1)[1] for k in DRAFTS if k.startswith("automodel/")} == set(automodel_drafts.keys())


@pytest.mark.parametrize("family", sorted(MODEL_TYPES))
def test_the_aux_rule_of_each_target_family_is_the_one_its_capture_code_applies(family):
    rec = REC["capture"][family]
    for probe in rec["probes"]:
        target = _target(MODEL_TYPES[family], probe["num_layers"])
        if probe["ids"] is None:
            want = ROW.default_physical_ids(probe["num_layers"])
        else:
            want = ROW.physical_ids(probe["ids"], target)
        assert want == probe["layers_to_capture"], (family, rec["source"], probe)


def test_the_first_id_rule_is_deepseek_and_glm4_moe_lite_only():
    # sglang PR #25454's rule, as the recording shows it: [2, 30, 58] as given only there
    as_given = {f for f, c in REC["capture"].items()
                if next(p for p in c["probes"] if p["ids"] == [2, 30, 58])["layers_to_capture"] == [2, 30, 58]}
    assert as_given == {"deepseek_v2", "glm4_moe_lite"}
    assert {target_family(_target(MODEL_TYPES[f], 61)) for f in as_given} == {"deepseek"}
    assert ROW.aux_rule_for(_target("llama", 32)) == "output"
    assert engine_rules("sglang", "post-25454").aux_rule_for(_target("qwen3", 36)) == "output"


@pytest.mark.parametrize("key", sorted(k for k, d in DRAFTS.items() if d.get("capture")))
def test_every_drafts_ids_are_fed_to_the_streams_sglangs_capture_chose(key):
    d = DRAFTS[key]
    t = d["target"]
    target = _load(t["ref"])
    assert target_family(target) == t["kconvert_family"]
    ids = d["aux_ids"]
    fed = ROW.physical_ids(ids, target) if ids is not None else ROW.default_physical_ids(target.num_hidden_layers)
    assert fed == d["capture"]["layers_to_capture"], key


def _loaded(d: dict) -> dict[str, str]:
    return {n: r["outcome"] for n, r in d.get("tensors", {}).items()}


@pytest.mark.parametrize("key", sorted(k for k, d in DRAFTS.items() if d.get("tensors")))
def test_tensor_names_in_a_layout_the_row_accepts_load_and_d2t_becomes_hot_token_id(key):
    d = DRAFTS[key]
    fam = "mla" if d["draft_class"] == "Eagle3DeepseekV2ForCausalLM" else "llama"
    for name, outcome in _loaded(d).items():
        if name in ("d2t", "model.d2t"):
            assert outcome == "renamed" and d["tensors"][name]["into"] == "hot_token_id"
        elif name.endswith("t2d"):
            assert outcome == "dropped"  # skipped by both loaders
        elif name.startswith(ROW.layer_names[fam]) or name.split(".")[0] in ("fc", "norm", "lm_head", "embed_tokens"):
            assert outcome == "loaded", (key, name, d["tensors"][name])


def test_model_prefixed_names_load_in_the_llama_draft_and_are_all_skipped_by_the_mla_draft():
    probes = {p["draft_class"]: p["results"]["model.-prefixed"] for p in REC["name_probes"]}
    llama = probes["LlamaForCausalLMEagle3"]
    mla = probes["Eagle3DeepseekV2ForCausalLM"]
    assert {n for n, r in llama.items() if r["outcome"] == "dropped"} == {"model.lm_head.weight", "model.t2d"}
    assert {r["outcome"] for n, r in mla.items() if not n.endswith("d2t")} == {"dropped"}
    assert ROW.model_prefix_ok == frozenset({"llama"})


def test_both_layer_spellings_load_and_extra_names_are_dropped_silently():
    for probe in REC["name_probes"]:
        fam = "mla" if probe["draft_class"] == "Eagle3DeepseekV2ForCausalLM" else "llama"
        (other,) = [v for k, v in probe["results"].items() if "instead of" in k]
        assert {r["outcome"] for r in other.values()} == {"loaded"}
        assert set(ROW.layer_names[fam]) >= {"midlayer."} and any(p.startswith("layers.") for p in ROW.layer_names[fam])
        extra = probe["results"]["extra names"]
        for name in ("layers.1.input_layernorm.weight", "rotary_emb.inv_freq", "unknown.weight", "fc_norm.0.weight"):
            assert extra[name]["outcome"] == "dropped", (fam, name)  # no error: SGLang skips unknown names


def test_multi_layer_fc_norm_and_norm_before_fc_are_as_recorded():
    cp = REC["config_probes"]
    assert cp["llama multi-layer"]["outcome"] == "built"
    assert cp["llama multi-layer"]["tensors"]["layers.1.input_layernorm.weight"]["outcome"] == "loaded"
    assert cp["mla multi-layer"]["outcome"] == "raises" and "only supports 1 layer" in cp["mla multi-layer"]["error"]
    assert ROW.multi_layer == frozenset({"llama"})
    for fam in ("llama", "mla"):
        assert {r["outcome"] for r in cp[f"{fam} fc_norm"]["tensors"].values()} == {"loaded"}
    assert ROW.fc_norm is True
    nbf = {fam: cp[f"{fam} norm_before_fc"]["tensors"]["input_norm.weight"]["outcome"] == "loaded"
           for fam in ("llama", "mla")}
    assert nbf == ROW.norm_before_fc == {"llama": True, "mla": False}


def test_speculators_configs_do_not_build_in_sglang():
    spec = [d for d in DRAFTS.values() if "transformer_layer_config" in d["config_keys"]]
    assert spec and all(d["build"]["outcome"] == "raises" for d in spec)
    assert ROW.reads_speculators_format is False


@pytest.mark.parametrize("i", range(len(REC["launch_lines"])))
def test_the_printed_launch_line_parses_in_sglangs_own_launcher_with_the_intended_settings(i):
    # sglang.launch_server's prepare_server_args + resolve_once ran on the very line kconvert prints
    from kconvert.engines.serve_lines import sglang_next_lines

    rec = REC["launch_lines"][i]
    assert "error" not in rec, rec.get("error")
    assert sglang_next_lines(rec["draft"], rec["target"], k=rec["k"], tp=1) == rec["lines"]
    k = rec["k"]
    si = rec["server_info"]
    got = tuple(si[key] for key in ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                                    "speculative_num_draft_tokens", "tp_size", "model_path",
                                    "speculative_draft_model_path"))
    assert got == ("EAGLE3", k, 1, k + 1, 1, rec["target"], rec["draft"])
    # and kconvert's server-side reading of those settings gives back k draft tokens per verify step
    from kconvert.runners.sglang_server import num_speculative_tokens, parse_server_info

    assert num_speculative_tokens(parse_server_info(rec["server_info"])) == k
