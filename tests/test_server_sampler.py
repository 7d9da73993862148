"""A running server's sampler (issue #46): `verify --server` and `kconvert acceptance` read what the server reveals
about it and never pass a figure from a server that forces acceptance; where the server reveals nothing, the
result says the figure is only as honest as the server's sampler, and how to expose it.

The stand-ins (tests/test_server_standin.py) serve what the real servers' code returns:
- vLLM: `/server_info?config_format=json` as vLLM 0.32's own handler answered it for the tiny target and draft,
  as written and with InferenceX's `rejection_sample_method: synthetic`, `synthetic_acceptance_length: 3.24`
  (tests/data/vllm_server_info_{standard,synthetic}.json, tests/vllm_oracle/record_server_info.py); 404 without
  VLLM_SERVER_DEV_MODE=1 (vllm/entrypoints/serve/__init__.py registers the route only then).
- SGLang: 0.5.23's /server_info (tests/test_server_standin.py) whose internal_states carry what its own
  `_add_env_vars` / `exportable_env_vars` wrote under each environment (tests/data/sglang_env_vars.json,
  tests/sglang_oracle/record_env_vars.py).
"""
from __future__ import annotations

import json

import pytest

from tests.test_server_standin import DATA, StandIn, _load, _sglang_0_5_23_server_info, run_kconvert
from tests.oracles import prom_delta

INFO = "/server_info?config_format=json"


def _vllm(server_info: dict | None) -> StandIn:
    before, after = (DATA / "vllm_metrics_before.txt").read_text(), (DATA / "vllm_metrics_after.txt").read_text()
    get = {"/version": {"version": "0.32.0"},
           "/v1/models": {"object": "list", "data": [{"id": "tiny-target", "object": "model"}]}}
    if server_info is not None:
        get[INFO] = server_info
    return StandIn(get=get, metrics=[before, after],
                   completion={"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                               "usage": {"prompt_tokens": 0, "completion_tokens": 32}})


@pytest.mark.parametrize("variant, code", [("synthetic", 1), ("standard", 0), (None, 0)])
def test_verify_server_on_vllm_refuses_a_pass_where_the_server_forces_acceptance(variant, code):
    info = _load(f"vllm_server_info_{variant}.json") if variant else None
    with _vllm(info) as s:
        r = run_kconvert("verify", "--server", s.url, "--engine", "vllm", "--prompts", "_smoke", "--max-tokens",
                         "32", "-k", "3", "--json")
    assert r.returncode == code, r.stderr
    doc = json.loads(r.stdout)
    sampler = doc["sampler"]
    # the counters are measured either way (the figure is shown, it just never passes)
    assert doc["counters"] == {k: v for k, v in prom_delta((DATA / "vllm_metrics_before.txt").read_text(),
                                                           (DATA / "vllm_metrics_after.txt").read_text(),
                                                           model="tiny-target").items() if k != "requests_finished"}
    if variant is None:
        assert not sampler["revealed"] and sampler["forced"] == []
        assert "only as honest as the server's sampler" in sampler["note"] and "VLLM_SERVER_DEV_MODE=1" in sampler["note"]
        return
    assert sampler["revealed"]
    spec = info["vllm_config"]["speculative_config"]
    assert sampler["settings"]["speculative_config.rejection_sample_method"] == spec["rejection_sample_method"]
    assert sampler["settings"]["speculative_config.draft_sample_method"] == spec["draft_sample_method"]
    if variant == "synthetic":
        assert any("synthetic_acceptance_rates" in f and "forced acceptance" in f for f in sampler["forced"])
    else:
        assert sampler["forced"] == [] and "note" not in sampler


def test_verify_server_prints_the_refusal_in_every_server_format():
    with _vllm(_load("vllm_server_info_synthetic.json")) as s:
        for fmt in ("full", "concise", "github"):
            r = run_kconvert("verify", "--server", s.url, "--engine", "vllm", "--prompts", "_smoke", "--max-prompts",
                             "1", "--max-tokens", "32", "--output-format", fmt)
            assert r.returncode == 1, r.stderr
            assert "forced acceptance" in r.stdout and "synthetic" in r.stdout, (fmt, r.stdout)


@pytest.mark.parametrize("environment, code", [("simulated", 1), ("exposed", 0), ("hidden", 0)])
def test_verify_server_on_sglang_reads_its_exposed_environment(environment, code):
    recorded = json.loads((DATA / "sglang_env_vars.json").read_text())
    info = {**_sglang_0_5_23_server_info(), "internal_states": [recorded["internal_state"][environment]]}
    with StandIn(get={"/server_info": info}, generate=_load("sglang_generate_0_5_23.json")) as s:
        r = run_kconvert("verify", "--server", s.url, "--engine", "sglang", "--prompts", "_smoke", "--max-prompts",
                         "3", "-k", "3", "--json")
    assert r.returncode == code, r.stderr
    sampler = json.loads(r.stdout)["sampler"]
    if environment == "simulated":
        assert any(f.startswith("SGLANG_SIMULATE_ACC_LEN=3.24") for f in sampler["forced"])
    elif environment == "hidden":  # set, but the server does not show it: a note, not a failure
        assert not sampler["revealed"] and sampler["forced"] == []
        assert "SGLANG_EXPOSE_OWN_ENV_VARS=1" in sampler["note"] and "only as honest" in sampler["note"]
    else:
        assert sampler["revealed"] and sampler["forced"] == []


@pytest.mark.parametrize("variant, code", [("synthetic", 1), ("standard", 0), (None, 0)])
def test_acceptance_checks_a_saved_server_info(tmp_path, variant, code):
    args = ["acceptance", str(DATA / "vllm_metrics_after.txt"), "--before", str(DATA / "vllm_metrics_before.txt"),
            "--json"]
    if variant:
        args += ["--server-info", str(DATA / f"vllm_server_info_{variant}.json")]
    r = run_kconvert(*args)
    assert r.returncode == code, r.stderr
    doc = json.loads(r.stdout)
    from kconvert.schemas import validate

    validate(doc, "acceptance")
    assert bool(doc["sampler"]["forced"]) is (variant == "synthetic")
    assert doc["sampler"]["revealed"] is (variant is not None)
    if variant is None:  # how to expose it: the saved /server_info this command reads
        assert "only as honest as the server's sampler" in doc["sampler"]["note"]
        assert "server_info?config_format=json" in doc["sampler"]["note"]
