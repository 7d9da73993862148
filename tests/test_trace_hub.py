"""Traces on the Hub, the format's version and the size of a trace (issue 24, items 3 and 4).

- `kconvert trace ... --push org/name` (its `--help` example, run as printed) commits the trace to `FakeHub`
  (tests/test_push.py) as a dataset repository; the committed files are served back by `FakeReadHub`
  (tests/fake_hub_read.py) and `kconvert score --trace org/name` gives the figures of the local folder, online
  and then offline from the cache (HF_HUB_OFFLINE=1, no request);
- a trace of a newer major format version is refused (exit 2, naming the kconvert that reads it), locally and
  from the Hub; a 1.0 trace written by the code before the versioning (tests/data/trace-1.0) still opens;
- `--estimate` against a derivation written out here (Kimi-K2.5 from its profile) and against the bytes of
  traces the tests record; `--for-drafts` and shards give the same score as the full trace.

The traces are recorded from the shipped tiny example in float32 by today's HF path with 4 prompts of 16 tokens
(~3 s each in-process here).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from kconvert.errors import InputError  # noqa: E402
from tests import printed  # noqa: E402
from tests.fake_hub_read import FakeReadHub, hub_read_env  # noqa: E402
from tests.hub_cache import populate_cache  # noqa: E402
from tests.test_push import FakeHub, hub_env  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
REPO = "my-org/tiny-trace"
DRAFTS = ("drafts/mla-torchspec", "drafts/llama-speculators", "broken/aux-ids-sglang-convention")
COMMON = ["--max-prompts", "4", "--max-tokens", "16", "--dtype", "float32", "--threads", "1"]


def _cli(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    # one torch thread, as the in-process runs: torch's default (every core) crawls on a shared machine
    env = {**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def _main(args: list[str], cwd: Path = ROOT) -> printed.Run:
    return printed.run(args, cwd)


def _counters(doc: dict) -> dict:
    s = doc["score"]
    return {"acceptance": s["acceptance"], "counters": s["counters"], "reading": s["reading"]["aux_ids"]}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """(full, reduced): every stream, and only the drafts' streams in 100 kB shards."""
    base = tmp_path_factory.mktemp("trace-hub")
    full, reduced = base / "full", base / "reduced"
    r = _main(["trace", str(TINY / "target"), "-o", str(full), "--layers", "all", *COMMON])
    assert r.rc == 0, r.err
    drafts = ",".join(str(TINY / d) for d in DRAFTS)
    r = _main(["trace", str(TINY / "target"), "-o", str(reduced), "--for-drafts", drafts, "--shard-size", "100kB",
               *COMMON])
    assert r.rc == 0, r.err
    return full, reduced


def _data_files(trace: Path) -> list[Path]:
    d = json.loads((trace / "trace.json").read_text())["data"]
    return [trace / f["file"] for f in d.get("files") or [d]]


