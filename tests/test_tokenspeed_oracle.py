"""kconvert's tokenspeed row held against what tokenspeed 0.1.1's own code did (tests/data/tokenspeed_oracle.json,
recorded by tests/tokenspeed_oracle/record.py; README there). No tokenspeed is needed here: the recording is the
oracle, the `tokenspeed 0.1.1` engine row (kconvert/engines/expectations.py) is what is tested.
"""
from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from kconvert.engines.expectations import engine_rules, target_family
from kconvert.engines.fed_streams import declared_ids
from kconvert.targets import from_config, load_target

ROOT = Path(__file__).resolve().parents[1]
REC = json.loads((ROOT / "tests" / "data" / "tokenspeed_oracle.json").read_text())
ROW = engine_rules("tokenspeed", "0.1.1")
DRAFTS = REC["drafts"]
# tokenspeed's model file -> a model_type its config.json writes (kconvert's target family follows from it)
MODEL_TYPES = {"llama": "llama", "gpt_oss": "gpt_oss", "minimax_m3": "minimax_m3", "deepseek_v3": "deepseek_v3",
               "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe"}


def _target(model_type: str, num_layers: int):
    return SimpleNamespace(model_type=model_type, text_model_type=None, mla=None, num_hidden_layers=num_layers)


def _load(ref: str):
    if ref.startswith("tests/data/producers/provenance.json"):
        prov = json.loads((ROOT / "tests" / "data" / "producers" / "provenance.json").read_text())
        return from_config(prov["target"], name="producers-target", origin=ref)
    return load_target(str(ROOT / ref) if ref.startswith("examples/") else ref)


def fed_streams(capture: dict, forward: dict, num_layers: int) -> list[int | None]:
    """The residual streams (vLLM's numbering: stream k enters layer k, stream L leaves the last layer) that a
    recorded capture list feeds the draft, read the way the family's model forward reads it (recorded with it):
    index i < L is the input of layer i; index L + 1 is the final norm's residual (stream L) where the forward
    has that branch; anything else is never reached (None)."""
    out: list[int | None] = []
    for i in capture["layers_to_capture"]:
        if i < num_layers:
            out.append(i)
        elif i == num_layers + 1 and forward["final_residual_index"]:
            out.append(num_layers)
        else:
            out.append(None)
    return out


def row_streams(ids: list[int], target) -> list[int | None]:
    """The row's reading of ids, with streams it cannot collect as None."""
    lo, hi = ROW.collectable(target.num_hidden_layers, target)
    return [s if lo <= s <= hi else None for s in ROW.physical_ids(ids, target)]


WEIGHT_NAMES_ONLY = ("t2d",)  # the one tensor both tokenspeed classes skip by design (ROW.ignored_tensors)


def test_what_kconvert_fix_writes_for_tokenspeed_builds_and_loads_whole_there():
    # NeMo Automodel's epoch folders (model.-prefixed names, layers.0.*, LlamaEagle3DraftModel) fixed by
    # `kconvert fix --engine tokenspeed` in the recorder: tokenspeed's own code builds each and loads every tensor
    fixed = {k: d for k, d in DRAFTS.items() if k.startswith("automodel/fixed-tokenspeed/")}
    assert len(fixed) == 3
    for key, d in fixed.items():
        assert d["build"]["outcome"] == "built", key
        outcomes = {n: o["outcome"] for n, o in d["tensors"].items()}
        assert {n for n, o in outcomes.items() if o == "dropped"} == set(WEIGHT_NAMES_ONLY), (key, outcomes)
        assert "raises" not in outcomes.values(), key


def _local(d: dict) -> Path | None:
    path = Path(d.get("path") or "")
    return path if path.is_dir() and ROOT in path.resolve().parents else None


