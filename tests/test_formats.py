"""Producer detection and the canonical DraftModel, for every producer at tiny and Kimi-K2.5 shapes; and that a
clean draft of each producer at Kimi shapes passes the built-in `kimi-k2.5` profile once its aux ids are in the
engine's convention."""
from __future__ import annotations

import json

import pytest

from kconvert.formats.canonical import read_draft
from kconvert.commands.inspect import inspect
from kconvert.rules import Decisions
from kconvert.source import open_checkpoint
from tests.factories import SHAPES, make_draft, rename_all

AUX = "eagle_aux_hidden_state_layer_ids"
CONFIDENCE_FLOOR = 0.5

# producer, family -> (detected producer, layout name, aux convention, ids kind ("out"|"in"|None), is_speculators)
CASES = {
    ("specforge", "llama"): ("specforge", "midlayer", "output", "out", False),
    ("torchspec", "llama"): ("torchspec", "midlayer", "input", "in", False),
    ("torchspec", "mla"): ("torchspec", "midlayer", "input", "in", False),
    ("eagle", "llama"): ("eagle", "midlayer", "input", None, False),
    ("speculators", "llama"): ("speculators", "layers.0", "input", "in", True),
    # ModelOpt's export code hooks layers[i] outputs (modelopt hf_spec_export.py / plugins): output-of-layer ids.
    # (Was None, "cannot tell"; issue #11 shows the code settles it.) Its 0.43+ exporter writes layers.N.* names
    # (tests/data/producers-modelopt, written by ModelOpt 0.47.0's export_speculative_decoding).
    ("modelopt", "llama"): ("modelopt", "layers.0", "output", "out", False),
}
SHAPE_NAMES = ("tiny", "kimi")


