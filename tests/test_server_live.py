"""vLLM server mode: ``measure_vllm_server`` against a fake server (fast, no vLLM) and against a real
``vllm serve`` of the tiny factory pair (``@pytest.mark.live``; skipped without vLLM).

The live part starts one server for the module (start ~30-80 s on this 2-core machine), measures the smoke
prompt set, checks the figures against the server's own ``/metrics`` deltas, then stops the server and
checks that no process of it survives. ``KCONVERT_SAVE_SCRAPES=<dir>`` also writes the two scrapes there
(that is how ``tests/data/vllm_metrics_{before,after}.txt`` were recorded).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from kconvert.engines.live_messages import LiveRequest
from kconvert.runners.vllm_server import measure_vllm_server
from kconvert.errors import EngineError, UsageError
from kconvert.prompts import load_prompts
from tests.loopback import Loopback
from tests.oracles import by_hand, prom_delta
from tests.vllm_server import VllmServer, engine_args_to_cli

sys.path.insert(0, str(Path(__file__).parent))
import live_factories  # noqa: E402

HAS_VLLM = importlib.util.find_spec("vllm") is not None


# ------------------------------------------------------------------------------------------ fake server


class FakeVllm(Loopback):
    """Answers like vLLM 0.32: /version, /v1/models, /v1/completions, and /metrics from a list of texts
    (the last one repeats); every completion request's body is kept in ``bodies``."""

    def __init__(self, metrics: list[str], models=("tiny-target",), status: int = 200):
        self.metrics = list(metrics)
        self.models = list(models)
        self.status = status
        self.bodies: list[dict] = []
        # the generated ids of a request: a two-token loop for prompts that start with "loop", else all distinct
        self.token_ids = lambda body: ([7, 9] * body["max_tokens"])[:body["max_tokens"]] \
            if str(body.get("prompt", "")).startswith("loop") else list(range(100, 100 + body["max_tokens"]))
        super().__init__(self._answer)

    def _answer(self, method: str, path: str, body):
        if method == "POST":
            self.bodies.append(body)
            if self.status != 200:
                return self.status, {"error": {"message": "boom"}}
            choice = {"index": 0, "text": "ok", "finish_reason": "length"}
            if body.get("return_token_ids"):  # vLLM 0.32 completion/serving.py: the ids only when asked for
                choice["token_ids"] = self.token_ids(body)
            return 200, {"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": body["max_tokens"]}}
        if path == "/version":
            return 200, {"version": "0.32.0"}
        if path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}
        if path == "/metrics":
            text = self.metrics.pop(0) if len(self.metrics) > 1 else self.metrics[0]
            return 200, text, "text/plain; version=0.0.4"
        return 404, {"error": "not found"}


def _metrics(drafts, tokens, accepted, per_pos, finished, model="tiny-target"):
    lines = [
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{model}"}} {drafts}.0',
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{model}"}} {tokens}.0',
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{model}"}} {accepted}.0',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{model}",position="{i}"}} {v}.0'
              for i, v in enumerate(per_pos)]
    lines += ["# TYPE vllm:request_success_total counter",
              f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="{model}"}} {finished}.0']
    return "\n".join(lines) + "\n"


@pytest.fixture
def fake_factory():
    made = []

    def make(*a, **kw):
        made.append(FakeVllm(*a, **kw))
        return made[-1]

    yield make
    for f in made:
        f.close()


def test_measure_reports_the_difference_of_the_two_scrapes(fake_factory):
    fake = fake_factory([_metrics(10, 30, 12, [8, 3, 1], 2), _metrics(50, 150, 72, [35, 24, 13], 6)])
    res = measure_vllm_server(fake.url, ["a", "b", "c", "d"], max_tokens=16)
    assert res["counters"] == {"drafts": 40, "draft_tokens": 120, "accepted": 60, "accepted_per_pos": [27, 21, 12]}
    # by hand: AL = 1 + 60/40 = 2.5, rate = 60/120 = 0.5, per position 27/40, 21/40, 12/40
    acc = res["acceptance"]
    assert acc["mean_acceptance_length"] == 2.5 and acc["acceptance_rate"] == 0.5
    assert acc["per_position"] == pytest.approx([0.675, 0.525, 0.3])
    assert res["num_speculative_tokens"] == 3 and res["model"] == "tiny-target" and res["engine_version"] == "0.32.0"
    assert res["completion_tokens"] == 64 and res["requests_finished"] == 4 and res["warnings"] == []
    assert all(b["temperature"] == 0.0 and b["prompt"] in "abcd" for b in fake.bodies)