@pytest.mark.parametrize("key", sorted(k for k, d in DRAFTS.items() if d.get("tensors")))
def test_names_kconvert_accepts_on_the_tokenspeed_row_are_names_tokenspeed_loads(key):
    """The class of the bug the Automodel drafts showed (model.layers.0.* dropped silently): a tensor tokenspeed
    dropped or refused is a finding of kconvert's tokenspeed row, never a clean draft."""
    from kconvert.commands.inspect import analyse, open_draft

    d = DRAFTS[key]
    lost = sorted(n for n, o in d["tensors"].items()
                  if o["outcome"] in ("dropped", "raises") and n.split(".")[-1] not in WEIGHT_NAMES_ONLY)
    folder = _local(d) if key.startswith(("examples/", "producers/", "automodel/")) else None
    if folder is None:
        pytest.skip("a sparse zoo replica or a folder the recorder built: its names are held by the other tests")
    res = analyse(open_draft(str(folder)), _load(d["target"]["ref"]), ROW)
    # a refused architecture (K101) or config stops tokenspeed before any name; else the names' own findings
    errors = {f.id for f in res.findings if f.severity == "error"}
    assert not lost or errors, (key, lost, sorted({f.id for f in res.findings}))


def test_the_recording_is_tokenspeed_0_1_1_and_names_the_source_line_of_each_behaviour():
    assert REC["versions"]["tokenspeed"] == "0.1.1" == ROW.version
    where = re.compile(r"^tokenspeed/runtime/[a-z0-9_/]+\.py:\d+$")
    assert all(where.match(c["source"]) and where.match(c["model_forward"]) for c in REC["capture"].values())
    assert all(where.match(v) for d in REC["draft_classes"].values() for v in d.values())
    # every zoo replica of an EAGLE-3 draft, every shipped example and every producer-written draft is in it
    zoo = {p.parent.name for p in (ROOT / "tests" / "zoo").glob("*/build.py")
           if getattr(importlib.import_module(f"tests.zoo.{p.parent.name}.build"), "METHOD", "eagle3") == "eagle3"}
    examples = {f"{p.parent.name}/{p.name}" for p in (ROOT / "examples" / "tiny").glob("*/*")
                if p.parent.name in ("drafts", "broken") and (p / "config.json").exists()}
    producers = {p.name for d in ("producers", "producers-modelopt") for p in (ROOT / "tests" / "data" / d).iterdir()
                 if (p / "config.json").exists()}
    assert {k.split("/", 1)[1] for k in DRAFTS if k.startswith("zoo/")} == zoo
    assert {k.split("/", 1)[1] for k in DRAFTS if k.startswith("examples/")} == examples
    assert {k.split("/", 1)[1] for k in DRAFTS if k.startswith("producers/")} == producers
    from tests.producers import automodel_drafts

    assert {k.split("/", 1)[1] for k in DRAFTS if k.startswith("automodel/")} == \
        set(automodel_drafts.keys()) | {f"fixed-tokenspeed/{n}" for n in automodel_drafts.FIXED_FROM}


@pytest.mark.parametrize("family", sorted(f for f, c in REC["capture"].items() if f in MODEL_TYPES
                                          and c["collects_layers_to_capture"]))
def test_each_target_familys_capture_is_the_rows_reading_of_the_ids(family):
    rec = REC["capture"][family]
    for probe in rec["probes"]:
        L = probe["num_layers"]
        target = _target(MODEL_TYPES[family], L)
        if probe["ids"] is None:
            assert [s for s in fed_streams(probe, rec, L)] == ROW.default_physical_ids(L), (family, probe)
            continue
        # tokenspeed keeps a set (deepseek_v3) or the list as given (causal_lm): compare in layer order
        assert sorted(fed_streams(probe, rec, L), key=lambda s: (s is None, s)) == \
            sorted(row_streams(probe["ids"], target), key=lambda s: (s is None, s)), (family, rec["source"], probe)


def test_no_first_id_rule_and_the_final_stream_only_through_id_L_on_llama_style_targets():
    # sglang PR #25454's first-id rule is absent: [2, 30, 58] is shifted on every family
    for family, rec in REC["capture"].items():
        if family == "kimi_k3":
            continue
        probe = next(p for p in rec["probes"] if p["ids"] == [2, 30, 58])
        assert probe["layers_to_capture"] == [3, 31, 59], family
    llama = REC["capture"]["llama"]
    assert llama["final_residual_index"] and not REC["capture"]["deepseek_v3"]["final_residual_index"]
    assert ROW.final_boundary == frozenset(f for f in ("llama", "gpt_oss", "deepseek")
                                           if REC["capture"][{"deepseek": "deepseek_v3"}.get(f, f)]
                                           ["final_residual_index"])


