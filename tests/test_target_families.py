"""Targets an EAGLE-3 draft cannot serve as written (issue #49 item 5): the table kconvert/targets/families.py and
the rule that reads it, over every family, model type and engine row; and the vLLM facts the table cites, read in
the installed vLLM's own files."""
from __future__ import annotations

import ast
import json
from importlib.util import find_spec
from pathlib import Path

import pytest

from kconvert import inspect
from kconvert.engines.expectations import ALL_ROWS
from kconvert.rules.architecture import target_not_served
from kconvert.targets.families import FAMILIES
from tests.factories import make_draft, make_target

CASES = [(fam, mt, where) for fam in FAMILIES for mt in sorted(fam.model_types) for where in ("top", "text")]


def _target(folder: Path, model_type: str, where: str) -> Path:
    make_target(folder)
    cfg = json.loads((folder / "config.json").read_text())
    if where == "top":
        cfg["model_type"] = model_type
    else:
        cfg["text_config"]["model_type"] = model_type
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    return make_draft(tmp_path_factory.mktemp("d") / "d", "specforge")


@pytest.mark.parametrize("fam, mt, where", CASES, ids=[f"{mt}-{w}" for _, mt, w in CASES])
def test_every_family_is_named_on_every_row_with_what_serves_it(tmp_path, draft, fam, mt, where):
    target = _target(tmp_path / "t", mt, where)
    for row in ALL_ROWS:
        res = inspect(str(draft), target=str(target), engine=row.engine, engine_version=row.version)
        (f,) = [f for f in res.findings if f.id == target_not_served.id]
        verdict = fam.engines.get(row.engine)
        assert f.severity == (verdict.severity if verdict else "warning"), row.key
        assert fam.name in f.message and f"What serves it: {fam.served_by}" in f.message
        assert (verdict.what if verdict else "no source") in f.message
        assert not f.fixable


def test_a_target_of_no_listed_family_gets_no_finding(tmp_path, draft):
    res = inspect(str(draft), target=str(make_target(tmp_path / "t")), engine="vllm", engine_version="0.32")
    assert not [f for f in res.findings if f.id == target_not_served.id]
    res = inspect(str(draft), target="kimi-k2.5", engine="sglang", engine_version="0.5.23")
    assert not [f for f in res.findings if f.id == target_not_served.id]


def test_an_error_on_the_row_fails_the_inspection(tmp_path, draft):
    # SGLang 0.5.23 raises at startup for Kimi-K3: the gate must stop the pair, whatever the draft's own checks say
    res = inspect(str(draft), target=str(_target(tmp_path / "t", "kimi_k3", "top")), engine="sglang",
                  engine_version="0.5.23")
    assert res.failing


VLLM = Path(find_spec("vllm").origin).parent if find_spec("vllm") else None
needs_vllm = pytest.mark.skipif(VLLM is None, reason="vLLM is not installed")


def _source(rel: str) -> str:
    return (VLLM / rel).read_text(encoding="utf-8")


def _mla_model_types() -> set[str]:
    tree = ast.parse(_source("transformers_utils/model_arch_config_convertor.py"))
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "is_deepseek_mla")
    return {c.value for c in ast.walk(fn) if isinstance(c, ast.Constant) and isinstance(c.value, str)}


@needs_vllm
def test_vllm_lists_the_families_among_its_mla_model_types():
    # issue #49 item 5: vLLM 0.32 already lists glm5_next, deepseek_v41 and k3_dspark as MLA model types
    assert {"glm5_next", "deepseek_v41", "k3_dspark"} <= _mla_model_types()


@needs_vllm
def test_the_vllm_facts_the_table_cites_are_in_vllms_code():
    glm = _source("models/glm5next/common/model.py")
    assert "SupportsEagle3" in glm and "return hc_contract(completed, self.config.hc_mult)" in glm
    k3 = _source("models/kimi_k3/nvidia/model.py")
    assert "SupportsEagle3" in k3 and "NoPE-only" in k3
    for rel in ("model_executor/models/deepseek_eagle3.py", "model_executor/models/deepseek_v2.py"):
        assert "mla_use_nope" not in _source(rel), rel
    v41 = _source("models/deepseek_v41/nvidia/model.py")
    assert "SupportsEagle3" in v41
    spec = _source("config/speculative.py")
    assert "DeepSeek V4.1 has no classic-MTP draft" in spec and 'hf_config.model_type = "kimi_k3_mtp"' in spec
    assert 'hf_config.model_type = "glm5_next_mtp"' in spec
