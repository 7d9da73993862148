"""SGLang server mode, offline: SGLang is not run here (it needs a GPU).

The bodies under tests/data/sglang_*.json are written in the shape SGLang's tokenizer manager produces
(sources in tests/data/README.md); ``measure_sglang_server`` is exercised against a small fake server that
answers ``/get_server_info`` and ``/generate`` with them.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kconvert.runners.sglang_server import (
    measure_sglang_server,
    output_health,
    meta_infos,
    num_speculative_tokens,
    parse_server_info,
    summarize_sglang,
)
from kconvert.errors import EngineError, InputError, UsageError
from kconvert.engines.acceptance import summarize
from tests.loopback import Loopback

DATA = Path(__file__).parent / "data"


def load(name):
    return json.loads((DATA / name).read_text())


def test_generate_batch_answers_give_sglang_accept_length_and_vllm_style_counters():
    server = parse_server_info(load("sglang_server_info_eagle3.json"))
    res = summarize_sglang(meta_infos(load("sglang_generate_eagle3.json")), server=server)
    assert res["num_requests"] == 3 and res["completion_tokens"] == 105 and res["spec_verify_ct"] == 36
    assert res["accept_length"] == pytest.approx(105 / 36)
    assert res["num_speculative_tokens"] == 3
    assert res["counters"] == {"drafts": 36, "draft_tokens": 108, "accepted": 66, "accepted_per_pos": []}
    acc = res["acceptance"]
    assert acc["acceptance_rate"] == pytest.approx(66 / 108)
    assert acc["mean_acceptance_length"] == pytest.approx(1 + 66 / 36)
    assert acc["per_position"] == [] and acc["num_speculative_tokens"] == 3  # SGLang reports no per-position counts
    # SGLang's own figure beside vLLM's: completion tokens / verify steps (tokenizer_manager.py), not 1 + 66/36
    assert acc["sglang_accept_length"] == pytest.approx(105 / 36) == res["accept_length"]


def test_accept_length_counts_the_prefill_token_so_it_exceeds_vllms_by_one_per_request():
    res = summarize_sglang(meta_infos(load("sglang_generate_eagle3.json")))
    assert res["accept_length"] * res["spec_verify_ct"] == pytest.approx(
        res["acceptance"]["mean_acceptance_length"] * res["spec_verify_ct"] + res["num_requests"])


def test_per_request_figures_match_sglangs_own_fields():
    for meta in meta_infos(load("sglang_generate_eagle3.json")):
        if meta["spec_verify_ct"]:
            one = summarize_sglang([meta], server={"speculative_num_draft_tokens": 4})
            assert one["accept_length"] == pytest.approx(meta["spec_accept_length"])
            assert one["acceptance"]["acceptance_rate"] == pytest.approx(meta["spec_accept_rate"])


def test_older_sglang_with_verify_count_only_gives_accept_length_but_no_counters():
    res = summarize_sglang(meta_infos(load("sglang_generate_verify_ct_only.json")))
    assert res["accept_length"] == pytest.approx(48 / 15)
    assert res["counters"] is None
    # SGLang's accept_length is reported; vLLM's convention needs the accepted count this version does not send
    assert res["acceptance"] == {"sglang_accept_length": pytest.approx(48 / 15), "mean_acceptance_length": None,
                                 "num_speculative_tokens": None}


def test_openai_answers_with_meta_info_in_their_choices_are_read():
    res = summarize_sglang(meta_infos(load("sglang_openai_chat_with_meta_info.json")), server={"speculative_num_steps": 3})
    assert res["accept_length"] == 3.0 and res["counters"]["accepted"] == 19
    assert res["acceptance"] == {**summarize(10, 30, 19, None, None), "num_speculative_tokens": 3,
                                 "sglang_accept_length": 3.0}


def test_openai_answers_without_meta_info_are_refused():
    body = load("sglang_openai_chat_with_meta_info.json")
    del body["choices"][0]["meta_info"]
    with pytest.raises(InputError, match="use /generate"):
        meta_infos(body)


def test_answers_of_a_server_without_speculative_decoding_are_refused():
    meta = {"id": "x", "prompt_tokens": 3, "completion_tokens": 8, "cached_tokens": 0}
    with pytest.raises(InputError, match="without speculative decoding"):
        summarize_sglang([meta])


@pytest.mark.parametrize("body, fragment", [
    ("text", "expected a JSON object"),
    ({"text": "no meta"}, "no meta_info"),
])
def test_bodies_that_are_not_sglang_answers_are_refused(body, fragment):
    with pytest.raises(InputError, match=fragment):
        meta_infos(body)


def test_a_count_that_is_not_a_count_is_refused():
    with pytest.raises(InputError, match="spec_verify_ct"):
        summarize_sglang([{"completion_tokens": 5, "spec_verify_ct": -1}])


def test_server_info_keeps_the_speculative_settings_and_the_servers_running_average():
    info = parse_server_info(load("sglang_server_info_eagle3.json"))
    assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_steps"] == 3
    assert info["speculative_eagle_topk"] == 1 and info["speculative_num_draft_tokens"] == 4
    assert info["speculative_draft_model_path"] == "AQ-MedAI/Kimi-K25-eagle3" and info["tp_size"] == 8
    assert info["avg_spec_accept_length"] == [2.93] and info["version"] == "0.5.6"
    assert "mem_fraction_static" not in info
    assert num_speculative_tokens(info) == 3


# ------------------------------------------------------------------------------------------ fake server


@pytest.fixture
def fake_sglang():
    answers = load("sglang_generate_eagle3.json")
    state = {"info": load("sglang_server_info_eagle3.json"), "bodies": [], "status": 200}

    def answer(method: str, path: str, body):
        if method == "GET":
            return (200, state["info"]) if path == "/get_server_info" else (404, {})
        state["bodies"].append(body)
        if state["status"] != 200:
            return state["status"], {"error": "boom"}
        return 200, answers[int(body["text"])]

    with Loopback(answer) as server:
        state["url"] = server.url
        yield state


def test_measure_sglang_server_sends_greedy_generate_requests_and_summarizes(fake_sglang):
    res = measure_sglang_server(fake_sglang["url"], ["0", "1", "2"], max_tokens=64)
    assert res["accept_length"] == pytest.approx(105 / 36) and res["engine_version"] == "0.5.6"
    assert res["api"] == "/generate" and res["server"]["speculative_algorithm"] == "EAGLE3"
    assert res["output_texts"][2] == "Paris."
    assert all(b["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 64} for b in fake_sglang["bodies"])


def test_measure_sglang_server_records_the_output_health_of_the_output_ids(fake_sglang):
    """SGLang 0.5.23 puts a finished request's generated ids in `output_ids` (tokenizer_manager.py
    _handle_batch_output); ids that are not all of its completion tokens are not its output, so no figures."""
    res = measure_sglang_server(fake_sglang["url"], ["0", "1", "2"], max_tokens=64)
    assert res["output_health"] is None  # these hand-written answers carry "output_ids": [] beside 64, 40, 1 tokens
    answers = load("sglang_generate_eagle3.json")
    loops = [[5, 6, 7] * 30, list(range(40)), [3]]
    for a, ids in zip(answers, loops):
        a["output_ids"] = ids[:a["meta_info"]["completion_tokens"]]
    h = output_health(answers)
    assert (h["prompts"], h["degenerate_prompts"]) == (3, 1)
    assert [(x["tokens"], x["cycle_length"], x["cycle_repeats"]) for x in h["per_prompt"]] == [
        (64, 3, 21), (40, None, 0), (1, None, 0)]


def test_measure_sglang_server_refuses_a_server_without_a_draft(fake_sglang):
    fake_sglang["info"] = {**fake_sglang["info"], "speculative_algorithm": None}
    with pytest.raises(UsageError, match="without speculative decoding"):
        measure_sglang_server(fake_sglang["url"], ["0"])


def test_measure_sglang_server_maps_a_server_error_to_an_engine_error(fake_sglang):
    fake_sglang["status"] = 500
    with pytest.raises(EngineError, match="HTTP 500"):
        measure_sglang_server(fake_sglang["url"], ["0"])


def test_sglang_0_5_23_answers_give_both_conventions_and_per_position_counts_from_its_histogram():
    # The speculative keys of these answers were written by SGLang 0.5.23's own
    # TokenizerManager._calculate_spec_decoding_metrics (tests/sglang_oracle/record.py); the scheduler counts it
    # was fed sit beside them in tests/data/sglang_oracle.json. Expected figures are derived here from those counts.
    rec = load("sglang_oracle.json")["meta_info"]["requests"]
    counts = [r["scheduler_counts"] for r in rec]
    res = summarize_sglang(meta_infos(load("sglang_generate_0_5_23.json")),
                           server={"speculative_num_steps": 3, "speculative_eagle_topk": 1,
                                   "speculative_num_draft_tokens": 4})
    completion = sum(c["completion_tokens"] for c in counts)
    steps = sum(c["spec_verify_ct"] for c in counts)
    accepted = sum(c["spec_num_correct_drafts"] for c in counts)
    assert res["accept_length"] == pytest.approx(completion / steps)
    assert res["acceptance"]["sglang_accept_length"] == pytest.approx(completion / steps)
    assert res["acceptance"]["mean_acceptance_length"] == pytest.approx(1 + accepted / steps)
    # the histograms counted verify steps by accepted drafts j; position i was accepted in the steps with j > i
    hist = [sum(c["spec_correct_drafts_histogram"][j] if j < len(c["spec_correct_drafts_histogram"]) else 0
                for c in counts) for j in range(4)]
    want = [sum(hist[i + 1:]) for i in range(3)]
    assert res["counters"] == {"drafts": steps, "draft_tokens": steps * 3, "accepted": accepted,
                               "accepted_per_pos": want}
    assert res["acceptance"]["per_position"] == pytest.approx([w / steps for w in want])
    # the third request finished at the prefill: SGLang 0.5.23 wrote no speculative key for it, and it counts
    assert rec[2]["meta_info_added"] == {} and res["num_requests"] == 3
