"""`kconvert engines list | learn | diff` (issue #47): the rows and the source of each fact, a release learned from its
own code, and what changed between two releases.

Expected values come from outside the code under test: vLLM's own Python files (the unpacked wheels in .vllm-oracle/,
read as text here), tests/data/vllm_oracle.json (recorded by running each release's functions), and the schema.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from kconvert.cli import main
from kconvert.engines import learned
from kconvert.engines.expectations import ALL_ROWS, EngineRules, KNOWN
from kconvert.schemas import validate

ROOT = Path(__file__).resolve().parents[1]
ORACLE = ROOT / ".vllm-oracle"
REC = json.loads((ROOT / "tests" / "data" / "vllm_oracle.json").read_text())


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _vllm_file(release: str, rel: str) -> str | None:
    """A file of a release's own code: the installed vLLM for 0.32.0, the unpacked wheel for the others."""
    if release == "0.32.0":
        import importlib.util

        spec = importlib.util.find_spec("vllm")
        base = Path(spec.origin).parent if spec and spec.origin else None
    else:
        base = ORACLE / f"vllm-{release}" / "vllm"
    p = base / rel if base else None
    return p.read_text() if p is not None and p.is_file() else None


# ------------------------------------------------------------------------------------------------------ list

def test_engines_list_json_names_the_source_of_every_fact_of_every_row(capsys):
    rc, out, _ = run(capsys, "engines", "list", "--json")
    assert rc == 0
    doc = json.loads(out)
    validate(doc, "engines")
    assert [r["row"] for r in doc["rows"]] == [r.key for r in ALL_ROWS]
    facts = {f.name for f in fields(EngineRules)} - {"engine", "version", "source", "aliases", "notes", "provenance",
                                                    "learned_from", "runner"}
    for r in doc["rows"]:
        if r["engine"] != "vllm":
            continue
        # every fact of a vLLM row has a source, learned or by hand; none is left to the row's prose
        assert set(r["facts"]) == facts and r["not_sourced"] == [], r["row"]
        lf = json.loads((ROOT / r["learned_from"]).read_text())
        for name, src in r["facts"].items():
            if src["learned"]:
                # a learned fact names the functions of that release that answered, as the learned file records them
                funcs = set(lf["functions"].values())
                assert any(f.split(" ")[0] in funcs for f in src["source"].split("; ")), (r["row"], name, src)
            else:
                assert src["source"] and src["file"] is None, (r["row"], name)
    installed = {i["engine"]: i for i in doc["installed"]}
    assert set(installed) == set(KNOWN)


def test_engines_list_of_one_row_prints_each_fact_and_its_source(capsys):
    rc, out, _ = run(capsys, "engines", "list", "vllm 0.34")
    assert rc == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("  ")]
    want = ("  aux_read_paths: learned (kconvert/engines/learned/vllm-0.34.0.json): "
            "vllm/v1/worker/gpu/spec_decode/eagle/")
    assert any(ln.startswith(want + "eagle3_utils.py:") for ln in lines), lines
    assert any(ln.startswith("  aux_rule: read by hand: ") for ln in lines)
    rc, _, err = run(capsys, "engines", "list", "vllm 0.35")
    assert rc == 2 and "no engine row" in err


# ------------------------------------------------------------------------------------------------------ diff

def _says(changes: list[dict], fact: str) -> list[str]:
    return [c["says"] for c in changes if c["fact"] == fact]


