"""kconvert/rules/shapes.py in full: every finding K301 (fc width) and K303 (hidden size) can yield, with its
severity, whole message, every evidence tuple, its ops and whether fix can act on it, against facts outside kconvert:

- vLLM 0.32's own draft class (the CPU build in .venv: vllm/model_executor/models/llama_eagle3.py
  Eagle3LlamaModel.__init__, lines 209-221): fc takes `target_hidden_size * num_aux_hidden_states` inputs, where
  `target_hidden_size = getattr(config, "target_hidden_size", config.hidden_size)` and `num_aux_hidden_states =
  getattr(config, "num_aux_hidden_states", None)`, else `len(layer_ids) if layer_ids else 3` with layer_ids =
  eagle_config's `eagle_aux_hidden_state_layer_ids`; fc's output is the draft's hidden_size (the decoder layer's
  input). SGLang reads only eagle_config's ids, else 3 (docs/rules.md K301; expectations.py reads_num_aux_from is
  the row's own statement of that and is not used here).
- docs/rules.md K301 / K303: what each checks, that fix sets target_hidden_size when the fc width and the target
  agree on it, that an fc width disagreeing with the number of aux states waits for --aux-ids, and that every norm
  tensor (input_layernorm, hidden_norm, post_attention_layernorm, the final norm) is a vector of hidden_size, the
  MLP's up_proj is [intermediate_size, hidden_size] and lm_head is [rows, hidden_size] (nn.Linear's
  [out_features, in_features] layout).
- The speculators format nests the layer config under `transformer_layer_config` and keeps target_hidden_size at
  top level (speculators' Eagle3SpeculatorConfig; tests/factories.py draft_config "speculators").
- JSON as a user reads it in config.json: the string "64" is written `"64"`, the float 64.0 `64.0`, true `true`.

Every figure is derived by hand in a comment from the tiny shape of tests/factories.py (TINY: hidden 64,
intermediate 128, draft_vocab 128; three aux ids, so fc is [64, 3 x 64 = 192]) and the target profiles (the tiny
target's hidden 64, Kimi-K2.5's 7168). Engine-free; each test takes milliseconds.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kconvert.rules.base import Evidence
from kconvert.writer.ops import SetConfig
from tests.factories import TINY, make_draft, make_target, one_rule, read_folder

H = TINY.hidden  # 64
FC_IN = 3 * H  # 192: three aux states of a hidden-64 target


def _full(f) -> dict:
    """Everything `kconvert inspect` prints of a finding, and what `kconvert fix` acts on."""
    return {"severity": f.severity, "message": f.message, "evidence": f.evidence, "ops": f.ops,
            "needs_decision": f.needs_decision, "fixable": f.fixable}


def _w(*shape: int):
    return ("BF16", shape, np.zeros(shape, np.float32))


def _put(named: dict):
    """A tensors mutator: set (or, with None, drop) each named tensor; `{L}` stands for the layer prefix, which
    the factory writes as midlayer. or layers.0. depending on the producer."""
    def mut(t):
        layer = next(k for k in t if k.endswith("mlp.up_proj.weight")).split("mlp.")[0]
        for k, v in named.items():
            if v is None:
                t.pop(k.format(L=layer))
            else:
                t[k.format(L=layer)] = v
    return mut


def _draft(tmp_path: Path, name: str, producer: str = "specforge", **kw):
    return read_folder(make_draft(tmp_path / name, producer, **kw))


@pytest.fixture
def tiny(tmp_path):
    from kconvert.targets import load_target

    return load_target(str(make_target(tmp_path / "target", "tiny")))  # hidden_size 64


@pytest.fixture
def kimi():
    from kconvert.targets import load_profile

    return load_profile("kimi-k2.5")  # hidden_size 7168


# --- K301 without a target: the width the config implies -----------------------------------------------------

def test_k301_a_draft_whose_fc_fits_its_config_has_no_finding(tmp_path):
    # fc [64, 192] = [hidden, 3 x hidden]: the factory's draft is what vLLM builds
    assert one_rule("K301", _draft(tmp_path, "d")) == []


def test_k301_no_fc_or_an_fc_that_is_not_a_matrix_is_not_judged(tmp_path, tiny):
    # A head without fc (no aux states) and an fc of one dimension: the width check needs a [rows, cols] matrix.
    no_fc = _draft(tmp_path, "n", tensors=_put({"fc.weight": None}))
    flat = _draft(tmp_path, "f", tensors=_put({"fc.weight": _w(FC_IN)}))
    cube = _draft(tmp_path, "c", tensors=_put({"fc.weight": _w(1, H, FC_IN)}))
    for d in (no_fc, flat, cube):
        assert one_rule("K301", d) == [] and one_rule("K301", d, target=tiny) == []


def test_k301_fc_narrower_than_num_aux_hidden_states_says_the_config_width(tmp_path):
    # llama_eagle3.py:210: num_aux_hidden_states 4 -> vLLM builds 4 x 64 = 256 inputs; the fc has 192.
    d = _draft(tmp_path, "d", config=lambda c: c.update(num_aux_hidden_states=4))
    (f,) = one_rule("K301", d)
    assert _full(f) == {"severity": "error", "message": "fc takes 192 inputs but the config implies 4 x 64 = 256",
                        "evidence": [Evidence("fc.weight", [64, 192], [64, 256])], "ops": [],
                        "needs_decision": None, "fixable": False}


def test_k301_sglang_ignores_num_aux_hidden_states(tmp_path):
    # SGLang reads eagle_config's three ids only: 3 x 64 = 192 is the fc it builds, whatever num_aux_hidden_states
    d = _draft(tmp_path, "d", config=lambda c: c.update(num_aux_hidden_states=4))
    assert one_rule("K301", d, engine="sglang", version="0.5.23") == []


def test_k301_four_eagle_config_ids_are_four_aux_states_on_both_engines(tmp_path):
    # llama_eagle3.py:214-216 (and SGLang): len(eagle_config ids) = 4 -> 4 x 64 = 256 fc inputs.
    def four(c):
        c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 2, 3, 4]
    fits = _draft(tmp_path, "w", config=four, tensors=_put({"fc.weight": _w(H, 4 * H)}))
    assert one_rule("K301", fits) == [] and one_rule("K301", fits, engine="sglang", version="0.5.23") == []
    (f,) = one_rule("K301", _draft(tmp_path, "n", config=four), engine="sglang", version="0.5.23")
    assert f.message == "fc takes 192 inputs but the config implies 4 x 64 = 256"
    assert f.evidence == [Evidence("fc.weight", [64, 192], [64, 256])]


def test_k301_no_ids_anywhere_or_an_empty_list_mean_three_aux_states(tmp_path):
    # `len(layer_ids) if layer_ids else 3`: [] and no eagle_config at all (the EAGLE repo's config) are 3 x 64.
    empty = _draft(tmp_path, "e", config=lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[]))
    bare = _draft(tmp_path, "b", "eagle")
    for d in (empty, bare):
        assert one_rule("K301", d) == [] and one_rule("K301", d, engine="sglang", version="0.5.23") == []


def test_k301_speculators_top_level_ids_count_the_aux_states(tmp_path):
    # vLLM's speculators adapter copies the top-level ids where the draft class reads them: 4 ids -> 256 inputs.
    four = lambda c: c.update(eagle_aux_hidden_state_layer_ids=[2, 4, 6, 8])  # noqa: E731
    assert one_rule("K301", _draft(tmp_path, "w", "speculators", config=four,
                                tensors=_put({"fc.weight": _w(H, 4 * H)}))) == []
    (f,) = one_rule("K301", _draft(tmp_path, "n", "speculators", config=four))
    assert f.message == "fc takes 192 inputs but the config implies 4 x 64 = 256"


def test_k301_top_level_ids_of_another_format_do_not_size_fc(tmp_path):
    # llama_eagle3.py reads eagle_config's ids only; the EAGLE repo's config with four top-level ids still gets
    # the default 3 x 64 = 192, which the factory's fc is.
    d = _draft(tmp_path, "d", "eagle", config=lambda c: c.update(eagle_aux_hidden_state_layer_ids=[2, 4, 6, 8]))
    assert one_rule("K301", d) == [] and one_rule("K301", d, engine="sglang", version="0.5.23") == []


def test_k301_no_target_wrong_rows_and_wrong_width_are_two_findings(tmp_path):
    # fc [80, 256]: 256 inputs against 3 x 64 = 192 (the evidence keeps fc's own 80 rows), and 80 outputs against
    # hidden_size 64 (the evidence keeps fc's own 256 columns).
    d = _draft(tmp_path, "d", tensors=_put({"fc.weight": _w(80, 256)}))
    assert [_full(f) for f in one_rule("K301", d)] == [
        {"severity": "error", "message": "fc takes 256 inputs but the config implies 3 x 64 = 192",
         "evidence": [Evidence("fc.weight", [80, 256], [80, 192])], "ops": [], "needs_decision": None,
         "fixable": False},
        {"severity": "error", "message": "fc has 80 outputs but hidden_size is 64",
         "evidence": [Evidence("fc.weight", [80, 256], [64, 256])], "ops": [], "needs_decision": None,
         "fixable": False}]


def test_k301_declared_target_hidden_size_sets_the_width_not_hidden_size(tmp_path):
    # llama_eagle3.py:218: target_hidden_size 128 wins over hidden_size 64: 3 x 128 = 384 inputs is right, and fc
    # keeps hidden_size (64) outputs.
    d = _draft(tmp_path, "d", config=lambda c: c.update(target_hidden_size=128),
               tensors=_put({"fc.weight": _w(H, 3 * 128)}))
    assert one_rule("K301", d) == []
    # ... and the factory's 192-wide fc is then too narrow: 3 x 128 = 384 expected
    (f,) = one_rule("K301", _draft(tmp_path, "n", config=lambda c: c.update(target_hidden_size=128)))
    assert f.message == "fc takes 192 inputs but the config implies 3 x 128 = 384"
    assert f.evidence == [Evidence("fc.weight", [64, 192], [64, 384])]


def test_k301_no_target_and_no_width_in_the_config_judges_only_what_it_can(tmp_path):
    # Neither target_hidden_size nor hidden_size: nothing to compare fc's 192 inputs or 64 rows with.
    d = _draft(tmp_path, "d", config=lambda c: c.pop("hidden_size"))
    assert one_rule("K301", d) == []


# --- K301 against a target ---------------------------------------------------------------------------------

def test_k301_target_agrees_with_the_draft(tmp_path, tiny):
    # tiny target hidden 64: 192 = 3 x 64, target_hidden_size defaults to hidden_size 64, fc rows 64 = hidden
    assert one_rule("K301", _draft(tmp_path, "d"), target=tiny) == []


def test_k301_width_not_a_multiple_of_the_targets_hidden_size_is_another_targets_draft(tmp_path, kimi):
    # Kimi-K2.5's hidden 7168: the tiny draft's 192 inputs are no multiple of it; the engine expects
    # [draft hidden 64, 3 x 7168 = 21504]. Only that finding: nothing else about fc is worth saying then.
    (f,) = one_rule("K301", _draft(tmp_path, "d"), target=kimi)
    assert _full(f) == {
        "severity": "error",
        "message": "fc takes 192 inputs, not a multiple of the target hidden size 7168: trained for another target",
        "evidence": [Evidence("fc.weight", [64, 192], [64, 21504])], "ops": [], "needs_decision": None,
        "fixable": False}


def test_k301_not_a_multiple_says_the_hidden_size_from_fc_when_the_config_has_none(tmp_path, tiny):
    # fc [80, 200]: 200 = 3 x 64 + 8 is no multiple of 64. Without hidden_size the draft's width is fc's 80 rows.
    d = _draft(tmp_path, "d", config=lambda c: c.pop("hidden_size"), tensors=_put({"fc.weight": _w(80, 200)}))
    (f,) = one_rule("K301", d, target=tiny)
    assert f.message == ("fc takes 200 inputs, not a multiple of the target hidden size 64: "
                         "trained for another target")
    assert f.evidence == [Evidence("fc.weight", [80, 200], [80, 192])]


def test_k301_width_of_another_aux_count_waits_for_aux_ids(tmp_path, tiny):
    # fc [80, 256] = 4 x 64 inputs while vLLM feeds eagle_config's three ids (3 x 64 = 192); the evidence keeps
    # fc's 80 rows. The repair is the ids (docs/rules.md K301): fix waits for --aux-ids, and nothing more is said.
    d = _draft(tmp_path, "d", tensors=_put({"fc.weight": _w(80, 256)}))
    (f,) = one_rule("K301", d, target=tiny)
    assert _full(f) == {"severity": "error",
                        "message": "fc takes 256 = 4 x 64 inputs but vllm will feed 3 aux states",
                        "evidence": [Evidence("fc.weight", [80, 256], [80, 192])], "ops": [],
                        "needs_decision": "--aux-ids (one id per aux state the draft was trained on)",
                        "fixable": True}


def test_k301_four_aux_states_load_on_vllm_but_are_fed_three_and_not_on_sglang(tmp_path, tiny):
    # num_aux_hidden_states 4 and fc 4 x 64 = 256: vLLM builds exactly that (it loads), but its runner feeds the
    # streams of eagle_config's 3 ids (V1) or its 3 defaults (V2), so it fails when it runs (vLLM 0.32/0.33's own
    # answers for the same shape of config: tests/data/vllm_oracle.json probes/num-aux-3-ids-4); SGLang feeds 3 too.
    d = _draft(tmp_path, "d", config=lambda c: c.update(num_aux_hidden_states=4),
               tensors=_put({"fc.weight": _w(H, 4 * H)}))
    (f,) = one_rule("K301", d, target=tiny)
    assert f.message.startswith("fc takes 256 = 4 x 64 inputs but vllm") and f.message.endswith("feeds 3 aux states")
    assert f.needs_decision and f.evidence == [Evidence("fc.weight", [64, 256], [64, 192])]
    (f,) = one_rule("K301", d, target=tiny, engine="sglang", version="0.5.23")
    assert f.message == "fc takes 256 = 4 x 64 inputs but sglang will feed 3 aux states"
    assert f.evidence == [Evidence("fc.weight", [64, 256], [64, 192])]


def test_k301_declared_target_hidden_size_the_target_contradicts_is_set_to_the_targets(tmp_path, tiny):
    # fc 192 = 3 x 64 matches the tiny target, but the config declares target_hidden_size 128: fix writes 64,
    # at top level (where the speculators format keeps it too).
    d = _draft(tmp_path, "d", config=lambda c: c.update(target_hidden_size=128))
    (f,) = one_rule("K301", d, target=tiny)
    assert _full(f) == {"severity": "error",
                        "message": "config implies target hidden size 128 but the target's is 64 (fc is [64, 192])",
                        "evidence": [Evidence("target_hidden_size", 128, 64)],
                        "ops": [SetConfig(("target_hidden_size",), 64, "fc width = n_aux x target hidden")],
                        "needs_decision": None, "fixable": True}


def test_k301_target_hidden_size_beats_a_hidden_size_of_another_width(tmp_path, tiny):
    # hidden_size 80, target_hidden_size 64, fc [80, 192]: vLLM's width is 3 x target_hidden_size = 192 and fc's
    # rows are the draft's own 80: nothing to say.
    def cfg(c):
        c.update(hidden_size=80, target_hidden_size=64)
    d = _draft(tmp_path, "d", config=cfg, tensors=_put({"fc.weight": _w(80, FC_IN)}))
    assert one_rule("K301", d, target=tiny) == []


def test_k301_hidden_size_stands_for_target_hidden_size_when_absent(tmp_path, tiny):
    # hidden_size 80 without target_hidden_size: vLLM's getattr default makes the target width 80, the target's
    # is 64. The evidence shows what the config declares for target_hidden_size: nothing.
    d = _draft(tmp_path, "d", config=lambda c: c.update(hidden_size=80),
               tensors=_put({"fc.weight": _w(80, FC_IN)}))
    (f,) = one_rule("K301", d, target=tiny)
    assert f.message == "config implies target hidden size 80 but the target's is 64 (fc is [80, 192])"
    assert f.evidence == [Evidence("target_hidden_size", None, 64)]
    assert f.ops == [SetConfig(("target_hidden_size",), 64, "fc width = n_aux x target hidden")]


def test_k301_config_without_either_width_gets_the_targets(tmp_path, tiny):
    # No hidden_size, no target_hidden_size; fc 192 = 3 x 64 fits the tiny target: fix writes 64.
    d = _draft(tmp_path, "d", config=lambda c: c.pop("hidden_size"))
    (f,) = one_rule("K301", d, target=tiny)
    assert _full(f) == {"severity": "error",
                        "message": "config sets neither target_hidden_size nor hidden_size but the target's is 64 "
                                   "(fc is [64, 192])",
                        "evidence": [Evidence("target_hidden_size", None, 64)],
                        "ops": [SetConfig(("target_hidden_size",), 64, "fc width = n_aux x target hidden")],
                        "needs_decision": None, "fixable": True}


def test_k301_speculators_target_hidden_size_is_written_at_top_level(tmp_path, tiny):
    # The speculators format keeps target_hidden_size at top level: 128 there, the target's 64.
    d = _draft(tmp_path, "d", "speculators", config=lambda c: c.update(target_hidden_size=128))
    (f,) = one_rule("K301", d, target=tiny)
    assert f.message == "config implies target hidden size 128 but the target's is 64 (fc is [64, 192])"
    assert f.ops == [SetConfig(("target_hidden_size",), 64, "fc width = n_aux x target hidden")]


def test_k301_fc_rows_other_than_hidden_size_against_a_target(tmp_path, tiny):
    # fc [80, 192]: the width fits the target (3 x 64) but its 80 outputs are not hidden_size 64.
    d = _draft(tmp_path, "d", tensors=_put({"fc.weight": _w(80, FC_IN)}))
    (f,) = one_rule("K301", d, target=tiny)
    assert _full(f) == {"severity": "error", "message": "fc has 80 outputs but hidden_size is 64",
                        "evidence": [Evidence("fc.weight", [80, 192], [64, 192])], "ops": [],
                        "needs_decision": None, "fixable": False}


# --- K303 with hidden_size: every tensor whose width it fixes ----------------------------------------------

def test_k303_a_draft_of_one_width_has_no_finding(tmp_path):
    assert one_rule("K303", _draft(tmp_path, "d")) == []
    assert one_rule("K303", _draft(tmp_path, "m", family="mla")) == []


def test_k303_every_norm_of_another_width_is_named_in_order(tmp_path):
    # Four norms of 80 where hidden_size is 64, one finding each: the final norm, then the layer's three.
    d = _draft(tmp_path, "d", tensors=_put({"norm.weight": _w(80), "{L}input_layernorm.weight": _w(80),
                                            "{L}hidden_norm.weight": _w(80),
                                            "{L}post_attention_layernorm.weight": _w(80)}))
    names = ["norm.weight", "layers.0.input_layernorm.weight", "layers.0.hidden_norm.weight",
             "layers.0.post_attention_layernorm.weight"]
    assert [_full(f) for f in one_rule("K303", d)] == [
        {"severity": "error", "message": f"{n} is [80], hidden_size is 64", "evidence": [Evidence(n, [80], [64])],
         "ops": [], "needs_decision": None, "fixable": False} for n in names]


def test_k303_a_norm_must_be_a_vector_not_just_end_in_hidden_size(tmp_path):
    # [1, 64] ends in 64 but is no [64] vector: RMSNorm's weight is one value per hidden unit.
    d = _draft(tmp_path, "d", tensors=_put({"norm.weight": _w(1, H)}))
    (f,) = one_rule("K303", d)
    assert f.message == "norm.weight is [1, 64], hidden_size is 64"
    assert f.evidence == [Evidence("norm.weight", [1, 64], [64])]


def test_k303_absent_tensors_are_not_its_business(tmp_path):
    # Missing norms are K601's, a missing lm_head K2xx's: K303 compares shapes that exist.
    d = _draft(tmp_path, "d", tensors=_put({"norm.weight": None, "{L}hidden_norm.weight": None,
                                            "lm_head.weight": None, "{L}mlp.up_proj.weight": None}))
    assert one_rule("K303", d) == []


def test_k303_lm_head_columns_other_than_hidden_size(tmp_path):
    # lm_head [128, 80]: nn.Linear(hidden 64, rows) is [rows, 64].
    d = _draft(tmp_path, "d", tensors=_put({"lm_head.weight": _w(TINY.draft_vocab, 80)}))
    (f,) = one_rule("K303", d)
    assert _full(f) == {"severity": "error", "message": "lm_head.weight is [128, 80]; expected [rows, 64]",
                        "evidence": [Evidence("lm_head.weight", [128, 80], ["draft_vocab", 64])], "ops": [],
                        "needs_decision": None, "fixable": False}


def test_k303_lm_head_that_is_not_a_matrix(tmp_path):
    # lm_head [128]: a vector is no [rows, 64] projection.
    d = _draft(tmp_path, "d", tensors=_put({"lm_head.weight": _w(TINY.draft_vocab)}))
    (f,) = one_rule("K303", d)
    assert f.message == "lm_head.weight is [128]; expected [rows, 64]"
    assert f.evidence == [Evidence("lm_head.weight", [128], ["draft_vocab", 64])]


def test_k303_up_proj_rows_other_than_intermediate_size(tmp_path):
    # up_proj [96, 64] where intermediate_size is 128: config implies [128, 64]; the evidence is the tensor's shape
    # against that one.
    d = _draft(tmp_path, "d", tensors=_put({"{L}mlp.up_proj.weight": _w(96, H)}))
    (f,) = one_rule("K303", d)
    assert _full(f) == {"severity": "error", "message": "mlp.up_proj is [96, 64]; config implies [128, 64]",
                        "evidence": [Evidence("layers.0.mlp.up_proj.weight", [96, 64], [128, 64])], "ops": [],
                        "needs_decision": None,
                        "fixable": False}


def test_k303_up_proj_columns_other_than_hidden_size_are_named(tmp_path):
    # up_proj [128, 80]: the rows fit intermediate_size 128, the 80 columns are not hidden_size 64.
    d = _draft(tmp_path, "d", tensors=_put({"{L}mlp.up_proj.weight": _w(TINY.inter, 80)}))
    (f,) = one_rule("K303", d)
    assert f.message == "mlp.up_proj is [128, 80]; config implies [128, 64]"


def test_k303_up_proj_column_mismatch_evidence_shows_the_mismatch(tmp_path):
    # up_proj [128, 80] against [intermediate 128, hidden 64]: the evidence showed 128 against 128 (the rows only)
    # until this test; it is the tensor's shape against the one the config implies
    d = _draft(tmp_path, "d", tensors=_put({"{L}mlp.up_proj.weight": _w(TINY.inter, 80)}))
    (f,) = one_rule("K303", d)
    assert f.evidence == [Evidence("layers.0.mlp.up_proj.weight", [128, 80], [128, 64])]


def test_k303_up_proj_is_not_judged_without_intermediate_size(tmp_path):
    # No intermediate_size: nothing to compare up_proj's rows with.
    d = _draft(tmp_path, "d", config=lambda c: c.pop("intermediate_size"))
    assert one_rule("K303", d) == []


# --- K303 without a usable hidden_size ----------------------------------------------------------------------

def test_k303_hidden_size_absent_is_set_from_fc_rows(tmp_path):
    # fc [64, 192]: its 64 rows are the draft's hidden size.
    d = _draft(tmp_path, "d", config=lambda c: c.pop("hidden_size"))
    (f,) = one_rule("K303", d)
    assert _full(f) == {"severity": "error", "message": "config has no hidden_size",
                        "evidence": [Evidence("hidden_size", None, 64)],
                        "ops": [SetConfig(("hidden_size",), 64, "fc rows")], "needs_decision": None,
                        "fixable": True}



def test_k303_a_hidden_size_of_zero_or_below_is_no_width_and_fc_rows_replace_it(tmp_path):
    # 0 or -64 is an integer but no width: vLLM would build every module of that width (empty, or refused by
    # torch for a negative size) instead of the 64 the tensors have. The fc layer's 64 rows are the width (fc
    # [64, 192]), written where hidden_size is read; before, 0 read as "config has no hidden_size" and -64 gave
    # six shape findings and no fix
    for v in (0, -64):
        d = _draft(tmp_path, f"d{v}", config=lambda c: c.update(hidden_size=v))
        (f,) = one_rule("K303", d)
        assert _full(f) == {"severity": "error", "message": f"hidden_size is {v}, not a width; write 64 (the fc "
                                                            "layer's rows)",
                            "evidence": [Evidence("hidden_size", str(v), 64)],
                            "ops": [SetConfig(("hidden_size",), 64, "fc rows")], "needs_decision": None,
                            "fixable": True}
    # 1 is a width (a tiny one): the tensors' 64 disagree with it, each norm named, as for any other wrong width
    d = _draft(tmp_path, "d1", config=lambda c: c.update(hidden_size=1))
    assert [f.message for f in one_rule("K303", d)][:2] == ["norm.weight is [64], hidden_size is 1",
                                                            "layers.0.input_layernorm.weight is [64], hidden_size is 1"]

def test_k303_hidden_size_absent_and_no_fc_has_nothing_to_write(tmp_path):
    d = _draft(tmp_path, "d", config=lambda c: c.pop("hidden_size"), tensors=_put({"fc.weight": None}))
    (f,) = one_rule("K303", d)
    assert _full(f) == {"severity": "error", "message": "config has no hidden_size",
                        "evidence": [Evidence("hidden_size", None, None)], "ops": [], "needs_decision": None,
                        "fixable": False}


def test_k303_speculators_hidden_size_absent_is_written_in_the_layer_config(tmp_path):
    # The speculators format keeps hidden_size under transformer_layer_config: fix writes it there.
    d = _draft(tmp_path, "d", "speculators", config=lambda c: c["transformer_layer_config"].pop("hidden_size"))
    (f,) = one_rule("K303", d)
    assert f.message == "config has no hidden_size"
    assert f.evidence == [Evidence("hidden_size", None, 64)]
    assert f.ops == [SetConfig(("transformer_layer_config", "hidden_size"), 64, "fc rows")]


def test_k303_speculators_config_without_a_layer_config(tmp_path):
    # No transformer_layer_config at all: there is no hidden_size to read, and fix writes one where it belongs.
    d = _draft(tmp_path, "d", "speculators", config=lambda c: c.pop("transformer_layer_config"))
    (f,) = one_rule("K303", d)
    assert f.message == "config has no hidden_size"
    assert f.ops == [SetConfig(("transformer_layer_config", "hidden_size"), 64, "fc rows")]


def test_k303_hidden_size_written_as_a_string(tmp_path):
    # "64" in config.json: the engine wants the number 64, which fc's rows give.
    d = _draft(tmp_path, "d", config=lambda c: c.update(hidden_size="64"))
    (f,) = one_rule("K303", d)
    assert _full(f) == {"severity": "error",
                        "message": "hidden_size is \"64\", not an integer; write 64 (the fc layer's rows)",
                        "evidence": [Evidence("hidden_size", "\"64\"", 64)],
                        "ops": [SetConfig(("hidden_size",), 64, "fc rows")], "needs_decision": None,
                        "fixable": True}


def test_k303_hidden_size_written_as_a_boolean(tmp_path):
    # true is no width, though Python counts bool as int
    d = _draft(tmp_path, "d", config=lambda c: c.update(hidden_size=True))
    (f,) = one_rule("K303", d)
    assert f.message == "hidden_size is true, not an integer; write 64 (the fc layer's rows)"
    assert f.evidence == [Evidence("hidden_size", "true", 64)]
    assert f.ops == [SetConfig(("hidden_size",), 64, "fc rows")]


def test_k303_hidden_size_written_as_a_float_without_fc(tmp_path):
    # 64.0 and no fc to read the width from: the user writes the number.
    d = _draft(tmp_path, "d", config=lambda c: c.update(hidden_size=64.0), tensors=_put({"fc.weight": None}))
    (f,) = one_rule("K303", d)
    assert _full(f) == {"severity": "error",
                        "message": "hidden_size is 64.0, not an integer; write the width as a number",
                        "evidence": [Evidence("hidden_size", "64.0", None)], "ops": [], "needs_decision": None,
                        "fixable": False}


def test_k303_speculators_hidden_size_string_in_the_layer_config(tmp_path):
    d = _draft(tmp_path, "d", "speculators", config=lambda c: c["transformer_layer_config"].update(hidden_size="64"))
    (f,) = one_rule("K303", d)
    assert _full(f) == {"severity": "error",
                        "message": "transformer_layer_config.hidden_size is \"64\", not an integer; "
                                   "write 64 (the fc layer's rows)",
                        "evidence": [Evidence("transformer_layer_config.hidden_size", "\"64\"", 64)],
                        "ops": [SetConfig(("transformer_layer_config", "hidden_size"), 64, "fc rows")],
                        "needs_decision": None, "fixable": True}


def test_k303_a_checkpoint_without_tensors_gets_no_hidden_size_finding(tmp_path):
    # Nothing to size: an empty checkpoint is K0xx's (integrity), not a width question.
    for name, cfg in (("s", lambda c: c.update(hidden_size="64")), ("a", lambda c: c.pop("hidden_size"))):
        assert one_rule("K303", _draft(tmp_path, name, config=cfg, tensors=lambda t: t.clear())) == []