def test_measure_records_the_output_health_of_the_token_ids_the_server_returns(fake_factory):
    """Every request asks vLLM for its generated ids (return_token_ids), and their health is recorded: here two of
    four answers are a two-token loop over all their 16 tokens (cycle 2, 8 repeats); the others never repeat."""
    fake = fake_factory([_metrics(0, 0, 0, [0, 0, 0], 0), _metrics(8, 24, 12, [6, 4, 2], 4)])
    res = measure_vllm_server(fake.url, ["loop a", "b", "loop c", "d"], max_tokens=16)
    assert all(b["return_token_ids"] is True for b in fake.bodies)
    h = res["output_health"]
    assert (h["prompts"], h["degenerate_prompts"], h["degenerate_share"]) == (4, 2, 0.5)
    assert [(p["cycle_length"], p["cycle_repeats"], p["distinct_share"]) for p in h["per_prompt"]] == [
        (2, 8, 2 / 16), (None, 0, 1.0), (2, 8, 2 / 16), (None, 0, 1.0)]
    # a server that answers without ids (one older than the field): no figures, and a warning that says so
    old = fake_factory([_metrics(0, 0, 0, [0, 0, 0], 0), _metrics(2, 6, 3, [2, 1, 0], 1)])
    old.token_ids = lambda body: None
    res = measure_vllm_server(old.url, ["a"], max_tokens=4)
    assert res["output_health"] is None and any("no token ids" in w for w in res["warnings"])


def test_measure_sends_chat_messages_with_the_chat_api(fake_factory):
    fake = fake_factory([_metrics(0, 0, 0, [0, 0, 0], 0), _metrics(4, 12, 6, [3, 2, 1], 1)])
    measure_vllm_server(fake.url, ["hi"], api="chat", max_tokens=4)
    assert fake.bodies[0]["messages"] == [{"role": "user", "content": "hi"}]


def test_measure_warns_about_foreign_traffic_and_a_k_mismatch(fake_factory):
    fake = fake_factory([_metrics(0, 0, 0, [0, 0, 0], 0), _metrics(9, 27, 9, [9, 0, 0], 5)])
    res = measure_vllm_server(fake.url, ["one"], k=4)
    assert any("4 other request" in w for w in res["warnings"])
    assert any("k=4" in w for w in res["warnings"]) and res["acceptance"]["num_speculative_tokens"] == 4


def test_measure_refuses_a_server_without_a_draft(fake_factory):
    fake = fake_factory(['# TYPE vllm:request_success_total counter\nvllm:request_success_total{engine="0"} 0.0\n'])
    with pytest.raises(UsageError, match="without a draft"):
        measure_vllm_server(fake.url, ["x"])


def test_measure_needs_a_model_when_several_are_served(fake_factory):
    fake = fake_factory([_metrics(0, 0, 0, [0], 0)], models=("a", "b"))
    with pytest.raises(UsageError, match="pick one"):
        measure_vllm_server(fake.url, ["x"])
    with pytest.raises(UsageError, match="not served"):
        measure_vllm_server(fake.url, ["x"], model="c")


def test_measure_maps_server_errors_to_engine_errors(fake_factory):
    fake = fake_factory([_metrics(0, 0, 0, [0], 0)], status=500)
    with pytest.raises(EngineError, match="HTTP 500"):
        measure_vllm_server(fake.url, ["x"])


def test_measure_of_an_unreachable_server_is_an_engine_error():
    from tests.vllm_server import free_port

    with pytest.raises(EngineError, match="cannot reach"):
        measure_vllm_server(f"http://127.0.0.1:{free_port()}", ["x"], timeout=2)


def test_engine_args_become_vllm_serve_flags():
    flags = engine_args_to_cli({"model": "/t", "tensor_parallel_size": 2, "trust_remote_code": False,
                                "disable_log_stats": False, "enforce_eager": True,
                                "speculative_config": {"model": "/d", "method": "eagle3", "num_speculative_tokens": 3}})
    assert flags == ["--model", "/t", "--tensor-parallel-size", "2", "--enforce-eager", "--speculative-config",
                     '{"model": "/d", "method": "eagle3", "num_speculative_tokens": 3}']


def test_a_server_that_dies_at_start_is_an_engine_error(tmp_path):
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'ValueError: no such model' >&2\nexit 1\n")
    fake_python.chmod(0o755)
    server = VllmServer(LiveRequest(target=str(tmp_path / "missing"), timeout_s=30), python=str(fake_python),
                        log_path=tmp_path / "serve.log")
    with pytest.raises(EngineError, match="exit 1") as info:
        server.start()
    assert any("no such model" in ln for ln in info.value.last_lines)


# ------------------------------------------------------------------------------------------ live


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    if not HAS_VLLM:
        pytest.skip("vllm is not installed (the `live` extra)")
    root = tmp_path_factory.mktemp("serve")
    target, draft = live_factories.build_pair(root)
    req = LiveRequest(target=str(target), draft=str(draft), num_speculative_tokens=3, timeout_s=240)
    server = VllmServer(req, served_model_name="tiny-target", log_path=root / "serve.log")
    server.start()
    yield server
    server.stop()


