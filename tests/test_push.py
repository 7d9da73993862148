"""`kconvert push`: the gate binding a folder to a passing verify report, the model card, and the one commit.

The Hub is out of reach from the test machine, so the commit tests run against `FakeHub`, a small HTTP server on
127.0.0.1 that stands in for the Hub: it answers the endpoints huggingface_hub 2.4 calls for create_repo,
create_branch, create_commit (validate-yaml, preupload, commit) and records every request for the assertions.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from huggingface_hub import ModelCard, metadata_load

from kconvert.errors import GateError, InputError
from kconvert.hub import push
from kconvert.hub.card import END, START, render_card
from kconvert.report.acceptance import summarize
from kconvert.report.markdown import render_markdown_section
from kconvert.schemas import validate
from kconvert.source.checkpoint import sha256_file
from tests.factories import make_draft

ROOT = Path(__file__).resolve().parent.parent
REPO = "my-org/kimi-eagle3"
# Kimi-K2.5 + AQ-MedAI draft on vLLM, k=4, GSM8K (eagle3-facts.md section 6).
COUNTERS = {"drafts": 42668, "draft_tokens": 170672, "accepted": 88381, "accepted_per_pos": [32897, 24875, 17906,
                                                                                              12703]}


# ---------------------------------------------------------------- factories

def make_checkpoint(folder: Path, *, shards: int = 1, provenance: bool = True) -> Path:
    make_draft(folder, "specforge", shards=shards)
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
    """A verify report of `folder` shaped like kconvert.report.document.build_report's, with a live section."""
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
    with pytest.raises(InputError, match="not JSON"):
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
    assert ("vllm serve moonshotai/Kimi-K2.5 --speculative-config '{\"model\": \"my-org/kimi-eagle3\", "
            "\"method\": \"eagle3\", \"num_speculative_tokens\": 4}' --tensor-parallel-size 8 --trust-remote-code") in text
    assert ("python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --speculative-algorithm EAGLE3 "
            "--speculative-draft-model-path my-org/kimi-eagle3 --speculative-num-steps 4 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 5 --tp 8 --trust-remote-code") in text
    assert "AQ-MedAI/Kimi-K25-eagle3" in text and "`K301`" in text
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" in text
    assert sha256_file(folder / "model.safetensors") in text


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
    create_branch and create_commit call, answering "regular" upload for every file (no LFS, no Xet)."""

    def __init__(self, fail: dict[str, int] | None = None):
        self.requests: list[dict] = []
        self.fail = fail or {}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def _reply(self, code: int, body: dict, headers: dict | None = None) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self):
                url = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = unquote(url.path)
                rec = {"method": "POST", "path": path, "query": parse_qs(url.query),
                       "auth": self.headers.get("Authorization"), "body": body}
                hub.requests.append(rec)
                for prefix, code in hub.fail.items():
                    if path.startswith(prefix):
                        return self._reply(code, {"error": "Invalid credentials in Authorization header"},
                                           {"X-Error-Message": "Invalid credentials in Authorization header"})
                if path == "/api/repos/create":
                    p = json.loads(body)
                    return self._reply(200, {"url": f"http://{self.headers['Host']}/{p['organization']}/{p['name']}"})
                if path == "/api/validate-yaml":
                    return self._reply(200, {"errors": [], "warnings": []})
                parts = path.split("/")  # /api/models/{org}/{name}/{action}/{rev...}
                if parts[:3] == ["", "api", "models"] and len(parts) >= 7:
                    repo, action, rev = "/".join(parts[3:5]), parts[5], "/".join(parts[6:])
                    if action == "branch":
                        return self._reply(200, {})
                    if action == "preupload":
                        files = json.loads(body)["files"]
                        return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                            "shouldIgnore": False} for f in files]})
                    if action == "commit":
                        base = f"http://{self.headers['Host']}/{repo}"
                        pr = "create_pr" in parse_qs(url.query)
                        return self._reply(200, {"commitUrl": f"{base}/commit/{'c' * 40}", "commitOid": "c" * 40,
                                                 "pullRequestUrl": f"{base}/discussions/1" if pr else None})
                return self._reply(404, {"error": f"FakeHub: no route {path}"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]

    def commit(self) -> tuple[dict, dict[str, bytes], dict]:
        """(header, {path: bytes}, request) of the one commit received."""
        commits = [r for r in self.requests if "/commit/" in r["path"]]
        assert len(commits) == 1, self.paths()
        lines = [json.loads(x) for x in commits[0]["body"].splitlines() if x.strip()]
        header = lines[0]["value"]
        files = {}
        for item in lines[1:]:
            assert item["key"] == "file" and item["value"]["encoding"] == "base64"
            files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
        return header, files, commits[0]


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
    assert hub.paths() == ["/api/repos/create", f"/api/models/{REPO}/branch/kconvert", "/api/validate-yaml",
                           f"/api/models/{REPO}/preupload/kconvert", f"/api/models/{REPO}/commit/kconvert"]
    create = json.loads(hub.requests[0]["body"])
    assert create == {"name": "kimi-eagle3", "organization": "my-org", "visibility": "private"}
    assert all(req["auth"] == "Bearer hf_fake_token" for req in hub.requests)
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