def test_qwen_targets_collect_nothing_and_kimi_k3_reads_completed_layer_counts():
    dead = {f for f, c in REC["capture"].items() if not c["collects_layers_to_capture"]}
    # beside the two families K108 names (their verdicts: the test below)
    assert dead == {"qwen2", "qwen3", "qwen3_moe", "glm53_flash", "deepseek_v41"}
    assert any("Qwen2/Qwen3" in n for n in ROW.notes)
    k3 = REC["capture"]["kimi_k3"]
    for probe in k3["probes"]:
        if probe["ids"] is not None and "eagle3_layers_to_capture" in probe:
            assert probe["eagle3_layers_to_capture"] == probe["ids"]
    assert any("Kimi-K3" in n for n in ROW.notes)


@pytest.mark.parametrize("probe, ids", sorted(REC["aux_id_probes"].items()))
def test_the_ids_the_row_reads_are_the_ones_tokenspeeds_reader_returns(probe, ids):
    from tests.tokenspeed_oracle.record import AUX_PROBE_CONFIGS

    cfg = AUX_PROBE_CONFIGS[probe]
    if "text_config" in cfg:
        pytest.skip("a K3 wrapper config: kconvert reads a draft's own config.json keys")
    assert declared_ids(SimpleNamespace(config=cfg), ROW) == ids


@pytest.mark.parametrize("key", sorted(k for k, d in DRAFTS.items() if "capture" in d))
def test_every_drafts_ids_are_read_and_fed_as_tokenspeed_did(key):
    d = DRAFTS[key]
    t = d["target"]
    target = _load(t["ref"])
    assert target_family(target) == t["kconvert_family"]
    # the row reads the same ids from the draft's config as tokenspeed's reader did
    assert declared_ids(SimpleNamespace(config=d["aux_config"]), ROW) == d["aux_ids"]
    fam = d["capture"]["family"]
    got = fed_streams(d["capture"], REC["capture"][fam], target.num_hidden_layers)
    want = (ROW.default_physical_ids(target.num_hidden_layers) if d["aux_ids"] is None
            else row_streams(d["aux_ids"], target))
    assert sorted(got, key=lambda s: (s is None, s)) == sorted(want, key=lambda s: (s is None, s)), key


@pytest.mark.parametrize("key", sorted(DRAFTS))
def test_an_architecture_resolves_to_an_eagle3_class_exactly_when_the_row_knows_it(key):
    d = DRAFTS[key]
    if "architectures" not in d:
        assert d["config"]["outcome"] == "raises"  # get_config refused the config (no model_type, speculators)
        return
    arch = d["architectures"][0]
    resolved = d.get("draft_class") in ("LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM")
    assert resolved == (arch in ROW.architectures), (key, arch, d.get("resolve"))
    if resolved:
        assert ROW.architectures[arch] == {"LlamaForCausalLMEagle3": "llama",
                                           "Eagle3DeepseekV2ForCausalLM": "mla"}[d["draft_class"]]


@pytest.mark.parametrize("key", sorted(k for k, d in DRAFTS.items() if d.get("tensors")))
def test_tensor_names_in_the_rows_layout_load_d2t_becomes_offsets_and_t2d_is_skipped(key):
    d = DRAFTS[key]
    fam = ROW.architectures[d["architectures"][0]]
    for name, out in d["tensors"].items():
        if name.endswith("d2t"):
            assert out["outcome"] == "renamed" and out["hot_token_id_is_index_plus_value"], (key, name)
        elif name.split(".")[-1] in ROW.ignored_tensors:
            assert out["outcome"] == "dropped", (key, name)
        elif name.startswith(ROW.layer_names[fam]) or name.split(".")[0] in ("fc", "norm", "lm_head", "embed_tokens"):
            assert out["outcome"] == "loaded", (key, name, out)


