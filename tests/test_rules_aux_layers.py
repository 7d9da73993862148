"""Aux layer ids (kconvert/rules/aux_layers.py), the public measurement table (kconvert/rules/measured.py) and the
recommendation a finding makes from it (kconvert/rules/recommend.py), against what lies outside them:

- the engines' conventions and their code (docs/formats-and-engines.md (#aux-layer-ids, #vllms-two-model-runners), with the PRs and
  loader files it cites): vLLM reads id k as the stream entering layer k and defaults to (2, L//2, L-3); SGLang's
  first-id rule (sglang PR #25454: first id 1 = output of layer 1, 2 = input of layer 2) applies on DeepSeek/Kimi
  targets only (deepseek_v2.py:3470), on Llama targets SGLang adds +1 to every id (llama.py:941), both recorded
  from SGLang 0.5.23 in tests/data/sglang_oracle.json; the top-level key is read by vLLM only (SGLang 0.5.23 reads
  eagle_config only); Model Runner V2 reads the top-level key or eagle_config.layer_ids
  (gpu/spec_decode/eagle/eagle3_utils.py), recorded for every shipped draft in tests/data/vllm_oracle.json;
- the producers' code as the facts file and the rule's docstring cite it: SpecForge 0.2.0 trains on the outputs of
  [1, L//2-1, L-4] when no ids are given (resolve_eagle_capture_layers), ModelOpt 0.47.0 captures
  sorted({1, L//2-1, L-4}) (hf_eagle.py:63), speculators 0.9.0 convert copies ids through unshifted
  (eagle3_converter.py:146);
- the public record of AQ-MedAI/Kimi-K25-eagle3 (tests/zoo/aqmedai_kimi_k25_eagle3/RECORD.md: vLLM PR #35966,
  42668 drafts, 170672 draft tokens, 88381 accepted at k=4 on GSM8K, TP 8: 88381 / 170672 = 51.78 %);
- the target's layer counts (Kimi-K2.5 61, Llama-3.1-8B 32, the tests' tiny target 8: docs/formats-and-engines.md#the-kimi-targets,
  tests/factories.py), from which every stream below is derived by hand in a comment;
- the text a user reads in the findings (K404's "cannot settle ... : <why>" and "in the <convention> convention
  (<why>)", each sign named in a few words there and said whole in the evidence, the sources in the rule's why),
  whose reasons are the rule's own documented wording.

Engine-free and in-process: each test writes a tiny draft (tests/factories.py) and reads it, milliseconds each
(issue #30: the survivors of `bench/mutation.py kconvert/rules/aux_layers.py` and of measured.py / recommend.py)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kconvert.engines.expectations import engine_rules
from kconvert.formats.canonical import read_draft
from kconvert.rules import Context, Decisions
from kconvert.rules.aux_layers import (converted_output_defaults, fed_physical_ids, ids_unread,
                                       producer_default_streams, settle_convention, trained_physical_ids,
                                       write_ops)
from kconvert.rules.measured import MEASURED, measured_reading
from kconvert.rules.recommend import recommendation
from kconvert.source import open_checkpoint
from kconvert.targets import load_profile
from kconvert.writer.ops import SetConfig
from tests.factories import TINY, make_draft, rename_all

AUX = "eagle_aux_hidden_state_layer_ids"
TOP = (AUX,)
EC = ("eagle_config", AUX)
LAYER_IDS = ("eagle_config", "layer_ids")
KIMI = load_profile("kimi-k2.5")  # 61 layers, DeepSeek-V3 text model (docs/formats-and-engines.md#the-kimi-targets)
LLAMA = load_profile("llama-3.1-8b")  # 32 layers
GPT_OSS = load_profile("gpt-oss-120b")  # 36 layers

FIRST_1 = "the first id is 1 (SGLang's first-id rule, PR #25454)"
FIRST_2 = "the first id is 2 (SGLang's first-id rule, PR #25454)"
TOP_VOTE = "the ids sit at the top-level key that only vLLM reads"
SPECFORGE_EV = "SpecForge captures the outputs of layers[i] (default [1, L//2-1, L-4])"
UNKNOWN_EV = "unknown producer: the convention of its ids is not recorded"


def _place(ids: object, where: tuple[tuple[str, ...], ...]):
    def mut(c: dict) -> None:
        c.pop(AUX, None)
        ec = c.pop("eagle_config", None)
        ec = {k: v for k, v in (ec or {}).items() if k not in (AUX, "layer_ids")}
        for p in where:
            if p == TOP:
                c[AUX] = ids
            else:
                ec[p[1]] = ids
        if ec:
            c["eagle_config"] = ec
    return mut


def draft(tmp_path: Path, producer: str = "unknown", ids: object = None, where=(EC,), *, name: str = "d",
          config=None, **kw):
    """A tiny draft of `producer` with `ids` at the config paths `where` (None: no ids anywhere)."""
    def mut(c: dict) -> None:
        _place(ids, where if ids is not None else ())(c)
        if config:
            config(c)
    return read_draft(open_checkpoint(str(make_draft(tmp_path / name, producer, config=mut, **kw))))


def ctx(d, target=KIMI, engine: str = "vllm", version: str = "0.32/v1", decisions: Decisions | None = None,
        **aux) -> Context:
    if aux:
        d = dataclasses.replace(d, aux=dataclasses.replace(d.aux, **aux))
    return Context(d, target, engine_rules(engine, version), decisions or Decisions())


def guessed_specforge(tmp_path: Path, ids: list[int], where=(EC,), name: str = "g"):
    """LlamaForCausalLMEagle3 with layers.0.* names: SpecForge guessed from the architecture alone (weak)."""
    d = draft(tmp_path, "specforge", ids, where, name=name, full_vocab=True,
              tensors=lambda t: rename_all(t, lambda k: k.replace("midlayer.", "layers.0.")))
    assert d.format.producer == "specforge" and d.aux.convention_strength == "weak"
    return d


# --- settle_convention: what decides, what is weighed, what the user reads --------------------------------------
# Each sign is named in the message in a few words (`why`) and said whole in the finding's evidence (`signs`:
# where = its name, observed = what it rests on, expected = the convention it points to).

def signs(st) -> list[tuple]:
    return [(e.where, e.observed, e.expected) for e in st.evidence()]


def said(by: dict) -> dict:
    """votes / weak as convention -> what each sign says"""
    return {conv: [s.said for s in ss] for conv, ss in by.items()}


TOP_SIGN = ("the top-level key", TOP_VOTE, "input")
FIRST_1_SIGN = ("the first id", FIRST_1, "output (weak)")
FIRST_2_SIGN = ("the first id", FIRST_2, "input (weak)")
SPECFORGE_SIGN = ("specforge's code", SPECFORGE_EV, "output")
SF_UNDETERMINED_SIGN = ("specforge's code", "SpecForge's ids on a DeepSeek/Kimi target not starting at 1 mean output "
                        "before sglang PR #25454 and input after it", "not counted")


def test_a_kconvert_record_is_decisive_even_against_a_flag_passed_back(tmp_path):
    # kconvert.json names the streams of these very ids: a --aux-convention repeated on the fixed output was the
    # decision about the input's ids (rule docstring), so the record wins over it.
    d = draft(tmp_path, "unknown", [1, 3, 4])
    ev = "kconvert.json records these ids in the output-of-layer convention"
    st = settle_convention(ctx(d, decisions=Decisions(aux_convention="input"), convention="output",
                               convention_strength="record", convention_evidence=ev))
    assert (st.convention, st.why, signs(st)) == ("output", "kconvert.json", [("kconvert.json", ev, "output")])


def test_a_record_without_a_convention_does_not_settle(tmp_path):
    d = draft(tmp_path, "unknown", [3, 4, 5])
    st = settle_convention(ctx(d, target=LLAMA, convention=None, convention_strength="record",
                               convention_evidence=""))
    assert st.convention is None and st.why == "nothing in the files says"


def test_the_flag_decides_when_no_record_does(tmp_path):
    d = draft(tmp_path, "unknown", [1, 3, 4])
    st = settle_convention(ctx(d, decisions=Decisions(aux_convention="output")))
    assert (st.convention, st.why, signs(st)) == (
        "output", "--aux-convention", [("--aux-convention", "decided on the command line", "output")])


def test_specforge_ids_not_starting_at_1_on_a_kimi_target_leave_only_the_first_id(tmp_path):
    # AQ-MedAI/Kimi-K25-eagle3's shape (RECORD.md "The files cannot settle it"): SpecForge's signature, ids
    # [2, 30, 58] in eagle_config on the 61-layer Kimi-K2.5. SpecForge's code is not counted (before #25454 SGLang
    # read them +1, after it as given); the first id 2 says input, weakly: unsettled.
    d = draft(tmp_path, "specforge", [2, 30, 58])
    assert d.aux.convention_strength == "producer"
    st = settle_convention(ctx(d))
    assert st.convention is None
    assert st.votes == {} and said(st.weak) == {"input": [FIRST_2]}
    assert st.why == "only weak evidence (input: the first id); not counted: specforge's code"
    assert signs(st) == [SF_UNDETERMINED_SIGN, FIRST_2_SIGN]


def test_specforge_ids_starting_at_1_on_a_kimi_target_are_output_by_its_code_and_the_first_id(tmp_path):
    # [1, 29, 57] on 61 layers: SpecForge's defaults [1, L//2-1, L-4]; the first id 1 also reads as output
    d = draft(tmp_path, "specforge", [1, 29, 57])
    st = settle_convention(ctx(d))
    assert st.convention == "output"
    assert said(st.votes) == {"output": [SPECFORGE_EV]} and said(st.weak) == {"output": [FIRST_1]}
    assert st.why == "specforge's code, the first id" and signs(st) == [SPECFORGE_SIGN, FIRST_1_SIGN]


def test_specforge_ids_on_a_llama_target_are_output_whatever_the_first_id(tmp_path):
    # llama.py:941 adds +1 to every id on every SGLang row (tests/data/sglang_oracle.json): SpecForge's code stays
    # strong, and the first id says nothing on a Llama target
    d = draft(tmp_path, "specforge", [2, 16, 29])
    st = settle_convention(ctx(d, target=LLAMA))
    assert (st.convention, st.why, st.weak, signs(st)) == ("output", "specforge's code", {}, [SPECFORGE_SIGN])


def test_without_a_target_specforge_ids_not_starting_at_1_stay_strong_and_the_first_id_disagrees(tmp_path):
    # no target: the DeepSeek exception cannot apply (its family is unknown), and the first-id rule is weighed
    d = draft(tmp_path, "specforge", [2, 4, 5])
    st = settle_convention(ctx(d, target=None))
    assert st.convention is None
    assert said(st.votes) == {"output": [SPECFORGE_EV]} and said(st.weak) == {"input": [FIRST_2]}
    assert st.why == "the evidence disagrees (input: the first id | output: specforge's code)"
    assert signs(st) == [SPECFORGE_SIGN, FIRST_2_SIGN]


def test_an_empty_id_list_is_weighed_by_the_producer_alone(tmp_path):
    # `[]` is a list of integers (read as such): SpecForge's code still counts, and there is no first or largest id
    d = draft(tmp_path, "specforge", [])
    assert d.aux.ids == []
    st = settle_convention(ctx(d))
    assert (st.convention, st.why, st.weak) == ("output", "specforge's code", {})


def test_a_producer_guessed_from_the_architecture_is_named_never_weighed(tmp_path):
    d = guessed_specforge(tmp_path, [3, 4, 5])
    st = settle_convention(ctx(d, target=LLAMA))
    assert st.convention is None and st.votes == {} and st.weak == {}
    assert st.why == "nothing in the files counts; not counted: specforge's guessed convention"
    assert signs(st) == [("specforge's guessed convention", SPECFORGE_EV + " (output), the producer being guessed "
                          "from the architecture alone", "not counted")]


def test_a_guessed_producer_and_the_undetermined_note_are_both_named(tmp_path):
    # guessed SpecForge with ids at the top-level key: its convention evidence is the key's, so no 'guessed' note,
    # and the key is a strong vote for input
    d = guessed_specforge(tmp_path, [3, 4, 5], where=(TOP,), name="top")
    st = settle_convention(ctx(d, target=LLAMA))
    assert (st.convention, st.why, signs(st)) == ("input", "the top-level key", [TOP_SIGN])


def test_the_top_level_key_settles_input(tmp_path):
    d = draft(tmp_path, "unknown", [3, 4, 5], where=(TOP,))
    assert d.aux.convention_strength == "weak"
    st = settle_convention(ctx(d, target=LLAMA))
    assert (st.convention, st.why, said(st.votes), st.weak) == ("input", "the top-level key", {"input": [TOP_VOTE]},
                                                                {})


def test_the_top_level_key_and_a_first_id_of_2_agree_on_a_kimi_target(tmp_path):
    d = draft(tmp_path, "unknown", [2, 30, 58], where=(TOP, EC))
    st = settle_convention(ctx(d))
    assert st.convention == "input" and st.why == "the top-level key, the first id"
    assert signs(st) == [TOP_SIGN, FIRST_2_SIGN]


def test_the_top_level_key_and_a_first_id_of_1_disagree_on_a_kimi_target(tmp_path):
    d = draft(tmp_path, "unknown", [1, 3, 4], where=(TOP, EC))
    st = settle_convention(ctx(d))
    assert st.convention is None and said(st.votes) == {"input": [TOP_VOTE]} and said(st.weak) == {"output": [FIRST_1]}
    assert st.why == "the evidence disagrees (input: the top-level key | output: the first id)"


FINAL_32 = "id 32 is the 32-layer target's final boundary (there is no layer 32 whose output it could name)"


def test_an_id_at_the_final_boundary_settles_input(tmp_path):
    # Llama-3.1-8B has 32 layers: stream 32 leaves the last layer; no layer 32 exists whose output it could name.
    d = draft(tmp_path, "unknown", [3, 32, 10])
    st = settle_convention(ctx(d, target=LLAMA))
    assert (st.convention, st.why, said(st.votes)) == ("input", "the final-boundary id", {"input": [FINAL_32]})
    assert signs(st) == [("the final-boundary id", FINAL_32, "input")]
    # one below the boundary names an existing layer's output: nothing settles
    st = settle_convention(ctx(draft(tmp_path, "unknown", [3, 31, 10], name="below"), target=LLAMA))
    assert st.convention is None and st.why == UNKNOWN_EV and signs(st) == []
    # and one past it names no stream at all (K402's business), which is no evidence of the input reading either
    st = settle_convention(ctx(draft(tmp_path, "unknown", [3, 33, 10], name="past"), target=LLAMA))
    assert st.convention is None and st.why == UNKNOWN_EV and st.votes == {}


def test_the_final_boundary_and_the_top_level_key_are_both_named(tmp_path):
    d = draft(tmp_path, "unknown", [3, 10, 32], where=(TOP,))
    st = settle_convention(ctx(d, target=LLAMA))
    assert st.convention == "input" and st.why == "the top-level key, the final-boundary id"
    assert signs(st) == [TOP_SIGN, ("the final-boundary id", FINAL_32, "input")]


@pytest.mark.parametrize("target", [KIMI, None])
def test_a_first_id_alone_is_weak_evidence_on_a_kimi_target_or_none(tmp_path, target):
    st = settle_convention(ctx(draft(tmp_path, "unknown", [1, 3, 4]), target=target))
    assert st.convention is None and st.votes == {} and said(st.weak) == {"output": [FIRST_1]}
    assert st.why == "only weak evidence (output: the first id)" and signs(st) == [FIRST_1_SIGN]
    st = settle_convention(ctx(draft(tmp_path, "unknown", [2, 3, 4], name="two"), target=target))
    assert st.convention is None and st.why == "only weak evidence (input: the first id)"
    assert signs(st) == [FIRST_2_SIGN]


@pytest.mark.parametrize("target", [LLAMA, GPT_OSS])
def test_the_first_id_says_nothing_on_llama_and_gpt_oss_targets(tmp_path, target):
    for i, first in enumerate((1, 2)):
        st = settle_convention(ctx(draft(tmp_path, "unknown", [first, 5, 7], name=f"d{i}"), target=target))
        assert (st.convention, st.why, st.votes, st.weak) == (None, UNKNOWN_EV, {}, {})


def test_no_evidence_at_all_says_so(tmp_path):
    d = draft(tmp_path, "unknown", [3, 4, 5])
    assert settle_convention(ctx(d, target=LLAMA, convention_evidence="")).why == "nothing in the files says"


def test_strong_evidence_with_opposite_weak_evidence_does_not_settle(tmp_path):
    # ModelOpt's signature (output, strong), ids [2, 4, 5] on the tiny 8-layer Kimi target (first id 2: input, weak)
    d = draft(tmp_path, "modelopt", [2, 4, 5])
    ev = "ModelOpt hooks the outputs of layers[i] (default sorted({1, L//2-1, L-4}))"
    tgt = dataclasses.replace(KIMI, num_hidden_layers=TINY.layers)
    st = settle_convention(ctx(d, target=tgt))
    assert st.convention is None
    assert st.why == "the evidence disagrees (input: the first id | output: modelopt's code)"
    assert signs(st) == [("modelopt's code", ev, "output"), FIRST_2_SIGN]


# --- a converted draft with an output-convention producer's capture defaults ------------------------------------
# What speculators 0.9.0 convert leaves (kconvert/formats/speculators.py conversion_habits, read in
# eagle3_converter.py): the legacy class it saves (:12, :195), a float32 cast of a source naming `dtype` (:184,
# :223-225); it copies ids unshifted (:146). The sources are K404's why; the sign says what the files show.

HABIT = "architectures ['Eagle3Speculator'], the legacy class the converter saves"
CONVERTED = "capture defaults through speculators convert"


def converted(tmp_path: Path, ids: list[int], name: str = "conv", **kw):
    d = draft(tmp_path, "speculators", ids, (TOP,), name=name, **kw)
    assert d.format.converted_by == "speculators convert"
    return d


def test_a_converted_draft_with_every_producers_defaults_names_them_all(tmp_path):
    # Llama-3.1-8B, 32 layers: [1, 32//2-1, 32-4] = [1, 15, 28] for SpecForge and TorchSpec, and ModelOpt's
    # sorted({1, 15, 28}) is the same list
    d = converted(tmp_path, [1, 15, 28])
    sign = converted_output_defaults(ctx(d, target=LLAMA))
    assert (sign.name, sign.convention, sign.strength) == (CONVERTED, "output", "strong")
    assert sign.said == ("the ids equal the output-convention capture defaults [1, L//2-1, L-4] for a target of 32 "
                         "layers (SpecForge 0.2.0, ModelOpt 0.47.0, TorchSpec) and the draft shows speculators "
                         f"convert's habits ({HABIT}); the converter copies ids unshifted, so they may be the source "
                         "producer's output-of-layer ids")
    st = settle_convention(ctx(d, target=LLAMA))
    # the format's own word (input, the top-level key) against the capture's (output): not settled
    assert st.convention is None and st.votes["output"] == [sign]
    assert said(st.votes)["input"] == ["the format writes vLLM's input-of-layer ids", TOP_VOTE]
    assert st.why == f"the evidence disagrees (input: speculators' code, the top-level key | output: {CONVERTED})"
    # the sources of each producer's defaults and of the converter's habits are the rule's why (`kconvert rules
    # K404`), whole
    from kconvert.rules.base import REGISTRY

    why = REGISTRY["K404"].why
    for cited in ("SpecForge 0.2.0 resolve_eagle_capture_layers", "ModelOpt 0.47.0 "
                  "modelopt/torch/speculative/plugins/hf_eagle.py:63", "TorchSpec torchspec/utils/misc.py:88",
                  "speculators/convert/eagle/eagle3_converter.py", ":12, :195", "Eagle3DraftModel", ":184, :223-225",
                  "unshifted (:146)"):
        assert cited in why, cited


def test_a_converted_draft_on_a_tiny_target_matches_modelopt_alone(tmp_path):
    # 4 layers: SpecForge/TorchSpec give [1, 4//2-1, 4-4] = [1, 1, 0]; ModelOpt sorted({1, max(0, 1), max(0, 0)})
    # = [0, 1]: only ModelOpt's defaults are [0, 1]
    d = converted(tmp_path, [0, 1])
    sign = converted_output_defaults(ctx(d, target=dataclasses.replace(LLAMA, num_hidden_layers=4)))
    assert "for a target of 4 layers (ModelOpt 0.47.0) and" in sign.said


def test_two_conversion_habits_are_both_named(tmp_path):
    # a float32 conversion of a source naming `dtype` (eagle3_converter.py:184, :223-225)
    def f32(t):
        for k, (dt, shape, data) in list(t.items()):
            if dt == "BF16":
                t[k] = ("F32", shape, data)

    def cfg(c):
        c["torch_dtype"] = "float32"
        c["transformer_layer_config"].pop("torch_dtype", None)

    d = converted(tmp_path, [1, 15, 28], tensors=f32, config=cfg)
    assert d.format.conversion_evidence == [HABIT, "float32 weights and no dtype in transformer_layer_config, as "
                                                   "the converter casts a source naming `dtype`"]
    sign = converted_output_defaults(ctx(d, target=LLAMA))
    assert f"habits ({HABIT}; {d.format.conversion_evidence[1]}); the" in sign.said


def test_converted_ids_are_weighed_only_when_they_equal_the_defaults_and_a_target_is_known(tmp_path):
    # speculators' own defaults [2, 32//2, 32-3] = [2, 16, 29] are the input convention's: no output vote
    d = converted(tmp_path, [2, 16, 29])
    assert converted_output_defaults(ctx(d, target=LLAMA)) is None
    assert settle_convention(ctx(d, target=LLAMA)).convention == "input"
    d = converted(tmp_path, [1, 15, 28], name="c2")
    assert converted_output_defaults(ctx(d, target=None)) is None
    # a draft that is not converted, or that has no ids, is never weighed
    d = draft(tmp_path, "speculators", [1, 15, 28], (TOP,), name="trained",
              config=lambda c: c.update(architectures=["Eagle3DraftModel"]))
    assert d.format.converted_by is None and converted_output_defaults(ctx(d, target=LLAMA)) is None
    d = converted(tmp_path, [1, 15, 28], name="c3")
    assert converted_output_defaults(ctx(d, target=LLAMA, ids=None)) is None
    assert converted_output_defaults(ctx(d, target=LLAMA, ids=[])) is None


# --- producer_default_streams: SpecForge's code when the config names no ids -------------------------------------

def _default_specforge_build(c: dict) -> None:
    # SpecForge 0.2.0's exporter rebuilds the config from the user's draft JSON: a default build ships no ids and
    # no eagle_config (rule docstring, docs/formats-and-engines.md#aux-layer-ids)
    c.pop("eagle_config", None)
    c.pop(AUX, None)


def test_specforge_without_ids_trains_on_the_inputs_of_the_engines_defaults(tmp_path):
    # resolve_eagle_capture_layers: outputs of [1, L//2-1, L-4]; +1 = the inputs of [2, L//2, L-3]. Kimi-K2.5,
    # 61 layers: [2, 30, 58]
    d = draft(tmp_path, "specforge", None, config=_default_specforge_build)
    # what recognises it: the architecture, midlayer.* names and d2t/t2d, SpecForge's signature without the ids key
    assert d.format.producer == "specforge" and len(d.format.evidence) == 3
    got = producer_default_streams(ctx(d))
    assert got == ([2, 30, 58], "SpecForge 0.2.0 specforge/algorithms/model_providers.py resolve_eagle_capture_layers")
    assert producer_default_streams(ctx(d, target=None)) is None


def test_producer_defaults_need_a_recognised_specforge(tmp_path):
    d = draft(tmp_path, "specforge", None, config=_default_specforge_build)
    below = dataclasses.replace(d, format=dataclasses.replace(d.format, confidence=d.format.confidence - 0.01))
    assert producer_default_streams(ctx(below)) is None
    # the layers are the recognised producer's (its format module's trained_layers): ModelOpt's says nothing
    from kconvert.formats import modelopt

    assert getattr(modelopt, "trained_layers", None) is None
    other = dataclasses.replace(d, format=dataclasses.replace(d.format, producer="modelopt"),
                                aux=dataclasses.replace(d.aux, producer_layers=None))
    assert producer_default_streams(ctx(other)) is None


# --- trained_physical_ids, fed_physical_ids, ids_unread, write_ops -----------------------------------------------

def test_the_users_ids_are_the_trained_streams(tmp_path):
    d = draft(tmp_path, "specforge", [1, 29, 57])
    assert trained_physical_ids(ctx(d, decisions=Decisions(aux_ids=[3, 31, 59]))) == [3, 31, 59]


def test_no_ids_are_the_engines_defaults_when_asked_or_for_the_eagle_reference(tmp_path):
    # vLLM's and SGLang's defaults (2, L//2, L-3): [2, 30, 58] on 61 layers
    d = draft(tmp_path, "unknown", None)
    assert trained_physical_ids(ctx(d)) is None
    assert trained_physical_ids(ctx(d, decisions=Decisions(aux_ids_default=True))) == [2, 30, 58]
    assert trained_physical_ids(ctx(d, target=None, decisions=Decisions(aux_ids_default=True))) is None
    e = draft(tmp_path, "eagle", None, name="eagle")
    assert e.format.producer == "eagle"
    assert trained_physical_ids(ctx(e)) == [2, 30, 58]  # EAGLE hard-codes them (docs/formats-and-engines.md#producers-and-their-layouts)
    assert trained_physical_ids(ctx(e, target=None)) is None


def test_settled_ids_are_the_trained_streams_in_vllms_numbering(tmp_path):
    # input: as written; output: +1 (output of layer k = input of layer k+1); unsettled: unknown
    top = draft(tmp_path, "unknown", [3, 4, 5], where=(TOP,))
    assert trained_physical_ids(ctx(top, target=LLAMA)) == [3, 4, 5]
    sf = draft(tmp_path, "specforge", [1, 29, 57], name="sf")
    assert trained_physical_ids(ctx(sf)) == [2, 30, 58]
    un = draft(tmp_path, "unknown", [3, 4, 5], name="un")
    assert trained_physical_ids(ctx(un, target=LLAMA)) is None


def test_vllm_v2_feeds_its_defaults_for_ids_only_in_eagle_config(tmp_path):
    # Model Runner V2 reads the top-level key or eagle_config.layer_ids only (eagle3_utils.py); the ids
    # [3, 31, 59] only in eagle_config are unread there and it feeds (2, L//2, L-3) = [2, 30, 58]; V1 reads them.
    d = draft(tmp_path, "unknown", [3, 31, 59])
    assert ids_unread(ctx(d, version="0.32")) and fed_physical_ids(ctx(d, version="0.32")) == [2, 30, 58]
    assert not ids_unread(ctx(d, version="0.32/v1")) and fed_physical_ids(ctx(d, version="0.32/v1")) == [3, 31, 59]
    # eagle_config.layer_ids is read by V2
    d = draft(tmp_path, "unknown", [3, 31, 59], where=(LAYER_IDS,), name="li")
    assert not ids_unread(ctx(d, version="0.32")) and fed_physical_ids(ctx(d, version="0.32")) == [3, 31, 59]
    # SGLang reads eagle_config (never 'unread' in this sense), no target or no ids: nothing to say
    d = draft(tmp_path, "unknown", [3, 31, 59], where=(TOP,), name="top")
    assert not ids_unread(ctx(d, engine="sglang", version="post-25454"))
    assert not ids_unread(ctx(d, target=None, version="0.32"))
    n = draft(tmp_path, "unknown", None, name="none")
    assert not ids_unread(ctx(n, version="0.32")) and fed_physical_ids(ctx(n, version="0.32")) is None


def test_sglang_feeds_the_first_id_rule_on_kimi_and_plus_one_on_llama(tmp_path):
    # sglang_oracle.json: deepseek_v2 [1, 29, 57] -> [2, 30, 58], [2, 30, 58] as given; llama +1 always
    d = draft(tmp_path, "unknown", [1, 29, 57])
    assert fed_physical_ids(ctx(d, engine="sglang", version="post-25454")) == [2, 30, 58]
    d = draft(tmp_path, "unknown", [2, 30, 58], name="two")
    assert fed_physical_ids(ctx(d, engine="sglang", version="post-25454")) == [2, 30, 58]
    assert fed_physical_ids(ctx(d, target=LLAMA, engine="sglang", version="post-25454")) == [3, 31, 59]


def test_write_ops_write_the_streams_at_every_key_the_row_reads(tmp_path):
    d = draft(tmp_path, "unknown", [1, 29, 57])
    # vLLM V1: both keys, ids as the streams (input convention)
    assert write_ops(ctx(d), [2, 30, 58], "why") == [SetConfig(TOP, [2, 30, 58], "why"),
                                                     SetConfig(EC, [2, 30, 58], "why")]
    # SGLang before #25454 adds +1: streams [2, 30, 58] are written [1, 29, 57], in eagle_config only
    assert write_ops(ctx(d, engine="sglang", version="pre-25454"), [2, 30, 58], "r") == [
        SetConfig(EC, [1, 29, 57], "r")]
    # SGLang after #25454 cannot express streams starting at 1 (a first id 1 is shifted): nothing to write
    assert write_ops(ctx(d, engine="sglang", version="post-25454"), [1, 29, 57], "r") == []


# --- the rules, as a user reads them ---------------------------------------------------------------------------------

def _findings(d, rid: str, **kw):
    from kconvert.rules.base import REGISTRY

    return list(REGISTRY[rid].fn(ctx(d, **kw)))


def test_k404_on_an_unsettled_kimi_draft_names_both_readings_and_the_measured_one(tmp_path):
    # AQ-MedAI/Kimi-K25-eagle3's files (ids [2, 30, 58] in eagle_config, SpecForge, Kimi-K2.5): V1 reads them as
    # input and feeds [2, 30, 58]; read as output they were trained on [3, 31, 59]. vLLM PR #35966 measured the
    # input reading at 88381 / 170672 = 51.78 % (RECORD.md).
    d = draft(tmp_path, "specforge", [2, 30, 58], shape="kimi")
    [f] = _findings(d, "K404")
    assert f.severity == "warning" and f.needs_decision.startswith("--aux-convention input|output")
    assert f.message == (
        "cannot settle which convention the aux ids [2, 30, 58] follow: only weak evidence (input: the first id); "
        "not counted: specforge's code; vLLM PR #35966 measured the input reading, no public run the output, so "
        "--aux-convention input is recommended")
    # each reading is evidence: the streams V1 feeds against those the draft was trained on under it; so is each
    # sign, and the measurement whole
    assert [(e.where, e.observed, e.expected) for e in f.evidence[1:]] == [
        ("read as input", [2, 30, 58], [2, 30, 58]), ("read as output", [2, 30, 58], [3, 31, 59]),
        SF_UNDETERMINED_SIGN, FIRST_2_SIGN,
        ("public record", "vLLM served AQ-MedAI/Kimi-K25-eagle3 with these ids read as input (51.78% acceptance at "
         "k=4 on GSM8K, TP 8, vLLM PR #35966); no public run measured the output reading", "input")]


def test_k404_settled_output_ids_name_their_evidence_and_the_cost(tmp_path):
    # SpecForge [1, 29, 57] on Kimi-K2.5: trained streams [2, 30, 58]; vLLM feeds [1, 29, 57], one layer early
    # (vLLM PR #43671's cost)
    d = draft(tmp_path, "specforge", [1, 29, 57], shape="kimi")
    [f] = _findings(d, "K404")
    assert f.severity == "error"
    assert f.message.startswith("aux ids [1, 29, 57] are in the output convention (specforge's code, the first "
                                "id); vllm 0.32/v1 would feed streams [1, 29, 57] instead of [2, 30, 58]: ")
    assert "#43671" in f.message
    assert [(e.where, e.observed, e.expected) for e in f.evidence[1:]] == [SPECFORGE_SIGN, FIRST_1_SIGN]


# --- measured.py: the public record's reading, matched by what the files say --------------------------------------

def test_the_table_holds_the_kimi_k25_measurement_of_vllm_pr_35966():
    # RECORD.md: 88381 accepted of 170672 draft tokens = 51.78 %
    assert f"{100 * 88381 / 170672:.2f}%" == "51.78%"
    [m] = MEASURED
    assert (m.question, m.reading, m.flag, m.ids, m.target_layers, m.producer, m.draft, m.source) == (
        "aux-convention", "input", "--aux-convention input", (2, 30, 58), 61, "specforge",
        "AQ-MedAI/Kimi-K25-eagle3", "vLLM PR #35966")
    assert m.figure == "51.78% acceptance at k=4 on GSM8K, TP 8" and m.other_measured is False
    assert m.to_dict() == {"question": "aux-convention", "reading": "input", "flag": "--aux-convention input",
                           "draft": "AQ-MedAI/Kimi-K25-eagle3", "engine": "vLLM",
                           "figure": "51.78% acceptance at k=4 on GSM8K, TP 8",
                           "source": "vLLM PR #35966", "other_measured": False}


def test_the_sentence_says_which_reading_was_measured_and_whether_the_other_was():
    [m] = MEASURED
    assert m.sentence() == ("vLLM served AQ-MedAI/Kimi-K25-eagle3 "
                            "with these ids read as input (51.78% acceptance at k=4 on GSM8K, TP 8, vLLM PR #35966); "
                            "no public run measured the output reading")
    o = dataclasses.replace(m, reading="output", engine="SGLang", figure="f", source="s", other_measured=True)
    assert o.sentence() == ("SGLang served AQ-MedAI/Kimi-K25-eagle3 "
                            "with these ids read as output (f, s); the input reading was measured too")


def test_the_measurement_matches_the_files_not_the_name(tmp_path):
    d = draft(tmp_path, "specforge", [2, 30, 58])
    m = measured_reading(ctx(d), "aux-convention")
    assert m is MEASURED[0]
    assert measured_reading(ctx(d), "d2t") is None
    # Kimi-K2 (model_type kimi_k2 at the top level, 61 layers) is in the entry's model types too
    k2 = dataclasses.replace(KIMI, model_type="kimi_k2", text_model_type=None)
    assert measured_reading(ctx(d, target=k2), "aux-convention") is m
    # only the text model's type naming it is enough (types = {model_type, text_model_type})
    wrapped = dataclasses.replace(KIMI, model_type="other", text_model_type="kimi_k2")
    assert measured_reading(ctx(d, target=wrapped), "aux-convention") is m
    # anything the files say differently: no match
    assert measured_reading(ctx(draft(tmp_path, "specforge", [2, 30, 57], name="ids")), "aux-convention") is None
    assert measured_reading(ctx(d, target=dataclasses.replace(KIMI, num_hidden_layers=60)), "aux-convention") is None
    ds = dataclasses.replace(KIMI, model_type="deepseek_v3", text_model_type="deepseek_v3")
    assert measured_reading(ctx(d, target=ds), "aux-convention") is None
    other = dataclasses.replace(d, format=dataclasses.replace(d.format, producer="torchspec"))
    assert measured_reading(ctx(other), "aux-convention") is None
    assert measured_reading(ctx(d, target=None), "aux-convention") is None
    assert measured_reading(ctx(d, ids=None), "aux-convention") is None


# --- recommend.py: only a decision-needing K404 recommends a reading ------------------------------------------------

def test_a_decision_needing_k404_recommends_the_measured_reading(tmp_path):
    from types import SimpleNamespace

    d = draft(tmp_path, "specforge", [2, 30, 58], shape="kimi")
    c = ctx(d)
    res = SimpleNamespace(draft=c.draft, target=c.target, engine=c.engine, decisions=c.decisions)
    [f] = _findings(d, "K404")
    assert recommendation(f, res) is MEASURED[0]
    # the same finding without a decision to make, or another rule's: nothing recommended
    assert recommendation(dataclasses.replace(f, needs_decision=None), res) is None
    assert recommendation(dataclasses.replace(f, id="K401"), res) is None
    # a K404 on files the record never measured: none
    d2 = draft(tmp_path, "unknown", [1, 3, 4], name="u")
    c2 = ctx(d2)
    res2 = SimpleNamespace(draft=c2.draft, target=c2.target, engine=c2.engine, decisions=c2.decisions)
    [f2] = _findings(d2, "K404")
    assert f2.needs_decision and recommendation(f2, res2) is None


# --- a head trained without aux states (no fc, use_aux_hidden_state false) -----------------------------------------

def test_a_head_without_aux_states_needs_no_ids_and_is_warned_about_on_model_runner_v2_only(tmp_path):
    # nvidia/gpt-oss-120b-Eagle3-v2's shape (vLLM PR #27688): use_aux_hidden_state false and no fc; it reads the
    # target's last hidden state, so no aux ids are missing. vLLM 0.32's Model Runner V2 collects aux states
    # anyway (vLLM issue #40551); V1 honours the flag (docs/formats-and-engines.md#vllms-two-model-runners).
    def no_fc(t):
        t.pop("fc.weight")

    d = draft(tmp_path, "unknown", None, config=lambda c: c.update(eagle_config={"use_aux_hidden_state": False}),
              tensors=no_fc)
    assert "fc.weight" not in d.tensors and d.aux.ids is None
    for version in ("0.32", "0.32/v1"):
        assert _findings(d, "K401", version=version) == []
    [f] = _findings(d, "K406", version="0.32")
    assert f.severity == "warning" and f.message.startswith(
        "a head without aux states (use_aux_hidden_state false): vllm 0.32 (Model Runner V2), what GPUs run,")
    assert _findings(d, "K406", version="0.32/v1") == []
    # the flag true, or absent, with no fc: an EAGLE-3 head that lost its fc, whose missing ids K401 reports
    for name, ec in (("true", {"use_aux_hidden_state": True}), ("absent", {})):
        d = draft(tmp_path, "unknown", None, name=name, config=lambda c, ec=ec: c.update(eagle_config=ec),
                  tensors=no_fc)
        assert [f.severity for f in _findings(d, "K401")] == ["warning"]
        assert _findings(d, "K406", version="0.32") == []
    # the flag false next to an fc: the engine would drop the fc (llama_eagle3.py load_weights)
    d = draft(tmp_path, "unknown", None, name="fc",
              config=lambda c: c.update(eagle_config={"use_aux_hidden_state": False}))
    assert [f.severity for f in _findings(d, "K401")] == ["warning"]


def test_different_ids_at_two_keys_are_an_error_and_the_same_ids_are_not(tmp_path):
    # vLLM's V1 runner reads the top-level key first, SGLang eagle_config only (docs/formats-and-engines.md#vllms-two-model-runners): two
    # different lists make the engines feed different streams
    def two(c):
        c[AUX] = [3, 31, 59]
        c["eagle_config"] = {AUX: [2, 30, 58]}

    d = draft(tmp_path, "unknown", None, config=two)
    [f] = _findings(d, "K405")
    assert f.severity == "error" and f.message == (
        "aux ids differ between config keys: {'eagle_aux_hidden_state_layer_ids': [3, 31, 59], "
        "'eagle_config.eagle_aux_hidden_state_layer_ids': [2, 30, 58]}")
    same = draft(tmp_path, "unknown", [3, 31, 59], where=(TOP, EC, LAYER_IDS), name="same")
    assert [f.severity for f in _findings(same, "K405")] == []


def test_a_list_at_one_key_and_a_number_at_another_disagree(tmp_path):
    # the ids are read from the first key that holds a list of integers (vLLM V1's order: the top-level key first);
    # eagle_config's `7` is no list, which SGLang (reading eagle_config only) cannot use: the keys disagree
    def odd(c):
        c[AUX] = [3, 31, 59]
        c["eagle_config"] = {AUX: 7}

    d = draft(tmp_path, "unknown", None, config=odd)
    assert d.aux.ids == [3, 31, 59]
    [f] = _findings(d, "K405")
    assert f.severity == "error" and f.message == (
        "aux ids differ between config keys: {'eagle_aux_hidden_state_layer_ids': [3, 31, 59], "
        "'eagle_config.eagle_aux_hidden_state_layer_ids': 7}")


# --- every field a user, a CI gate and fix read: findings in full (issue #30) ---------------------------------------
# The message, severity, evidence (where / observed / expected: what --json and the SARIF output carry), the ops fix
# writes (path, value, the reason kconvert.json records) and the decision fix waits for. Streams are derived by
# hand in each comment from the engines' conventions above; the wording is the rule's own (kconvert/rules/aux_layers.py
# and docs/rules.md), which users read and grep CI logs for.

DECIDE_IDS = "--aux-ids L1,L2,L3 (layers in vLLM's input-of-layer numbering) or --aux-ids default"
FINAL_36 = "id 36 is the 36-layer target's final boundary (there is no layer 36 whose output it could name)"


def whole(f):
    return (f.severity, f.message, [(e.where, e.observed, e.expected) for e in f.evidence],
            [(o.path, o.value, o.reason) for o in f.ops], f.needs_decision, f.fixable)


def test_k401_the_eagle_reference_code_is_consistent_and_fix_writes_the_defaults_where_the_row_reads(tmp_path):
    # the EAGLE reference code hard-codes the engines' defaults, the inputs of (2, L//2, L-3): [2, 30, 58] on 61
    # layers. vLLM V1 reads both keys, as given (input); SGLang after #25454 reads eagle_config, and on a Kimi target
    # shifts a list starting at 1, so streams [2, 30, 58] are written [1, 29, 57] there.
    e = draft(tmp_path, "eagle", None)
    msg = ("no aux ids recorded; the EAGLE reference code trains on the engines' default layers, so this is "
           "consistent")
    why = "EAGLE hard-codes the engines' default layers"
    [f] = _findings(e, "K401")
    assert whole(f) == ("info", msg, [(AUX, None, [2, 30, 58])],
                        [(TOP, [2, 30, 58], why), (EC, [2, 30, 58], why)], None, True)
    [f] = _findings(e, "K401", engine="sglang", version="post-25454")
    assert whole(f) == ("info", msg, [(AUX, None, [2, 30, 58])], [(EC, [1, 29, 57], why)], None, True)
    # without a target there are no layers to name: nothing to write, nothing to decide
    [f] = _findings(e, "K401", target=None)
    assert whole(f) == ("info", msg, [(AUX, None, None)], [], None, False)


def test_k401_an_unknown_producer_waits_for_the_layers(tmp_path):
    # vLLM PR #50170: the engine feeds its defaults, inputs of [2, 30, 58] on Kimi-K2.5
    u = draft(tmp_path, "unknown", None)
    tail = "; a draft trained on other layers collapses (vLLM PR #50170), which only `kconvert verify` can see"
    [f] = _findings(u, "K401")
    assert whole(f) == ("warning", "no aux layer ids recorded: the engine will feed its defaults (inputs of layers "
                        "[2, 30, 58])" + tail, [(AUX, None, "the layers the draft was trained on")], [],
                        DECIDE_IDS, True)
    [f] = _findings(u, "K401", target=None)
    assert f.message == "no aux layer ids recorded: the engine will feed its defaults" + tail
    # --aux-ids 3,31,59: written at both keys vLLM V1 reads, as given
    [f] = _findings(u, "K401", decisions=Decisions(aux_ids=[3, 31, 59]))
    why = "aux ids decided by the user"
    assert whole(f) == ("warning", "no aux ids recorded; writing [3, 31, 59] as decided",
                        [(AUX, None, [3, 31, 59])], [(TOP, [3, 31, 59], why), (EC, [3, 31, 59], why)], None, True)


def test_k401_specforge_defaults_are_the_rows_defaults(tmp_path):
    # SpecForge 0.2.0, no ids: outputs of [1, 29, 57] = the inputs of [2, 30, 58], vLLM's defaults on 61 layers
    sf = draft(tmp_path, "specforge", None, config=_default_specforge_build)
    [f] = _findings(sf, "K401")
    src = "SpecForge 0.2.0 specforge/algorithms/model_providers.py resolve_eagle_capture_layers"
    assert whole(f) == ("info", f"no aux ids recorded; specforge trains on streams [2, 30, 58] when none are given "
                        f"({src}), the streams vllm 0.32/v1's defaults feed", [(AUX, None, [2, 30, 58])], [],
                        None, False)


def test_k401_a_producer_whose_defaults_are_not_the_rows_is_an_error_fix_repairs(tmp_path, monkeypatch):
    # A format module's trained_layers is where a producer whose code trains on other layers says so (SpecForge's
    # DEFAULT_LAYERS here); such a producer's outputs of [0, 10, 20] are the inputs of [1, 11, 21], not vLLM's
    # [2, 30, 58] on Kimi-K2.5: the draft would run on other layers, and fix writes the producer's streams
    import kconvert.formats.specforge as specforge

    src = "a producer's code that trains on the outputs of [0, 10, 20]"
    monkeypatch.setattr(specforge, "DEFAULT_LAYERS", (src, lambda L: [0, 10, 20]))
    sf = draft(tmp_path, "specforge", None, config=_default_specforge_build)
    [f] = _findings(sf, "K401")
    why = f"specforge's default training layers ({src})"
    assert whole(f) == ("error", f"no aux ids recorded; specforge trains on streams [1, 11, 21] when none are given "
                        f"({src}), but vllm 0.32/v1's defaults feed [2, 30, 58]: the draft would run on other "
                        "layers than it was trained on", [(AUX, None, [1, 11, 21])],
                        [(TOP, [1, 11, 21], why), (EC, [1, 11, 21], why)], None, True)


def test_k402_ids_that_are_no_list_and_repeated_ids(tmp_path):
    inv = draft(tmp_path, "unknown", "2,30,58")
    assert _findings(inv, "K401") == []  # the ids are there, only malformed: K402's, not "missing"
    [f] = _findings(inv, "K402")
    assert whole(f) == ("error", "aux ids at eagle_config.eagle_aux_hidden_state_layer_ids are not a list of "
                        "integers", [(".".join(EC), "2,30,58", "[int]")], [], DECIDE_IDS, True)
    dup = draft(tmp_path, "unknown", [3, 3, 5], name="dup")
    [f] = _findings(dup, "K402")
    assert whole(f) == ("error", "aux ids [3, 3, 5] repeat a layer", [(".".join(EC), [3, 3, 5], None)], [],
                        DECIDE_IDS, True)


def test_k402_streams_outside_0_to_L(tmp_path):
    # at the top-level key the ids are input-of-layer (vLLM's): a 61-layer target has streams 0 (the embedding
    # output) .. 61 (after the last layer); 62 does not exist, 0 does
    d = draft(tmp_path, "unknown", [2, 30, 62], where=(TOP,))
    [f] = _findings(d, "K402")
    assert whole(f) == ("error", "aux ids [2, 30, 62] (input convention) name streams [2, 30, 62]; a 61-layer "
                        "target has streams 0..61", [(AUX, [2, 30, 62], "streams within 0..61")], [], DECIDE_IDS,
                        True)
    assert _findings(draft(tmp_path, "unknown", [0, 30, 58], where=(TOP,), name="zero"), "K402") == []
    # ids whose convention is not settled (unknown producer, eagle_config, first id 3 on a Llama target) name no
    # streams: nothing to range-check
    assert _findings(draft(tmp_path, "unknown", [3, 16, 29], name="un"), "K402", target=LLAMA) == []


def test_k402_nvidia_gpt_oss_ids_on_sglang_before_32334_lose_a_state(tmp_path):
    # nvidia/gpt-oss-120b-Eagle3-v3's [24, 30, 36] on the 36-layer GPT-OSS (the rule's why, sglang PR #32334):
    # 36 is the final boundary, so input; SGLang before #25454 adds +1 and reads [25, 31, 37], and collects streams
    # 0..35 only (its hook fires before a layer): 2 of 3 states, a crash. The streams [24, 30, 36] cannot be fed
    # at all (36 > 35), so fix cannot repair it.
    d = draft(tmp_path, "unknown", [24, 30, 36])
    [f] = _findings(d, "K402", target=GPT_OSS, engine="sglang", version="pre-25454")
    assert whole(f) == ("error", "sglang pre-25454 reads the aux ids [24, 30, 36] as streams [25, 31, 37] and "
                        "collects at most stream 35 on a 36-layer gpt_oss target: fc gets 2 of 3 states and the "
                        "draft fails (sglang PR #32334: crash)",
                        [(".".join(EC), [24, 30, 36], "streams within 0..35 on sglang pre-25454")], [], None, False)
    # [24, 34, 36] -> read as [25, 35, 37]: stream 35 is still collected, 2 of 3 again
    d = draft(tmp_path, "unknown", [24, 34, 36], name="b")
    [f] = _findings(d, "K402", target=GPT_OSS, engine="sglang", version="pre-25454")
    assert "fc gets 2 of 3 states" in f.message
    # since #32334 SGLang collects the final boundary on GPT-OSS and reads ids whose largest is L as given
    assert _findings(d, "K402", target=GPT_OSS, engine="sglang", version="post-32334") == []


def test_k402_ids_fix_can_rewrite_are_left_to_k404(tmp_path):
    # top-level [2, 16, 31] on the 32-layer Llama-3.1-8B: input (the top-level key). SGLang adds +1 on Llama
    # (llama.py:941) and reads [3, 17, 32], beyond its last collected stream 31; written [1, 15, 30] instead, it feeds
    # [2, 16, 31], all collected: repairable, so K402 says nothing (K404 rewrites them)
    d = draft(tmp_path, "unknown", [2, 16, 31], where=(TOP, EC))
    assert _findings(d, "K402", target=LLAMA, engine="sglang", version="post-25454") == []
    [f] = _findings(d, "K404", target=LLAMA, engine="sglang", version="post-25454")
    assert [(o.path, o.value) for o in f.ops] == [(EC, [1, 15, 30])]


def test_k402_a_trained_stream_after_the_last_layer_that_sglang_never_collects(tmp_path):
    # [2, 30, 60] decided output-of-layer on Kimi-K2.5: trained on streams [3, 31, 61]; SGLang after #25454 reads a
    # list starting at 2 as given ([2, 30, 60], all collected) but can never feed stream 61 (it collects 0..60 on
    # a DeepSeek target): 2 of 3 states
    d = draft(tmp_path, "unknown", [2, 30, 60])
    [f] = _findings(d, "K402", engine="sglang", version="post-25454", decisions=Decisions(aux_convention="output"))
    assert whole(f) == ("error", "the draft was trained on stream 61 (after the last of 61 layers); sglang post-25454 "
                        "does not collect it on a deepseek target, so fc gets 2 of 3 states and the draft fails "
                        "(sglang PR #32334)",
                        [(".".join(EC), [2, 30, 60], "streams within 0..60 on sglang post-25454")], [], None, False)


def test_k403_the_id_count_against_fc(tmp_path):
    # a Kimi-shaped draft: fc takes 3 x 7168 = 21504 inputs, 3 hidden states; two ids are one short
    d = draft(tmp_path, "unknown", [2, 30], shape="kimi")
    [f] = _findings(d, "K403")
    assert whole(f) == ("error", "2 aux ids but fc takes 3 hidden states (21504 = 3 x 7168)",
                        [(".".join(EC), [2, 30], "3 ids")], [], DECIDE_IDS, True)
    # --aux-ids replaces the files' ids: three named, nothing to say; two named, where the files had none
    assert _findings(d, "K403", decisions=Decisions(aux_ids=[2, 30, 58])) == []
    n = draft(tmp_path, "unknown", None, shape="kimi", name="n")
    assert _findings(n, "K403") == []
    [f] = _findings(n, "K403", decisions=Decisions(aux_ids=[2, 30]))
    assert f.evidence[0].where == "--aux-ids" and f.evidence[0].observed == [2, 30]
    assert _findings(d, "K403", target=None) == []


def test_k404_unsettled_ids_no_public_run_measured(tmp_path):
    # [1, 29, 57] in eagle_config on Kimi-K2.5, producer unknown: only the first id (1: output, weakly). Read as
    # input vLLM V1 feeds them as written; read as output they were trained on [2, 30, 58]
    d = draft(tmp_path, "unknown", [1, 29, 57])
    [f] = _findings(d, "K404")
    assert whole(f) == (
        "warning", "cannot settle which convention the aux ids [1, 29, 57] follow: only weak evidence (output: the "
        "first id); no public run measured either reading",
        [(".".join(EC), [1, 29, 57], None), ("read as input", [1, 29, 57], [1, 29, 57]),
         ("read as output", [1, 29, 57], [2, 30, 58]), FIRST_1_SIGN], [],
        "--aux-convention input|output (which convention the ids were trained in)", True)
    assert _findings(draft(tmp_path, "unknown", None, name="none"), "K404") == []


def test_k404_streams_sglang_cannot_express(tmp_path):
    # [1, 29, 57] decided input: streams [1, 29, 57]. SGLang after #25454 shifts a list starting at 1 on Kimi, so
    # no list it reads feeds streams starting at 1
    d = draft(tmp_path, "unknown", [1, 29, 57])
    [f] = _findings(d, "K404", engine="sglang", version="post-25454", decisions=Decisions(aux_convention="input"))
    assert whole(f) == ("error", "sglang post-25454 cannot express streams [1, 29, 57]: ids starting at 1 are "
                        "shifted by its first-id rule", [(".".join(EC), [1, 29, 57], [1, 29, 57])], [], None, False)


def test_k404_a_stream_sglang_never_collects_and_a_one_layer_late_shift(tmp_path):
    # GPT-OSS [24, 30, 36] (final boundary: input) on SGLang before #25454: read +1 as [25, 31, 37]; 37 is never
    # collected (0..35). Written [23, 29, 35] (+1 = [24, 30, 36]) in eagle_config, the only key SGLang reads
    d = draft(tmp_path, "unknown", [24, 30, 36])
    [f] = _findings(d, "K404", target=GPT_OSS, engine="sglang", version="pre-25454")
    why = "convert input-convention ids for sglang"
    assert whole(f) == ("error", "aux ids [24, 30, 36] are in the input convention (the final-boundary id); sglang "
                        "pre-25454 would feed streams [25, 31, 37] instead of [24, 30, 36]: stream 37 is never "
                        "collected, so fc gets fewer states than it needs",
                        [(".".join(EC), [24, 30, 36], [23, 29, 35]), ("the final-boundary id", FINAL_36, "input")],
                        [(EC, [23, 29, 35], why)], None, True)
    # top-level [2, 16, 30] on Llama-3.1-8B (input): SGLang reads [3, 17, 31], all collected (0..31), one layer
    # late everywhere: the measured cost of a late shift, a warning
    d = draft(tmp_path, "unknown", [2, 16, 30], where=(TOP, EC), name="late")
    [f] = _findings(d, "K404", target=LLAMA, engine="sglang", version="pre-25454")
    assert f.severity == "warning" and f.message.endswith("instead of [2, 16, 30]: one layer late: ~0.10 accept "
                                                          "length lost on Kimi-K2.5 (sglang PR #25454)")
    assert [(o.path, o.value, o.reason) for o in f.ops] == [(EC, [1, 15, 29], why)]


def test_k404_settled_output_ids_are_rewritten_for_vllm(tmp_path):
    # SpecForge [1, 29, 57] on Kimi-K2.5: trained on [2, 30, 58]; vLLM V1 reads as given and feeds [1, 29, 57]: fix
    # writes [2, 30, 58] at both keys
    d = draft(tmp_path, "specforge", [1, 29, 57], shape="kimi")
    [f] = _findings(d, "K404")
    why = "convert output-convention ids for vllm"
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [(".".join(EC), [1, 29, 57], [2, 30, 58]),
                                                                        SPECFORGE_SIGN, FIRST_1_SIGN]
    assert [(o.path, o.value, o.reason) for o in f.ops] == [(TOP, [2, 30, 58], why), (EC, [2, 30, 58], why)]


def test_k405_aux_ids_replaced_by_the_flag_and_the_flag_repeating_the_files(tmp_path):
    d = draft(tmp_path, "unknown", [2, 30, 58])
    [f] = _findings(d, "K405", decisions=Decisions(aux_ids=[3, 31, 59]))
    assert whole(f) == ("info", "aux ids replaced by --aux-ids: [2, 30, 58] -> streams [3, 31, 59]",
                        [(".".join(EC), [2, 30, 58], [3, 31, 59])],
                        [(TOP, [3, 31, 59], "--aux-ids"), (EC, [3, 31, 59], "--aux-ids")], None, True)
    # passed back to a fixed output that already holds them at both keys: nothing to say
    same = draft(tmp_path, "unknown", [3, 31, 59], where=(TOP, EC), name="same")
    assert _findings(same, "K405", decisions=Decisions(aux_ids=[3, 31, 59])) == []


def test_k405_two_keys_that_disagree_are_both_in_the_evidence(tmp_path):
    def two(c):
        c[AUX] = [3, 31, 59]
        c["eagle_config"] = {AUX: [2, 30, 58]}

    [f] = _findings(draft(tmp_path, "unknown", None, config=two), "K405")
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [(AUX, [3, 31, 59], None),
                                                                        (".".join(EC), [2, 30, 58], None)]
    assert f.needs_decision == DECIDE_IDS and f.ops == []


def test_k405_ids_only_in_eagle_config_on_each_vllm_runner(tmp_path):
    # input-of-layer ids [3, 31, 59] only in eagle_config on Kimi-K2.5. Model Runner V2 reads the top-level key or
    # eagle_config.layer_ids only, so it feeds its defaults [2, 30, 58]: an error; V1 reads them (a warning naming
    # V2); ids equal to the defaults lose nothing on V2. Fix mirrors them at both keys.
    inp = Decisions(aux_convention="input")
    mirror = "mirror ids at every key the engine reads"
    d = draft(tmp_path, "unknown", [3, 31, 59])
    [f] = _findings(d, "K405", version="0.32", decisions=inp)
    # one fact per message, and the evidence is what fix writes (the top-level key, where there were none)
    assert whole(f) == ("error", "vllm 0.32 (Model Runner V2) does not read "
                        "eagle_config.eagle_aux_hidden_state_layer_ids: it feeds its defaults [2, 30, 58], not "
                        "[3, 31, 59]", [(AUX, None, [3, 31, 59])],
                        [(TOP, [3, 31, 59], mirror), (EC, [3, 31, 59], mirror)], None, True)
    [f] = _findings(d, "K405", version="0.32/v1", decisions=inp)
    assert whole(f)[:2] == ("warning", "vllm 0.32/v1 reads eagle_config.eagle_aux_hidden_state_layer_ids; vllm 0.32 "
                            "(Model Runner V2) does not read eagle_config.eagle_aux_hidden_state_layer_ids and would "
                            "feed its defaults [2, 30, 58], not [3, 31, 59]")
    dflt = draft(tmp_path, "unknown", [2, 30, 58], name="dflt")
    [f] = _findings(dflt, "K405", version="0.32", decisions=inp)
    assert whole(f)[:2] == ("warning", "vllm 0.32 (Model Runner V2) does not read "
                            "eagle_config.eagle_aux_hidden_state_layer_ids: it feeds its defaults [2, 30, 58], which "
                            "are these streams")
    [f] = _findings(dflt, "K405", version="0.32/v1", decisions=inp)
    assert whole(f)[:2] == ("warning", "aux ids are only at eagle_config.eagle_aux_hidden_state_layer_ids; vllm "
                            "0.32/v1 reads eagle_aux_hidden_state_layer_ids too")


def test_k405_ids_only_at_the_top_level_key_on_sglang_and_without_a_target(tmp_path):
    # top-level [3, 31, 59] (input) on Kimi-K2.5: SGLang after #25454 reads eagle_config only, a list starting at 3
    # as given, so fix mirrors the same ids there
    d = draft(tmp_path, "unknown", [3, 31, 59], where=(TOP,))
    [f] = _findings(d, "K405", engine="sglang", version="post-25454")
    mirror = "mirror ids at every key the engine reads"
    assert whole(f) == ("warning", "aux ids are only at eagle_aux_hidden_state_layer_ids; sglang post-25454 reads "
                        "eagle_config.eagle_aux_hidden_state_layer_ids too", [(".".join(EC), None, [3, 31, 59])],
                        [(EC, [3, 31, 59], mirror)], None, True)
    # no target: vLLM V1 would also read eagle_config; no runner comparison without layers
    [f] = _findings(d, "K405", target=None)
    assert whole(f)[:2] == ("warning", "aux ids are only at eagle_aux_hidden_state_layer_ids; vllm 0.32/v1 reads "
                            "eagle_config.eagle_aux_hidden_state_layer_ids too")


def test_k406_an_fc_with_the_flag_false_and_num_aux_hidden_states(tmp_path):
    # vLLM drops fc.* when use_aux_hidden_state is false (llama_eagle3.py load_weights): fix sets it true
    d = draft(tmp_path, "unknown", [2, 30, 58], shape="kimi",
              config=lambda c: c["eagle_config"].update(use_aux_hidden_state=False))
    [f] = _findings(d, "K406")
    assert whole(f) == ("error", "eagle_config.use_aux_hidden_state is false but the draft has an fc layer: the "
                        "engine would drop it", [("eagle_config.use_aux_hidden_state", False, True)],
                        [(("eagle_config", "use_aux_hidden_state"), True, "the draft is an EAGLE-3 draft")], None,
                        True)
    # num_aux_hidden_states 2 against fc's 21504 = 3 x 7168 inputs: fix writes the integer 3 (config.json)
    n = draft(tmp_path, "unknown", [2, 30, 58], shape="kimi", name="n",
              config=lambda c: c.update(num_aux_hidden_states=2))
    [f] = _findings(n, "K406")
    assert whole(f) == ("error", "num_aux_hidden_states is 2 but fc takes 3 hidden states",
                        [("num_aux_hidden_states", 2, 3)],
                        [(("num_aux_hidden_states",), 3, "fc width / target hidden size")], None, True)
    assert type(f.evidence[0].expected) is int and type(f.ops[0].value) is int
    # a tiny draft (fc 3 x 64) next to Kimi-K2.5 (7168): fc's width is no multiple of the target's, nothing to count
    t = draft(tmp_path, "unknown", [2, 30, 58], name="t", config=lambda c: c.update(num_aux_hidden_states=2))
    assert _findings(t, "K406") == []


def test_k406_a_head_without_aux_states_in_full(tmp_path):
    def no_fc(t):
        t.pop("fc.weight")

    d = draft(tmp_path, "unknown", None, config=lambda c: c.update(eagle_config={"use_aux_hidden_state": False}),
              tensors=no_fc)
    [f] = _findings(d, "K406", version="0.32")
    assert whole(f) == ("warning", "a head without aux states (use_aux_hidden_state false): vllm 0.32 (Model Runner "
                        "V2), what GPUs run, collects aux states anyway and acceptance drops (vLLM issue #40551); "
                        "Model Runner V1 honours the flag", [("eagle_config.use_aux_hidden_state", False, None)], [],
                        None, False)
    # the loader line that says so is the rule's why
    from kconvert.rules.base import REGISTRY

    assert "0.32 gpu/model_runner.py sets use_aux_hidden_state_outputs for every eagle3 draft" in REGISTRY["K406"].why


def test_k401_the_users_ids_win_over_a_producers_defaults(tmp_path):
    # a default SpecForge build (no ids) with --aux-ids 3,31,59: the decision is written, not SpecForge's defaults
    sf = draft(tmp_path, "specforge", None, config=_default_specforge_build)
    [f] = _findings(sf, "K401", decisions=Decisions(aux_ids=[3, 31, 59]))
    assert (f.message, [(o.path, o.value) for o in f.ops]) == (
        "no aux ids recorded; writing [3, 31, 59] as decided", [(TOP, [3, 31, 59]), (EC, [3, 31, 59])])


def test_k402_streams_starting_at_1_on_kimi_that_sglang_cannot_feed_and_the_users_repairable_ones(tmp_path):
    # [1, 29, 60] decided input on Kimi-K2.5: streams [1, 29, 60]. SGLang after #25454 shifts a list starting at 1
    # and reads [2, 30, 61]; it collects 0..60 (no final boundary on DeepSeek), so 2 of 3 states; and no list it
    # reads feeds streams starting at 1 (its first-id rule), so fix cannot repair it
    d = draft(tmp_path, "unknown", [1, 29, 60])
    row = dict(engine="sglang", version="post-25454")
    [f] = _findings(d, "K402", decisions=Decisions(aux_convention="input"), **row)
    assert whole(f) == ("error", "sglang post-25454 reads the aux ids [1, 29, 60] as streams [2, 30, 61] and collects "
                        "at most stream 60 on a 61-layer deepseek target: fc gets 2 of 3 states and the draft fails "
                        "(sglang PR #32334: crash)",
                        [(".".join(EC), [1, 29, 60], "streams within 0..60 on sglang post-25454")], [], None, False)
    # --aux-ids 3,31,60: streams SGLang feeds when written as they are (a list starting at 3 is not shifted), all
    # collected: repairable, nothing for K402
    assert _findings(d, "K402", decisions=Decisions(aux_ids=[3, 31, 60]), **row) == []


def test_k404_without_a_target_and_at_sglangs_gpt_oss_boundary(tmp_path):
    # SpecForge [1, 29, 57] without a target: output, trained [2, 30, 58]; vLLM reads as given: one layer early
    d = draft(tmp_path, "specforge", [1, 29, 57])
    [f] = _findings(d, "K404", target=None)
    assert f.severity == "error" and f.message.endswith("would feed streams [1, 29, 57] instead of [2, 30, 58]: one "
                                                       "layer early: position-0 acceptance ~10% instead of ~45% "
                                                       "(vLLM PR #43671)")
    # GPT-OSS (36 layers) [23, 29, 35] decided input on SGLang after #32334: the largest id is not 36, so +1:
    # [24, 30, 36]; stream 36, the final boundary, is collected on GPT-OSS since #32334: one layer late, written
    # [22, 28, 34]
    g = draft(tmp_path, "unknown", [23, 29, 35], name="g")
    [f] = _findings(g, "K404", target=GPT_OSS, engine="sglang", version="post-32334",
                    decisions=Decisions(aux_convention="input"))
    assert f.severity == "warning" and "would feed streams [24, 30, 36] instead of [23, 29, 35]: one layer late" \
        in f.message
    assert [(o.path, o.value) for o in f.ops] == [(EC, [22, 28, 34])]


def test_k405_leaves_unsettled_and_misread_ids_to_k404(tmp_path):
    # unsettled ([3, 31, 59], unknown producer, eagle_config only): K404 asks first; settled SpecForge [1, 29, 57]
    # that vLLM would misread: K404 rewrites them at every key
    assert _findings(draft(tmp_path, "unknown", [3, 31, 59]), "K405") == []
    assert _findings(draft(tmp_path, "specforge", [1, 29, 57], name="sf"), "K405") == []


def test_k405_ids_only_at_eagle_config_layer_ids_are_unread_by_model_runner_v1(tmp_path):
    # V1 reads the top-level key and eagle_config.eagle_aux_hidden_state_layer_ids, not eagle_config.layer_ids
    # (the rule's why: gpu_model_runner.py _get_eagle3_aux_layers_from_config): it feeds its defaults
    inp = Decisions(aux_convention="input")
    d = draft(tmp_path, "unknown", [3, 31, 59], where=(LAYER_IDS,))
    [f] = _findings(d, "K405", decisions=inp)
    assert whole(f)[:3] == ("error", "vllm 0.32/v1 does not read eagle_config.layer_ids: it feeds its defaults "
                            "[2, 30, 58], not [3, 31, 59]",
                            [(AUX, None, [3, 31, 59]), (".".join(EC), None, [3, 31, 59])])
    # at both eagle_config keys: V1 reads one of them, V2 the other (so V2 feeds them too: nothing to say of V2;
    # the message once said V2 would feed its defaults); the top-level key is what both read
    both = draft(tmp_path, "unknown", [3, 31, 59], where=(EC, LAYER_IDS), name="both")
    [f] = _findings(both, "K405", decisions=inp)
    assert f.message == ("aux ids are only at eagle_config.eagle_aux_hidden_state_layer_ids, eagle_config.layer_ids; "
                         "vllm 0.32/v1 reads eagle_aux_hidden_state_layer_ids too")


def test_k406_without_a_target_counts_fc_in_the_drafts_own_hidden_size(tmp_path):
    # the tiny draft's fc takes 3 x 64 = 192 inputs (tests/factories.py TINY: hidden 64, no target_hidden_size):
    # num_aux_hidden_states 2 is one short, also with no target to take the width from
    t = draft(tmp_path, "unknown", [2, 4, 5], config=lambda c: c.update(num_aux_hidden_states=2))
    assert t.target_hidden_size is None
    [f] = _findings(t, "K406", target=None)
    assert (f.message, [(o.path, o.value) for o in f.ops]) == (
        "num_aux_hidden_states is 2 but fc takes 3 hidden states", [(("num_aux_hidden_states",), 3)])
