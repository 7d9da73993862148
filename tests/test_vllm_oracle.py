"""kconvert's vLLM engine rows held against what vLLM's own code answered (tests/data/vllm_oracle.json, recorded by
tests/vllm_oracle/record.py; README there). No vLLM is needed here: the recording is the oracle, every vLLM row of
kconvert/engines/expectations.py (KNOWN["vllm"], Model Runner V2, and RUNNER_ROWS["vllm"], Model Runner V1) is what
is tested. ~1 s.
"""
from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from kconvert.engines.expectations import KNOWN, RUNNER_ROWS, other_runner
from kconvert.formats.read import read_draft
from kconvert.score.reading import declared_ids, engine_reading
from kconvert.source.checkpoint import load_folder

ROOT = Path(__file__).resolve().parents[1]
REC = json.loads((ROOT / "tests" / "data" / "vllm_oracle.json").read_text())
ROWS = {**KNOWN["vllm"], **RUNNER_ROWS.get("vllm", {})}
ON_DISK = {"examples/drafts": "examples/tiny/drafts", "examples/broken": "examples/tiny/broken",
           "producers": "tests/data/producers"}


def _release(row) -> str:
    return row.version.split("/")[0]


def _fed(answer: dict, runner: str) -> list[int]:
    """What vLLM feeds: the runner's ids from the config, else the target model's defaults (gpu_model_runner.py
    _init_eagle3 / eagle3_utils.set_eagle3_aux_hidden_state_layers: `if aux_layers: ... else: default`)."""
    got = answer[runner]
    assert not isinstance(got, dict), f"vLLM raised {got}: kconvert predicts no refusal here"
    return list(got) if got else list(answer["default"])


def _predicted(row, cfg: dict, num_layers: int) -> list[int]:
    """kconvert's prediction, by the row's own reading (kconvert/score/reading.py engine_reading's first step)."""
    ids = declared_ids(SimpleNamespace(config=cfg), row)
    return row.default_physical_ids(num_layers) if ids is None else row.physical_ids(ids)


def test_the_recording_is_vllm_0_32_and_0_33_and_names_each_function_by_file_and_line():
    assert {r: REC["releases"][r]["versions"]["vllm"] for r in REC["releases"]} == {"0.32": "0.32.0",
                                                                                    "0.33": "0.33.0"}
    where = re.compile(r"^vllm/[a-z0-9_/]+\.py:\d+$")
    for rel in REC["releases"].values():
        assert {"v1", "v2", "default", "get_config"} <= set(rel["functions"])
        assert all(where.match(f) for f in rel["functions"].values())
    # every row kconvert ships for vLLM names a release the recording covers, and both runners are covered
    assert {_release(r) for r in ROWS.values()} <= set(REC["releases"])
    assert {r.runner for r in ROWS.values()} == {"v1", "v2"}
    # every EAGLE-3 zoo replica, every shipped example draft and every producers' draft is in it
    zoo = {p.parent.name for p in (ROOT / "tests" / "zoo").glob("*/build.py")
           if getattr(importlib.import_module(f"tests.zoo.{p.parent.name}.build"), "METHOD", "eagle3") == "eagle3"}
    assert {k.split("/", 1)[1] for k in REC["drafts"] if k.startswith("zoo/")} == zoo
    shipped = {f"{g}/{p.name}" for g, d in ON_DISK.items() for p in (ROOT / d).iterdir()
               if (p / "config.json").exists()}
    assert {k for k in REC["drafts"] if not k.startswith("zoo/")} == shipped


@pytest.mark.parametrize("version", sorted(ROWS))
def test_each_vllm_row_predicts_the_ids_its_runner_feeds_for_every_draft(version):
    row = ROWS[version]
    bad = {}
    for key, d in REC["drafts"].items():
        want = _fed(d["answers"][_release(row)], row.runner)
        got = _predicted(row, d["config"], d["num_layers"])
        if got != want:
            bad[key] = {"kconvert": got, "vllm": want}
    assert not bad, (row.key, row.runner, REC["releases"][_release(row)]["functions"][row.runner], bad)


