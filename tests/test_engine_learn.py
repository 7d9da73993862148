"""Rows as learned data (issue #47): the probe set the learner asks, the rows built from learned files, a release
learned on this machine, and K106 for an installed release kconvert has no row for. Engine-free and fast: the learned
files hold what each release's code answered (tests/vllm_oracle/record.py --check re-asks it)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kconvert.engines import learned
from kconvert.engines.expectations import KNOWN, NEWEST, cached_row, engine_rules, row_for
from kconvert.engines.probes import TARGET_CONFIG, draft_tensors, layer_tensors, vllm_probes
from kconvert.source.safetensors_header import read_header

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny"


def _header(folder: Path) -> dict[str, list]:
    (f,) = sorted(folder.glob("*.safetensors"))
    return {n: [i.dtype, list(i.shape)] for n, i in read_header(f, f.name).tensors.items()}


@pytest.mark.parametrize("family,example", [("llama", "llama-specforge"), ("mla", "mla-torchspec")])
def test_the_probes_base_drafts_have_the_shipped_tiny_examples_names_and_shapes(family, example):
    # the probe set's arithmetic of shapes, held against the examples' own safetensors headers
    assert draft_tensors(family) == _header(TINY / "drafts" / example)


def test_the_probe_target_is_the_tiny_targets_text_model():
    cfg = json.loads((TINY / "target" / "config.json").read_text())["text_config"]
    assert {k: cfg[k] for k in TARGET_CONFIG} == TARGET_CONFIG


def test_every_probe_is_one_base_draft_and_a_later_layer_takes_h_inputs():
    probes = vllm_probes()
    assert len(probes) >= 30 and all(p["family"] in ("llama", "qwen3", "mla") for p in probes.values())
    second = layer_tensors("llama", 1, "layers.1.")
    assert second["layers.1.self_attn.q_proj.weight"][1][1] == TARGET_CONFIG["hidden_size"]  # H, not 2H (PR #26164)


@pytest.mark.parametrize("release", [r for _, r in learned.committed("vllm")])
def test_each_committed_release_has_its_rows_and_each_row_reads_its_learned_file(release):
    doc = learned.load("vllm", release)
    minor = release.rsplit(".", 1)[0]
    for runner in doc["facts"]["runners"]["value"]:
        row = KNOWN["vllm"][minor if runner == "v2" else f"{minor}/v1"]
        assert row.learned_from == f"kconvert/engines/learned/vllm-{release}.json"
        got, _ = learned.fields(doc, runner)
        assert {k: getattr(row, k) for k in got} == got


def test_a_release_learned_on_this_machine_is_a_row_with_its_hand_facts_carried(tmp_path, monkeypatch):
    """The cache's learned/ folder (what `kconvert engines learn` writes): here the learned file of vLLM 0.34.0 itself,
    so its row must equal the committed 0.34 row in every learned fact, with the hand facts said to be carried."""
    monkeypatch.setenv("KCONVERT_ENGINES_CACHE", str(tmp_path))
    (tmp_path / "learned").mkdir()
    shutil.copy(learned.HERE / "vllm-0.34.0.json", tmp_path / "learned" / "vllm-0.34.0.json")
    cached_row.cache_clear()
    try:
        row = cached_row("vllm", "0.34")
        assert row is not None and row.key == "vllm 0.34" and row.runner == "v2"
        ship = KNOWN["vllm"]["0.34"]
        for name, src in row.provenance.items():
            assert getattr(row, name) == getattr(ship, name), name
            if not src.learned:
                assert src.where.startswith("carried from the vllm 0.34 row, not re-read for vllm 0.34.0"), name
        assert cached_row("vllm", "0.34/v1") is None  # no Model Runner V1 in that release
        assert cached_row("vllm", "0.35") is None
    finally:
        cached_row.cache_clear()


def _k106(monkeypatch, installed: dict, **kw):
    from kconvert.commands.inspect import inspect
    import kconvert.rules.config_hygiene as ch

    monkeypatch.setattr(ch, "installed_version", lambda engine: installed.get(engine))
    res = inspect(str(TINY / "drafts" / "llama-specforge"), target=str(TINY / "target"), **kw)
    return [f for f in res.findings if f.id == "K106"], res


def _next_minor(engine: str = "vllm") -> str:
    newest = max(tuple(int(x) for x in v.split("/")[0].split(".")) for v in KNOWN[engine])
    return f"{newest[0]}.{newest[1] + 1}.0"


def test_an_installed_release_without_a_row_is_k106_naming_it_the_row_applied_and_both_ways_to_settle_it(monkeypatch):
    unknown = _next_minor()
    k106, res = _k106(monkeypatch, {"vllm": unknown}, engine_version=NEWEST["vllm"])
    assert [f.severity for f in k106] == ["warning"]
    msg = k106[0].message
    assert f"vllm {unknown} is installed here" in msg and f"applies the {res.engine.key} row" in msg
    assert f"`kconvert engines learn vllm=={unknown}`" in msg and "--oracle`" in msg
    # a known release, a patch of one, or no engine at all: nothing to say
    for inst in ({"vllm": "0.34.0"}, {"vllm": "0.33.4"}, {}):
        assert _k106(monkeypatch, inst, engine_version="0.34")[0] == []


def test_k106_for_an_engine_kconvert_cannot_learn_says_so_instead_of_a_command_that_would_fail(monkeypatch):
    k106, _ = _k106(monkeypatch, {"sglang": "0.5.99"}, engine="sglang", engine_version="0.5.23")
    assert len(k106) == 1 and "engines learn" not in k106[0].message and "learns vllm releases only" in \
        k106[0].message


def test_k106_is_silent_for_the_installed_release_kconvert_ships_a_row_for():
    from kconvert.engines.installed import installed_version

    inst = installed_version("vllm")
    if inst:
        assert row_for("vllm", inst) is not None
    assert engine_rules("vllm", "0.34").key == "vllm 0.34"


def test_the_gpu_install_lines_name_the_newest_vllm_release_kconvert_has_a_row_for():
    import re

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    newest = KNOWN["vllm"][NEWEST["vllm"]]
    release = Path(newest.learned_from).stem.partition("-")[2]  # the release its facts were learned from
    boot = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert re.search(r'^VLLM_GPU_SPEC="\$\{VLLM_GPU_SPEC:-vllm==' + re.escape(release) + r'\}"$', boot, re.M)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    minor = release.rsplit(".", 1)[0]
    major, m = minor.split(".")
    assert f"vllm>={minor},<{major}.{int(m) + 1}" in extras["gpu"]
    assert {"torch", "transformers"} <= {re.split(r"[<>=!~ ]", r)[0] for r in extras["learn"]}


def test_a_verify_on_0_34_measures_model_runner_v2_whatever_the_platform_and_says_why_v1_is_refused():
    from kconvert.commands.verify.model_runner import measured_runner

    row = KNOWN["vllm"]["0.34"]
    for env in ({"VLLM_TARGET_DEVICE": "cpu"}, {"VLLM_TARGET_DEVICE": "cuda"}):
        assert measured_runner(row, environ=env)[0] == "v2"
    runner, why = measured_runner(row, environ={"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_TARGET_DEVICE": "cuda"})
    assert runner == "v2" and "Model Runner V1 has been removed" in why
    # the rows with V1 keep vLLM 0.32/0.33's choice: V1 on the CPU build
    assert measured_runner(KNOWN["vllm"]["0.33"], environ={"VLLM_TARGET_DEVICE": "cpu"})[0] == "v1"


def test_the_sglang_rows_learned_facts_are_what_the_sglang_recording_settles():
    """kconvert/engines/learned/sglang-0.5.23.json is tests/data/sglang_oracle.json (SGLang 0.5.23's own code, recorded
    by tests/sglang_oracle/record.py, whose --check compares the learned file too) read as row facts; the 0.5.23 row
    takes them and names their source."""
    rec = json.loads((ROOT / "tests" / "data" / "sglang_oracle.json").read_text())
    doc = learned.load("sglang", "0.5.23")
    assert learned.comparable(learned.document_sglang(rec)) == learned.comparable(doc)
    row = KNOWN["sglang"]["0.5.23"]
    got, _ = learned.fields(doc, None)
    assert set(got) == {"aux_rule", "layer_names", "multi_layer", "norm_before_fc", "fc_norm", "model_prefix_ok"}
    for name, value in got.items():
        assert getattr(row, name) == value and row.provenance[name].learned, name
    # the capture's reading of each target family, checked against the recorded ids by hand here: on DeepSeek/Kimi
    # [1, 29, 57] -> [2, 30, 58] and [2, 30, 58] stays; on Llama every id +1; on GPT-OSS ids ending at L stay
    cap = {fam: {tuple(p["ids"]): p["layers_to_capture"] for p in c["probes"] if p["ids"]}
           for fam, c in rec["capture"].items()}
    assert cap["deepseek_v2"][(1, 29, 57)] == [2, 30, 58] and cap["deepseek_v2"][(2, 30, 58)] == [2, 30, 58]
    assert cap["llama"][(2, 30, 58)] == [3, 31, 59] and cap["gpt_oss"][(24, 30, 36)] == [24, 30, 36]
    assert row.aux_rule == {"*": "output", "deepseek": "output-if-first-is-1", "gpt_oss": "output-unless-final"}


def test_a_peagle_draft_on_vllm_0_34_is_a_k105_error_in_vllm_034s_own_words_and_every_command_refuses_it(tmp_path):
    """vLLM 0.34 refuses P-EAGLE (transformers_utils/configs/speculators/algos.py update_peagle), where 0.33 loaded it
    with its EAGLE-3 classes. The message is read here from 0.34's own file when it is unpacked (.vllm-oracle/)."""
    import re

    from kconvert.commands.fix import fix
    from kconvert.commands.inspect import inspect
    from tests.test_methods import peagle_config, peagle_folder

    folder = str(peagle_folder(tmp_path / "peagle", peagle_config()))
    res = inspect(folder, engine="vllm", engine_version="0.34")
    k105 = [f for f in res.findings if f.id == "K105"]
    assert [f.severity for f in k105] == ["error"] and "vllm 0.34 refuses it" in k105[0].message
    assert "speculators/algos.py" in k105[0].message and "update_peagle" in k105[0].message
    algos = ROOT / ".vllm-oracle" / "vllm-0.34.0" / "vllm" / "transformers_utils" / "configs" / "speculators" / "algos.py"
    if algos.is_file():
        said = re.search(r'def update_peagle.*?raise ValueError\("([^"]+)"\)', algos.read_text(), re.S).group(1)
        assert said in k105[0].message
    assert res.refusal("verify") is not None and fix(folder, None, engine_version="0.34", dry_run=True).refused
    # 0.33 loads it with its EAGLE-3 classes: not an error there (its row was not read for other methods: a warning)
    assert all(f.severity != "error" for f in inspect(folder, engine="vllm", engine_version="0.33").findings
               if f.id == "K105")