def test_engines_diff_033_034_says_what_a_deployer_acts_on(capsys):
    rc, out, _ = run(capsys, "engines", "diff", "vllm==0.33.0", "vllm==0.34.0", "--json")
    assert rc == 0
    doc = json.loads(out)
    validate(doc, "engines")
    ch = doc["changes"]
    # Model Runner V1 removed: the words are vLLM 0.34's own (platforms/interface.py validate_environ)
    v1 = _says(ch, "runners")
    assert len(v1) == 1 and "Model Runner V1 exists in vllm 0.33.0 and is gone in vllm 0.34.0" in v1[0]
    src = _vllm_file("0.34.0", "platforms/interface.py")
    if src is not None:
        said = re.search(r'"(VLLM_USE_V2_MODEL_RUNNER=\{value\} is no longer supported: ".*?Unset this variable\.)"',
                         src, re.S)
        assert said and "Model Runner V1 has been removed" in said.group(1)
        assert "Model Runner V1 has been removed" in v1[0]
    # ids kept only in eagle_config: V1 read them (recorded), no 0.34 runner does
    reads = _says(ch, "aux_read_paths")
    assert any("eagle_config.eagle_aux_hidden_state_layer_ids" in s and "by no runner in vllm 0.34.0" in s
               for s in reads)
    only_ec = [d for k, d in REC["drafts"].items() if "eagle_aux_hidden_state_layer_ids" not in d["config"]
               and (d["config"].get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")]
    assert only_ec and all(d["answers"]["0.33"]["v1"] and d["answers"]["0.34"]["v2"] is None
                           and "v1" not in d["answers"]["0.34"] for d in only_ec)
    # P-EAGLE refused, in 0.34's own words (speculators/algos.py update_peagle)
    pe = _says(ch, "refuses")
    assert len(pe) == 1 and "refuses it" in pe[0]
    algos = _vllm_file("0.34.0", "transformers_utils/configs/speculators/algos.py")
    if algos is not None:
        msg = re.search(r'raise ValueError\("(P-EAGLE[^"]+)"\)', algos).group(1)
        assert msg in pe[0]
    # the served context: 0.33 lowered it on V2 only, 0.34 on its only runner
    assert any("served context" in s for s in _says(ch, "limits_served_to_draft"))
    # where the code moved: requires_aux_hidden_states (eagle3_utils.py -> eagle/config.py)
    moved = {c["fact"]: c for c in ch if c["kind"] == "code"}
    assert "eagle/config.py" in moved["requires_aux_hidden_states"]["after"]
    # the rendered view says the same sentences
    rc, out, _ = run(capsys, "engines", "diff", "0.33", "vllm 0.34")
    assert rc == 0 and all(f"- {c['says']}" in out for c in ch if c["kind"] == "behaviour")


def test_every_pair_of_learned_releases_diffs_and_equal_releases_do_not(capsys):
    rels = [f"vllm=={r}" for _, r in learned.committed("vllm")]
    for a in rels:
        for b in rels:
            rc, out, _ = run(capsys, "engines", "diff", a, b, "--json")
            assert rc == 0
            doc = json.loads(out)
            validate(doc, "engines")
            assert (doc["changes"] == []) == (a == b), (a, b)
    rc, _, err = run(capsys, "engines", "diff", "vllm==0.33.0", "vllm==9.9.9")
    assert rc == 2 and "kconvert engines learn vllm==9.9.9" in err


# ------------------------------------------------------------------------------------------------------ learn

def test_learn_names_the_extra_and_exits_3_without_torch(capsys, monkeypatch, tmp_path):
    import importlib.util

    import kconvert.runners.engine_oracle as eo

    real = importlib.util.find_spec
    monkeypatch.setattr(eo.importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    monkeypatch.setenv("KCONVERT_ENGINES_CACHE", str(tmp_path))
    rc, _, err = run(capsys, "engines", "learn", "vllm==0.34.0")
    assert rc == 3 and "torch" in err and "[learn]" in err
    assert not any(tmp_path.iterdir())  # nothing fetched before the check


@pytest.mark.parametrize("spec", ["vllm", "vllm==0.34", "vllm>=0.34.0", "0.34.0", "vllm==latest"])
def test_learn_wants_one_exact_release(capsys, spec):
    rc, _, err = run(capsys, "engines", "learn", spec)
    assert rc == 2 and "ENGINE==X.Y.Z" in err


@pytest.mark.skipif(not (ORACLE / "vllm-0.34.0" / "vllm" / "__init__.py").is_file(),
                    reason="vLLM 0.34.0's Python files are not unpacked in .vllm-oracle/ (tests/vllm_oracle/record.py)")
def test_learn_reproduces_the_committed_learned_file_of_034(tmp_path):
    """The command as a user runs it (a child process, the cache set to the project's .vllm-oracle so that nothing is
    downloaded): its learned file is the committed one. tests/vllm_oracle/record.py --check (scripts/test.sh) does
    the same for 0.32 and 0.33 with the same learner."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), KCONVERT_ENGINES_CACHE=str(ORACLE))
    p = subprocess.run([sys.executable, "-m", "kconvert", "engines", "learn", "vllm==0.34.0", "--out", str(tmp_path),
                        "--json"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    validate(doc, "engines")
    assert doc["committed_same"] is True and doc["seconds"] <= 90
    got = json.loads((tmp_path / "vllm-0.34.0.json").read_text())
    shipped = json.loads((learned.HERE / "vllm-0.34.0.json").read_text())
    assert learned.comparable(got) == learned.comparable(shipped)
    assert any("GPU" in s or "engine run" in s for s in doc["not_learned"])


@pytest.mark.parametrize("release", [r for _, r in learned.committed("vllm")])
def test_each_learned_files_facts_follow_from_its_own_recorded_answers(release):
    """kconvert/engines/derive.py over the answers the release's code gave (kept in the file): the facts the rows
    read. A derivation changed without re-learning fails here."""
    from kconvert.engines.derive import derive_vllm

    doc = learned.load("vllm", release)
    raw = {"drafts": doc["answers"], "release": doc["release_answers"], "functions": doc["functions"]}
    assert derive_vllm(raw) == doc["facts"]
    # and the answers are the release's own: the shipped drafts' V2 answers recorded by tests/vllm_oracle/record.py
    # come from the same functions
    label = release.rsplit(".", 1)[0]
    assert REC["releases"][label]["functions"] == {k: v for k, v in doc["functions"].items()}


# ---------------------------------------------------------------------------------------------------- --oracle

KIMI = "zoo/lightseekorg_kimi_k25_eagle3_mla"  # Kimi-K2.5 shaped (7168 hidden, 163840 vocabulary), sparse headers


def _recorded_oracle(key: str, release: str, runner: str = "v2") -> dict:
    """What vLLM `release`'s own code answered for a recorded draft (tests/data/vllm_oracle.json), in the shape
    kconvert.runners.engine_oracle.ask_about_draft returns."""
    label = release.rsplit(".", 1)[0]
    return {"engine": "vllm", "release": release, "why": "recorded by tests/vllm_oracle/record.py", "runner": runner,
            "learned_from": "tests/data/vllm_oracle.json", "functions": REC["releases"][label]["functions"],
            "patched": REC["releases"][label].get("patched", []), "answer": REC["drafts"][key]["answers"][label],
            "seconds": 0.0}


@pytest.fixture()
def kimi(tmp_path):
    from tests.zoo.lightseekorg_kimi_k25_eagle3_mla.build import build

    return str(build(tmp_path / "kimi"))


@pytest.mark.skipif(not (ORACLE / "vllm-0.34.0" / "vllm" / "__init__.py").is_file(),
                    reason="vLLM 0.34.0's Python files are not unpacked in .vllm-oracle/ (tests/vllm_oracle/record.py)")
def test_inspect_oracle_asks_vllm_034s_code_about_a_kimi_k25_shaped_draft_and_agrees(kimi):
    """The real child, as a user runs it: vLLM 0.34.0's Python files asked about a Kimi-K2.5-shaped draft next to the
    kimi-k2.5 profile. Its answers are those tests/vllm_oracle/record.py recorded for the same replica, and the row
    agrees with them (no K107)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), KCONVERT_ENGINES_CACHE=str(ORACLE))
    p = subprocess.run([sys.executable, "-m", "kconvert", "inspect", kimi, "--target", "kimi-k2.5", "--engine-version",
                        "0.34", "--oracle", "--json"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    doc = json.loads(p.stdout)
    validate(doc, "report")
    o = doc["oracle"]
    rec = REC["drafts"][KIMI]["answers"]["0.34"]
    assert (o["release"], o["runner"]) == ("0.34.0", "v2")
    assert o["functions"]["v2"] == REC["releases"]["0.34"]["functions"]["v2"]
    a = o["answers"]
    assert a["raises"] is None and a["draft_class"] == rec["model"]["class"]
    assert a["fc_weight_shape"] == rec["model"]["fc_weight_shape"] and a["dropped"] == rec["model"]["dropped"]
    assert a["served_max_model_len"] == rec["served"]["v2_max_model_len"]
    assert a["ids_fed"] == sorted(set(rec["v2"] or rec["default"]))
    assert "K107" not in {f["id"] for f in doc["findings"]}
    print(f"--oracle on {KIMI}: {o['seconds']} s in the child")  # the measurement the report quotes


def test_verify_dry_run_with_oracle_reports_the_engines_answers_and_a_stale_row_fails(kimi, monkeypatch):
    import kconvert.runners.engine_oracle as eo
    from kconvert.commands.verify import verify

    monkeypatch.setattr(eo, "ask_about_draft", lambda ckpt, target, row, **k: _recorded_oracle(KIMI, "0.34.0"))
    vr = verify(kimi, "kimi-k2.5", engine_version="0.34", dry_run=True, oracle=True)
    doc = vr.to_dict()
    validate(doc, "report")
    assert doc["oracle"]["release"] == "0.34.0" and "K107" not in {f["id"] for f in doc["findings"]}
    import io

    from rich.console import Console

    from kconvert.report.terminal import header

    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(header(doc))
    assert "oracle: vllm 0.34.0's own code" in buf.getvalue() and "serves 4096 tokens" in buf.getvalue()
    # the same answers against the 0.33/v1 row: V1 read eagle_config's ids there; 0.34's code feeds the defaults,
    # so the row's claim about served context (V1 serves the target's) disagrees with 0.34's answer
    vr = verify(kimi, "kimi-k2.5", engine_version="0.33/v1", dry_run=True, oracle=True)
    k107 = [f for f in vr.inspect.findings if f.id == "K107"]
    assert k107 and all(f.severity == "error" for f in k107) and vr.exit_code == 1
    assert any("the context served" in f.message for f in k107)


def test_oracle_needs_a_target_and_a_learnable_engine(capsys, kimi):
    rc, _, err = run(capsys, "inspect", kimi, "--oracle")
    assert rc == 2 and "--oracle needs --target" in err
    rc, _, err = run(capsys, "inspect", kimi, "--target", "kimi-k2.5", "--engine", "sglang", "--oracle")
    assert rc == 2 and "--oracle asks vllm's code" in err


def test_matrix_oracle_asks_for_each_vllm_cell_only(kimi, monkeypatch):
    import kconvert.runners.engine_oracle as eo
    from kconvert.matrix.build import MatrixRequest, engine_rows

    asked = []

    def recorded(ckpt, target, row, **k):
        asked.append(row.key)
        return _recorded_oracle(KIMI, {"0.34": "0.34.0", "0.33": "0.33.0", "0.32": "0.32.0"}[row.version.split("/")[0]],
                                row.runner)

    monkeypatch.setattr(eo, "ask_about_draft", recorded)
    from kconvert.matrix import run_matrix

    doc = run_matrix(MatrixRequest(drafts=[kimi], target="kimi-k2.5", engines="all", oracle=True))
    vllm = [r.key for r in engine_rows("all") if r.engine == "vllm"]
    assert sorted(asked) == sorted(vllm)  # one question per vLLM cell, none for SGLang's rows
    cells = {f"{c['engine']} {c['engine_version']}": c for c in doc["cells"]}
    assert "K107" not in cells["vllm 0.34"]["finding_ids"] and "K107" not in cells["vllm 0.33"]["finding_ids"]


def test_learn_says_why_it_does_not_fetch_sglang(capsys):
    rc, _, err = run(capsys, "engines", "learn", "sglang==0.5.23")
    assert rc == 2 and "tests/sglang_oracle/record.py" in err and "sglang-0.5.23.json" in err
    rc, out, _ = run(capsys, "engines", "list", "sglang 0.5.23")
    assert rc == 0 and "aux_rule: learned (kconvert/engines/learned/sglang-0.5.23.json)" in out