def _tensor_bytes(path: Path) -> int:
    """A safetensors file's data bytes: its size less the 8-byte length and the header (safetensors' framing)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    return path.stat().st_size - 8 - n


# ------------------------------------------------------------------------------------------- the size ---

def test_reduced_trace_gives_the_same_score_as_the_full_one(traces):
    """Only the drafts' streams, in shards: fewer bytes, the very same figures for every draft (the broken one
    measured with --skip-static)."""
    full, reduced = traces
    doc = json.loads((reduced / "trace.json").read_text())
    # mla-torchspec and llama-speculators declare [2, 5, 7] (their config.json), fed as is by vLLM 0.32; the
    # SGLang-convention variant declares [1, 4, 6], which vLLM feeds as written (inspect's K404 is about that)
    assert doc["layers"] == [1, 2, 4, 5, 6, 7]
    assert doc["version"] == "1.1" and len(_data_files(reduced)) > 1
    assert sum(p.stat().st_size for p in _data_files(reduced)) < 0.75 * _data_files(full)[0].stat().st_size
    for d in DRAFTS:
        got = []
        for t in (full, reduced):
            r = _main(["score", str(TINY / d), "--trace", str(t), "--threads", "1", "--json", "--skip-static"])
            assert r.rc in (0, 1), r.err
            got.append(_counters(json.loads(r.out)))
        assert got[0] == got[1], d
        assert got[0]["counters"]["drafts"] > 0


def test_estimate_of_kimi_k25_is_the_arithmetic_written_out():
    """From the kimi-k2.5 profile alone (moonshotai/Kimi-K2.5 text_config: 61 layers, hidden 7168, vocab 163840;
    bf16). Default layers: vLLM's default aux ids (2, L//2, L-3) = (2, 30, 58) each ±1 (kconvert trace's
    default, so shifted readings can be tried) = 9 streams. 96 prompts (the shipped sets)."""
    L, H, V, bf16 = 61, 7168, 163840, 2
    layers = sorted({c + s for c in (2, L // 2, L - 3) for s in (-1, 0, 1)})
    assert layers == [1, 2, 3, 29, 30, 31, 57, 58, 59]
    for N in (2_000, 20_000):
        hidden = N * len(layers) * H * bf16  # 2,000: 258,048,000; 20,000: 2,580,480,000
        U = min(V, 2 * N)  # at most: every token and every greedy next token distinct
        embed = U * H * bf16
        index = (2 * N + 3 * 96 + 1 + U) * 8  # input_ids, next_token; seq_offsets, prompt/output lens; embed_ids
        r = _main(["trace", "kimi-k2.5", "--estimate", "--positions", str(N), "--json"])
        assert r.rc == 0, r.err
        est = json.loads(r.out)
        assert est["layers"] == layers
        assert est["bytes"] == {"hidden": hidden, "embed_tokens": embed, "lm_head": 0, "index": index}
        assert est["total_bytes"] == hidden + embed + index
        assert est["per_position_bytes"] == len(layers) * H * bf16 + 16
    assert hidden + embed + index == 3_154_562_312  # 20,000 positions: 3.15 GB
    r = _main(["trace", "kimi-k2.5", "--estimate", "--positions", "2000", "--lm-head", "--json"])
    assert json.loads(r.out)["bytes"]["lm_head"] == V * H * bf16  # 2,348,810,240: the head dwarfs 2k positions


def test_estimate_is_the_size_of_the_recorded_trace(traces):
    """Given the recorded counts (positions, sequences, distinct tokens), the estimate is the data bytes of the
    files on disk to the byte; from the positions alone it bounds them."""
    from kconvert.trace.estimate import estimate

    for t in traces:
        doc = json.loads((t / "trace.json").read_text())
        headers = [json.loads(_read_header(p)) for p in _data_files(t)]
        U = next(h["embed_ids"]["shape"][0] for h in headers if "embed_ids" in h)
        on_disk = sum(_tensor_bytes(p) for p in _data_files(t))
        kw = dict(positions=doc["num_positions"], sequences=doc["num_sequences"], layers=doc["layers"],
                  dtype="float32")
        assert estimate(str(TINY / "target"), unique_tokens=U, **kw).total == on_disk
        assert estimate(str(TINY / "target"), **kw).total >= on_disk


def _read_header(p: Path) -> bytes:
    with open(p, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return f.read(n)


def test_estimate_and_push_trace_help_examples_run_as_printed(tmp_path, traces):
    lines = [line for command, line in printed.iter_help_examples() if command == "trace" and "--estimate" in line]
    assert len(lines) >= 2
    for line in lines:
        r = _main(shlex.split(line)[1:], ROOT)
        assert r.rc == 0, (line, r.err)
        assert "total" in r.out and "bytes" in r.out, r.out
    shutil.copytree(traces[1], tmp_path / "tiny-trace")
    line = next(ln for c, ln in printed.iter_help_examples() if c == "push-trace" and "--dry-run" in ln)
    r = _main(shlex.split(line)[1:], tmp_path)
    assert r.rc == 0, (line, r.err)
    assert "dry run: nothing uploaded" in r.out and "kconvert-trace" in r.out


def test_push_refuses_a_trace_whose_data_changed(tmp_path, traces):
    t = tmp_path / "t"
    shutil.copytree(traces[1], t)
    shard = _data_files(t)[-1]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    r = _main(["push-trace", str(t), REPO, "--dry-run"], tmp_path)
    assert r.rc == 2 and "does not match trace.json" in r.err, r.err


# -------------------------------------------------------------------------------------------- the Hub ---

def test_a_trace_pushed_to_the_hub_scores_as_the_local_folder(tmp_path, monkeypatch):
    """The `--push` help example as printed: one dataset commit of exactly trace.json, its shards and the card;
    read back by `score --trace org/name` through huggingface_hub, online then offline, with the local figures."""
    line = next(ln for c, ln in printed.iter_help_examples() if c == "trace" and "--push" in ln)
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(ROOT / "examples", work / "examples")
    with FakeHub() as hub:
        r = _cli(shlex.split(line)[1:], hub_env(hub), cwd=work)
        assert r.returncode == 0, r.stderr
        header, files, req = hub.commit()
    local = work / "tiny-trace"
    assert req["path"] == f"/api/datasets/{REPO}/commit/main"
    create = json.loads(hub.requests[0]["body"])
    assert create["type"] == "dataset" and create["name"] == "tiny-trace"
    want = {p.name for p in _data_files(local)} | {"trace.json", "README.md"}
    assert set(files) == want and len(want) > 3  # sharded (200 kB), nothing else from the folder
    for name in want - {"README.md"}:
        assert hashlib.sha256(files[name]).hexdigest() == hashlib.sha256((local / name).read_bytes()).hexdigest()
    from huggingface_hub import DatasetCard

    card = DatasetCard(files["README.md"].decode())
    doc = json.loads((local / "trace.json").read_text())
    meta = card.data.to_dict()
    assert meta["viewer"] is False and "kconvert-trace" in meta["tags"]
    kt = meta["kconvert_trace"]
    assert (kt["target"], kt["dtype"], kt["layers"], kt["num_positions"]) == (
        doc["target"]["source"], "float32", doc["layers"], doc["num_positions"])
    assert kt["bytes"] == sum(p.stat().st_size for p in _data_files(local))
    assert doc["recorder"]["backend"] in kt["recorder"] and "`all`: 4 prompts" in card.text

    served = tmp_path / "served"
    served.mkdir()
    for name, data in files.items():
        (served / name).write_bytes(data)
    draft = str(TINY / "drafts" / "mla-torchspec")
    args = ["score", draft, "--threads", "1", "--json"]
    base = _main(args + ["--trace", str(local)])
    assert base.rc == 0, base.err
    home = tmp_path / "hf_home"
    with FakeReadHub({f"datasets/{REPO}": served}) as rhub:
        online = _cli(args + ["--trace", REPO], hub_read_env(rhub, home), cwd=tmp_path)
        seen = len(rhub.requests)
        assert online.returncode == 0, online.stderr
        offline = _cli(args + ["--trace", REPO], hub_read_env(rhub, home, offline=True), cwd=tmp_path)
        assert offline.returncode == 0, offline.stderr
        assert len(rhub.requests) == seen  # the cache alone
        commit = rhub.commit(f"datasets/{REPO}")
    assert any(q.path.startswith(f"/api/datasets/{REPO}/") for q in rhub.requests)
    _offline(monkeypatch, home / "hub")  # in this process: the cache the runs above filled, pinned to the commit
    pinned = _main(args + ["--trace", f"{REPO}@{commit}"], tmp_path)
    assert pinned.rc == 0, pinned.err
    from kconvert.schemas import validate

    for doc_ in (json.loads(online.stdout), json.loads(offline.stdout), json.loads(pinned.out)):
        validate(doc_, "report")
        assert _counters(doc_) == _counters(json.loads(base.out))
        assert doc_["score"]["trace"]["hub"]["repo_id"] == REPO
        assert doc_["score"]["trace"]["sha256"] == json.loads(base.out)["score"]["trace"]["sha256"]


def test_an_existing_folder_wins_over_a_hub_id(tmp_path, traces, monkeypatch):
    from kconvert.trace.format import open_trace

    shutil.copytree(traces[1], tmp_path / REPO)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with open_trace(REPO) as tr:
        assert tr.hub is None and tr.root == Path(REPO)


def _offline(monkeypatch, cache: Path) -> None:
    """huggingface_hub in this process reading only `cache` (its constants are read at import: set them too)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_offline_with_an_empty_cache_is_one_line(tmp_path, monkeypatch):
    _offline(monkeypatch, tmp_path / "hub")
    r = _main(["score", str(TINY / "drafts" / "mla-torchspec"), "--trace", REPO], tmp_path)
    assert r.rc == 2 and "Traceback" not in r.err
    assert "not in the Hugging Face cache" in r.err and "HF_HUB_OFFLINE is set" in r.err, r.err


