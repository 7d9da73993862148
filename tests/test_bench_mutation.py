"""bench/mutation.py's guard on a kept scratch folder (issue #30): mutmut runs the copy of tests/ made by the first
run, so a folder reused after the tests changed must be refused, not judged by the old tests."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mutation():
    spec = importlib.util.spec_from_file_location("bench_mutation", ROOT / "bench" / "mutation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_kept_folder_whose_test_copy_differs_is_named_stale(tmp_path):
    m = _mutation()
    assert m.stale_tests(tmp_path) == []  # no copy yet: a fresh folder, nothing to compare
    copy = tmp_path / "mutants" / "tests"
    for f in (ROOT / "tests").rglob("*.py"):
        (copy / f.relative_to(ROOT / "tests")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, copy / f.relative_to(ROOT / "tests"))
    assert m.stale_tests(tmp_path) == []
    (copy / "test_bench_mutation.py").write_text("# an older copy\n")
    (copy / "factories.py").unlink()
    assert m.stale_tests(tmp_path) == ["tests/factories.py", "tests/test_bench_mutation.py"]
