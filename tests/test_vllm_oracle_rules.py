"""The aux-layer rules (K404/K405: `kconvert.rules.aux_layers.fed_physical_ids`) held against the streams vLLM's own
runners feed for every draft kconvert ships (tests/data/vllm_oracle.json). tests/test_vllm_oracle.py holds the rows'
reading (`score/reading.py`); this holds the rules' own, which once differed from it: on Model Runner V2 the rules
took ids kept only in eagle_config as fed, while V2 never reads them and feeds the target's defaults
(nvidia/Kimi-K2.5-Thinking-Eagle3 was a K404 error on the V2 rows for ids V2 ignores).
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from kconvert.engines.expectations import KNOWN
from kconvert.formats.aux import AUX_PATHS, get_path
from kconvert.rules.aux_layers import fed_physical_ids

ROOT = Path(__file__).resolve().parents[1]
REC = json.loads((ROOT / "tests" / "data" / "vllm_oracle.json").read_text())


def _vllm_feeds(answer: dict, runner: str) -> list[int]:
    # gpu_model_runner.py / eagle3_utils.py: the runner's ids from the config if any, else the model's defaults
    got = answer[runner]
    assert not isinstance(got, dict), got
    return list(got) if got else list(answer["default"])


def _ctx(cfg: dict, num_layers: int, row) -> SimpleNamespace:
    # only what fed_physical_ids reads: the ids as written and where, the row, the target's depth
    locations = {".".join(p): v for p in AUX_PATHS if (v := get_path(cfg, p)) is not None}
    ids = next(iter(locations.values()), None)
    aux = SimpleNamespace(ids=list(ids) if isinstance(ids, list) else None, locations=locations)
    target = SimpleNamespace(num_hidden_layers=num_layers, model_type="kimi_k2", text_model_type=None, mla=True)
    return SimpleNamespace(draft=SimpleNamespace(aux=aux), engine=row, target=target)


@pytest.mark.parametrize("version", sorted(KNOWN["vllm"]))
def test_the_rules_feed_what_vllms_runner_feeds_for_every_shipped_draft(version):
    row = KNOWN["vllm"][version]
    rel = row.version.split("/")[0]
    bad = {}
    for key, d in REC["drafts"].items():
        ctx = _ctx(d["config"], d["num_layers"], row)
        if ctx.draft.aux.ids is None:
            continue  # no ids: K404/K405 do not run (the defaults are K401's)
        want = sorted(set(_vllm_feeds(d["answers"][rel], row.runner)))  # set_aux_hidden_state_layers: sorted(set)
        got = sorted(set(fed_physical_ids(ctx)))
        if got != want:
            bad[key] = {"kconvert": got, "vllm": want}
    assert not bad, (row.key, bad)