def test_the_target_embedding_replaces_the_drafts_and_a_draft_head_stays_unless_the_config_lacks_a_draft_vocab():
    shared = [d for d in DRAFTS.values() if "embed_sharing" in d]
    assert shared and all(d["embed_sharing"]["embed"] == "target" for d in shared)
    assert ROW.uses_draft_embeddings is False
    cp = REC["config_probes"]
    assert cp["llama no draft_vocab_size"]["load_lm_head_from_target"] is True
    assert cp["llama tied embeddings"]["load_lm_head_from_target"] is False


def test_model_prefixed_names_load_in_the_llama_class_and_are_dropped_by_the_mla_class():
    probes = {p["draft_class"]: p["results"]["model.-prefixed"] for p in REC["name_probes"]}
    llama = probes["LlamaForCausalLMEagle3"]
    assert {n for n, r in llama.items() if r["outcome"] == "dropped"} == {"model.lm_head.weight", "model.t2d"}
    mla = probes["Eagle3DeepseekV2ForCausalLM"]
    assert {r["outcome"] for n, r in mla.items() if not n.endswith("d2t")} <= {"dropped", "raises"}
    # model.layers.0.* is not renamed (only a bare layers.0. is), so the prefix is not safe in general: Automodel's
    # names, fed to the Llama class, are dropped
    am = DRAFTS["automodel/fixed-sglang/automodel-eagle3"]["tensors"]
    assert {r["outcome"] for n, r in am.items() if n.startswith("model.layers.0.")} == {"dropped"}
    assert ROW.model_prefix_ok == frozenset()


def test_both_layer_spellings_load_and_unknown_names_are_dropped_silently():
    for probe in REC["name_probes"]:
        fam = "mla" if probe["draft_class"] == "Eagle3DeepseekV2ForCausalLM" else "llama"
        (other,) = [v for k, v in probe["results"].items() if "instead of" in k]
        assert {r["outcome"] for r in other.values()} == {"loaded"}
        assert set(ROW.layer_names[fam]) == {"midlayer.", "layers.0."}
        for name, r in probe["results"]["extra names"].items():
            assert r["outcome"] == "dropped", (fam, name)


def test_one_layer_only_fc_norm_norm_before_fc_norm_output_and_the_aux_count_as_recorded():
    cp = REC["config_probes"]
    assert {cp[f"{f} multi-layer"]["outcome"] for f in ("llama", "mla")} == {"raises"}
    assert ROW.multi_layer == frozenset()
    for fam in ("llama", "mla"):
        assert {r["outcome"] for r in cp[f"{fam} fc_norm"]["tensors"].values()} == {"loaded"}
        assert cp[f"{fam} norm_output"]["norm_output"] is True
    assert ROW.fc_norm is True and ROW.norm_output is True
    nbf = {fam: cp[f"{fam} norm_before_fc"]["tensors"]["input_norm.weight"]["outcome"] == "loaded"
           for fam in ("llama", "mla")}
    assert nbf == ROW.norm_before_fc
    # the Llama class sizes fc from the top-level key only; the MLA class from eagle_config's ids first
    assert (cp["llama four ids at top level"]["num_fc_input_dim"], cp["llama four ids in eagle_config"]["num_fc_input_dim"],
            cp["mla four ids at top level"]["num_fc_input_dim"], cp["mla four ids in eagle_config"]["num_fc_input_dim"]) \
        == (4, 3, 3, 4)
    # kconvert writes where the capture reads (eagle_config); the Llama class's count from the top level is a note
    assert ROW.aux_write_paths == (("eagle_config", "eagle_aux_hidden_state_layer_ids"),)
    assert any("other than three ids" in n for n in ROW.notes)
    for arch in ("Eagle3LlamaForCausalLM", "LlamaForCausalLM", "Eagle3DeepseekV3ForCausalLM"):
        assert cp[f"llama architecture {arch}"]["outcome"] == "raises" and arch not in ROW.architectures