def expected_ids(kind: str | None, shape: str) -> list[int] | None:
    L = SHAPES[shape].layers
    return {"out": [1, L // 2 - 1, L - 4], "in": [2, L // 2, L - 3], None: None}[kind]


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    """Every producer at both shapes, built once (the kimi ones are sparse files)."""
    root = tmp_path_factory.mktemp("formats")
    out = {}
    for shape in SHAPE_NAMES:
        for producer, family in list(CASES) + [("unknown", "llama")]:
            out[(producer, family, shape)] = make_draft(root / f"{shape}-{producer}-{family}", producer,
                                                        shape=shape, family=family)
    return out


def draft_of(drafts, producer, family, shape):
    return read_draft(open_checkpoint(str(drafts[(producer, family, shape)])))


@pytest.mark.parametrize("shape", SHAPE_NAMES)
@pytest.mark.parametrize("producer,family", list(CASES))
def test_producer_is_detected_with_confidence_and_evidence(drafts, producer, family, shape):
    d = draft_of(drafts, producer, family, shape)
    assert d.format.producer == CASES[(producer, family)][0]
    assert d.format.confidence > CONFIDENCE_FLOOR
    assert d.format.evidence and all(isinstance(e, str) and e for e in d.format.evidence)


@pytest.mark.parametrize("shape", SHAPE_NAMES)
def test_unknown_producer_is_named_unknown_with_a_reason(drafts, shape):
    d = draft_of(drafts, "unknown", "llama", shape)
    assert d.format.producer == "unknown" and d.format.confidence == 0.0
    assert d.format.evidence
    assert d.aux.convention is None  # never assumed for an unknown producer
    assert d.aux.ids == expected_ids("out", shape)


@pytest.mark.parametrize("shape", SHAPE_NAMES)
@pytest.mark.parametrize("producer,family", list(CASES))
def test_draft_model_facts(drafts, producer, family, shape):
    s = SHAPES[shape]
    _, layout, conv, ids_kind, spec = CASES[(producer, family)]
    d = draft_of(drafts, producer, family, shape)
    assert d.layer_family == family
    assert d.key_layout.name == layout and d.key_layout.prefix == ""
    assert d.is_speculators is spec
    assert d.aux.ids == expected_ids(ids_kind, shape)
    assert d.aux.convention == conv and d.aux.convention_evidence
    assert d.draft_vocab_size == s.draft_vocab
    assert d.lm_head_rows == s.draft_vocab
    assert d.shape("fc.weight") == (s.hidden, 3 * s.hidden)
    assert d.fc_in == 3 * s.hidden and d.fc_out == s.hidden
    assert d.hidden_size == s.hidden and d.num_hidden_layers == 1 and d.vocab_size == s.vocab
    assert d.shape("d2t") == (s.draft_vocab,) and d.shape("t2d") == (s.vocab,)
    assert not d.has_embeddings and d.unmapped == []
    # canonical names whatever the layout in the files
    assert all(not n.startswith(("midlayer.", "model.")) for n in d.tensors)
    assert all(d.raw_names[c].endswith(c.split("layers.0.")[-1]) for c in d.tensors)
    if family == "mla":
        assert d.shape("layers.0.self_attn.kv_a_proj_with_mqa.weight") == (s.kv_lora + s.rope, 2 * s.hidden)
    else:
        assert d.shape("layers.0.self_attn.q_proj.weight") == (s.heads * s.head_dim, 2 * s.hidden)
        assert d.head_dim == s.head_dim


def test_speculators_config_is_flattened_with_top_level_fields_winning(drafts):
    d = draft_of(drafts, "speculators", "llama", "tiny")
    assert d.config["hidden_size"] == SHAPES["tiny"].hidden  # from transformer_layer_config
    assert d.architectures == ["Eagle3Speculator"]
    assert d.aux.source == AUX and d.norm_flags == {"norm_before_residual": False}


def test_modelopt_flags_are_collected(drafts):
    d = draft_of(drafts, "modelopt", "llama", "tiny")
    assert d.extra_flags == {"use_input_layernorm_in_first_layer": True, "use_last_layernorm": False,
                             "use_mtp_layernorm": False}


def test_specforge_ids_are_read_from_eagle_config(drafts):
    d = draft_of(drafts, "specforge", "llama", "kimi")
    assert d.aux.source == "eagle_config." + AUX and d.aux.ids == [1, 29, 57]
    assert d.aux.locations == {"eagle_config." + AUX: [1, 29, 57]}


def test_full_vocab_torchspec_llama_draft_without_stamp_is_still_torchspec(tmp_path):
    def strip(c):
        c.pop("_torchspec_version")
        c.pop("eagle_config")
        c.pop(AUX)

    folder = make_draft(tmp_path / "d", "torchspec", shape="kimi", full_vocab=True, config=strip)
    d = read_draft(open_checkpoint(str(folder)))
    assert d.format.producer == "torchspec" and d.format.confidence > CONFIDENCE_FLOOR
    assert "full-vocabulary lm_head without d2t/t2d" in d.format.evidence
    assert d.lm_head_rows == 163840 and d.draft_vocab_size is None and "d2t" not in d.tensors
    assert d.aux.ids is None


def test_mla_draft_architecture_without_stamp_is_torchspec(tmp_path):
    folder = make_draft(tmp_path / "d", "torchspec", family="mla", config=lambda c: c.pop("_torchspec_version"))
    d = read_draft(open_checkpoint(str(folder)))
    assert d.format.producer == "torchspec" and d.layer_family == "mla"


def test_torchspec_vllm_export_for_kimi_k2_is_input_convention_else_output(tmp_path):
    def export(model_type):
        def mut(c):
            c.pop(AUX)
            c["model_type"] = model_type
        return mut

    def layers0(t):
        rename_all(t, lambda k: k.replace("midlayer.", "layers.0."))

    kimi = read_draft(open_checkpoint(str(make_draft(tmp_path / "a", "torchspec", family="mla",
                                                     config=export("kimi_k2"), tensors=layers0))))
    other = read_draft(open_checkpoint(str(make_draft(tmp_path / "b", "torchspec", family="mla",
                                                      config=export("deepseek_v2"), tensors=layers0))))
    assert kimi.key_layout.name == "layers.0" and kimi.aux.convention == "input"
    assert other.aux.convention == "output"


def test_model_prefixed_layout_is_recognised(tmp_path):
    folder = make_draft(tmp_path / "d", "specforge", tensors=lambda t: rename_all(t, lambda k: "model." + k))
    d = read_draft(open_checkpoint(str(folder)))
    assert d.key_layout.prefix == "model." and d.key_layout.layer == "midlayer."
    assert "layers.0.self_attn.q_proj.weight" in d.tensors and d.unmapped == []


def test_sharded_draft_reads_like_a_single_file_one(tmp_path):
    one = read_draft(open_checkpoint(str(make_draft(tmp_path / "one", "specforge"))))
    three = read_draft(open_checkpoint(str(make_draft(tmp_path / "three", "specforge", shards=3))))
    assert three.summary() == one.summary()


def test_kconvert_provenance_records_the_convention_of_rewritten_ids(tmp_path):
    folder = make_draft(tmp_path / "d", "unknown", config=lambda c: c["eagle_config"].update({AUX: [2, 4, 5]}))
    (folder / "kconvert.json").write_text(json.dumps({"aux_ids": {"written": [2, 4, 5], "physical": [2, 4, 5]}}))
    d = read_draft(open_checkpoint(str(folder)))
    assert d.aux.convention == "input" and "kconvert.json" in d.aux.convention_evidence


# --- clean drafts at Kimi shapes against the built-in kimi-k2.5 profile ----------------------------------------

def errors(res):
    return [(f.id, f.message) for f in res.findings if f.severity == "error"]


@pytest.mark.parametrize("producer,family", [("torchspec", "llama"), ("torchspec", "mla"), ("eagle", "llama"),
                                             ("speculators", "llama")])
def test_clean_kimi_draft_has_no_error_on_vllm(drafts, producer, family):
    res = inspect(str(drafts[(producer, family, "kimi")]), target="kimi-k2.5")
    assert errors(res) == [] and res.exit_code == 0


def test_clean_unknown_kimi_draft_with_input_convention_ids_has_no_error(tmp_path):
    folder = make_draft(tmp_path / "d", "unknown", shape="kimi",
                        config=lambda c: c["eagle_config"].update({AUX: [2, 30, 58]}))
    res = inspect(str(folder), target="kimi-k2.5", decisions=Decisions(aux_convention="input"))
    assert errors(res) == []
    # K405: ids only in eagle_config (vLLM's V1 runner reads the top-level key first) is a warning, not an error.
    assert {f.id for f in res.findings} <= {"K004", "K405"}


def test_specforge_kimi_draft_is_only_k404_on_vllm(drafts):
    # Model Runner V1 feeds eagle_config's [1, 29, 57] as written (gpu_model_runner.py
    # _get_eagle3_aux_layers_from_config), one stream early
    res = inspect(str(drafts[("specforge", "llama", "kimi")]), target="kimi-k2.5", engine_version="0.32/v1")
    assert [f.id for f in res.findings if f.severity == "error"] == ["K404"]
    k404 = next(f for f in res.findings if f.id == "K404")
    assert k404.evidence[0].observed == [1, 29, 57] and k404.evidence[0].expected == [2, 30, 58]
    # Model Runner V2 reads no eagle_config ids (eagle3_utils.get_eagle3_aux_layers_from_config) and feeds the
    # defaults (2, L//2, L-3) = [2, 30, 58] on 61 layers: the trained streams, so K405 only asks to mirror them
    res = inspect(str(drafts[("specforge", "llama", "kimi")]), target="kimi-k2.5", engine_version="0.33")
    assert [f.id for f in res.findings if f.severity == "error"] == []
    assert [f.severity for f in res.findings if f.id == "K405"] == ["warning"]


@pytest.mark.parametrize("producer", ["specforge", "modelopt"])
def test_output_convention_kimi_drafts_are_k404_one_layer_early_on_vllm_and_fixable(drafts, producer):
    res = inspect(str(drafts[(producer, "llama", "kimi")]), target="kimi-k2.5", engine_version="0.32/v1")
    k404 = [f for f in res.findings if f.id == "K404"]
    assert len(k404) == 1 and k404[0].severity == "error" and k404[0].ops
    assert k404[0].evidence[0].expected == [2, 30, 58]
    res = inspect(str(drafts[(producer, "llama", "kimi")]), target="kimi-k2.5", engine="sglang")
    assert "K404" not in {f.id for f in res.findings}


def test_specforge_kimi_draft_has_no_error_on_sglang(drafts):
    res = inspect(str(drafts[("specforge", "llama", "kimi")]), target="kimi-k2.5", engine="sglang")
    assert errors(res) == [] and "K404" not in {f.id for f in res.findings}


@pytest.mark.parametrize("producer,family", [("torchspec", "llama"), ("torchspec", "mla")])
def test_clean_torchspec_kimi_draft_has_no_error_on_sglang(drafts, producer, family):
    res = inspect(str(drafts[(producer, family, "kimi")]), target="kimi-k2.5", engine="sglang")
    assert errors(res) == []
