"""`kconvert verify --server` as a user runs it, in a child process, against a loopback stand-in that replays
recorded server answers (tests/data, each recording's source in tests/data/README.md):

- vLLM: the two real `/metrics` scrapes of `vllm_metrics_{before,after}.txt` around the 8 `_smoke` prompts;
  the expected counters are the scrapes' own deltas as prometheus_client's parser reads them, and the figures
  vLLM's definitions written out (tests/oracles.py), not kconvert's summary.
- tokenspeed: two `/metrics` scrapes written by tokenspeed 0.1.1's own metrics and exposition code
  (`tokenspeed_oracle.json` metrics.scrapes); the expected counters are derived in the test from the verify steps
  the recording lists.
- SGLang: `sglang_server_info_eagle3.json` for `/get_server_info` and the three `/generate` answers of
  `sglang_generate_eagle3.json` (constructed) or of `sglang_generate_0_5_23.json` (speculative keys written by
  SGLang 0.5.23's own code); the expected figures are derived in the test from the answers' own `meta_info`
  (SGLang's accept_length = sum(completion_tokens) / sum(spec_verify_ct), tokenizer_manager.py).

The child is `sys.executable -m kconvert`, so in the core tier (scripts/test.sh, a venv with `pip install .` and
no vLLM or torch) this proves that `verify --server` runs on what kconvert declares: issue #19 found it exiting 70
("ModuleNotFoundError: httpx") there while the main venv passed because vLLM brought httpx in.
Cost: ~1-2 s per child process.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.loopback import Loopback
from tests.oracles import by_hand, prom_delta

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def _load(name: str):
    return json.loads((DATA / name).read_text())


class StandIn(Loopback):
    """A loopback HTTP server answering GET/POST paths from recorded bodies. ``metrics`` is a list of texts
    served in turn (the last repeats); ``generate`` a list of `/generate` answers served in turn, then again
    from the first."""

    def __init__(self, *, get: dict[str, object], metrics: list[str] | None = None,
                 generate: list[dict] | None = None, completion: dict | None = None):
        state = {"metrics": list(metrics or []), "generate": list(generate or []), "posts": []}
        self.state = state
        lock = threading.Lock()

        def answer(method: str, path: str, body):
            if method == "GET":
                if path == "/metrics" and state["metrics"]:
                    with lock:
                        text = state["metrics"].pop(0) if len(state["metrics"]) > 1 else state["metrics"][0]
                    return 200, text, "text/plain; version=0.0.4"
                return (200, get[path]) if path in get else (404, {"detail": "Not Found"})
            with lock:
                state["posts"].append((path, body))
                n = sum(1 for p, _ in state["posts"] if p == "/generate") - 1
                reply = state["generate"][n % len(state["generate"])] if state["generate"] else None
            if path == "/generate" and reply is not None:
                return 200, reply
            if path == "/v1/completions" and completion is not None:
                return 200, completion
            return 404, {"detail": "Not Found"}

        super().__init__(answer)


def run_kconvert(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    core = os.environ.get("KCONVERT_CORE_TIER") == "1"
    # the main tier runs the source tree's kconvert; the core tier the installed copy (pip install .)
    if core:
        env.pop("PYTHONPATH", None)
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd="/" if core else str(ROOT))


@pytest.fixture
def vllm_standin():
    before, after = (DATA / "vllm_metrics_before.txt").read_text(), (DATA / "vllm_metrics_after.txt").read_text()
    counters = prom_delta(before, after, model="tiny-target")
    finished = counters.pop("requests_finished")
    # what the recorded run was (tests/data/README.md): vLLM 0.32.0 serving "tiny-target", 8 _smoke prompts, 32 tokens
    expected = {"engine_version": "0.32.0", "model": "tiny-target", "max_tokens": 32, "num_prompts": 8,
                "counters": counters, "requests_finished": finished,
                "hand": by_hand(counters["drafts"], counters["draft_tokens"], counters["accepted"],
                                counters["accepted_per_pos"])}
    s = StandIn(get={"/version": {"version": expected["engine_version"]},
                     "/v1/models": {"object": "list", "data": [{"id": expected["model"], "object": "model"}]}},
                metrics=[before, after],
                # completion bodies were not recorded; verify --server takes its figures from /metrics only
                # kconvert asks for return_token_ids, which vLLM 0.32 answers with the generated ids
                # (vllm/entrypoints/openai/completion/serving.py); 32 distinct ids: an output that did not loop
                completion={"choices": [{"index": 0, "text": "", "finish_reason": "length",
                                         "token_ids": list(range(expected["max_tokens"]))}],
                            "usage": {"prompt_tokens": 0, "completion_tokens": expected["max_tokens"]}})
    yield s, expected
    s.close()


def _sglang_0_5_23_server_info() -> dict:
    # the fields SGLang 0.5.23's own launcher resolved from the launch line kconvert prints
    # (tests/data/sglang_oracle.json launch_lines; build_server_info) and its version; no scheduler ran
    rec = _load("sglang_oracle.json")["launch_lines"][0]
    return {**rec["server_info"], "version": "0.5.23", "internal_states": []}


@pytest.fixture(params=["older", "0.5.23"])
def sglang_standin(request):
    if request.param == "older":  # constructed bodies, /get_server_info only
        answers = _load("sglang_generate_eagle3.json")
        s = StandIn(get={"/get_server_info": _load("sglang_server_info_eagle3.json")}, generate=answers)
    else:  # speculative keys written by SGLang 0.5.23's code (tests/sglang_oracle/record.py), /server_info
        answers = _load("sglang_generate_0_5_23.json")
        s = StandIn(get={"/server_info": _sglang_0_5_23_server_info()}, generate=answers)
    yield s, answers, request.param
    s.close()


def test_core_tier_has_no_engine_installed():
    """The core tier is only worth its time if vLLM and torch are really absent from it."""
    if os.environ.get("KCONVERT_CORE_TIER") != "1":
        pytest.skip("main tier: vLLM and torch are installed on purpose")
    assert importlib.util.find_spec("vllm") is None and importlib.util.find_spec("torch") is None
    # the children run the installed copy (pip install .), not the source tree the tests import
    r = subprocess.run([sys.executable, "-c", "import kconvert; print(kconvert.__file__)"], capture_output=True,
                       text=True, cwd="/", env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert "site-packages" in r.stdout, r.stdout + r.stderr


def test_verify_server_on_a_vllm_standin_reports_the_recorded_counters(vllm_standin):
    s, expected = vllm_standin
    r = run_kconvert("verify", "--server", s.url, "--engine", "vllm", "--prompts", "_smoke",
                     "--max-tokens", str(expected["max_tokens"]), "-k", "3", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["counters"] == expected["counters"]
    hand, acc = expected["hand"], doc["acceptance"]
    assert acc["acceptance_rate"] == pytest.approx(hand["acceptance_rate"])
    assert acc["mean_acceptance_length"] == pytest.approx(hand["mean_acceptance_length"])
    assert acc["per_position"] == pytest.approx(hand["per_position"])
    assert doc["engine_version"] == "0.32.0" and doc["num_prompts"] == expected["num_prompts"] == 8
    assert [p for p, _ in s.state["posts"]] == ["/v1/completions"] * 8
    assert doc["requests_finished"] == expected["requests_finished"] == 8 and doc["warnings"] == []  # the recorded scrapes count 8 finished requests
    assert doc["output_health"]["prompts"] == 8 and doc["output_health"]["degenerate_prompts"] == 0


def test_verify_server_on_an_sglang_standin_reports_accept_length_beside_vllms_convention(sglang_standin):
    s, answers, which = sglang_standin
    metas = [a["meta_info"] for a in answers]
    completion = sum(m["completion_tokens"] for m in metas)
    verify_steps = sum(m.get("spec_verify_ct", 0) for m in metas)  # 0.5.23 writes none without a verify step
    accepted = sum(m.get("spec_accept_token_num", m.get("spec_num_correct_drafts", 0)) for m in metas)
    r = run_kconvert("verify", "--server", s.url, "--engine", "sglang", "--prompts", "_smoke", "--max-prompts", "3",
                     "-k", "3", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["engine"] == "sglang" and doc["api"] == "/generate"
    assert doc["engine_version"] == {"older": "0.5.6", "0.5.23": "0.5.23"}[which]
    if which == "0.5.23":  # its histogram gives vLLM's per-position counts, which sum to the accepted tokens
        assert sum(doc["counters"]["accepted_per_pos"]) == accepted and doc["server"]["speculative_num_steps"] == 3
    assert doc["accept_length"] == pytest.approx(completion / verify_steps)
    assert doc["acceptance"]["sglang_accept_length"] == pytest.approx(completion / verify_steps)
    assert doc["acceptance"]["mean_acceptance_length"] == pytest.approx(1 + accepted / verify_steps)
    assert all(body["sampling_params"]["temperature"] == 0.0 for _, body in s.state["posts"])
    r = run_kconvert("verify", "--server", s.url, "--engine", "sglang", "--prompts", "_smoke", "--max-prompts", "3",
                     "--output-format", "concise")
    assert r.returncode == 0, r.stderr
    assert "sglang_accept_length" in r.stdout and "mean_acceptance_length" in r.stdout


@pytest.fixture
def tokenspeed_standin():
    """Two /metrics scrapes written by tokenspeed 0.1.1's own code (tests/tokenspeed_oracle/record.py: its
    EngineMetrics fed through OutputProcesser._aggregate_spec_decode_step, exposed by add_prometheus_middleware),
    around the verify steps the recording lists; the OpenAI routes its gateway serves (/v1/models,
    /v1/completions); no /version."""
    m = _load("tokenspeed_oracle.json")["metrics"]
    before, after = m["scrapes"]
    steps = m["steps"][before["after_steps"]:after["after_steps"]]
    lengths = [n for st in steps for n in st["output_lengths"]]
    k = m["speculative_num_draft_tokens"] - 1
    # tokenspeed's counters between the two scrapes, derived from the steps: one draft per decode slot, k draft
    # tokens each, the accepted ones without the bonus token (output length - 1)
    expected = {"model": m["labels"]["model_name"], "k": k, "drafts": len(lengths), "draft_tokens": k * len(lengths),
                "accepted": sum(n - 1 for n in lengths), "tokens_per_step": sum(lengths) / len(lengths)}
    s = StandIn(get={"/v1/models": {"object": "list", "data": [{"id": expected["model"], "object": "model"}]}},
                metrics=[before["text"], after["text"]],
                completion={"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                            "usage": {"prompt_tokens": 0, "completion_tokens": 8}})
    yield s, expected
    s.close()


def test_verify_server_on_a_tokenspeed_standin_reads_its_counters_in_vllms_convention(tokenspeed_standin):
    s, expected = tokenspeed_standin
    r = run_kconvert("verify", "--server", s.url, "--engine", "tokenspeed", "--prompts", "_smoke",
                     "--max-prompts", "2", "-k", str(expected["k"]), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["engine"] == "tokenspeed" and doc["model"] == expected["model"]
    c = doc["counters"]
    assert (c["drafts"], c["draft_tokens"], c["accepted"]) == (expected["drafts"], expected["draft_tokens"],
                                                               expected["accepted"])
    acc = doc["acceptance"]
    # tokenspeed's own acc_len (engine/request_stats.py): tokens per verify step, bonus included
    assert acc["mean_acceptance_length"] == pytest.approx(expected["tokens_per_step"])
    assert acc["acceptance_rate"] == pytest.approx(expected["accepted"] / expected["draft_tokens"])
    assert [p for p, _ in s.state["posts"]] == ["/v1/completions"] * 2


def test_verify_server_on_nothing_listening_is_an_engine_error():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    r = run_kconvert("verify", "--server", f"http://127.0.0.1:{port}", "--engine", "sglang", "--prompts", "_smoke",
                     "--max-prompts", "1")
    assert r.returncode == 3, r.stderr
    assert "cannot reach" in r.stderr