def test_speculators_configs_are_refused_by_tokenspeeds_config_reader():
    spec = [d for d in DRAFTS.values() if "transformer_layer_config" in d["config_keys"]]
    assert spec and all(d["config"]["outcome"] == "raises" for d in spec)
    assert ROW.reads_speculators_format is False


@pytest.mark.parametrize("i", range(len(REC["launch_lines"])))
def test_the_printed_serve_line_parses_in_tokenspeeds_own_front_end_with_the_intended_settings(i):
    from kconvert.engines.serve_lines import tokenspeed_next_lines

    rec = REC["launch_lines"][i]
    assert "error" not in rec, rec.get("error")
    assert tokenspeed_next_lines(rec["draft"], rec["target"], k=rec["k"], tp=1) == rec["lines"]
    k, sa = rec["k"], rec["server_args"]
    got = tuple(sa[key] for key in ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                                    "speculative_num_draft_tokens", "attn_tp_size", "speculative_draft_model_path",
                                    "enable_metrics"))
    assert got == ("EAGLE3", k, 1, k + 1, 1, rec["draft"], True)
    assert rec["engine_argv"][:2] == ["--model", rec["target"]]


def test_tokenspeeds_counters_read_as_vllms_convention_bonus_token_excluded():
    """The /metrics text tokenspeed's own EngineMetrics and exposition code wrote for known verify steps, read by
    kconvert; the expected figures are derived here from the steps (each slot emits its accepted drafts plus
    one bonus token)."""
    from kconvert.engines.acceptance import summarize
    from kconvert.engines.metrics import TOKENSPEED, spec_decode_counters

    m = REC["metrics"]
    lengths = [n for step in m["steps"] for n in step["output_lengths"]]
    k = m["speculative_num_draft_tokens"] - 1
    c = spec_decode_counters(m["text"], names=TOKENSPEED)
    assert (c["drafts"], c["draft_tokens"], c["accepted"]) == (len(lengths), len(lengths) * k,
                                                                 sum(n - 1 for n in lengths))
    assert c["model_names"] == [m["labels"]["model_name"]] and c["engines"] == [m["labels"]["dp_rank"]]
    acc = summarize(c["drafts"], c["draft_tokens"], c["accepted"], c["accepted_per_pos"], k)
    # tokenspeed's acc_len (engine/request_stats.py) is tokens per verify step, bonus included: the mean length
    assert acc["mean_acceptance_length"] == pytest.approx(sum(lengths) / len(lengths))
    assert "excludes the bonus token" in m["text"]


@pytest.mark.parametrize("family, model_type", [("glm53_flash", "glm5_next"), ("deepseek_v41", "deepseek_v41"),
                                                ("kimi_k3", "kimi_k3")])
def test_the_target_families_verdicts_on_tokenspeed_are_what_its_capture_code_does(family, model_type):
    """kconvert/targets/families.py (K108): an error where tokenspeed's model forward collects no EAGLE-3 aux state
    for the target (recorded from its source), a warning where it does (the draft's rope is the open question)."""
    from kconvert.targets.families import family_of

    fam = family_of(SimpleNamespace(model_type=model_type, text_model_type=None))
    verdict = fam.engines["tokenspeed"]
    collects = REC["capture"][family]["collects_layers_to_capture"]
    assert verdict.severity == ("warning" if collects else "error"), (family, verdict)
    assert REC["capture"][family]["model_forward"].split("/")[-1].split(":")[0] in verdict.what


def test_every_fact_of_the_tokenspeed_row_names_its_source():
    # what `kconvert engines list "tokenspeed 0.1.1"` prints per fact: none is left to the row's prose
    from dataclasses import fields

    from kconvert.engines.expectations import EngineRules

    facts = {f.name for f in fields(EngineRules)} - {"engine", "version", "source", "aliases", "notes", "provenance",
                                                    "learned_from", "runner"}
    assert set(ROW.provenance) == facts
    assert all(str(src).startswith("read by hand: ") for src in ROW.provenance.values())
