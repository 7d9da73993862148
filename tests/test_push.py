"""`kconvert push`: the gate binding a folder to a passing verify report, the model card, and the one commit.

The Hub is out of reach from the test machine, so the commit tests run against `FakeHub`, a small HTTP server on
127.0.0.1 that stands in for the Hub: it answers the endpoints huggingface_hub 2.4 calls for create_repo,
create_branch, create_commit (validate-yaml, preupload, commit) and, with HF_HUB_DISABLE_XET=1, the LFS path every
real draft's weights take (batch API, upload to the storage, verify), keeps the uploaded bytes, and records every
request for the assertions.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np
import pytest
from huggingface_hub import ModelCard, metadata_load

from kconvert.errors import GateError, InputError
from kconvert.commands.push import push
from kconvert.hub.card import END, START, render_card
from kconvert.engines.acceptance import summarize
from kconvert.report.markdown import render_markdown_section
from kconvert.schemas import validate
from kconvert.source.checkpoint import sha256_file
from tests.factories import make_draft
from tests.oracles import seed

ROOT = Path(__file__).resolve().parent.parent
REPO = "my-org/kimi-eagle3"
# Kimi-K2.5 + AQ-MedAI draft on vLLM, k=4, GSM8K: the seed scrape's counters (tests/data, read by tests/oracles.py).
COUNTERS = seed()


# ---------------------------------------------------------------- factories

def make_checkpoint(folder: Path, *, shards: int = 1, provenance: bool = True,
                    tensors: Callable[[dict], None] | None = None) -> Path:
    make_draft(folder, "specforge", shards=shards, tensors=tensors)
    if provenance:
        (folder / "kconvert.json").write_text(json.dumps({
            "tool": "kconvert", "version": "0.1.0",
            "input": {"source": "AQ-MedAI/Kimi-K25-eagle3", "revision": "main", "commit": "a" * 40,
                      "producer": "specforge",
                      "files": {"model.safetensors": {"size": 1, "sha256": "b" * 64}}},
            "ops": [{"kind": "set-config", "path": "eagle_config.eagle_aux_hidden_state_layer_ids",
                     "value": [2, 4, 5], "reason": "SGLang output ids → vLLM input ids"}],
            "output": {"files": {}}, "findings_fixed": ["K301"], "findings_left": [],
            "aux_ids": {"written": [2, 4, 5], "physical": [1, 3, 4], "engine": "vllm"},
        }))
    return folder


def make_report(folder: Path, *, verdict: str = "pass", command: str = "verify", k: int = 4,
                extra_files: dict[str, str] | None = None) -> dict:
    """A verify report of `folder` shaped like kconvert.results.document.build_report's, with a live section."""
    files = []
    for p in sorted(folder.iterdir()):
        if p.is_file():
            files.append({"name": p.name, "size": p.stat().st_size, "sha256": sha256_file(p)})
    for name, sha in (extra_files or {}).items():
        files.append({"name": name, "size": 10, "sha256": sha})
    acc = summarize(COUNTERS["drafts"], COUNTERS["draft_tokens"], COUNTERS["accepted"],
                    COUNTERS["accepted_per_pos"], k)
    doc = {
        "schema_version": 1, "tool": {"name": "kconvert", "version": "0.1.0"}, "command": command,
        "created": "2026-01-01T00:00:00+00:00",
        "subject": {"source": str(folder), "kind": "local", "repo_id": None, "revision": None, "commit": None,
                    "files": files},
        "format": {"producer": "specforge", "confidence": 1.0, "evidence": ["eagle_config"]},
        "draft": {"layer_family": "llama"},
        "target": {"name": "kimi-k2.5", "origin": "profile", "num_hidden_layers": 61},
        "engine": {"name": "vllm", "rules_version": "0.32", "installed_version": "0.32.0"},
        "findings": [], "summary": {"errors": 0, "warnings": 0, "info": 0, "fixable": 0},
        "live": {"engine": "vllm", "engine_version": "0.32.0", "target": "moonshotai/Kimi-K2.5",
                 "prompt_set": "math", "num_prompts": 40, "max_tokens": 64, "num_speculative_tokens": k, "tp": 8,
                 "engine_args": {"trust_remote_code": True}, "counters": dict(COUNTERS), "acceptance": acc,
                 "lossless": {"identical": True, "requests": 40, "tokens_compared": 2560, "first_difference": None}},
        "thresholds": {"min_acceptance_length": 2.5, "min_acceptance_rate": 0.4, "min_per_position": [],
                       "expected": None, "source": "flags", "notes": [],
                       "checks": [{"name": "min_acceptance_length", "passed": True, "observed": acc[
                           "mean_acceptance_length"], "required": 2.5,
                           "message": "mean acceptance length 3.071 >= 2.500"}]},
        "verdict": verdict, "exit_code": 0 if verdict == "pass" else 1,
    }
    validate(doc, "report")
    return doc