# ---------------------------------------------------------------------------------------- the version ---

def _newer_major(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    doc = json.loads((dst / "trace.json").read_text())
    doc["version"] = "2.0"
    doc["layout_of_2_0"] = {"something": "a 1.x reader does not know"}
    (dst / "trace.json").write_text(json.dumps(doc))
    return dst


def test_a_newer_major_version_is_refused_naming_the_kconvert_that_reads_it(tmp_path, traces, monkeypatch):
    from kconvert.trace.format import open_trace

    t = _newer_major(traces[1], tmp_path / "t2")
    with pytest.raises(InputError, match=r"trace format 2\.0 is newer than this kconvert .* up to 1\.1\); it was "
                                         r"written by kconvert \S+, which reads it"):
        open_trace(t)
    # the same from the Hub, here from huggingface_hub's cache (as a download leaves it; tests/hub_cache.py)
    populate_cache(tmp_path / "hub", REPO, t, repo_type="dataset")
    _offline(monkeypatch, tmp_path / "hub")
    r = _main(["score", str(TINY / "drafts" / "mla-torchspec"), "--trace", REPO], tmp_path)
    assert r.rc == 2 and "Traceback" not in r.err, r.err
    assert "trace format 2.0 is newer" in r.err and "pip install -U" in r.err, r.err


def test_a_newer_minor_version_is_read(tmp_path, traces):
    from kconvert.trace.format import open_trace

    t = tmp_path / "t12"
    shutil.copytree(traces[1], t)
    doc = json.loads((t / "trace.json").read_text())
    doc["version"], doc["added_in_1_2"] = "1.2", [1, 2]
    (t / "trace.json").write_text(json.dumps(doc))
    with open_trace(t) as tr:
        assert tr.format_version == (1, 2) and tr.meta.layers == doc["layers"]


def test_a_trace_written_before_the_versioning_reads_as_1_0():
    from kconvert.trace.format import open_trace

    legacy = ROOT / "tests" / "data" / "trace-1.0"
    assert json.loads((legacy / "trace.json").read_text())["version"] == 1  # what the 1.0 writer wrote
    with open_trace(legacy) as tr:
        assert tr.format_version == (1, 0) and tr.summary()["format_version"] == "1.0"
        s = tr.sequence(1)
        assert (s.prompt_len, s.output_len, s.length) == (4, 5, 13)
        assert tuple(tr.hidden(s, 5).shape) == (13, 64)
