"""Contradictions a new user met (issue 18, item 6), each pinned: the user's typo is a usage error, evidence names
what it says, messages say each thing once and never show Python's None, report files get the usual mode, and a
missing optional package is one exit code."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kconvert.errors import UsageError
from kconvert.commands.inspect import inspect
from kconvert.rules import Decisions
from tests.factories import SHAPES, make_draft, make_target, rename_all

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="80", **(env or {}))
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, env=e,
                          cwd=cwd or ROOT, timeout=120)


def test_aux_ids_past_the_target_are_a_usage_error_naming_the_range(tmp_path):
    draft = make_draft(tmp_path / "d", "torchspec")
    target = make_target(tmp_path / "t", "tiny")
    L = SHAPES["tiny"].layers
    with pytest.raises(UsageError) as err:
        inspect(str(draft), target=str(target), decisions=Decisions(aux_ids=[2, 5, 99]))
    assert f"0..{L}" in err.value.message and "99" in err.value.message
    r = cli("inspect", str(draft), "--target", str(target), "--aux-ids", "2,5,99")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"0..{L}" in r.stderr and "K402" not in r.stdout


def test_k201_evidence_names_a_tensor_that_carries_the_prefix(tmp_path):
    # The draft: every name prefixed `model.` except lm_head.weight.
    draft = make_draft(tmp_path / "d", "torchspec",
                       tensors=lambda t: rename_all(t, lambda k: k if k == "lm_head.weight" else "model." + k))
    res = inspect(str(draft), target=str(make_target(tmp_path / "t", "tiny")))
    f = next(f for f in res.findings if f.id == "K201")
    assert f.evidence[0].where.startswith("model."), f.evidence[0].where


def _drafts_with_fields_missing(root: Path):
    """Every producer's factory draft, whole and with one config field at a time removed, and every zoo replica."""
    import importlib
    import json

    tgt = str(make_target(root / "t", "tiny"))
    for prod in ("torchspec", "specforge", "speculators", "eagle", "modelopt"):
        for drop in (None, "hidden_size", "target_hidden_size", "vocab_size", "draft_vocab_size",
                     "num_attention_heads", "max_position_embeddings", "head_dim", "num_hidden_layers"):
            d = make_draft(root / f"{prod}-{drop}", prod)
            if drop:
                c = json.loads((d / "config.json").read_text())
                c.pop(drop, None)
                if isinstance(c.get("transformer_layer_config"), dict):
                    c["transformer_layer_config"].pop(drop, None)
                (d / "config.json").write_text(json.dumps(c))
            yield d, tgt
    zoo = ROOT / "tests" / "zoo"
    for case in sorted(p.name for p in zoo.iterdir() if (p / "expect.json").is_file()):
        mod = importlib.import_module(f"tests.zoo.{case}.build")
        yield mod.build(root / case), mod.TARGET


def test_no_finding_shows_python_none_or_says_a_word_twice(tmp_path):
    from kconvert.engines.expectations import ALL_ROWS

    bad = set()
    for folder, target in _drafts_with_fields_missing(tmp_path):
        for row in ALL_ROWS:
            for tgt in (target, None):
                for f in inspect(str(folder), target=tgt, engine=row.engine, engine_version=row.version).findings:
                    if re.search(r"\bNone\b", f.message):
                        bad.add((f.id, f.message))
                    m = re.search(r"\b([A-Za-z][\w.]*\w)[:,]?\s+\1\b", f.message)
                    if m:
                        bad.add((f.id, f.message))
    assert not bad, sorted(bad)


def test_an_unreadable_config_names_the_file_once(tmp_path):
    draft = make_draft(tmp_path / "d", "torchspec")
    (draft / "config.json").write_text("{not json")
    r = cli("inspect", str(draft))
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[0]
    assert line.count("config.json") == 1 and "not valid JSON" in line, line


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_report_and_sarif_files_get_the_mode_open_would_give(tmp_path, mask):
    from kconvert.report.files import write_report

    old = os.umask(mask)
    try:
        write_report(tmp_path / "r.json", "json", "inspect", '{"a": 1}\n')
        write_report(tmp_path / "r.sarif", "sarif", "inspect", "{}")
        with open(tmp_path / "plain", "w"):  # the oracle: what open(2) gives under this umask
            pass
    finally:
        os.umask(old)
    want = (tmp_path / "plain").stat().st_mode & 0o777
    assert want == 0o666 & ~mask
    for name in ("r.json", "r.sarif"):
        assert (tmp_path / name).stat().st_mode & 0o777 == want, name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left beside


def _blocking(tmp_path: Path, *modules: str) -> dict:
    """An environment in which `import <module>` fails as it does where the package is not installed: a
    sitecustomize that sets sys.modules[name] = None (Python then raises ModuleNotFoundError on import)."""
    site = tmp_path / "block"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules))
    return {"PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}


def test_missing_torch_exits_3_with_the_install_line(tmp_path):
    # a real trace and a draft the static checks let through (--skip-static): torch is asked for only once the
    # draft is to be scored; bad input and a refusal are said first (tests/test_other_method_commands.py)
    from tests.score_factories import random_trace

    draft = make_draft(tmp_path / "d", "torchspec")
    trace = random_trace(tmp_path / "t")
    env = dict(os.environ, COLUMNS="80", **_blocking(tmp_path, "torch"))
    r = subprocess.run([sys.executable, "-m", "kconvert", "score", str(draft), "--trace", str(trace),
                        "--skip-static"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "pip install 'kconvert-eagle3[score]'" in r.stderr and "not installed" in r.stderr


def test_missing_vllm_exits_3_with_the_install_line(monkeypatch):
    from kconvert.runners import vllm_offline
    from kconvert.engines.live_messages import LiveRequest
    from kconvert.errors import EXIT_ENGINE, MissingPackageError

    monkeypatch.setattr(vllm_offline, "installed_version", lambda name: None)
    with pytest.raises(MissingPackageError) as err:
        vllm_offline.run_vllm(LiveRequest(target="t", draft="d", prompts=["hi"]))
    # both builds named, whatever this machine has: the dry run's note names the same (tests/test_hints.py)
    assert err.value.exit_code == EXIT_ENGINE == 3
    assert "pip install 'kconvert-eagle3[live]'" in err.value.hint and "pip install 'kconvert-eagle3[gpu]'" in err.value.hint