def write_report(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def ckpt(tmp_path: Path) -> tuple[Path, Path]:
    folder = make_checkpoint(tmp_path / "draft")
    return folder, write_report(tmp_path / "verify.json", make_report(folder))


# ---------------------------------------------------------------- the gate

def test_passing_report_of_this_folder_opens_the_gate(ckpt):
    folder, report = ckpt
    res = push(folder, REPO, report=report, dry_run=True)
    names = {f.name: f for f in res.files}
    assert set(names) == {"config.json", "model.safetensors", "kconvert.json"}
    assert names["model.safetensors"].bound and names["config.json"].bound
    assert not names["kconvert.json"].bound
    assert names["model.safetensors"].sha256 == sha256_file(folder / "model.safetensors")


def test_failed_verdict_is_refused(tmp_path):
    folder = make_checkpoint(tmp_path / "d")
    report = write_report(tmp_path / "r.json", make_report(folder, verdict="fail"))
    with pytest.raises(GateError, match="verdict is 'fail'"):
        push(folder, REPO, report=report, dry_run=True)


def test_report_of_another_command_is_refused(tmp_path):
    folder = make_checkpoint(tmp_path / "d")
    report = write_report(tmp_path / "r.json", make_report(folder, command="inspect"))
    with pytest.raises(GateError, match="not `kconvert verify`"):
        push(folder, REPO, report=report, dry_run=True)


def test_tampered_weight_file_is_named(ckpt):
    folder, report = ckpt
    p = folder / "model.safetensors"
    data = bytearray(p.read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes: only the hash can tell
    p.write_bytes(bytes(data))
    with pytest.raises(GateError, match=r"^model\.safetensors: sha256 .*changed after verify"):
        push(folder, REPO, report=report, dry_run=True)


def test_tampered_config_is_named(ckpt):
    folder, report = ckpt
    cfg = json.loads((folder / "config.json").read_text())
    cfg["num_hidden_layers"] = 2
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(GateError, match=r"^config\.json: "):
        push(folder, REPO, report=report, dry_run=True)


def test_missing_shard_is_named(tmp_path):
    folder = make_checkpoint(tmp_path / "d", shards=2)
    report = write_report(tmp_path / "r.json", make_report(folder))
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(GateError, match=r"^model-00002-of-00002\.safetensors: in the report but missing"):
        push(folder, REPO, report=report, dry_run=True)


def test_tokenizer_listed_in_the_report_is_bound(tmp_path):
    folder = make_checkpoint(tmp_path / "d")
    (folder / "tokenizer_config.json").write_text("{}")
    report = write_report(tmp_path / "r.json", make_report(folder))
    (folder / "tokenizer_config.json").write_text('{"chat_template": "changed"}')
    with pytest.raises(GateError, match=r"^tokenizer_config\.json: "):
        push(folder, REPO, report=report, dry_run=True)


def test_missing_report_is_an_input_error(ckpt, tmp_path):
    folder, _ = ckpt
    with pytest.raises(InputError, match="no such report"):
        push(folder, REPO, report=tmp_path / "nope.json", dry_run=True)


def test_invalid_report_is_an_input_error(ckpt, tmp_path):
    folder, _ = ckpt
    bad = tmp_path / "bad.json"
    bad.write_text('{"command": "verify"}')
    with pytest.raises(InputError, match="required property"):
        push(folder, REPO, report=bad, dry_run=True)
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        push(folder, REPO, report=bad, dry_run=True)


def test_report_of_another_checkpoint_is_refused(tmp_path):
    a = make_checkpoint(tmp_path / "a")
    b = make_checkpoint(tmp_path / "b", shards=2)
    report = write_report(tmp_path / "r.json", make_report(a))
    with pytest.raises(GateError, match="missing from|another checkpoint"):
        push(b, REPO, report=report, dry_run=True)


def test_report_of_same_names_but_other_bytes_says_another_checkpoint(tmp_path):
    a = make_checkpoint(tmp_path / "a")
    b = make_draft(tmp_path / "b", "specforge", config=lambda c: c.update(rms_norm_eps=1e-6),
                   tensors=lambda t: t.pop("norm.weight"))
    report = write_report(tmp_path / "r.json", make_report(a))
    with pytest.raises(GateError, match="another checkpoint"):
        push(b, REPO, report=report, dry_run=True)


def test_extra_weight_file_not_in_report_is_refused(ckpt):
    folder, report = ckpt
    (folder / "extra.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(GateError, match=r"^extra\.safetensors: in .* not in the report"):
        push(folder, REPO, report=report, dry_run=True)


def test_pickle_weights_are_never_pushed(ckpt):
    folder, report = ckpt
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(GateError, match="pickle"):
        push(folder, REPO, report=report, dry_run=True)


def test_cli_gate_failure_exits_1_with_one_line(ckpt):
    folder, report = ckpt
    (folder / "config.json").write_text("{}")
    r = run_cli("push", str(folder), REPO, "--report", str(report), "--dry-run")
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[0].startswith("error: config.json: ")
    assert "Traceback" not in r.stderr


def test_cli_missing_report_exits_2(ckpt, tmp_path):
    folder, _ = ckpt
    r = run_cli("push", str(folder), REPO, "--report", str(tmp_path / "nope.json"), "--dry-run")
    assert r.returncode == 2
    assert "no such report" in r.stderr


# ---------------------------------------------------------------- the card

def test_card_metadata_parses_back(ckpt, tmp_path):
    folder, report = ckpt
    res = push(folder, REPO, report=report, dry_run=True)
    (tmp_path / "README.md").write_text(res.readme)
    meta = metadata_load(tmp_path / "README.md")
    assert meta["base_model"] == "moonshotai/Kimi-K2.5"
    assert meta["library_name"] == "vllm"
    assert {"eagle3", "speculative-decoding", "vllm"} <= set(meta["tags"])
    card = ModelCard(res.readme)
    assert card.data.base_model == "moonshotai/Kimi-K2.5"


def test_card_shows_both_conventions_serve_lines_and_provenance(ckpt):
    folder, report = ckpt
    text = push(folder, REPO, report=report, dry_run=True).readme
    assert "51.78 %" in text  # vLLM acceptance rate
    assert text.count("3.071") >= 2  # vLLM AL and SGLang accept_length
    assert "SGLang / SpecForge" in text
    assert "| Rate | 0.771 | 0.583 | 0.420 | 0.298 |" in text
    assert "vLLM 0.32.0" in text and "Prompt set: math, 40 prompts" in text
    assert "`min_acceptance_length` | 2.5" in text and "mean acceptance length 3.071 >= 2.500" in text
    assert "identical (requests 40, tokens compared 2,560)" in text
    assert ("vllm serve moonshotai/Kimi-K2.5 --tensor-parallel-size 8 --speculative-config '{\"model\": "
            "\"my-org/kimi-eagle3\", \"method\": \"eagle3\", \"num_speculative_tokens\": 4}' "
            "--trust-remote-code") in text
    assert ("python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --speculative-algorithm EAGLE3 "
            "--speculative-draft-model-path my-org/kimi-eagle3 --speculative-num-steps 4 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 5 --trust-remote-code") in text
    assert ("tokenspeed serve moonshotai/Kimi-K2.5 --tp 8 --speculative-algorithm EAGLE3 "
            "--speculative-draft-model-path my-org/kimi-eagle3 --speculative-num-steps 4 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 5 --enable-metrics --trust-remote-code") in text
    assert "AQ-MedAI/Kimi-K25-eagle3" in text and "`K301`" in text
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" in text
    assert sha256_file(folder / "model.safetensors") in text


def test_card_serves_with_the_speculative_keys_verify_ran_with(tmp_path):
    """A P-EAGLE draft verified with parallel drafting (or a replayed production line's keys): the card's vLLM line
    keeps them; the model is the Hub repo, never the folder verify read."""
    folder = make_checkpoint(tmp_path / "draft")
    doc = make_report(folder)
    doc["live"]["speculative_config"] = {"model": str(folder), "method": "eagle3", "num_speculative_tokens": 4,
                                         "parallel_drafting": True, "draft_tensor_parallel_size": 1}
    text = push(folder, REPO, report=write_report(tmp_path / "verify.json", doc), dry_run=True).readme
    line = next(ln for ln in text.splitlines() if ln.lstrip().startswith("vllm serve"))
    spec = json.loads(line.split("--speculative-config '", 1)[1].split("'", 1)[0])
    assert spec == {"model": REPO, "method": "eagle3", "num_speculative_tokens": 4, "parallel_drafting": True,
                    "draft_tensor_parallel_size": 1}


def test_card_serves_the_verified_rows_model_runner_and_names_it(tmp_path):
    """vLLM on GPUs runs Model Runner V2 unless VLLM_USE_V2_MODEL_RUNNER says otherwise (config/vllm.py
    use_v2_model_runner), and the two runners read a draft's aux ids from different keys: a draft verified under a
    Model Runner V1 row (0.32/v1) is served by a line that asks for V1, and the card names the runner of its line
    and the one the numbers were measured on."""
    folder = make_checkpoint(tmp_path / "draft")
    doc = make_report(folder)
    doc["engine"]["rules_version"] = "0.32/v1"
    doc["runner"] = {"row": "v1", "measured": "v1", "why": "vLLM's CPU build runs Model Runner V1 (no Triton backend)",
                     "other_row": "vllm 0.32", "differs": []}
    text = push(folder, REPO, report=write_report(tmp_path / "v1.json", doc), dry_run=True).readme
    line = next(ln for ln in text.splitlines() if "vllm serve" in ln)
    assert line.startswith("VLLM_USE_V2_MODEL_RUNNER=0 vllm serve moonshotai/Kimi-K2.5 "), line
    assert "The vLLM line runs Model Runner V1 (`VLLM_USE_V2_MODEL_RUNNER=0`), the runner of the verified row " \
           "vllm 0.32/v1" in text
    # the V2 row GPUs run: no variable; the card says the live numbers came from V1 and what V2's checks add
    doc["engine"]["rules_version"] = "0.33"
    doc["runner"] = {"row": "v2", "measured": "v1", "why": "vLLM's CPU build runs Model Runner V1 (no Triton backend)",
                     "other_row": "vllm 0.33/v1",
                     "differs": [{"id": "K405", "severity": "error", "only_under": "v2", "message": "m"}]}
    text = push(folder, REPO, report=write_report(tmp_path / "v2.json", doc), dry_run=True).readme
    line = next(ln for ln in text.splitlines() if "vllm serve" in ln)
    assert line.startswith("vllm serve "), line
    assert "VLLM_USE_V2_MODEL_RUNNER" not in text
    note = next(ln for ln in text.splitlines() if ln.startswith("The vLLM line runs"))
    assert "Model Runner V2, what vLLM on GPUs runs (the verified row vllm 0.33)" in note
    assert "measured on Model Runner V1 (vLLM's CPU build" in note and "K405 error only under V2" in note


def test_card_of_a_peagle_draft_gives_no_sglang_line_since_sglang_serves_none(tmp_path):
    """SGLang 0.5.23 serves no P-EAGLE (K105's text, from srt/speculative/spec_info.py and spec_registry.py): a
    "for reference" EAGLE3 launch line for a P-EAGLE draft would not run it as it was verified (parallel
    drafting), so the card says why there is none instead. An EAGLE-3 draft's card keeps its SGLang line."""
    folder = make_checkpoint(tmp_path / "draft")
    doc = make_report(folder)
    doc["draft"]["method"] = "peagle"
    doc["live"]["speculative_config"] = {"model": str(folder), "method": "eagle3", "num_speculative_tokens": 3,
                                         "parallel_drafting": True}
    text = push(folder, REPO, report=write_report(tmp_path / "verify.json", doc), dry_run=True).readme
    assert "sglang.launch_server" not in text and "--speculative-algorithm" not in text
    assert "SGLang: no line: sglang 0.5.23 serves no peagle draft (K105;" in text
    assert "tokenspeed: no line: tokenspeed 0.1.1 serves no peagle draft (K105;" in text
    assert "given for reference" not in text and "tokenspeed serve" not in text
    assert sum(ln.lstrip().startswith("vllm serve") for ln in text.splitlines()) == 1
    doc["draft"]["method"] = "eagle3"
    text = push(folder, REPO, report=write_report(tmp_path / "verify2.json", doc), dry_run=True).readme
    assert "python -m sglang.launch_server" in text and "tokenspeed serve" in text
    assert "the SGLang and tokenspeed lines are given for reference" in text


def test_a_card_verified_on_tokenspeed_marks_tokenspeeds_line_verified(tmp_path):
    """Every engine kconvert has rows for gets a line in the card, and the verified one is the engine the report
    measured on: a report from `verify --server --engine tokenspeed` marks tokenspeed's line, not vLLM's."""
    folder = make_checkpoint(tmp_path / "draft")
    doc = make_report(folder)
    doc["live"]["engine"] = "tokenspeed"
    doc["engine"]["name"] = "tokenspeed"
    text = push(folder, REPO, report=write_report(tmp_path / "verify.json", doc), dry_run=True).readme
    assert "tokenspeed (verified):" in text and "vLLM (verified):" not in text
    assert "the vLLM and SGLang lines are given for reference" in text
    serve = [ln for ln in text.splitlines() if ln.startswith("tokenspeed serve")]
    assert len(serve) == 1 and f"--speculative-draft-model-path {REPO}" in serve[0] and "--enable-metrics" in serve[0]


def test_markdown_section_is_reusable_without_a_repo(ckpt):
    folder, report = ckpt
    md = render_markdown_section(json.loads(report.read_text()))
    assert md.startswith("## Validation")
    assert START not in md and "---" not in md.splitlines()[0]


def test_existing_readme_is_kept_and_metadata_merged(ckpt):
    folder, report = ckpt
    (folder / "README.md").write_text("---\nlicense: mit\ntags:\n- kimi\n- eagle3\n---\n\n# My draft\n\n"
                                      "Trained on 1M samples.\n")
    text = push(folder, REPO, report=report, dry_run=True).readme
    card = ModelCard(text)
    assert card.data.license == "mit"
    assert card.data.tags == ["kimi", "eagle3", "speculative-decoding", "vllm"]
    assert "# My draft" in card.text and "Trained on 1M samples." in card.text
    assert card.text.count(START) == 1 and card.text.count(END) == 1


def test_second_render_replaces_the_section_not_duplicates_it(ckpt):
    folder, report = ckpt
    doc = json.loads(report.read_text())
    first = render_card(doc, REPO, existing="# Draft\n\nintro\n\n## Training\n\ndetails\n")
    doc["live"]["num_speculative_tokens"] = 3
    second = render_card(doc, REPO, existing=first)
    assert second.count(START) == 1 and second.count(END) == 1
    assert "intro" in second and "## Training" in second
    assert '"num_speculative_tokens": 3' in second and '"num_speculative_tokens": 4' not in second
    assert render_card(doc, REPO, existing=second) == second


def test_engine_target_hub_id_names_the_base_model(tmp_path):
    folder = make_checkpoint(tmp_path / "d")
    doc = make_report(folder)
    doc["target"] = {"name": "target-folder-summary", "origin": "folder"}
    doc["live"]["target"] = "org/real-target"
    assert ModelCard(push(folder, REPO, report=doc, dry_run=True).readme).data.base_model == "org/real-target"


def test_local_target_folder_leaves_base_model_to_the_flag(tmp_path):
    folder = make_checkpoint(tmp_path / "d")
    doc = make_report(folder)
    doc["target"] = {"name": str(tmp_path / "target"), "origin": "folder"}
    doc["live"]["target"] = str(tmp_path / "target")
    res = push(folder, REPO, report=doc, dry_run=True)
    assert "base_model" not in ModelCard(res.readme).data.to_dict()
    assert res.notes
    res = push(folder, REPO, report=doc, dry_run=True, base_model="org/target")
    assert ModelCard(res.readme).data.base_model == "org/target"


# ---------------------------------------------------------------- the commit, against a stand-in Hub

class FakeHub:
    """Stands in for the Hugging Face Hub on 127.0.0.1: the endpoints huggingface_hub 2.4's create_repo,
    create_branch and create_commit call with HF_HUB_DISABLE_XET=1, and the large-file storage behind them.

    Like the Hub (its default .gitattributes), the preupload answer sends weights (`*.safetensors`, ...) and files of
    10 MiB or more through LFS and the rest (config, card) inline ("regular"). The LFS path is git-lfs's batch API
    as the Hub serves it: `POST /{repo}.git/info/lfs/objects/batch` answers each object missing from the storage with
    an `upload` action (a presigned-style storage URL: one PUT of the whole file, or, when `chunk_size` is given, one
    PUT per part then a completion POST) and a `verify` action (`POST /{repo}.git/info/lfs/objects/verify`). The
    uploaded bytes are kept in `lfs` by oid; a commit whose `lfsFile` points to an object the storage does not hold
    (or whose bytes do not hash to the oid) is refused, as the Hub refuses it.
    """

    LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".onnx", ".msgpack")
    LFS_MIN_SIZE = 10 * 1024 * 1024
    STORAGE = "/fake-lfs-storage"  # stands in for the presigned S3 URLs the Hub hands out

    def __init__(self, fail: dict[str, int] | None = None, *, chunk_size: int | None = None,
                 fail_upload: int | None = None):
        """`fail`: path prefix -> status for Hub POSTs; `chunk_size`: ask for multipart uploads of objects larger
        than it; `fail_upload`: status every PUT to the storage is answered with (with `Retry-After: 0`, so
        huggingface_hub's retries do not sleep 1+2+4+8+8 s)."""
        self.requests: list[dict] = []
        self.lfs: dict[str, bytes] = {}  # the large-file storage: oid -> bytes as PUT
        self.fail = fail or {}
        self.chunk_size = chunk_size
        self.fail_upload = fail_upload
        self._parts: dict[str, dict[int, bytes]] = {}
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def _reply(self, code: int, body: dict | None, headers: dict | None = None,
                       content_type: str = "application/json") -> None:
                raw = json.dumps(body).encode() if body is not None else b""
                self.send_response(code)
                if body is not None:
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _record(self, method: str) -> dict:
                url = urlsplit(self.path)
                body = self._body()
                rec = {"method": method, "path": unquote(url.path), "query": parse_qs(url.query),
                       "auth": self.headers.get("Authorization"), "headers": dict(self.headers.items()),
                       "body": body}
                with hub._lock:
                    hub.requests.append(rec)
                return rec

            def _base(self) -> str:
                return f"http://{self.headers['Host']}"

            def do_PUT(self):
                rec = self._record("PUT")
                path = rec["path"]
                if not path.startswith(hub.STORAGE + "/"):
                    return self._reply(404, {"error": f"FakeHub: no route PUT {path}"})
                if hub.fail_upload:
                    return self._reply(hub.fail_upload, None, {"Retry-After": "0"})
                parts = path[len(hub.STORAGE) + 1:].split("/")  # {oid} or {oid}/part/{n}
                if len(parts) == 1:
                    with hub._lock:
                        hub.lfs[parts[0]] = rec["body"]
                    return self._reply(200, None, {"ETag": f'"{hashlib.md5(rec["body"]).hexdigest()}"'})
                if len(parts) == 3 and parts[1] == "part":
                    with hub._lock:
                        hub._parts.setdefault(parts[0], {})[int(parts[2])] = rec["body"]
                    return self._reply(200, None, {"ETag": f'"{hashlib.md5(rec["body"]).hexdigest()}"'})
                return self._reply(404, {"error": f"FakeHub: no route PUT {path}"})

            def _batch(self, rec: dict) -> None:
                req = json.loads(rec["body"])
                if req.get("operation") != "upload" or "basic" not in req.get("transfers", []) \
                        or req.get("hash_algo", "sha256") != "sha256":
                    return self._reply(422, {"message": f"FakeHub: unexpected batch request {req}"})
                repo = rec["path"][1:-len("/info/lfs/objects/batch")]  # "{org}/{name}.git"
                objects = []
                for o in req["objects"]:
                    oid, size = o["oid"], o["size"]
                    have = hub.lfs.get(oid)
                    if have is not None and len(have) == size and hashlib.sha256(have).hexdigest() == oid:
                        objects.append({"oid": oid, "size": size})  # already stored: no actions, no upload
                        continue
                    upload: dict = {"href": f"{self._base()}{hub.STORAGE}/{oid}?X-Amz-Signature=fake"}
                    if hub.chunk_size and size > hub.chunk_size:
                        n = -(-size // hub.chunk_size)
                        upload = {"href": f"{self._base()}{hub.STORAGE}/complete/{oid}?uploadId=fake",
                                  "header": {"chunk_size": str(hub.chunk_size),
                                             **{str(i): f"{self._base()}{hub.STORAGE}/{oid}/part/{i}?partNumber={i}"
                                                for i in range(1, n + 1)}}}
                    objects.append({"oid": oid, "size": size, "authenticated": True, "actions": {
                        "upload": upload,
                        "verify": {"href": f"{self._base()}/{repo}/info/lfs/objects/verify",
                                   "header": {"Authorization": rec["auth"] or ""}}}})
                transfer = "multipart" if hub.chunk_size and "multipart" in req["transfers"] else "basic"
                return self._reply(200, {"transfer": transfer, "objects": objects},
                                   content_type="application/vnd.git-lfs+json")

            def _complete(self, rec: dict) -> None:
                oid = rec["path"].rsplit("/", 1)[1]
                req = json.loads(rec["body"])
                parts = hub._parts.get(oid, {})
                got = [(p["partNumber"], p["etag"]) for p in req["parts"]]
                want = [(i, f'"{hashlib.md5(parts[i]).hexdigest()}"') for i in sorted(parts)]
                if req.get("oid") != oid or got != want:
                    return self._reply(400, {"error": f"FakeHub: bad completion {got} for parts {want}"})
                with hub._lock:
                    hub.lfs[oid] = b"".join(parts[i] for i in sorted(parts))
                return self._reply(200, {})

            def _stored(self, oid: str, size: int) -> bool:
                data = hub.lfs.get(oid)
                return data is not None and len(data) == size and hashlib.sha256(data).hexdigest() == oid

            def do_POST(self):
                rec = self._record("POST")
                path, body = rec["path"], rec["body"]
                for prefix, code in hub.fail.items():
                    if path.startswith(prefix):
                        return self._reply(code, {"error": "Invalid credentials in Authorization header"},
                                           {"X-Error-Message": "Invalid credentials in Authorization header"})
                if path == "/api/repos/create":
                    p = json.loads(body)
                    return self._reply(200, {"url": f"{self._base()}/{p['organization']}/{p['name']}"})
                if path == "/api/validate-yaml":
                    return self._reply(200, {"errors": [], "warnings": []})
                if path.endswith(".git/info/lfs/objects/batch"):
                    return self._batch(rec)
                if path.endswith(".git/info/lfs/objects/verify"):
                    v = json.loads(body)
                    if self._stored(v["oid"], v["size"]):
                        return self._reply(200, {})
                    return self._reply(404, {"error": f"FakeHub: object {v['oid']} not found in the storage"})
                if path.startswith(hub.STORAGE + "/complete/"):
                    return self._complete(rec)
                parts = path.split("/")  # /api/models/{org}/{name}/{action}/{rev...} (or /api/datasets/...)
                if parts[:3] in (["", "api", "models"], ["", "api", "datasets"]) and len(parts) >= 7:
                    repo, action, rev = "/".join(parts[3:5]), parts[5], "/".join(parts[6:])
                    if action == "branch":
                        return self._reply(200, {})
                    if action == "preupload":
                        files = json.loads(body)["files"]
                        return self._reply(200, {"files": [{"path": f["path"], "uploadMode": hub.upload_mode(f),
                                                            "shouldIgnore": False} for f in files]})
                    if action == "commit":
                        for item in (json.loads(x) for x in body.splitlines() if x.strip()):
                            v = item["value"]
                            if item["key"] == "lfsFile" and not (v.get("algo") == "sha256"
                                                                and self._stored(v["oid"], v["size"])):
                                return self._reply(422, {"error": f"Your push was rejected because an LFS pointer "
                                                                  f"pointed to a file that does not exist: {v}"})
                        base = f"{self._base()}/{repo}"
                        pr = "create_pr" in rec["query"]
                        return self._reply(200, {"commitUrl": f"{base}/commit/{'c' * 40}", "commitOid": "c" * 40,
                                                 "pullRequestUrl": f"{base}/discussions/1" if pr else None})
                return self._reply(404, {"error": f"FakeHub: no route {path}"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def upload_mode(self, f: dict) -> str:
        return "lfs" if f["path"].endswith(self.LFS_SUFFIXES) or f["size"] >= self.LFS_MIN_SIZE else "regular"

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]

    def commits(self) -> list[dict]:
        return [r for r in self.requests if "/commit/" in r["path"]]

    def commit_items(self) -> tuple[dict, list[dict], dict]:
        """(header, [{"key": "file"|"lfsFile"|..., "value": ...}, ...], request) of the one commit received."""
        commits = self.commits()
        assert len(commits) == 1, self.paths()
        lines = [json.loads(x) for x in commits[0]["body"].splitlines() if x.strip()]
        assert lines[0]["key"] == "header"
        return lines[0]["value"], lines[1:], commits[0]

    def commit(self) -> tuple[dict, dict[str, bytes], dict]:
        """(header, {path: bytes}, request) of the one commit received; an `lfsFile` entry's bytes are the ones the
        storage holds under its oid."""
        header, items, req = self.commit_items()
        files = {}
        for item in items:
            v = item["value"]
            if item["key"] == "lfsFile":
                files[v["path"]] = self.lfs[v["oid"]]
            else:
                assert item["key"] == "file" and v["encoding"] == "base64", item
                files[v["path"]] = base64.b64decode(v["content"])
        return header, files, req


@pytest.fixture(autouse=True)
def _no_xet(monkeypatch):
    """In-process pushes take the LFS path as the CLI runs with HF_HUB_DISABLE_XET=1 do (hf_xet is installed, and
    FakeHub does not stand in for Xet storage)."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)


def hub_env(hub: FakeHub) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and "proxy" not in k.lower()}
    env.update({"HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_fake_token", "HF_HUB_DISABLE_XET": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_ETAG_TIMEOUT": "5", "NO_PROXY": "127.0.0.1,localhost",
                "HF_HOME": str(Path(env.get("TMPDIR", "/tmp")) / "kconvert-test-hf-home")})
    return env


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env or {**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=60)


def test_cli_push_makes_one_commit_with_every_file_and_the_card(ckpt):
    """HF_ENDPOINT and HF_TOKEN are read by huggingface_hub at import: the CLI runs in a child process."""
    folder, report = ckpt
    with FakeHub() as hub:
        r = run_cli("push", str(folder), REPO, "--report", str(report), "--private", "--revision", "kconvert",
                    "--create-pr", "--commit-message", "verified draft", "--json", env=hub_env(hub))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["pr_url"].endswith("/discussions/1")
    oid = sha256_file(folder / "model.safetensors")
    assert hub.paths() == ["/api/repos/create", f"/api/models/{REPO}/branch/kconvert", "/api/validate-yaml",
                           f"/api/models/{REPO}/preupload/kconvert", f"/{REPO}.git/info/lfs/objects/batch",
                           f"{FakeHub.STORAGE}/{oid}", f"/{REPO}.git/info/lfs/objects/verify",
                           f"/api/models/{REPO}/commit/kconvert"]
    create = json.loads(hub.requests[0]["body"])
    assert create == {"name": "kimi-eagle3", "organization": "my-org", "visibility": "private"}
    assert all(req["auth"] == "Bearer hf_fake_token" for req in hub.requests if req["method"] == "POST")
    assert "ref" not in json.loads(hub.requests[4]["body"])  # huggingface_hub sends no ref for a pull request
    pre = json.loads(hub.requests[3]["body"])["files"]
    sizes = {f["path"]: f["size"] for f in pre}
    assert sizes["model.safetensors"] == (folder / "model.safetensors").stat().st_size
    header, files, req = hub.commit()
    assert header["summary"] == "verified draft"
    assert req["query"] == {"create_pr": ["1"]}
    assert set(files) == {"config.json", "model.safetensors", "kconvert.json", "README.md"}
    for name in ("config.json", "model.safetensors", "kconvert.json"):
        assert hashlib.sha256(files[name]).hexdigest() == sha256_file(folder / name)
    assert sha256_file(folder / "model.safetensors") in header["description"]
    card = ModelCard(files["README.md"].decode())
    assert card.data.base_model == "moonshotai/Kimi-K2.5"


def test_library_push_to_main_sends_no_branch_and_no_pr(ckpt):
    folder, report = ckpt
    with FakeHub() as hub:
        res = push(folder, REPO, report=report, endpoint=hub.url, token="hf_x")
    assert f"/api/models/{REPO}/branch/main" not in hub.paths()
    assert hub.paths()[-1] == f"/api/models/{REPO}/commit/main"
    assert "visibility" not in json.loads(hub.requests[0]["body"])  # not --private: the org's default
    header, files, req = hub.commit()
    assert req["query"] == {}
    assert header["summary"].startswith("Upload EAGLE-3 draft verified by kconvert")
    assert res.commit_oid == "c" * 40 and res.pr_url is None


def test_second_push_of_the_pulled_readme_keeps_one_section(ckpt):
    folder, report = ckpt
    (folder / "README.md").write_text("# Draft\n\nOur notes.\n")
    with FakeHub() as hub:
        push(folder, REPO, report=report, endpoint=hub.url, token="hf_x")
        (folder / "README.md").write_bytes(hub.commit()[1]["README.md"])
    with FakeHub() as hub:
        push(folder, REPO, report=report, endpoint=hub.url, token="hf_x")
        text = hub.commit()[1]["README.md"].decode()
    assert text.count(START) == 1 and text.count("## Validation") == 1
    assert "Our notes." in text


def test_dry_run_touches_no_network(ckpt):
    folder, report = ckpt
    with FakeHub() as hub:
        env = hub_env(hub)
        r = run_cli("push", str(folder), REPO, "--report", str(report), "--dry-run", env=env)
    assert r.returncode == 0, r.stderr
    assert hub.requests == []
    assert "model.safetensors" in r.stdout and sha256_file(folder / "model.safetensors") in r.stdout
    assert START in r.stdout and "dry run: nothing uploaded" in r.stdout


def test_hub_auth_error_is_one_line_exit_2(ckpt):
    folder, report = ckpt
    with FakeHub(fail={"/api/repos/create": 401}) as hub:
        r = run_cli("push", str(folder), REPO, "--report", str(report), env=hub_env(hub))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: push to my-org/kimi-eagle3 failed:")
    assert "HF_TOKEN" in r.stderr and "Traceback" not in r.stderr


def test_unreachable_hub_is_an_input_error(ckpt):
    folder, report = ckpt
    with FakeHub() as hub:
        url = hub.url  # a port that was just free and is closed again
    with pytest.raises(InputError, match="push to my-org/kimi-eagle3 failed"):
        push(folder, REPO, report=report, endpoint=url, token="hf_x")


# ---------------------------------------------------------------- the LFS path, as every real draft takes it

PAD = 3 * 1024 * 1024 + 17  # bytes of random weights per shard: an odd size, so the last multipart part is short


def make_lfs_checkpoint(folder: Path, *, shards: int = 2) -> Path:
    """A draft whose safetensors files carry a few MB of incompressible weights each (one random U8 tensor at the
    front of the first shard, one at the back of the last), so each is a real LFS object."""
    rng = np.random.default_rng(3)

    def pad(t: dict) -> None:
        items = list(t.items())
        t.clear()
        t["lfs_pad_a.weight"] = ("U8", (PAD,), rng.bytes(PAD))
        t.update(items)
        t["lfs_pad_b.weight"] = ("U8", (PAD,), rng.bytes(PAD))

    return make_checkpoint(folder, shards=shards, tensors=pad)


def _part(req: dict) -> int:
    """A storage PUT's part number (0 for a single-part upload)."""
    tail = req["path"].split("/")
    return int(tail[-1]) if len(tail) >= 2 and tail[-2] == "part" else 0


@pytest.mark.parametrize("chunk_size", [None, 1024 * 1024], ids=["single-part", "multipart"])
def test_cli_push_uploads_every_safetensors_through_lfs(tmp_path, chunk_size):
    folder = make_lfs_checkpoint(tmp_path / "draft")
    doc = make_report(folder)
    report = write_report(tmp_path / "verify.json", doc)
    reported = {f["name"]: f for f in doc["subject"]["files"]}
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    size = {n: (folder / n).stat().st_size for n in shards}
    assert all(v > 3 * 1024 * 1024 for v in size.values())
    oid = {n: sha256_file(folder / n) for n in shards}
    assert oid == {n: reported[n]["sha256"] for n in shards}  # the oids are the sha256s the verify report binds

    with FakeHub(chunk_size=chunk_size) as hub:
        r = run_cli("push", str(folder), REPO, "--report", str(report), "--json", env=hub_env(hub))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["commit_oid"] == "c" * 40
    reqs = hub.requests
    paths = hub.paths()
    assert paths[:4] == ["/api/repos/create", "/api/validate-yaml", f"/api/models/{REPO}/preupload/main",
                         f"/{REPO}.git/info/lfs/objects/batch"]
    assert paths[-1] == f"/api/models/{REPO}/commit/main" and len(hub.commits()) == 1

    # preupload: every file offered with its size and first 512 bytes; FakeHub answers lfs for the shards only
    offered = {f["path"]: f for f in json.loads(reqs[2]["body"])["files"]}
    assert set(offered) == set(reported) | {"README.md"}
    for n in shards:
        assert offered[n]["size"] == size[n]
        assert base64.b64decode(offered[n]["sample"]) == (folder / n).read_bytes()[:512]

    # the batch: one request naming every shard by sha256 oid and size, nothing else
    batch = json.loads(reqs[3]["body"])
    assert batch["operation"] == "upload" and batch["hash_algo"] == "sha256"
    assert batch["transfers"] == ["basic", "multipart"] and batch["ref"] == {"name": "main"}
    assert sorted(batch["objects"], key=lambda o: o["oid"]) == sorted(
        ({"oid": oid[n], "size": size[n]} for n in shards), key=lambda o: o["oid"])
    assert reqs[3]["headers"]["Accept"] == "application/vnd.git-lfs+json"
    assert reqs[3]["auth"] == "Bearer hf_fake_token"

    # the uploads: the bytes PUT to the storage hash to the oid, with no Hub token sent to the storage
    middle = reqs[4:-1]
    for n in shards:
        puts = sorted((x for x in middle if x["method"] == "PUT" and x["path"].startswith(f"{FakeHub.STORAGE}/"
                                                                                            f"{oid[n]}")), key=_part)
        if chunk_size is None:
            assert [_part(x) for x in puts] == [0]
        else:
            assert [_part(x) for x in puts] == list(range(1, -(-size[n] // chunk_size) + 1))
            assert all(len(x["body"]) == chunk_size for x in puts[:-1])
            done = [x for x in middle if x["path"] == f"{FakeHub.STORAGE}/complete/{oid[n]}"]
            assert len(done) == 1 and json.loads(done[0]["body"])["oid"] == oid[n]
        body = b"".join(x["body"] for x in puts)
        assert hashlib.sha256(body).hexdigest() == oid[n] == reported[n]["sha256"]
        assert len(body) == size[n]
        assert all(x["auth"] is None for x in puts)
        verify = [json.loads(x["body"]) for x in middle if x["path"] == f"/{REPO}.git/info/lfs/objects/verify"]
        assert {"oid": oid[n], "size": size[n]} in verify
        assert hub.lfs[oid[n]] == (folder / n).read_bytes()
    assert len([x for x in middle if x["path"].endswith("/verify")]) == len(shards)
    assert {x["path"].split("?")[0] for x in middle} <= {f"/{REPO}.git/info/lfs/objects/verify"} | {
        x["path"] for x in middle if x["path"].startswith(FakeHub.STORAGE)}

    # the commit: the shards as lfsFile pointers to those oids, card/config/provenance/index inline
    header, items, _ = hub.commit_items()
    lfs = {i["value"]["path"]: i["value"] for i in items if i["key"] == "lfsFile"}
    assert lfs == {n: {"path": n, "algo": "sha256", "oid": oid[n], "size": size[n]} for n in shards}
    inline = {i["value"]["path"] for i in items if i["key"] == "file"}
    assert inline == {"config.json", "kconvert.json", "model.safetensors.index.json", "README.md"}
    assert len(items) == len(lfs) + len(inline)
    _, files, _ = hub.commit()
    for n in inline - {"README.md"}:
        assert hashlib.sha256(files[n]).hexdigest() == reported[n]["sha256"]
    assert all(oid[n] in header["description"] for n in shards)


def test_objects_already_in_the_storage_are_not_uploaded_again(tmp_path):
    """A rerun after a failed commit: the batch answers the stored objects without actions, nothing is PUT."""
    folder = make_lfs_checkpoint(tmp_path / "draft")
    report = write_report(tmp_path / "verify.json", make_report(folder))
    with FakeHub() as hub:
        push(folder, REPO, report=report, endpoint=hub.url, token="hf_x")
        first = len(hub.requests)
        hub.requests.clear()
        push(folder, REPO, report=report, endpoint=hub.url, token="hf_x")
    assert first > len(hub.requests)
    assert not [x for x in hub.requests if x["method"] == "PUT" or x["path"].endswith("/verify")]
    assert hub.paths()[-1] == f"/api/models/{REPO}/commit/main"
    lfs = [i for i in hub.commit_items()[1] if i["key"] == "lfsFile"]
    assert sorted(i["value"]["oid"] for i in lfs) == sorted(sha256_file(p) for p in folder.glob("*.safetensors"))


def test_lfs_upload_failure_is_one_line_and_makes_no_commit(tmp_path):
    """The storage answers every PUT 500: huggingface_hub retries (5 times, Retry-After: 0 keeps it to ~5 s),
    then gives up; the push names the file and the HTTP error on one line, and nothing is committed."""
    folder = make_lfs_checkpoint(tmp_path / "draft")
    report = write_report(tmp_path / "verify.json", make_report(folder))
    with FakeHub(fail_upload=500) as hub:
        r = run_cli("push", str(folder), REPO, "--report", str(report), env=hub_env(hub))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr
    assert re.match(r"error: push to my-org/kimi-eagle3 failed: Error while uploading "
                    r"'model-0000[12]-of-00002\.safetensors' to the Hub: .*\b500\b", errors[0]), errors[0]
    assert hub.commits() == [] and hub.lfs == {}
    assert not [x for x in hub.requests if x["path"].endswith("/verify")]
    puts = [x for x in hub.requests if x["method"] == "PUT"]
    assert len(puts) >= 2 * 2  # each shard tried, and retried