@pytest.mark.parametrize("version", sorted(ROWS))
def test_engine_reading_of_each_shipped_draft_is_what_vllm_collects(version):
    """The same through kconvert's full reading of the files on disk (vLLM collects sorted(set(ids)):
    set_aux_hidden_state_layers)."""
    row = ROWS[version]
    for key, d in REC["drafts"].items():
        if key.startswith("zoo/"):
            continue  # built in a temporary folder by the recorder; the config test above covers them
        group, name = key.rsplit("/", 1)
        folder = ROOT / ON_DISK[group] / name
        draft = read_draft(load_folder(folder, ref=str(folder)))
        reading = engine_reading(draft, row, d["num_layers"], target_vocab=draft.vocab_size or 0)
        want = tuple(sorted(set(_fed(d["answers"][_release(row)], row.runner))))
        assert reading.aux_ids == want, (row.key, key)


def test_the_two_runners_differ_only_where_the_recording_says():
    """Rows paired by other_runner read alike exactly where vLLM's V1 and V2 functions answered alike."""
    for row in ROWS.values():
        if row.runner != "v2":
            continue
        v1 = other_runner(row)
        assert v1 is not None and v1.runner == "v1" and _release(v1) == _release(row)
        for key, d in REC["drafts"].items():
            a = d["answers"][_release(row)]
            same_vllm = _fed(a, "v1") == _fed(a, "v2")
            same_kconvert = (_predicted(v1, d["config"], d["num_layers"])
                             == _predicted(row, d["config"], d["num_layers"]))
            assert same_vllm == same_kconvert, (row.key, key)


@pytest.mark.parametrize("version", sorted(ROWS))
def test_each_rows_no_aux_heads_claim_is_what_its_runner_does_with_use_aux_hidden_state(version):
    """no_aux_heads "yes": the runner honours eagle_config.use_aux_hidden_state false (V1:
    llm_base_proposer.py _get_eagle3_use_aux_hidden_state_from_config; V2 0.33: eagle3_utils.requires_aux_hidden_states).
    "v1-runner-only" (V2 0.32): there is no such function in that release; its model_runner.py sets
    use_aux_hidden_state_outputs true for every eagle3 draft."""
    row = ROWS[version]
    rel = _release(row)
    key = "v1_use_aux_hidden_state" if row.runner == "v1" else "v2_requires_aux_hidden_states"
    if row.no_aux_heads == "yes":
        assert key in REC["releases"][rel]["functions"] or key.removeprefix("v2_") in REC["releases"][rel]["functions"]
        seen = set()
        for name, d in REC["drafts"].items():
            ec = d["config"].get("eagle_config") or {}
            want = ec.get("use_aux_hidden_state") is not False
            assert d["answers"][rel][key] is want, (row.key, name)
            seen.add(want)
        assert seen == {True, False}  # the recording holds heads of both kinds
    else:
        assert row.no_aux_heads == "v1-runner-only" and row.runner == "v2"
        assert "requires_aux_hidden_states" not in REC["releases"][rel]["functions"]
        assert all(d["answers"][rel].get(key) is None for d in REC["drafts"].values())


def test_model_runner_v2_refuses_a_draft_exactly_where_kconvert_sees_a_p_eagle_draft():
    """config/vllm.py _get_v2_model_runner_unsupported_features sends a parallel-drafting EAGLE draft (P-EAGLE) to
    Model Runner V1 (the V1 rows' notes); kconvert's detect_method (kconvert/formats/methods.py) names that method.
    Every shipped draft is EAGLE-3, so V2 refuses none of them, in either release."""
    from kconvert.formats.methods import detect_method

    for key, d in REC["drafts"].items():
        for rel, a in d["answers"].items():
            feats = a["v2_unsupported_features"]
            assert isinstance(feats, list), (key, rel, feats)
            peagle = detect_method(d["config"], []).method == "peagle"
            assert ("parallel drafting for EAGLE speculative decoding" in feats) == peagle, (key, rel)
            assert a["speculative_config"]["method"] == "eagle3" and not feats, (key, rel, a)
