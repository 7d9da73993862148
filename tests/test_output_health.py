"""Output health (kconvert/engines/output_health.py) against derivations written here and vLLM's own tail-repetition
check, on token sequences hypothesis builds with loops of known shape. Engine-free, about a second."""
from __future__ import annotations

import ast
import importlib.util
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kconvert.engines.output_health import MAX_CYCLE_LENGTH, MIN_LOOP_SHARE, summarize_health, tail_cycle, token_health

tokens = st.lists(st.integers(0, 5), max_size=40)  # a small alphabet, so that chance repeats happen


def brute_cycle(ids: list[int]) -> tuple[int | None, int]:
    """The definition read literally: for every period p, the most whole copies of the last p tokens the list ends
    in (compared as slices); the period whose copies cover the most tokens, the shortest among equals."""
    best: tuple[int | None, int] = (None, 0)
    for p in range(1, MAX_CYCLE_LENGTH + 1):
        r = 0
        while p * (r + 1) <= len(ids) and ids[len(ids) - p * (r + 1):] == ids[len(ids) - p:] * (r + 1):
            r += 1
        if r >= 2 and (best[0] is None or p * r > best[0] * best[1]):
            best = (p, r)
    return best


@given(tokens)
def test_the_tail_cycle_is_the_definitions(ids):
    assert tail_cycle(ids) == brute_cycle(ids)


@given(tokens)
def test_per_output_figures_follow_from_the_cycle_and_the_token_set(ids):
    h = token_health(ids)
    p, r = brute_cycle(ids)
    assert h["tokens"] == len(ids)
    assert h["distinct_share"] == (len(set(ids)) / len(ids) if ids else None)
    assert (h["cycle_length"], h["cycle_repeats"]) == (p, r)
    assert h["loop_share"] == (p * r / len(ids) if p else 0.0)
    assert h["degenerate"] == (p is not None and p * r >= MIN_LOOP_SHARE * len(ids))


@given(st.lists(st.integers(0, 9), max_size=12), st.lists(st.integers(10, 20), min_size=1, max_size=MAX_CYCLE_LENGTH,
                                                       unique=True),
       st.integers(2, 12))
def test_a_prefix_then_a_loop_is_found_with_its_period_and_repeats(prefix, unit, repeats):
    """An output built as text then `repeats` copies of a cycle of distinct tokens (none of them in the text):
    its cycle is that cycle, and it is degenerate exactly when the copies fill half of it."""
    ids = prefix + unit * repeats
    h = token_health(ids)
    assert (h["cycle_length"], h["cycle_repeats"]) == (len(unit), repeats)
    assert h["degenerate"] == (len(unit) * repeats * 2 >= len(ids))


def test_a_stop_token_after_the_loop_ends_no_cycle():
    """An output that ended by itself (its stop token last) did not loop to the length limit."""
    loop = [7, 8] * 20
    assert token_health(loop)["degenerate"]
    assert token_health(loop + [2]) == {"tokens": 41, "distinct_share": 3 / 41, "cycle_length": None,
                                        "cycle_repeats": 0, "loop_share": 0.0, "degenerate": False}


@given(st.lists(tokens, max_size=8))
def test_the_summary_counts_and_medians_the_per_prompt_figures(outputs):
    s = summarize_health(outputs)
    per = [token_health(o) for o in outputs]
    assert s["per_prompt"] == per and s["prompts"] == len(outputs)
    bad = sum(1 for o in outputs if brute_cycle(o)[0] is not None and
              brute_cycle(o)[0] * brute_cycle(o)[1] * 2 >= len(o))
    assert s["degenerate_prompts"] == bad
    assert s["degenerate_share"] == (bad / len(outputs) if outputs else None)
    shares = sorted(len(set(o)) / len(o) for o in outputs if o)
    assert s["median_distinct_share"] == (statistics.median(shares) if shares else None)


# ------------------------------------------------------------------------------------------ vLLM's own check


def _vllm_has_repeating_pattern():
    """`_has_repeating_pattern` of the installed vLLM (vllm/v1/core/sched/utils.py), read from its source file and
    compiled alone: importing vLLM costs tens of seconds, and the function is plain Python."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vllm is not installed (the `live` extra)")
    path = Path(list(spec.submodule_search_locations)[0]) / "v1" / "core" / "sched" / "utils.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "_has_repeating_pattern")
    scope: dict = {"Sequence": list}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), scope)
    return scope["_has_repeating_pattern"]


@pytest.fixture(scope="module")
def vllm_repeats():
    return _vllm_has_repeating_pattern()


@settings(max_examples=300)
@given(ids=tokens)
def test_the_cycle_is_what_vllms_repetition_detection_sees_at_the_tail(vllm_repeats, ids):
    """vLLM finds the last p tokens repeated m times at the tail exactly for the (p, m) the figures allow: the
    reported cycle repeats `cycle_repeats` times and not once more, and no period finds more tokens in a loop."""
    p, r = tail_cycle(ids)
    if p is not None:
        assert vllm_repeats(ids, p, r)
        assert p * (r + 1) > len(ids) or not vllm_repeats(ids, p, r + 1)
    for q in range(1, MAX_CYCLE_LENGTH + 1):
        for m in range(2, len(ids) // q + 1):
            if vllm_repeats(ids, q, m):
                assert p is not None and p * r >= q * m, (q, m, p, r)