@pytest.mark.live
@pytest.mark.timeout(300)
def test_live_server_figures_equal_the_metrics_deltas(live_server):
    import httpx

    _, prompts = load_prompts("_smoke")
    scrape = lambda: httpx.get(f"{live_server.url}/metrics", timeout=10).text  # noqa: E731
    first = scrape()
    res = measure_vllm_server(live_server.url, prompts, max_tokens=32, keep_metrics_text=True)
    last = scrape()
    c = res["counters"]
    assert c["drafts"] > 0 and c["draft_tokens"] > 0 and c["accepted"] > 0 and sum(c["accepted_per_pos"]) == c["accepted"]
    assert res["engine_version"] == "0.32.0" and res["models"] == ["tiny-target"] and res["warnings"] == []
    assert c["draft_tokens"] == 3 * c["drafts"] and res["num_speculative_tokens"] == 3
    # Nothing else ran: our own scrapes around the call, read by prometheus_client's parser, give the same
    # difference, and the figures are vLLM's definitions of those counters.
    independent = prom_delta(first, last, model="tiny-target")
    assert {k: independent[k] for k in c} == c
    assert independent["requests_finished"] == len(prompts)
    hand = by_hand(independent["drafts"], independent["draft_tokens"], independent["accepted"],
                   independent["accepted_per_pos"])
    for key in ("mean_acceptance_length", "acceptance_rate", "per_position"):
        assert res["acceptance"][key] == pytest.approx(hand[key]), key
    # the ids vLLM returned for return_token_ids are its generated tokens: as many as its usage counted, per answer
    h = res["output_health"]
    assert h is not None and h["prompts"] == len(prompts)
    assert sum(p["tokens"] for p in h["per_prompt"]) == res["completion_tokens"] > 0
    print(f"\nserver start {live_server.start_s:.1f} s; generate {res['timings']['generate_s']:.1f} s; "
          f"AL {res['acceptance']['mean_acceptance_length']:.3f}; counters {c}")
    save = os.environ.get("KCONVERT_SAVE_SCRAPES")
    if save:
        Path(save).mkdir(parents=True, exist_ok=True)
        Path(save, "vllm_metrics_before.txt").write_text(res["metrics_text"]["before"])
        Path(save, "vllm_metrics_after.txt").write_text(res["metrics_text"]["after"])


@pytest.mark.live
@pytest.mark.timeout(300)
def test_verify_server_cli_measures_the_running_server(live_server, capsys):
    """`kconvert verify --server URL` (no draft, no target: the deployment has both) in json and concise."""
    from kconvert.cli import main
    from kconvert.schemas import validate

    capsys.readouterr()
    argv = ["verify", "--server", live_server.url, "--prompts", "_smoke", "--max-tokens", "32", "-k", "3"]
    assert main(argv + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["server"] == live_server.url and doc["engine"] == "vllm" and doc["prompt_set"] == "_smoke"
    c = doc["counters"]
    assert c["drafts"] > 0 and sum(c["accepted_per_pos"]) == c["accepted"] and c["draft_tokens"] == 3 * c["drafts"]
    hand = by_hand(c["drafts"], c["draft_tokens"], c["accepted"], c["accepted_per_pos"])
    assert doc["acceptance"]["mean_acceptance_length"] == pytest.approx(hand["mean_acceptance_length"])
    assert main(argv + ["--output-format", "concise"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"server: vllm {live_server.url}, 8 prompts of '_smoke'")
    assert "mean_acceptance_length" in out[0]
    # formats that carry a checkpoint's findings are refused for a server, as a usage error
    assert main(argv + ["--output-format", "sarif"]) == 2
    err = capsys.readouterr()
    validate_sarif = json.loads(err.out)
    assert validate_sarif["runs"][0]["invocations"][0]["executionSuccessful"] is False
    assert "--server" in err.err
    del validate


@pytest.mark.live
@pytest.mark.timeout(300)
def test_verify_server_from_the_core_install_measures_the_running_server(live_server):
    """`kconvert verify --server` run by the core venv's python (scripts/test.sh: `pip install .`, no vLLM, no
    torch) against the same live `vllm serve` (no new engine start): its counters equal our own /metrics
    difference around the call. Issue #19: a core install exited 70 here (httpx was not declared)."""
    import subprocess

    import httpx

    core_python = os.environ.get("KCONVERT_CORE_PYTHON")
    if not core_python:
        pytest.skip("KCONVERT_CORE_PYTHON is not set (scripts/test.sh sets it to the core tier's venv)")
    scrape = lambda: httpx.get(f"{live_server.url}/metrics", timeout=10).text  # noqa: E731
    first = scrape()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed copy, not the tree
    r = subprocess.run([core_python, "-m", "kconvert", "verify", "--server", live_server.url, "--prompts", "_smoke",
                        "--max-tokens", "16", "-k", "3", "--json"], capture_output=True, text=True, env=env,
                       cwd="/", timeout=240)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    independent = prom_delta(first, scrape(), model="tiny-target")  # prometheus_client, not kconvert
    c = doc["counters"]
    assert c["drafts"] > 0 and {k: independent[k] for k in c} == c
    assert independent["requests_finished"] == doc["num_prompts"] == 8


@pytest.mark.live
@pytest.mark.timeout(120)
def test_live_server_stop_leaves_no_process(live_server):
    import psutil

    pids = live_server.pids()
    assert len(pids) >= 2  # the API server and its EngineCore at least
    live_server.stop()
    alive = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append((pid, p.name()))
        except psutil.NoSuchProcess:
            pass
    assert alive == []
