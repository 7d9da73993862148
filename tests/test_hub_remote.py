"""`kconvert inspect org/name` on a Hub draft whose weights are not in the cache: tensor headers and the small
tensors (d2t, t2d, norms) are read by HTTP range requests,
so the draft is checked like a local folder without downloading its weights.

This machine cannot reach the Hub, so the tests start `FakeReadHub` (tests/fake_hub_read.py): an HTTP server on
127.0.0.1 that stands in for the Hub (repo info, tree listing, `resolve/` with the headers huggingface_hub 2.4
expects, a redirect of the safetensors files to a second "storage" server that serves byte ranges). huggingface_hub
reads HF_ENDPOINT at import, so kconvert runs as a child process with HF_ENDPOINT pointing at the stand-in.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kconvert.errors import HeaderError
from kconvert.source.hub import HubRangeReader
from kconvert.source.safetensors_header import read_header
from tests.factories import make_draft
from tests.fake_hub_read import FakeReadHub, Req, hub_read_env

ROOT = Path(__file__).resolve().parent.parent
REPO = "acme/eagle3-draft"
METADATA_RANGE = "bytes=0-100000"  # the first read of a header (as huggingface_hub's get_safetensors_metadata)
BIG = (32768, 1024)  # a 64 MB bf16 tensor left as a hole of a sparse file: the weights no inspect should fetch


def absolute_d2t_draft(folder: Path, shards: int = 1) -> Path:
    """A SpecForge draft whose d2t holds absolute target ids (K502), with a large embedding that is never read."""
    def mutate(t: dict) -> None:
        dtype, shape, offsets = t["d2t"]
        t["d2t"] = (dtype, shape, offsets + np.arange(shape[0]))
        t["embed_tokens.weight"] = ("BF16", BIG, None)

    return make_draft(folder, "specforge", tensors=mutate, shards=shards)


def inspect(ref: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kconvert", "inspect", ref, "--json"], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=60)


def findings(r: subprocess.CompletedProcess, *, drop_notes: bool = True) -> list[tuple[str, str, str]]:
    doc = json.loads(r.stdout)
    return sorted((f["id"], f["severity"], f["message"]) for f in doc["findings"]
                  if not (drop_notes and f["id"] == "K003" and f["severity"] == "info"))


def weights(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def assert_one_line_refusal(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr
    return errors[0]


@pytest.mark.parametrize("shards", [1, 2])
def test_uncached_hub_draft_is_checked_like_the_local_folder(tmp_path, shards):
    draft = absolute_d2t_draft(tmp_path / "draft", shards)
    local = inspect(str(draft))
    assert local.returncode == 1, local.stderr
    assert "K502" in {f[0] for f in findings(local)}

    with FakeReadHub({REPO: draft}) as hub:
        remote = inspect(REPO, hub_read_env(hub, tmp_path / "hf_home"))
        seen = len(hub.requests)
        # HF_HUB_OFFLINE keeps today's behaviour: the small files are now cached, nothing is read remotely and
        # the tensor checks are skipped with a note.
        offline = inspect(REPO, hub_read_env(hub, tmp_path / "hf_home", offline=True)) if shards == 1 else None
        assert len(hub.requests) == seen
    assert remote.returncode == 1, remote.stderr
    assert findings(remote) == findings(local)  # K502 included, same evidence (d2t values read by range)
    notes = [f[2] for f in findings(remote, drop_notes=False) if f[0] == "K003"]
    assert any("read by HTTP range requests" in n for n in notes), notes
    doc = json.loads(remote.stdout)
    assert doc["subject"]["kind"] == "hub" and doc["subject"]["repo_id"] == REPO

    for p in weights(draft):
        reqs = hub.file_requests(p.name)
        gets = [q for q in reqs if q.method == "GET"]
        assert gets and all(q.range for q in gets), [(q.method, q.range) for q in reqs]  # only Range requests
        # Beyond the first read of the header (100 kB: its length, the header, the file size), kconvert reads
        # the small tensors: far less than the file.
        served = sum(q.sent for q in reqs if q.range != METADATA_RANGE)
        assert served < p.stat().st_size // 50, (p.name, served, p.stat().st_size)
        # The storage (another origin, as the Hub's CDN) never receives the token.
        assert all(q.auth is None for q in reqs if q.server == "cdn")
        # The token maps were read at exactly their spans in the file (absolute offsets: 8 + header + offset).
        header = read_header(p, p.name)
        ranges = {q.range for q in gets}
        for name in ("d2t", "t2d"):
            if name in header.tensors:
                info = header.tensors[name]
                assert f"bytes={info.start}-{info.end - 1}" in ranges, (name, sorted(ranges))
    assert sum(q.sent for q in hub.requests if q.server == "cdn") < sum(p.stat().st_size for p in weights(draft)) // 50

    if offline is not None:
        # Without the tensor headers SpecForge's signature (midlayer.*, d2t/t2d) is not seen: the architecture name
        # alone does not settle the convention of [1, ...], so K404 is a warning whose next lines name verify
        # --diagnose (it was an error on the config alone).
        assert offline.returncode == 0, offline.stderr
        k404 = [f for f in findings(offline) if f[0] == "K404"]
        assert k404 and k404[0][1] == "warning"
        assert any(s["command"].startswith("kconvert verify ") and "--diagnose" in s["command"].split()
                   for s in json.loads(offline.stdout)["next_steps"])
        assert "K502" not in {f[0] for f in findings(offline)}
        assert any("tensor checks are skipped" in f[2] for f in findings(offline, drop_notes=False))


def _fault(mode: str, scope: str):
    """Misbehave on the range reads: scope "all" from the first read of the header on, "tensors" only on the
    tensor reads after it."""
    def fault(req: Req) -> str | None:
        if scope == "tensors" and req.range == METADATA_RANGE:
            return None
        return mode
    return fault


@pytest.mark.parametrize("mode,scope,message", [
    ("short", "tensors", "the Hub sent 1023 bytes for bytes"),
    ("long", "tensors", "the Hub sent more than"),
    ("wrong_range", "all", "the Hub answered bytes 0-100000 with Content-Range 'bytes 1-100001/"),
    ("full200", "all", "the Hub ignored the range request for bytes 0-100000 (status 200"),
    ("500", "tensors", "from the Hub failed"),
])
def test_a_bad_range_answer_stops_inspect_with_one_line(tmp_path, mode, scope, message):
    """A failing d2t read must not silently skip K502: it stops inspect (exit 2, one line, no traceback)."""
    draft = absolute_d2t_draft(tmp_path / "draft")
    with FakeReadHub({REPO: draft}, fault=_fault(mode, scope)) as hub:
        r = inspect(REPO, hub_read_env(hub, tmp_path / "hf_home"))
    line = assert_one_line_refusal(r)
    assert "model.safetensors" in line and message in line, line
    # under --json the refusal is also a JSON error object on stdout, with the same exit code and message
    err = json.loads(r.stdout)
    assert err["verdict"] == "error" and err["exit_code"] == 2 and message in err["error"]["message"]
    if mode == "full200":
        # The body was not read to its end: the client hung up long before the 64 MB were written.
        size = (draft / "model.safetensors").stat().st_size
        full = [q for q in hub.requests if q.server == "cdn" and q.status == 200]
        assert full and all(q.sent < size // 4 for q in full), [(q.range, q.sent) for q in full]


def test_hub_failing_the_header_read_is_one_line(tmp_path):
    """The header read failing (huggingface_hub's multi-line HTTP error) is one line too."""
    draft = absolute_d2t_draft(tmp_path / "draft")
    with FakeReadHub({REPO: draft}, fault=lambda req: "500" if req.range == METADATA_RANGE else None) as hub:
        r = inspect(REPO, hub_read_env(hub, tmp_path / "hf_home"))
    line = assert_one_line_refusal(r)
    assert "could not read safetensors headers from the Hub" in line, line


def test_offline_with_an_empty_cache_is_the_existing_clear_error(tmp_path):
    draft = absolute_d2t_draft(tmp_path / "draft")
    with FakeReadHub({REPO: draft}) as hub:
        r = inspect(REPO, hub_read_env(hub, tmp_path / "hf_home", offline=True))
    line = assert_one_line_refusal(r)
    assert "not in the Hugging Face cache" in line and "HF_HUB_OFFLINE is set" in line, line
    assert hub.requests == []


# ------------------------------------------------------------------ the answer checks, without a server

class _Answer:
    def __init__(self, status: int, headers: dict[str, str]):
        self.status_code, self.headers = status, headers


@pytest.mark.parametrize("status,headers,start,want,size", [
    (206, {"Content-Range": "bytes 100-163/4096"}, 100, 64, 4096),
    (206, {"Content-Range": "bytes 0-7/*"}, 0, 8, None),
    (200, {"Content-Length": "8"}, 0, 8, 8),  # the whole file is exactly the asked bytes
])
def test_range_answers_that_are_accepted(status, headers, start, want, size):
    assert HubRangeReader._check_answer("f.safetensors", "span", start, want, _Answer(status, headers)) == (want, size)


@pytest.mark.parametrize("status,headers,got", [
    (206, {"Content-Range": "bytes 0-4095/4096"}, (4096, 4096)),  # the file ends before the asked span
    (200, {"Content-Length": "4096"}, (4096, 4096)),  # Range ignored, but the whole file is within the span
])
def test_a_first_read_past_the_end_of_a_small_file_is_accepted(status, headers, got):
    """The first read of a header asks for 100 kB: a smaller file answers with what it has, and says so."""
    assert HubRangeReader._check_answer("f.safetensors", "span", 0, 100_001, _Answer(status, headers),
                                        to_end=True) == got
    with pytest.raises(HeaderError):  # without `to_end` (a tensor's span) a short answer is refused
        HubRangeReader._check_answer("f.safetensors", "span", 0, 100_001, _Answer(status, headers))


@pytest.mark.parametrize("status,headers,start,want", [
    (206, {}, 100, 64),  # no Content-Range
    (206, {"Content-Range": "bytes 100-164/4096"}, 100, 64),  # one byte more than asked
    (206, {"Content-Range": "bytes 0-63/4096"}, 100, 64),  # another span
    (200, {"Content-Length": "4096"}, 0, 64),  # Range ignored: the whole file
    (200, {"Content-Length": "64"}, 100, 64),  # 200 for a span not at the start cannot be that span
    (200, {}, 0, 64),  # unknown length
    (204, {}, 0, 64),
    (304, {}, 0, 64),
])
def test_range_answers_that_are_refused(status, headers, start, want):
    with pytest.raises(HeaderError):
        HubRangeReader._check_answer("f.safetensors", "span", start, want, _Answer(status, headers))
