"""Which vLLM model runner a verify run measures, and what the static checks say under the other runner's row.

vLLM picks its runner in config/vllm.py use_v2_model_runner (0.32.0 and 0.33.0; 0.34.0 has Model Runner V2 only): the
CPU build has no Triton backend and runs Model Runner V1; elsewhere VLLM_USE_V2_MODEL_RUNNER decides when set, else a feature V2 lacks
(_get_v2_model_runner_unsupported_features: "parallel drafting for EAGLE speculative decoding", P-EAGLE) forces
V1, else V2. The two runners read a draft's aux ids from different keys (kconvert/engines/expectations.py), so a
verdict measured on one can differ on the other; the report says which one was measured and what differs."""
from __future__ import annotations

import os
from typing import Any, Mapping

from kconvert.engines.expectations import EngineRules, other_runner, runner_asked
from kconvert.engines.installed import detect_platform


def measured_runner(row: EngineRules, *, parallel_drafting: bool = False,
                    environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The runner vLLM runs here for `row`, and why (config/vllm.py use_v2_model_runner)."""
    env = os.environ if environ is None else environ
    if row.release_runners and "v1" not in row.release_runners:
        # vLLM 0.34 removed Model Runner V1 (learned: platforms/interface.py validate_environ refuses
        # VLLM_USE_V2_MODEL_RUNNER=0); its CPU runner subclasses V2
        why = f"vLLM {row.version} has Model Runner V2 only (V1 was removed)"
        if runner_asked(env) == "v1":
            why += f"; VLLM_USE_V2_MODEL_RUNNER={env['VLLM_USE_V2_MODEL_RUNNER'].strip()} set here makes it refuse to " \
                   f"start: {row.v1_refused}"
        return "v2", why
    if detect_platform(env) == "cpu":
        return "v1", "vLLM's CPU build runs Model Runner V1 (no Triton backend)"
    asked = runner_asked(env)
    if asked:
        return asked, f"VLLM_USE_V2_MODEL_RUNNER={env['VLLM_USE_V2_MODEL_RUNNER'].strip()}"
    if parallel_drafting:
        return "v1", "parallel drafting (P-EAGLE) is a feature Model Runner V2 lacks"
    return (row.runner or "v2"), f"the {row.engine} {row.version} row's runner"


def _keys(res: Any) -> dict[tuple[str, str], str]:
    return {(f.id, f.severity): f.message for f in res.findings}


def runner_block(row: EngineRules, res: Any, other_res: Any | None, *, parallel_drafting: bool = False,
                 environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The report's `runner`: the row's runner, the one measured and why, and the findings (id, severity) present
    under one runner's row and not the other's (None for engines without model runners)."""
    if row.runner is None:
        return None
    measured, why = measured_runner(row, parallel_drafting=parallel_drafting, environ=environ)
    other = other_runner(row)
    block: dict[str, Any] = {"row": row.runner, "measured": measured, "why": why,
                             "other_row": f"{other.engine} {other.version}" if other else None,
                             "differs": []}
    if other is None or other_res is None:
        return block
    mine, theirs = _keys(res), _keys(other_res)
    for key in sorted(set(mine) - set(theirs)):
        block["differs"].append({"id": key[0], "severity": key[1], "only_under": row.runner, "message": mine[key]})
    for key in sorted(set(theirs) - set(mine)):
        block["differs"].append({"id": key[0], "severity": key[1], "only_under": other.runner,
                                 "message": theirs[key]})
    return block
