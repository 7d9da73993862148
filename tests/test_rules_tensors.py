"""kconvert/rules/tensor_names.py, shapes.py and embeddings.py: their helpers, through the findings a user reads, against facts outside kconvert:

- vLLM 0.32's own draft class (the CPU build in .venv: vllm/model_executor/models/llama_eagle3.py
  Eagle3LlamaModel.__init__, lines 179-221): `eagle_config = getattr(config, "eagle_config", None) or {}`;
  fc is built only `if self.use_aux_hidden_state` (line 209); its input is target_hidden_size x
  num_aux_hidden_states, where `num_aux_hidden_states = getattr(config, "num_aux_hidden_states", None)`, else
  `len(layer_ids) if layer_ids else 3` with layer_ids = eagle_config's `eagle_aux_hidden_state_layer_ids`
  (lines 210-216): the top-level ids of a non-speculators config are not read there.
- Heads without aux states: vLLM 0.32 builds no fc when eagle_config's use_aux_hidden_state is false
  (llama_eagle3.py:180-183 and 209; vLLM PR #27688, docs/formats-and-engines.md#vllm-032-loading-rules), and ModelOpt's
  exporter writes neither fc nor hidden_norm for them (modelopt/torch/export/plugins/hf_spec_export.py: "fc and
  hidden_norm are only present when use_aux_hidden_state=True").
- Multi-layer drafts (vLLM PR #26164, nm-testing/random-weights-llama3.1.8b-2layer-eagle3): vLLM builds
  `range(config.num_hidden_layers)` decoder layers (llama_eagle3.py line 206); a complete layer the config forgot
  is a layer (docs/rules.md K103), a partial one past the declared count is a stray (K203).
- NumPy's Generator (numpy 2.x, PCG64): `integers(low, high, size)` draws from [low, high); the rows K701 samples are
  the documented fixed-seed draw (tensors.py embedding_sample_rows docstring: "16 rows drawn with a fixed seed,
  spread over the whole table"), pinned here from NumPy itself.

Every expected figure is derived by hand in a comment from the tiny shape of tests/factories.py (hidden 64, so
three aux states are 192 fc inputs and four are 256). Engine-free; each test takes well under a second.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from kconvert.commands.inspect import inspect
from kconvert.rules.embeddings import embedding_sample_rows
from tests.factories import TINY, layers, make_draft, make_target, rename_all, one_rule, read_folder

AUX = "eagle_aux_hidden_state_layer_ids"
H = TINY.hidden  # 64


def run(tmp_path: Path, producer: str = "specforge", *, target: bool = False, engine: str = "vllm",
        version: str = "0.32/v1", name: str = "draft", **kw):
    folder = make_draft(tmp_path / name, producer, **kw)
    tgt = str(make_target(tmp_path / "target", "tiny")) if target else None
    return inspect(str(folder), target=tgt, engine=engine, engine_version=version)


def of(res, rid: str) -> list:
    return [f for f in res.findings if f.id == rid]


def fc(n_aux: int):
    """fc.weight [H, n_aux x H]: the width vLLM builds for n_aux aux states of a target of hidden H."""
    def mut(t):
        t["fc.weight"] = ("BF16", (H, n_aux * H), np.zeros((H, n_aux * H), np.float32))
    return mut


# --- _engine_aux_count: how many aux states vLLM sizes fc for (K301 without a target) --------------------------

def test_vllm_sizes_fc_from_num_aux_hidden_states_before_the_ids(tmp_path):
    # llama_eagle3.py:210: num_aux_hidden_states (4) wins over eagle_config's three ids: fc 4 x 64 = 256 loads.
    res = run(tmp_path, config=lambda c: c.update(num_aux_hidden_states=4), tensors=fc(4))
    assert of(res, "K301") == []
    # ... and an fc of three states (192) is then the wrong width: 4 x 64 = 256 expected.
    (f,) = of(run(tmp_path, name="d3", config=lambda c: c.update(num_aux_hidden_states=4)), "K301")
    assert f.message == "fc takes 192 inputs but the config implies 4 x 64 = 256"


def test_vllm_counts_eagle_config_ids_when_num_aux_hidden_states_is_absent(tmp_path):
    # llama_eagle3.py:214-216: four eagle_config ids -> 4 aux states -> 256 fc inputs.
    def four(c):
        c["eagle_config"][AUX] = [1, 2, 3, 4]
    assert of(run(tmp_path, config=four, tensors=fc(4)), "K301") == []
    (f,) = of(run(tmp_path, name="d3", config=four), "K301")
    assert f.message == "fc takes 192 inputs but the config implies 4 x 64 = 256"


def test_empty_eagle_config_ids_fall_back_to_three(tmp_path):
    # llama_eagle3.py:216 `len(layer_ids) if layer_ids else 3`: [] is no ids -> 3 x 64 = 192 (the factory's fc).
    res = run(tmp_path, config=lambda c: c["eagle_config"].update({AUX: []}))
    assert of(res, "K301") == []


def test_a_null_eagle_config_is_no_eagle_config(tmp_path):
    # llama_eagle3.py:179/214 `getattr(config, "eagle_config", None) or {}`: null reads as {} -> 3 aux states, and
    # no aux-free head (fc is required, hidden_norm too).
    res = run(tmp_path, config=lambda c: c.update(eagle_config=None))
    assert of(res, "K301") == []
    res = run(tmp_path, name="nofc", config=lambda c: c.update(eagle_config=None), tensors=lambda t: t.pop("fc.weight"))
    assert [e.where for f in of(res, "K202") for e in f.evidence] == ["fc.weight"]


def test_top_level_ids_of_a_non_speculators_config_do_not_size_fc(tmp_path):
    # llama_eagle3.py:214-216 reads eagle_config's ids only: four top-level ids beside no eagle_config ids leave
    # vLLM's default of 3 states, 192 inputs, which the factory's fc has.
    def top_four(c):
        c["eagle_config"].pop(AUX)
        c[AUX] = [1, 2, 3, 4]
    assert of(run(tmp_path, config=top_four), "K301") == []


def test_a_speculators_draft_without_ids_gets_three_aux_states(tmp_path):
    # No num_aux_hidden_states, no ids anywhere: vLLM's default of 3 (llama_eagle3.py:216) -> 192 = the fc.
    res = run(tmp_path, "speculators", config=lambda c: c.pop(AUX))
    assert of(res, "K301") == []


def test_a_draft_with_no_ids_at_all_gets_three_aux_states(tmp_path):
    # The EAGLE reference trainer records no ids (docs/formats-and-engines.md#producers-and-their-layouts): vLLM's default 3 -> 192 fc inputs.
    res = run(tmp_path, "eagle")
    assert of(res, "K301") == []
    (f,) = of(run(tmp_path, "eagle", name="d4", tensors=fc(4)), "K301")
    assert f.message == "fc takes 256 inputs but the config implies 3 x 64 = 192"


# --- no_aux_head: a head that reads only the last hidden state (no fc, no hidden_norm) -------------------------

def _no_aux(c):
    c["eagle_config"]["use_aux_hidden_state"] = False


def _drop(*names):
    def mut(t):
        for n in names:
            t.pop(n)
    return mut


def test_a_head_without_aux_states_needs_neither_fc_nor_hidden_norm(tmp_path):
    # ModelOpt: "fc and hidden_norm are only present when use_aux_hidden_state=True"; vLLM builds no fc then
    # (llama_eagle3.py:209).
    res = run(tmp_path, config=_no_aux, tensors=_drop("fc.weight", "midlayer.hidden_norm.weight"))
    assert of(res, "K202") == [] and of(res, "K601") == []


def test_a_head_with_fc_is_an_aux_head_whatever_the_flag_says(tmp_path):
    # fc present: the tensors were trained with aux states, so their hidden_norm is a missing norm (K601 names it).
    res = run(tmp_path, config=_no_aux, tensors=_drop("midlayer.hidden_norm.weight"))
    assert [e.where for f in of(res, "K601") for e in f.evidence] == ["layers.0.hidden_norm.weight"]


def test_use_aux_hidden_state_true_still_needs_fc(tmp_path):
    res = run(tmp_path, config=lambda c: c["eagle_config"].update(use_aux_hidden_state=True),
              tensors=_drop("fc.weight", "midlayer.hidden_norm.weight"))
    assert [e.where for f in of(res, "K202") for e in f.evidence] == ["fc.weight"]
    assert [e.where for f in of(res, "K601") for e in f.evidence] == ["layers.0.hidden_norm.weight"]


# --- draft_layers: the decoder layers the draft really has, and the strays past them ---------------------------

def k103_value(res):
    (f,) = of(res, "K103")
    return f.ops[0].value


def test_a_complete_second_layer_the_config_forgot_is_counted(tmp_path):
    # layers 0 and 1, every projection of layer 1 present, num_hidden_layers 1: two layers (K103 sets 2), no stray.
    res = run(tmp_path, tensors=layers((1, True)))
    assert k103_value(res) == 2 and of(res, "K203") == [] and of(res, "K202") == []


def test_three_complete_layers_declared_three_are_a_clean_three_layer_draft(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(num_hidden_layers=3), tensors=layers((1, True), (2, True)))
    assert {"K103", "K202", "K203"} & {f.id for f in res.findings} == set()


def test_a_declared_second_layer_with_missing_weights_is_k202_not_a_stray(tmp_path):
    # num_hidden_layers 2 declares layer 1; only its gate_proj is there, so vLLM builds it with 8 weights left
    # uninitialised: q/k/v/o, up/down projections and its two norms (hidden_norm is layer 0's only).
    res = run(tmp_path, config=lambda c: c.update(num_hidden_layers=2), tensors=layers((1, False)))
    assert of(res, "K203") == []
    (f,) = of(res, "K202")
    assert sorted(e.where for e in f.evidence) == sorted(
        f"layers.1.{n}.weight" for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                         "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm"))


def test_without_num_hidden_layers_a_partial_second_layer_is_a_stray(tmp_path):
    # No count declared: an EAGLE-3 draft is one decoder layer (docs/formats-and-engines.md#the-draft) plus any later layer that
    # is complete (docs/rules.md K103), so layers.1.mlp.gate_proj alone is a stray the engine cannot place.
    res = run(tmp_path, config=lambda c: c.pop("num_hidden_layers"), tensors=layers((1, False)))
    assert of(res, "K202") == []
    assert [e.where for f in of(res, "K203") for e in f.evidence] == ["layers.1.mlp.gate_proj.weight"]


def test_a_layer_after_a_gap_is_a_stray(tmp_path):
    # layers 0 and 2, no layer 1: vLLM builds consecutive layers 0..N-1, so layer 2's tensors are strays.
    res = run(tmp_path, tensors=layers((2, True)))
    strays = [e.where for f in of(res, "K203") for e in f.evidence]
    assert strays and all(w.startswith("layers.2.") for w in strays)
    assert of(res, "K202") == []


def test_a_complete_second_mla_layer_is_counted_by_its_q_lora_projections(tmp_path):
    # An MLA draft whose layer 0 has q_a_proj (q-LoRA) with q_lora_rank left out of the config: layer 1's q-LoRA
    # projections (q_a_proj, q_b_proj) make it complete, so the draft has 2 layers.
    res = run(tmp_path, "torchspec", family="mla", config=lambda c: c.pop("q_lora_rank"),
              tensors=layers((1, True), mla=True))
    assert k103_value(res) == 2 and of(res, "K203") == []


# --- embedding_sample_rows: the rows K701 reads ------------------------------------------------------------------

def test_a_one_row_table_samples_its_only_row():
    # integers(0, 1, size=1) can only give 0.
    assert embedding_sample_rows(1) == [0]


def test_the_sample_is_sixteen_distinct_sorted_rows_spread_over_the_table_and_the_same_each_time():
    n = 163840  # Kimi-K2.5's vocabulary (docs/formats-and-engines.md#the-kimi-targets)
    rows = embedding_sample_rows(n)
    assert rows == embedding_sample_rows(n)  # a fixed seed: the same verdict on every run
    assert len(rows) <= 16 and rows == sorted(set(rows)) and 0 <= rows[0] and rows[-1] < n
    assert rows[0] < n // 2 < rows[-1]  # both halves of the table
    # Pinned from NumPy 2.3.5 itself: sorted(set(np.random.default_rng(0).integers(0, 163840, size=16).tolist())).
    assert rows == [2707, 6713, 12327, 28715, 44201, 50434, 82514, 83744, 99391, 104359, 106400, 119520, 133246,
                    139366, 149545, 159046]


def test_a_small_table_is_sampled_within_its_rows():
    # 5 rows: at most 5 draws from [0, 5).
    rows = embedding_sample_rows(5)
    assert rows and set(rows) <= set(range(5)) and rows == sorted(set(rows))


def test_layers_without_a_layer_0_are_no_decoder_layer(tmp_path):
    # Every layer tensor under layers.1 and none under layers.0: vLLM builds layer 0 first (range(num_hidden_layers),
    # llama_eagle3.py:206), so there is no usable decoder layer; the layers.1 tensors are strays and K103 counts 0.
    res = run(tmp_path, tensors=lambda t: rename_all(t, lambda k: k.replace("midlayer.", "layers.1.")))
    assert [f.message for f in of(res, "K103")] == ["num_hidden_layers is 1 but the draft has 0 layers"]
    strays = [e.where for f in of(res, "K203") for e in f.evidence]
    assert len(strays) == 10 and all(w.startswith("layers.1.") for w in strays)  # the factory's 10 layer tensors


# --- K701 in full: the shape against the target's, the fresh-init test per dtype, the op fix writes ---------------

def _k701(tmp_path: Path, name: str, table, *, target=None, engine: str = "vllm", version: str = "0.32/v1"):
    """K701's findings for a tiny draft whose embed_tokens is `table` ((dtype, shape, values)), read as inspect
    reads it, against a target profile (None: no target)."""
    def put(t):
        t["embed_tokens.weight"] = table

    d = read_folder(make_draft(tmp_path / name, "torchspec", embeddings=True, tensors=put))
    return one_rule("K701", d, target=target, engine=engine, version=version)


def _normal(rows: int, dtype: str = "BF16", std: float = 1.0, seed: int = 1):
    return (dtype, (rows, H), np.random.default_rng(seed).normal(0, std, size=(rows, H)).astype(np.float32))


def test_k701_a_table_shaped_for_another_vocabulary_is_dropped_only_where_the_target_can_share_its_own(tmp_path):
    # the tiny target's embedding is [512, 64] (tests/factories.py TINY: vocab 512, hidden 64); a [128, 64] table
    # fails at load on both engines. The target's hidden size equals the draft's, so the engine can share the
    # target's table: fix drops the draft's, the reason kconvert.json records.
    from kconvert.targets import load_profile
    from kconvert.writer.ops import DropTensor

    from kconvert.targets import load_target

    tiny = load_target(str(make_target(tmp_path / "target", "tiny")))
    [f] = _k701(tmp_path, "short", _normal(128, std=0.02), target=tiny)
    assert (f.severity, f.message) == ("error", "embed_tokens is [128, 64]; the target's vocabulary needs [512, 64]")
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [("embed_tokens.weight", [128, 64], [512, 64])]
    assert f.ops == [DropTensor("embed_tokens.weight", "engine shares the target's embedding")]
    # Kimi-K2.5's hidden size is 7168, the draft's 64: no table of the target's fits, nothing to drop
    [f] = _k701(tmp_path, "kimi", _normal(128, std=0.02), target=load_profile("kimi-k2.5"))
    assert f.message == "embed_tokens is [128, 64]; the target's vocabulary needs [163840, 64]" and f.ops == []


def test_k701_a_fresh_init_is_seen_in_each_float_dtype_and_in_a_one_row_table(tmp_path):
    # nn.Embedding's N(0, 1) init (TorchSpec issue #38): row std about 1 in BF16, F16 and F32 alike, and in a table
    # of a single row; trained-looking N(0, 0.02) rows are not flagged
    from kconvert.writer.ops import DropTensor

    for dtype in ("BF16", "F16", "F32"):
        [f] = _k701(tmp_path, dtype, _normal(TINY.vocab, dtype))
        assert f.severity == "error" and f.message.startswith("embed_tokens rows have std 1.0"), dtype
        assert f.ops == [DropTensor("embed_tokens.weight", "engine shares the target's embedding")]
    [f] = _k701(tmp_path, "one", _normal(1))
    assert f.message.startswith("embed_tokens rows have std ")
    assert _k701(tmp_path, "trained", _normal(TINY.vocab, std=0.02)) == []


def test_k701_an_integer_table_is_not_sampled(tmp_path):
    # an I32 tensor named embed_tokens has no float rows to judge: values -1 and 1 have std exactly 1.0, which a
    # float table would be flagged for, and no finding is the answer
    vals = np.where(np.arange(TINY.vocab * H).reshape(TINY.vocab, H) % 2 == 0, -1, 1).astype(np.int32)
    assert float(np.std(vals)) == 1.0
    assert _k701(tmp_path, "int", ("I32", (TINY.vocab, H), vals)) == []


def test_k701_an_empty_table_has_no_rows_to_sample(tmp_path):
    # a [0, 64] embed_tokens (no target to compare shapes with): nothing to sample; reading zero rows would take
    # the std of nothing (NumPy: nan and a RuntimeWarning on stderr), so the rule does not read at all
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _k701(tmp_path, "empty", ("F32", (0, H), np.zeros((0, H), np.float32))) == []


def test_k701_the_fresh_init_finding_in_full_and_its_bounds(tmp_path):
    # every row alternates -a, +a: the std of any sample of rows is exactly a (half the values each sign, mean 0),
    # representable in BF16 for a = 1.0 and 1.5. std 1.0 is a fresh N(0, 1) init's; 1.5 is outside [0.8, 1.2]
    from kconvert.writer.ops import DropTensor

    def alternating(a: float):
        return ("BF16", (TINY.vocab, H), np.where(np.arange(TINY.vocab * H).reshape(TINY.vocab, H) % 2, a, -a)
                .astype(np.float32))

    [f] = _k701(tmp_path, "one", alternating(1.0))
    assert (f.severity, f.message) == (
        "error", "embed_tokens rows have std 1.00, like a fresh nn.Embedding (N(0,1)); trained embeddings are far "
        "smaller: it was probably never trained (TorchSpec issue #38), and vllm 0.32/v1 uses it instead of the "
        "target's")
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [("embed_tokens.weight", "row std 1.000",
                                                                         "<< 1")]
    assert f.ops == [DropTensor("embed_tokens.weight", "engine shares the target's embedding")]
    assert _k701(tmp_path, "wide", alternating(1.5)) == []
    # SGLang replaces the draft's table with the target's (TorchSpec issue #38): nothing to flag there
    assert _k701(tmp_path, "sg", alternating(1.0), engine="sglang", version="post-25454") == []



def test_k701_the_fresh_init_band_includes_both_ends(tmp_path):
    # The band is [0.8, 1.2], both ends flagged (the rule's why). A std of exactly 0.8 or 1.2 in float64 needs a
    # variance that rounds to 0.64 or 1.44: rows of 25 values (no target, so the width is not checked), 8 of +a,
    # 8 of -a and 9 zeros, give mean 0 exactly and variance 16 a^2 / 25, i.e. 16/25 = 0.64 for a = 1 and
    # 36/25 = 1.44 for a = 1.5 (both exact in BF16); sqrt of the doubles nearest 0.64 and 1.44 rounds to the
    # doubles nearest 0.8 and 1.2 (checked here with math.sqrt, independent of the rule)
    import math

    def row25(a: float):
        row = np.array([a] * 8 + [-a] * 8 + [0.0] * 9, np.float32)
        return ("BF16", (TINY.vocab, 25), np.tile(row, (TINY.vocab, 1)))

    assert (math.sqrt(16 / 25), math.sqrt(36 / 25)) == (0.8, 1.2)
    for a, shown in ((1.0, "0.800"), (1.5, "1.200")):
        [f] = _k701(tmp_path, f"end{a}", row25(a))
        assert [(e.where, e.observed) for e in f.evidence] == [("embed_tokens.weight", f"row std {shown}")]
    # just outside either end, with a one BF16 step (2^-8, 2^-7) past 1 and 1.5: std 0.8 a = 0.7906 and 1.2125
    assert _k701(tmp_path, "below", row25(0.98828125)) == []
    assert _k701(tmp_path, "above", row25(1.515625)) == []

# --- K201 in full: the model. prefix each engine row loads, the evidence, the renames' reason ---------------------

def _k201(d, engine: str, version: str):
    return one_rule("K201", d, engine=engine, version=version)


def test_k201_model_prefixed_names_per_engine_row(tmp_path):
    # every name but lm_head prefixed `model.` (the shape HF's save of a wrapped model writes): vLLM prefixes `model.`
    # itself (llama_eagle3.py load_weights), so these become model.model.* there; SGLang 0.5.23's Llama draft tries
    # name then model.name (llama_eagle3.py:372, recorded) and loads them, but not model.lm_head.weight
    def pre(lm_head_too: bool):
        return lambda t: rename_all(t, lambda k: "model." + k if lm_head_too or k != "lm_head.weight" else k)

    d = read_folder(make_draft(tmp_path / "p", "unknown", tensors=pre(False)))
    [f] = _k201(d, "vllm", "0.32/v1")
    assert (f.severity, f.message) == ("error", "tensor names use the model.layers.0.* layout; vllm loads layers.0.*")
    # the example is the first name (sorted) that shows the prefix: model.d2t, not the unprefixed lm_head
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [("model.d2t", "model.layers.0", "layers.0")]
    assert ("model.fc.weight", "fc.weight", "vllm layout") in [(o.old, o.new, o.reason) for o in f.ops]
    assert all(o.reason == "vllm layout" for o in f.ops)
    assert _k201(d, "sglang", "0.5.23") == []
    both = read_folder(make_draft(tmp_path / "q", "unknown", tensors=pre(True)))
    [f] = _k201(both, "sglang", "0.5.23")
    assert f.message == "tensor names use the model.layers.0.* layout; sglang loads midlayer.*"
    assert ("model.lm_head.weight", "lm_head.weight", "sglang layout") in [(o.old, o.new, o.reason) for o in f.ops]


def test_k201_a_family_the_row_names_no_layer_names_for_takes_its_own_layout(tmp_path):
    # SGLang's rows list layer names for its Llama and MLA drafts only; a Qwen3-family draft is held to the row's
    # own layout (midlayer.*), which the factory's SpecForge draft already uses: nothing to rename
    import dataclasses

    d = read_folder(make_draft(tmp_path / "d", "specforge"))
    assert d.key_layout.layer == "midlayer."
    assert _k201(dataclasses.replace(d, layer_family="qwen3"), "sglang", "post-25454") == []


# --- K801: a missing lm_head, against the vocabulary the engine serves ---------------------------------------------

def test_k801_a_missing_lm_head_in_full(tmp_path):
    # tiny draft: draft_vocab_size 128, vocab 512 (tests/factories.py TINY). Without a target the draft's own vocab
    # is what the engine's head has: 128 != 512, the shapes disagree and acceptance is 0 (sglang issue #27829). A
    # full-vocabulary draft (512 = 512) uses the target's head instead of its trained one: a warning. Next to
    # Kimi-K2.5 (vocab 163840) even the full-vocabulary draft's 512 is a reduced vocabulary: an error.
    from kconvert.targets import load_profile

    def k801(d, target=None):
        return [(f.severity, f.message, [(e.where, e.observed, e.expected) for e in f.evidence])
                for f in one_rule("K801", d, target=target)]

    ev = [("lm_head.weight", "absent", "present")]
    red = read_folder(make_draft(tmp_path / "r", "specforge", tensors=lambda t: t.pop("lm_head.weight")))
    assert k801(red) == [("error", "lm_head is missing while draft_vocab_size is 128: acceptance will be 0", ev)]
    full = read_folder(make_draft(tmp_path / "f", "specforge", full_vocab=True, tensors=lambda t: t.pop("lm_head.weight"),
                            config=lambda c: c.update(draft_vocab_size=TINY.vocab)))
    assert (full.draft_vocab_size, full.vocab_size) == (512, 512)
    assert k801(full) == [("warning", "lm_head is missing: the engine will use the target's head, not the trained one",
                           ev)]
    assert k801(full, load_profile("kimi-k2.5")) == [
        ("error", "lm_head is missing while draft_vocab_size is 512: acceptance will be 0", ev)]


def test_k201_a_draft_without_decoder_layer_tensors_has_nothing_to_rename(tmp_path):
    # every midlayer.* tensor left out: the reader's layer name is its default (layers.0.), which SGLang before
    # #24663 does not load, but no tensor carries it, so no rename exists and K201 says nothing; K202 names the
    # missing layer tensors. (Found by the mutation run: K201 raised "declares fix availability 'always' but emits
    # a finding that is not fixable" here, which inspect reported as a check that could not run.)
    def no_layers(t):
        for k in [k for k in t if k.startswith(("midlayer.", "layers."))]:
            t.pop(k)

    folder = make_draft(tmp_path / "d", "unknown", tensors=no_layers)
    d = read_folder(folder)
    assert not any(n.startswith(("midlayer.", "layers.")) for n in d.raw_names.values())
    assert _k201(d, "sglang", "pre-25454") == []
    res = inspect(str(folder), target=None, engine="sglang", engine_version="pre-25454")
    assert of(res, "K201") == [] and of(res, "K202") != []
    assert not any("could not run" in f.message or "declares fix availability" in f.message for f in res.findings)


def test_k201_the_example_tensor_is_one_that_shows_the_layout(tmp_path):
    # layers.0.* names on SGLang before #24663 (Llama: midlayer.* only): the example is the first name (sorted)
    # under layers.0., not d2t or fc.weight
    d = read_folder(make_draft(tmp_path / "a", "unknown"))
    first = min(n for n in d.raw_names.values() if n.startswith("layers.0."))
    [f] = _k201(d, "sglang", "pre-25454")
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [(first, "layers.0", "midlayer")]
    # a head without fc or d2t (nvidia/gpt-oss-120b-Eagle3-v2's kind: no aux states, full vocabulary), every name
    # prefixed model., layers as midlayer.*: model.lm_head.weight sorts first among them ('l' < 'm'), and the example
    # skips it (lm_head is often the one name without the prefix, so it is no evidence of the layout)
    def bare(t):
        for k in ("fc.weight", "d2t", "t2d"):
            t.pop(k, None)
        rename_all(t, lambda k: "model." + k)

    g = read_folder(make_draft(tmp_path / "g", "specforge", full_vocab=True, tensors=bare,
                         config=lambda c: c.update(eagle_config={"use_aux_hidden_state": False})))
    names = sorted(g.raw_names.values())
    assert names[0] == "model.lm_head.weight"
    [f] = _k201(g, "vllm", "0.32/v1")
    assert f.evidence[0].where == names[1] and f.evidence[0].observed == g.key_layout.name



def test_k201_names_the_prefixed_lm_head_when_it_is_the_only_rename(tmp_path):
    # The example falls back to model.lm_head.weight only when it is the one name the fix renames. That needs a
    # `model.` majority (formats/layouts.py detect_layout: more than half the names) that comes from names
    # read_draft does not map: here the draft's own tensors are unprefixed, lm_head alone is model.lm_head.weight,
    # and 15 extra model.extra.N.weight tensors (unknown, left unmapped) make the majority. vLLM 0.32 loads
    # lm_head.weight (llama_eagle3.py load_weights), so the single rename is model.lm_head.weight -> lm_head.weight.
    def lm_head_and_extras(t):
        t["model.lm_head.weight"] = t.pop("lm_head.weight")
        for i in range(15):
            t[f"model.extra.{i}.weight"] = t["norm.weight"]

    d = read_folder(make_draft(tmp_path / "d", "unknown", tensors=lm_head_and_extras))
    assert (d.key_layout.prefix, d.key_layout.lm_head_prefixed) == ("model.", True)
    [f] = _k201(d, "vllm", "0.32/v1")
    assert [(o.old, o.new) for o in f.ops] == [("model.lm_head.weight", "lm_head.weight")]
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [("model.lm_head.weight", "model.layers.0",
                                                                        "layers.0")]

# --- K202: the tensors vLLM's draft class allocates, for plain and q-LoRA MLA attention ----------------------------

def test_k202_mla_q_lora_is_read_from_the_tensors_or_the_config(tmp_path):
    # DeepseekV2/V3 attention (vLLM deepseek_v2.py, transformers DeepseekV3Attention): q_lora_rank set -> q_a_proj,
    # q_a_layernorm, q_b_proj; None -> q_proj. A draft whose config lost q_lora_rank but holds q_a_proj is q-LoRA
    # (its tensors say so); a plain-q draft without q_lora_rank needs q_proj only. Neither misses a tensor.
    def plain_q(t):
        s = TINY
        layer = next(k for k in t if k.endswith("self_attn.q_a_proj.weight")).removesuffix("self_attn.q_a_proj.weight")
        for n in ("q_a_proj", "q_a_layernorm", "q_b_proj"):
            t.pop(f"{layer}self_attn.{n}.weight")
        shape = (s.heads * (s.nope + s.rope), 2 * H)
        t[f"{layer}self_attn.q_proj.weight"] = ("BF16", shape, np.zeros(shape, np.float32))

    lora = run(tmp_path, "torchspec", family="mla", config=lambda c: c.pop("q_lora_rank"), name="lora")
    assert of(lora, "K202") == []
    plain = run(tmp_path, "torchspec", family="mla", config=lambda c: c.pop("q_lora_rank"), tensors=plain_q,
                name="plain")
    assert of(plain, "K202") == []
    # a second q-LoRA MLA layer (vLLM PR #26164: later layers take H inputs) is held to the same attention
    two = run(tmp_path, "torchspec", family="mla", config=lambda c: c.update(num_hidden_layers=2),
              tensors=layers((1, True), mla=True), name="two")
    assert of(two, "K202") == []


def test_k202_names_what_is_missing(tmp_path):
    def drop(t):
        t.pop("midlayer.self_attn.k_proj.weight")
        t.pop("midlayer.self_attn.v_proj.weight")

    res = run(tmp_path, tensors=drop)
    [f] = of(res, "K202")
    assert f.severity == "error"
    assert f.message == ("2 required tensor(s) missing: layers.0.self_attn.k_proj.weight, "
                         "layers.0.self_attn.v_proj.weight")
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [
        ("layers.0.self_attn.k_proj.weight", "absent", "present"),
        ("layers.0.self_attn.v_proj.weight", "absent", "present")]


def test_k202_lists_six_names_and_counts_them_all(tmp_path):
    # the seven projections of the Llama layer left out: the count says 7, the message names the first six (the
    # evidence carries all seven)
    def drop(t):
        for k in [k for k in t if k.endswith("_proj.weight")]:
            t.pop(k)

    [f] = of(run(tmp_path, tensors=drop), "K202")
    head, names = f.message.split(": ", 1)
    assert head == "7 required tensor(s) missing" and len(names.split(", ")) == 6 and len(f.evidence) == 7


# --- K203: biases vLLM ignores, tensors it cannot place --------------------------------------------------------------

def test_k203_biases_and_strangers_in_full(tmp_path):
    # vLLM's Linear layers of the draft have no bias and its loader skips `*.bias` silently (the rule's why); a name
    # no draft class has (here `extra.weight`) raises there. Five biases: counted, four named, all in the evidence
    # and dropped, each op with the reason kconvert.json records.
    from kconvert.writer.ops import DropTensor

    bias_names = [f"midlayer.self_attn.{p}_proj.bias" for p in "qkvo"] + ["fc.bias"]

    def add(t, extra: bool):
        for n in bias_names:
            t[n] = ("BF16", (H,), np.zeros(H, np.float32))
        if extra:
            t["extra.weight"] = ("BF16", (H,), np.zeros(H, np.float32))

    [f] = of(run(tmp_path, tensors=lambda t: add(t, False), name="b"), "K203")
    head, listed = f.message.split(": ", 1)
    assert (f.severity, head) == ("warning", "5 bias tensor(s) that the engine ignores")
    assert len(listed.split(", ")) == 4 and set(listed.split(", ")) <= set(bias_names)
    assert sorted((e.where, e.observed, e.expected) for e in f.evidence) == sorted(
        (n, "present", "absent") for n in bias_names)
    assert sorted(f.ops, key=lambda o: o.name) == sorted(
        (DropTensor(n, "vLLM ignores *.bias silently") for n in bias_names), key=lambda o: o.name)
    both = {f.severity: f for f in of(run(tmp_path, tensors=lambda t: add(t, True), name="e"), "K203")}
    assert sorted(both) == ["error", "warning"]
    assert (both["error"].message, both["error"].ops) == ("1 tensor(s) the engine cannot place: extra.weight",
                                                          [DropTensor("extra.weight", "not part of an EAGLE-3 draft")])


def test_k104_without_a_target_names_every_skipped_check(tmp_path):
    # no --target: the checks that compare with the target are skipped, listed by id, comma-separated
    from kconvert.rules.base import REGISTRY

    res = run(tmp_path)
    skipped = sorted(r.id for r in REGISTRY.values() if r.needs_target)
    assert len(skipped) >= 2
    [f] = [f for f in res.findings if f.message.startswith("no --target given")]
    assert f.message.endswith(f"({', '.join(skipped)})")
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [("--target", None,
                                                                         "a profile, folder or Hub id")]


def test_k103_a_one_layer_draft_loads_on_a_row_that_builds_one_layer_only(tmp_path):
    # SGLang before #24663 builds a one-layer Llama draft and raises for num_hidden_layers != 1 (the rule's why):
    # the factory's one-layer draft (num_hidden_layers 1, midlayer.*) is exactly what it builds
    res = run(tmp_path, engine="sglang", version="pre-25454")
    assert [f.message for f in of(res, "K103")] == []
    two = run(tmp_path, engine="sglang", version="pre-25454", config=lambda c: c.update(num_hidden_layers=2),
              tensors=layers((1, True)), name="two")
    [f] = of(two, "K103")
    assert f.message.startswith("the draft has 2 decoder layers; sglang pre-25454 builds a one-layer llama draft")
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [("num_hidden_layers", 2, 1)]


def test_k301_against_the_targets_hidden_size_in_full(tmp_path):
    # the tiny target's hidden size is 64; vLLM feeds one state per id, 3 here (eagle_config's three ids), so fc
    # must take 3 x 64 = 192 inputs. 200 is no multiple of 64 (trained for another target); 256 = 4 x 64 is one
    # state too many for the ids (--aux-ids decides which four)
    def width(n):
        def mut(t):
            t["fc.weight"] = ("BF16", (H, n), np.zeros((H, n), np.float32))
        return mut

    [f] = of(run(tmp_path, target=True, tensors=width(200), name="w200"), "K301")
    assert f.message == "fc takes 200 inputs, not a multiple of the target hidden size 64: trained for another target"
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [("fc.weight", [64, 200], [64, 192])]
    [f] = of(run(tmp_path, target=True, tensors=width(256), name="w256"), "K301")
    assert f.message == "fc takes 256 = 4 x 64 inputs but vllm will feed 3 aux states"
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [("fc.weight", [64, 256], [64, 192])]
    assert f.needs_decision == "--aux-ids (one id per aux state the draft was trained on)"


def test_k301_a_config_that_names_another_targets_hidden_size(tmp_path):
    # fc is [64, 192] = 3 x 64, the tiny target's width; a config saying target_hidden_size 32 (or naming no size at
    # all) is what is wrong: fix writes the width fc implies
    [f] = of(run(tmp_path, target=True, config=lambda c: c.update(target_hidden_size=32), name="t32"), "K301")
    assert f.message == "config implies target hidden size 32 but the target's is 64 (fc is [64, 192])"
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [("target_hidden_size", 32, 64)]
    assert [(o.path, o.value, o.reason) for o in f.ops] == [(("target_hidden_size",), 64,
                                                             "fc width = n_aux x target hidden")]
    none = [f for f in of(run(tmp_path, target=True, config=lambda c: c.pop("hidden_size"), name="none"), "K301")
            if "neither" in f.message]
    assert [f.message for f in none] == [
        "config sets neither target_hidden_size nor hidden_size but the target's is 64 (fc is [64, 192])"]


def test_k201_a_layer_name_the_row_does_not_load_shows_the_first_tensor_renamed(tmp_path):
    # SGLang before #25454 (engine row pre-25454, docs/rules.md K201) loads the Llama draft's layer only as
    # midlayer.* (PR #24663 added layers.*); speculators writes layers.0.* (tests/factories.py LAYER_PREFIX). The
    # evidence is the first renamed name in sorted order; every layers.0.* name is renamed to midlayer.*.
    d = read_folder(make_draft(tmp_path / "d", "speculators"))
    assert d.key_layout.layer == "layers.0."
    [f] = _k201(d, "sglang", "pre-25454")
    assert f.message == "tensor names use the layers.0.* layout; sglang loads midlayer.*"
    layer = sorted(n for n in d.raw_names.values() if n.startswith("layers.0."))
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [(layer[0], "layers.0", "midlayer")]
    assert sorted((o.old, o.new) for o in f.ops) == [(n, "midlayer." + n[len("layers.0."):]) for n in layer]


# --- K203 in full: biases the engine ignores, and names it cannot place ----------------------------------------

def test_k203_biases_and_names_the_engine_cannot_place_in_full(tmp_path):
    # Eleven biases and eleven names outside the EAGLE-3 layout (vLLM's AutoWeightsLoader raises on a name it
    # cannot place and skips *.bias: docs/rules.md K203), plus a stray second layer (the factory's 10 layer
    # tensors, declared num_hidden_layers 1, incomplete: no projections). Two findings: the biases a warning
    # naming four, the others an error naming four with the strays after them; each with ten as evidence and
    # every one dropped.
    biases = [f"probe.{i:02d}.bias" for i in range(11)]
    others = [f"probe.{i:02d}.weight" for i in range(11)]

    def put(t):
        for n in biases + others:
            t[n] = ("F32", (2,), np.zeros(2, np.float32))
        t["layers.1.input_layernorm.weight"] = ("BF16", (H,), np.ones(H, np.float32))

    d = read_folder(make_draft(tmp_path / "d", "specforge", tensors=put))
    b, o = one_rule("K203", d)
    assert (b.severity, b.message) == ("warning", "11 bias tensor(s) that the engine ignores: probe.00.bias, "
                                                  "probe.01.bias, probe.02.bias, probe.03.bias")
    assert [(e.where, e.observed, e.expected) for e in b.evidence] == [(n, "present", "absent") for n in biases[:10]]
    assert [(op.name, op.reason) for op in b.ops] == [(n, "vLLM ignores *.bias silently") for n in biases]
    every = others + ["layers.1.input_layernorm.weight"]
    assert (o.severity, o.message) == ("error", "12 tensor(s) the engine cannot place: probe.00.weight, "
                                                "probe.01.weight, probe.02.weight, probe.03.weight")
    assert [(e.where, e.observed, e.expected) for e in o.evidence] == [(n, "present", "absent") for n in every[:10]]
    assert [(op.name, op.reason) for op in o.ops] == [(n, "not part of an EAGLE-3 draft") for n in every]
