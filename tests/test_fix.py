"""`kconvert.fix` (kconvert.commands.fix) on drafts the tests build: every op kind really applied (read back from the output), the
output re-inspects clean and fixes to a no-op, the input is never touched, decisions the files cannot settle
stop fix, format conversions round-trip, and the CLI's exit codes and JSON reports."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from kconvert.cli import main
from kconvert.errors import AmbiguityError, UnfixableError, UsageError
from kconvert.commands.fix import fix
from kconvert.formats.layouts import to_canonical
from kconvert.rules import Decisions
from kconvert.schemas import validate
from kconvert.source import open_checkpoint
from tests.factories import SHAPES, TINY, _vocab_map, make_draft, make_target, rename_all

AUX = "eagle_aux_hidden_state_layer_ids"


# --- helpers ----------------------------------------------------------------------------------------------------

@pytest.fixture
def target(tmp_path) -> str:
    return str(make_target(tmp_path / "target", "tiny"))


def tree_hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def arrays(folder: Path) -> dict[str, np.ndarray]:
    ck = open_checkpoint(str(folder))
    return {n: ck.read_array(n) for n in ck.tensors}


def raw_bytes(folder: Path) -> dict[str, tuple[str, tuple, bytes]]:
    """canonical name -> (dtype, shape, bytes), whatever the layout in the files."""
    ck = open_checkpoint(str(folder))
    from kconvert.formats.layouts import detect_layout

    layout = detect_layout(sorted(ck.tensors))
    return {to_canonical(n, layout): (i.dtype, tuple(i.shape), ck.read_bytes(i)) for n, i in ck.tensors.items()}


def draft(tmp_path: Path, producer: str = "torchspec", name: str = "in", **kw) -> Path:
    return make_draft(tmp_path / name, producer, **kw)


# --- each op kind, applied and read back ------------------------------------------------------------------------

def _bias(t):
    t["midlayer.self_attn.q_proj.bias"] = ("BF16", (TINY.heads * TINY.head_dim,), np.ones(64, np.float32))


def _absolute_d2t(t):
    d2t, _ = _vocab_map(TINY)
    t["d2t"] = ("I64", (TINY.draft_vocab,), d2t + np.arange(TINY.draft_vocab))


def _t2d_extra_bit(t):
    dt, shape, data = t["t2d"]
    data = data.copy()
    data[np.flatnonzero(~data)[0]] = True
    t["t2d"] = (dt, shape, data)


def _random_embeddings(t):
    rng = np.random.default_rng(3)
    t["embed_tokens.weight"] = ("BF16", (TINY.vocab, TINY.hidden),
                                rng.normal(0, 1, (TINY.vocab, TINY.hidden)).astype(np.float32))


def _to_f16(t):
    for k, (dt, shape, data) in list(t.items()):
        if dt == "BF16":
            t[k] = ("F16", shape, data)


# name -> (producer, make_draft kwargs, fix kwargs, expected op kinds)
SCENARIOS = {
    "set-config (specforge ids for vllm)": ("specforge", {}, {}, {"set-config"}),
    "delete-config (auto_map, quantization_config)": (
        "torchspec", {"config": lambda c: c.update(auto_map={"AutoModel": "x.Y"}, quantization_config={})}, {},
        {"delete-config"}),
    "rename-tensor (model. prefix)": (
        "torchspec", {"tensors": lambda t: rename_all(t, lambda k: "model." + k)}, {}, {"rename-tensor"}),
    "drop-tensor (bias)": ("torchspec", {"tensors": _bias}, {}, {"drop-tensor"}),
    "drop-tensor (random embeddings)": ("torchspec", {"embeddings": True, "tensors": _random_embeddings}, {},
                                        {"drop-tensor"}),
    "d2t-absolute-to-offsets": ("torchspec", {"tensors": _absolute_d2t}, {}, {"d2t-absolute-to-offsets"}),
    "rebuild-t2d": ("torchspec", {"tensors": _t2d_extra_bit}, {}, {"rebuild-t2d"}),
    # the rewrite names `model.d2t`, which the rename moves first (found by bench/fix_vs_cp.py)
    "rename-tensor + d2t rewrite of the renamed tensor": (
        "torchspec", {"tensors": lambda t: (_absolute_d2t(t), rename_all(t, lambda k: "model." + k))}, {},
        {"rename-tensor", "d2t-absolute-to-offsets"}),
    "cast-tensor": ("torchspec", {"tensors": _to_f16, "config": lambda c: c.update(torch_dtype="float16")},
                    {"decisions": Decisions(cast_dtype="BF16")},
                    {"cast-tensor", "set-config"}),
    "set-config nested (speculators)": (
        "speculators", {"config": lambda c: (c.pop("norm_before_residual"),
                                             c["transformer_layer_config"].update(num_hidden_layers=61))}, {},
        {"set-config"}),
    "sglang layout (layers.0 -> midlayer)": (
        "torchspec", {"tensors": lambda t: rename_all(t, lambda k: k.replace("midlayer.", "layers.0."))},
        # (pinned to the row before PR #24663, whose Llama loader read midlayer.* only; that row also adds +1 to
        # the input-convention ids, hence the set-config)
        {"engine": "sglang", "engine_version": "pre-25454"}, {"rename-tensor", "delete-config", "set-config"}),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fix_applies_clean_idempotent_and_leaves_input_alone(tmp_path, target, name):
    producer, draft_kw, fix_kw, kinds = SCENARIOS[name]
    src = draft(tmp_path, producer, **draft_kw)
    before = tree_hashes(src)
    out = tmp_path / "out"
    res = fix(str(src), out, target=target, **fix_kw)
    assert {o.kind for o in res.ops} == kinds
    assert tree_hashes(src) == before, "fix modified its input"
    assert res.remaining_fixable() == []
    assert [f for f in res.after.findings if f.severity == "error"] == []
    prov = json.loads((out / "kconvert.json").read_text())
    assert len(prov["ops"]) == len(res.ops)
    again = fix(str(out), tmp_path / "again", target=target, engine=fix_kw.get("engine", "vllm"),
                engine_version=fix_kw.get("engine_version"))
    assert again.noop, [o for o in again.ops]


def test_set_config_writes_vllm_ids_at_both_keys(tmp_path, target):
    out = tmp_path / "out"
    fix(str(draft(tmp_path, "specforge")), out, target=target)
    cfg = config(out)
    assert cfg[AUX] == [2, 4, 5] and cfg["eagle_config"][AUX] == [2, 4, 5]
    assert json.loads((out / "kconvert.json").read_text())["aux_ids"]["physical"] == [2, 4, 5]


def test_delete_config_removes_the_keys(tmp_path, target):
    out = tmp_path / "out"
    fix(str(draft(tmp_path, config=lambda c: c.update(auto_map={"A": "b.C"}, index_topk=8))), out, target=target)
    assert "auto_map" not in config(out) and "index_topk" not in config(out)


def test_rename_keeps_every_byte(tmp_path, target):
    src = draft(tmp_path, tensors=lambda t: rename_all(t, lambda k: "model." + k))
    out = tmp_path / "out"
    fix(str(src), out, target=target)
    names = set(open_checkpoint(str(out)).tensors)
    assert not any(n.startswith("model.") for n in names) and "layers.0.self_attn.q_proj.weight" in names
    assert raw_bytes(out) == raw_bytes(src)


def test_drop_removes_only_the_bias(tmp_path, target):
    src = draft(tmp_path, tensors=_bias)
    out = tmp_path / "out"
    fix(str(src), out, target=target)
    names = set(open_checkpoint(str(out)).tensors)
    assert "midlayer.self_attn.q_proj.bias" not in names
    assert names == set(open_checkpoint(str(src)).tensors) - {"midlayer.self_attn.q_proj.bias"}


def test_d2t_absolute_ids_become_offsets(tmp_path, target):
    out = tmp_path / "out"
    fix(str(draft(tmp_path, tensors=_absolute_d2t)), out, target=target)
    d2t, _ = _vocab_map(TINY)
    got = arrays(out)["d2t"]
    assert got.dtype == np.int64 and np.array_equal(got, d2t)


def test_t2d_is_rebuilt_from_d2t(tmp_path, target):
    out = tmp_path / "out"
    fix(str(draft(tmp_path, tensors=_t2d_extra_bit)), out, target=target)
    _, t2d = _vocab_map(TINY)
    got = arrays(out)["t2d"]
    assert got.shape == (TINY.vocab,) and np.array_equal(got.astype(bool), t2d)


def test_cast_writes_bf16_with_close_values(tmp_path, target):
    src = draft(tmp_path, tensors=_to_f16, config=lambda c: c.update(torch_dtype="float16"))
    out = tmp_path / "out"
    fix(str(src), out, target=target, decisions=Decisions(cast_dtype="BF16"))
    ck = open_checkpoint(str(out))
    floats = {n: i.dtype for n, i in ck.tensors.items() if n not in ("d2t", "t2d")}
    assert set(floats.values()) == {"BF16"}
    a, b = arrays(src), arrays(out)
    for n in floats:
        np.testing.assert_allclose(b[n], a[n].astype(np.float32), rtol=1e-2, atol=1e-3)
    assert config(out)["torch_dtype"] == "bfloat16"


def test_pickle_files_are_not_copied(tmp_path, target):
    src = draft(tmp_path)
    (src / "pytorch_model.bin").write_bytes(b"\x80\x04junk")
    out = tmp_path / "out"
    fix(str(src), out, target=target)
    assert not (out / "pytorch_model.bin").exists()


# --- dry run, decisions, unfixable -------------------------------------------------------------------------------

def test_dry_run_writes_nothing(tmp_path, target):
    src = draft(tmp_path, "specforge")
    listing = sorted(p.name for p in tmp_path.iterdir())
    res = fix(str(src), tmp_path / "out", target=target, dry_run=True)
    assert res.ops and res.written is None
    assert sorted(p.name for p in tmp_path.iterdir()) == listing


def test_unknown_producer_ids_are_left_as_is_naming_aux_convention(tmp_path, target):
    """The convention of an unknown producer's ids is a decision: without the flag fix leaves the ids exactly as
    they are and names the flag (here nothing else needs changing, so nothing is written); with it, fix writes."""
    src = draft(tmp_path, "unknown")
    before = config(src)
    res = fix(str(src), tmp_path / "out", target=target)
    assert [f.id for f in res.plan.left_as_is] == ["K404"]
    assert "--aux-convention" in res.plan.left_as_is[0].needs_decision
    assert res.noop and res.exit_code == 0 and not (tmp_path / "out").exists() and config(src) == before
    res = fix(str(src), tmp_path / "out", target=target, decisions=Decisions(aux_convention="output"))
    assert config(tmp_path / "out")["eagle_config"][AUX] == [2, 4, 5]
    assert res.remaining_fixable() == []
    # the provenance records the convention, so the output re-fixes to nothing without the flag
    assert fix(str(tmp_path / "out"), tmp_path / "again", target=target).noop


def test_missing_aux_ids_are_left_missing_unless_given(tmp_path, target):
    src = draft(tmp_path, config=lambda c: (c.pop(AUX), c.pop("eagle_config")))
    res = fix(str(src), tmp_path / "out", target=target, dry_run=True)
    assert [f.id for f in res.plan.left_as_is] == ["K401"] and "--aux-ids" in res.plan.left_as_is[0].needs_decision
    assert not any(getattr(o, "path", None) and AUX in o.path for o in res.ops)
    fix(str(src), tmp_path / "out", target=target, decisions=Decisions(aux_ids=[2, 4, 6]))
    cfg = config(tmp_path / "out")
    assert cfg[AUX] == [2, 4, 6] and cfg["eagle_config"][AUX] == [2, 4, 6]


def test_missing_aux_ids_default_records_the_engine_defaults(tmp_path, target):
    src = draft(tmp_path, config=lambda c: (c.pop(AUX), c.pop("eagle_config")))
    fix(str(src), tmp_path / "out", target=target, decisions=Decisions(aux_ids_default=True))
    assert config(tmp_path / "out")[AUX] == [2, TINY.layers // 2, TINY.layers - 3]


def test_unfixable_error_stops_fix_unless_partial(tmp_path, target):
    src = draft(tmp_path, tensors=lambda t: t.pop("midlayer.self_attn.q_proj.weight"),
                config=lambda c: c.update(auto_map={"A": "b.C"}))
    with pytest.raises(UnfixableError) as e:
        fix(str(src), tmp_path / "out", target=target)
    assert "K202" in str(e.value) and not (tmp_path / "out").exists()
    res = fix(str(src), tmp_path / "out", target=target, partial=True)
    assert [f.id for f in res.plan.unfixable] == ["K202"]
    assert "auto_map" not in config(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "kconvert.json").read_text())["findings_left"] == ["K202"]


def test_output_folder_equal_to_input_is_refused(tmp_path, target):
    src = draft(tmp_path, "specforge")
    with pytest.raises(UsageError):
        fix(str(src), src, target=target)


# --- format conversions -----------------------------------------------------------------------------------------

def test_speculators_become_flat_for_sglang(tmp_path, target):
    src = draft(tmp_path, "speculators")
    out = tmp_path / "out"
    res = fix(str(src), out, target=target, engine="sglang")
    cfg = config(out)
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert not {"speculators_model_type", "transformer_layer_config", "speculators_config"} & set(cfg)
    assert cfg["hidden_size"] == TINY.hidden and cfg["num_hidden_layers"] == 1
    from kconvert.engines.expectations import SGLANG_CURRENT

    # written in the form SGLang post-25454 (and pre-25454) reads as streams [2, 4, 5]; the vLLM-only key is gone
    assert cfg["eagle_config"][AUX] == SGLANG_CURRENT.written_ids([2, 4, 5]) and AUX not in cfg
    assert SGLANG_CURRENT.physical_ids(cfg["eagle_config"][AUX]) == [2, 4, 5]
    names = set(open_checkpoint(str(out)).tensors)
    assert "midlayer.self_attn.q_proj.weight" in names and not any(n.startswith("layers.") for n in names)
    assert raw_bytes(out) == raw_bytes(src)
    assert res.remaining_fixable() == [] and [f.id for f in res.after.findings if f.severity == "error"] == []
    assert fix(str(out), tmp_path / "again", target=target, engine="sglang").noop


def test_speculators_to_flat_for_sglang_pre_25454_keeps_the_converted_ids(tmp_path, target):
    # Regression: the flat conversion copied the top-level (vLLM-convention) ids over the ids K404 had
    # converted for SGLang, so the output fed layers [3, 5, 6] and the next fix changed it again.
    from kconvert.engines.expectations import SGLANG_LEGACY

    src = draft(tmp_path, "speculators")
    out = tmp_path / "out"
    res = fix(str(src), out, target=target, engine="sglang", engine_version="pre-25454")
    written = config(out)["eagle_config"][AUX]
    assert written == SGLANG_LEGACY.written_ids([2, 4, 5]) == [1, 3, 4]
    assert SGLANG_LEGACY.physical_ids(written) == [2, 4, 5]
    assert res.remaining_fixable() == []
    assert fix(str(out), tmp_path / "again", target=target, engine="sglang", engine_version="pre-25454").noop


def test_speculators_to_flat_for_sglang_honours_user_aux_ids(tmp_path, target):
    out = tmp_path / "out"
    fix(str(draft(tmp_path, "speculators")), out, target=target, engine="sglang", decisions=Decisions(aux_ids=[3, 4, 6]))
    assert config(out)["eagle_config"][AUX] == [3, 4, 6]


def test_to_speculators_for_sglang_is_refused(tmp_path, target):
    # SGLang does not read the speculators format (and the output would lose its only copy of the ids).
    with pytest.raises(UsageError):
        fix(str(draft(tmp_path)), tmp_path / "out", target=target, engine="sglang", to_format="speculators")
    assert not (tmp_path / "out").exists()


def test_flat_to_speculators_and_back_round_trips(tmp_path, target):
    src = draft(tmp_path, "torchspec")
    spec = tmp_path / "spec"
    res = fix(str(src), spec, target=target, to_format="speculators")
    cfg = config(spec)
    assert cfg["architectures"] == ["Eagle3Speculator"] and cfg["speculators_model_type"] == "eagle3"
    assert cfg["transformer_layer_config"]["hidden_size"] == TINY.hidden
    assert cfg[AUX] == [2, 4, 5] and cfg["norm_before_residual"] is False
    assert all(n.startswith(("layers.0.", "fc.", "norm.", "lm_head.", "d2t", "t2d"))
               for n in open_checkpoint(str(spec)).tensors)
    assert res.after.draft.format.producer == "speculators" and res.remaining_fixable() == []
    assert [f for f in res.after.findings if f.severity == "error"] == []

    flat = tmp_path / "flat"
    fix(str(spec), flat, target=target, to_format="flat")
    back, orig = config(flat), config(src)
    orig.pop("_torchspec_version")  # producer stamp: not a field of the draft
    back_norm = back.pop("norm_before_residual")
    assert back_norm is False and back == orig
    assert raw_bytes(flat) == raw_bytes(spec) == raw_bytes(src)


def test_to_speculators_refuses_mla_drafts(tmp_path, target):
    with pytest.raises(UsageError):
        fix(str(draft(tmp_path, family="mla")), tmp_path / "out", target=target, to_format="speculators")


def test_sharded_input_gives_sharded_output_with_index(tmp_path, target):
    src = draft(tmp_path, "specforge", shards=3, tensors=_bias)
    out = tmp_path / "out"
    fix(str(src), out, target=target)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) == 3 and all((out / s).is_file() for s in shards)
    ck = open_checkpoint(str(out))
    assert set(index["weight_map"]) == set(ck.tensors)
    assert "midlayer.self_attn.q_proj.bias" not in ck.tensors
    before = raw_bytes(src)
    before.pop("layers.0.self_attn.q_proj.bias")  # raw_bytes names tensors canonically
    assert raw_bytes(out) == before


def test_lm_head_from_reselects_rows_of_a_wrongly_pruned_head(tmp_path, target):
    full = draft(tmp_path, name="full", full_vocab=True)
    F = arrays(full)["lm_head.weight"]
    d2t, _ = _vocab_map(TINY)

    def wrong_prune(t):  # the TorchSpec bug: lm_head[d2t] instead of lm_head[d2t + arange]
        t["lm_head.weight"] = ("BF16", (TINY.draft_vocab, TINY.hidden), F[d2t])

    src = draft(tmp_path, name="pruned", tensors=wrong_prune)
    out = tmp_path / "out"
    res = fix(str(src), out, target=target, decisions=Decisions(lm_head_source=str(full)))
    assert [o.kind for o in res.ops] == ["reselect-lm-head"]
    got = arrays(out)["lm_head.weight"]
    assert np.array_equal(got, F[d2t + np.arange(TINY.draft_vocab)])
    assert not np.array_equal(got, arrays(src)["lm_head.weight"])
    assert fix(str(out), tmp_path / "again", target=target).noop


def test_lm_head_from_needs_a_draft_with_d2t(tmp_path, target):
    full = draft(tmp_path, name="full", full_vocab=True)
    with pytest.raises(UsageError):
        fix(str(full), tmp_path / "out", target=target, decisions=Decisions(lm_head_source=str(full)))


# --- CLI ----------------------------------------------------------------------------------------------------------

def test_cli_inspect_exit_codes(tmp_path, target, capsys):
    clean = draft(tmp_path, name="clean")
    bad = draft(tmp_path, "specforge", name="bad")
    assert main(["inspect", str(clean), "--target", target]) == 0
    # the specforge draft's ids sit in eagle_config only: Model Runner V1 feeds them one stream early (K404), V2
    # reads none and feeds its defaults, the trained streams; the default row follows the machine, so name V1's
    assert main(["inspect", str(bad), "--target", target, "--engine-version", "0.32/v1"]) == 1
    assert main(["inspect", str(bad), "--target", target, "--engine", "sglang"]) == 0
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    assert main(["inspect", str(clean), "--engine", "tensorrt"]) == 2
    assert main(["inspect", str(clean), "--aux-ids", "a,b"]) == 2


def test_cli_inspect_json_is_a_valid_report(tmp_path, target, capsys):
    bad = draft(tmp_path, "specforge", name="bad")
    capsys.readouterr()
    assert main(["inspect", str(bad), "--target", target, "--engine-version", "0.32/v1", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    validate(doc, "report")
    assert doc["format"]["producer"] == "specforge" and doc["exit_code"] == 1 and doc["verdict"] == "fail"
    assert [f["id"] for f in doc["findings"]] == ["K404"] and doc["findings"][0]["fix_ops"]


def test_cli_inspect_json_without_target_is_valid(tmp_path, capsys):
    capsys.readouterr()
    assert main(["inspect", str(draft(tmp_path)), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    validate(doc, "report")
    assert doc["target"] is None and any(f["id"] == "K000" for f in doc["findings"])


def test_cli_fix_exit_codes(tmp_path, target, capsys):
    bad = draft(tmp_path, "specforge", name="bad")
    assert main(["fix", str(bad), "-o", str(tmp_path / "out"), "--target", target]) == 0
    assert config(tmp_path / "out")[AUX] == [2, 4, 5]
    assert main(["fix", str(tmp_path / "out"), "-o", str(tmp_path / "again"), "--target", target]) == 0
    assert main(["fix", str(bad), "--target", target]) == 2  # no -o and no --dry-run
    assert main(["fix", str(bad), "--dry-run", "--target", target]) == 0
    unknown = draft(tmp_path, "unknown", name="unknown")
    capsys.readouterr()
    # a decision nobody gave leaves the ids as they are: nothing else to change, so exit 0 and nothing written
    assert main(["fix", str(unknown), "-o", str(tmp_path / "u"), "--target", target, "--output-format",
                 "concise"]) == 0
    out = capsys.readouterr().out
    assert "left as is: K404" in out and "--aux-convention" in out and not (tmp_path / "u").exists()
    assert main(["fix", str(unknown), "-o", str(tmp_path / "u"), "--target", target, "--fail-on", "warning"]) == 1
    assert main(["fix", str(unknown), "-o", str(tmp_path / "u"), "--target", target,
                 "--aux-convention", "output"]) == 0
    broken = draft(tmp_path, name="broken", tensors=lambda t: t.pop("fc.weight"))
    assert main(["fix", str(broken), "-o", str(tmp_path / "b"), "--target", target]) == 1
    assert main(["fix", str(broken), "-o", str(tmp_path / "b"), "--target", target, "--partial"]) == 1
    assert main(["fix", str(bad), "-o", str(tmp_path / "x"), "--cast", "int4"]) == 2


def test_cli_fix_json_is_a_valid_report(tmp_path, target, capsys):
    bad = draft(tmp_path, "specforge", name="bad")
    capsys.readouterr()
    assert main(["fix", str(bad), "-o", str(tmp_path / "out"), "--target", target, "--engine-version", "0.32/v1",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    validate(doc, "report")
    assert doc["command"] == "fix" and doc["fix"]["applied_findings"] == ["K404"]
    assert doc["fix"]["remaining_fixable_after"] == [] and not doc["fix"]["noop"]


def test_cli_rules_exit_codes(capsys):
    assert main(["rules"]) == 0
    assert main(["rules", "K404"]) == 0
    assert "SGLang" in capsys.readouterr().out
    assert main(["rules", "K999"]) == 2
    capsys.readouterr()
    assert main(["rules", "--json"]) == 0
    from kconvert.rules import REGISTRY

    assert {r["id"] for r in json.loads(capsys.readouterr().out)} == set(REGISTRY)


def test_a_fixed_eagle_reference_draft_is_still_recognised_and_refixes_to_nothing(tmp_path, target):
    # The fix writes the aux ids into eagle_config, which the EAGLE reference code never writes: the output is
    # recognised through the producer its kconvert.json records.
    src = draft(tmp_path, "eagle")
    res = fix(str(src), tmp_path / "out", target=target)
    assert res.inspect.draft.format.producer == "eagle"
    assert res.after.draft.format.producer == "eagle"
    assert any("kconvert.json" in e for e in res.after.draft.format.evidence)
    assert fix(str(tmp_path / "out"), tmp_path / "again", target=target).noop


def _t2d_extra(t):
    dt, shape, data = t["t2d"]
    data = data.copy()
    data[np.flatnonzero(~data)[0]] = True
    t["t2d"] = (dt, shape, data)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("family", ["llama", "mla"])
@pytest.mark.parametrize("producer", ["specforge", "torchspec", "speculators", "eagle", "modelopt"])
def test_several_defects_at_once_fix_clean_and_refix_to_nothing(tmp_path, target, producer, family, engine):
    """Ops of different rules on the same tensors compose: `model.`-prefixed keys (renamed) whose d2t holds
    absolute ids (rewritten: the op must follow the rename) and whose t2d disagrees with d2t (rebuilt), in every
    producer's layout, both layer families, both engines, sharded or not. (A speculators MLA draft leaves the
    speculators format, in which vLLM always builds a Llama layer.)"""
    def defects(t):
        _absolute_d2t(t)
        _t2d_extra(t)
        rename_all(t, lambda k: "model." + k)

    src = draft(tmp_path, producer, family=family, tensors=defects, shards=2 if family == "mla" else 1)
    res = fix(str(src), tmp_path / "out", target=target, engine=engine)
    assert [f.id for f in res.after.findings if f.severity == "error"] == []
    assert res.remaining_fixable() == []
    out = arrays(tmp_path / "out")
    d2t, _ = _vocab_map(TINY)
    assert np.array_equal(out["d2t"], d2t) and not any(n.startswith("model.") for n in out)
    assert fix(str(tmp_path / "out"), tmp_path / "again", target=target, engine=engine).noop


def test_the_library_api_takes_the_decisions_under_their_earlier_name_options(tmp_path, target):
    import kconvert

    src = draft(tmp_path, config=lambda c: (c.pop(AUX), c.pop("eagle_config")))
    assert kconvert.Options is Decisions
    kconvert.fix(str(src), tmp_path / "out", target=target, options=kconvert.Options(aux_ids=[2, 4, 6]))
    assert config(tmp_path / "out")[AUX] == [2, 4, 6]
    res = kconvert.inspect(str(src), target=target, options=Decisions(aux_ids=[2, 4, 6]))
    assert res.options is res.decisions and res.decisions.aux_ids == [2, 4, 6]
    with pytest.raises(UsageError):
        fix(str(src), tmp_path / "again", target=target, decisions=Decisions(), options=Decisions())
