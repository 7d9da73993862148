"""What `kconvert matrix` reads from the Hub, counted by the stand-in (tests/fake_hub_read.py): each draft's files
are read once per process however many engine rows judge it (`kconvert.source.hub.READ_CACHE`, keyed by the commit
sha), a branch that moves is read at its new commit, and `gather` resolves the drafts concurrently with the
output's order and each draft's own error kept.

huggingface_hub reads HF_ENDPOINT at import, so kconvert runs as a child process pointed at the stand-in.
"""
from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kconvert.source.hub import FIRST_READ, SMALL_FILE_PATTERNS
from kconvert.source.safetensors_header import read_header
from kconvert.schemas import validate
from tests.factories import make_draft
from tests.fake_hub_read import FakeReadHub, hub_read_env

ROOT = Path(__file__).resolve().parent.parent
TARGET = str(ROOT / "examples" / "tiny" / "target")
ROWS = ["vllm:0.32", "vllm:0.33", "sglang:post-25454", "sglang:0.5.23"]


def matrix(refs: list[str], env: dict[str, str], *extra: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "kconvert", "matrix", *refs, "--target", TARGET, "--cache", "off",
                        "--json", *extra], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert r.stdout, r.stderr
    doc = json.loads(r.stdout)
    validate(doc, "matrix")
    return doc


def small_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if any(fnmatch.fnmatch(p.name, pat) for pat in SMALL_FILE_PATTERNS)]


@pytest.mark.parametrize("workers", [1, 2])
def test_each_draft_is_read_once_however_many_engine_rows_judge_it(tmp_path, workers):
    """In one process, or in a pool of 2 (a draft's static cells are one group, run in one worker)."""
    drafts = {f"acme/draft-{i}": make_draft(tmp_path / f"d{i}", "specforge", shards=1 + i % 2) for i in range(3)}
    env = hub_read_env(hub := FakeReadHub(drafts), tmp_path / "hf_home")
    with hub:
        doc = matrix(list(drafts), {**env, "XDG_CACHE_HOME": str(tmp_path / "xdg")}, "--engines", ",".join(ROWS),
                     "--workers", str(workers))
    assert len(doc["cells"]) == len(drafts) * len(ROWS) and not doc["summary"]["error"], doc["summary"]

    # What must be fetched, derived from the files of each draft:
    #   gathering (the driver resolves each draft at `main`, cold HF cache):
    #     1 repo info  +  1 tree listing (to match its allow_patterns)  +  per small file (config.json, the
    #     index): 1 HEAD + 1 GET  (huggingface_hub 2.4's snapshot_download)
    #   every cell (one inspect per draft x row): nothing more to resolve: it reads the draft at the commit gathering
    #     resolved (`org/name@sha`, CellSpec.read_ref), whose small files are in the HF cache
    #   once per draft, the first of its cells (the worker keeps what it read at that commit sha):
    #     per shard: the first range read of its header (bytes 0-100000, which holds the length and the
    #                header: asserted below) = 2 requests (the Hub's 302, then the storage's 206)
    #     per vocabulary map (d2t, t2d) in the shards: one range read = 2 requests (302 + 206)
    gather = once = 0
    for folder in drafts.values():
        shards = sorted(folder.glob("*.safetensors"))
        headers = [read_header(p, p.name) for p in shards]
        assert all(8 + h.header_len <= FIRST_READ for h in headers)  # the first read holds each header whole
        maps = sum(1 for h in headers for name in h.tensors if name in ("d2t", "t2d"))
        assert maps == 2
        gather += 2 + 2 * len(small_files(folder))
        once += 2 * len(shards) + 2 * maps
    assert len(hub.requests) == gather + once, [(q.method, q.path, q.range) for q in hub.requests]
    # and each byte range of each file (by its repo, commit and name: drafts of the same bytes share a blob on
    # the storage) was asked for exactly once
    ranges = [(q.path, q.range) for q in hub.requests if q.server == "hub" and q.range]
    assert len(ranges) == len(set(ranges)) == once // 2
    assert sum(1 for q in hub.requests if q.server == "cdn") == once // 2


def test_a_branch_that_moves_is_read_at_its_new_commit(tmp_path):
    """READ_CACHE keys on the commit sha `main` resolves to, never on `main`: after a push the same process reads
    the new commit's header and vocabulary maps; a read at the branch name itself is never kept."""
    before = make_draft(tmp_path / "before", "specforge")
    after = make_draft(tmp_path / "after", "specforge",
                       tensors=lambda t: t.update({"extra.weight": ("F32", (4,), None)}))
    script = (
        "import json, sys\n"
        "from kconvert.formats.layouts import token_map_names\n"
        "from kconvert.source.hub import HubRangeReader, load_hub\n"
        "for line in sys.stdin:\n"
        "    if line.strip() == 'load':\n"
        "        ck = load_hub('acme/draft', prefetch=token_map_names)\n"
        "        out = {'commit': ck.commit, 'tensors': sorted(ck.tensors)}\n"
        "    else:\n"
        "        r = HubRangeReader.create('acme/draft', 'acme/draft', 'main')\n"
        "        out = {'header': r.header('model.safetensors')[0].decode()}\n"
        "    print(json.dumps(out), flush=True)\n")
    with FakeReadHub({"acme/draft": before}) as hub:
        env = hub_read_env(hub, tmp_path / "hf_home")
        p = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=ROOT, env=env)

        def ask(cmd: str) -> tuple[dict, int]:
            n = len(hub.requests)
            p.stdin.write(cmd + "\n")
            p.stdin.flush()
            return json.loads(p.stdout.readline()), sum(1 for q in hub.requests[n:] if q.server == "cdn")

        try:
            first, read1 = ask("load")
            again, read2 = ask("load")  # the same commit: nothing read from the storage a second time
            branch1, _ = ask("branch")
            new_commit = hub.push("acme/draft", after)
            moved, read3 = ask("load")
            branch2, read4 = ask("branch")
        finally:
            p.stdin.close()
            p.wait(timeout=30)
    assert first["commit"] == again["commit"] != new_commit and first["commit"] in hub.history["acme/draft"]
    assert read1 > 0 and read2 == 0
    assert moved["commit"] == new_commit
    assert "extra.weight" in moved["tensors"] and "extra.weight" not in first["tensors"]
    assert read3 == read1  # the new commit's header and maps, each read once
    assert "extra.weight" not in branch1["header"] and "extra.weight" in branch2["header"]
    assert read4 == 1  # at `main` the header is read again, not taken from what was kept


def test_gather_resolves_the_drafts_at_once_in_order_with_each_drafts_own_error(tmp_path):
    ok = make_draft(tmp_path / "ok", "specforge")
    repos = {f"acme/draft-{i}": ok for i in range(6)}
    refs = ["acme/draft-0", "acme/missing", "acme/draft-1", str(ok), "acme/draft-2@no-such-rev", "acme/draft-3",
            "acme/draft-4", "acme/draft-5"]
    with FakeReadHub(repos, latency=0.05) as hub:
        env = hub_read_env(hub, tmp_path / "hf_home")
        doc = matrix(refs, {**env, "XDG_CACHE_HOME": str(tmp_path / "xdg")}, "--engines", "vllm:0.32",
                     "--workers", "1")
    drafts = doc["drafts"]
    assert [d["draft"] for d in drafts] == refs
    errors = {d["draft"]: d["error"] for d in drafts if d["error"]}
    assert set(errors) == {"acme/missing", "acme/draft-2@no-such-rev"}, errors
    assert "no such repository on the Hub" in errors["acme/missing"]
    assert "no such revision" in errors["acme/draft-2@no-such-rev"]
    assert [d["revision"] for d in drafts if d["source"] == "hub" and not d["error"]] == \
        [hub.commit(r) for r in refs if r.startswith("acme/draft-") and "@" not in r]
    cells = {c["draft"]: c for c in doc["cells"]}
    assert cells["acme/missing"]["state"] == "error" and cells["acme/draft-0"]["state"] != "error"
    # Several drafts were resolved at the same time: one draft alone never has two requests in flight (its one
    # small file, config.json, is a HEAD then a GET after its repo info and tree) and the cells run one after
    # another.
    assert len(small_files(ok)) == 1
    assert hub.max_in_flight > 1


def test_the_read_cache_is_bounded_by_bytes_least_recently_used_out():
    from kconvert.source.hub import ReadCache

    c = ReadCache(budget=1000)
    for i in range(6):
        c.put((f"u{i}", 0, 200), (bytes(200), None))  # 6 x 200 > 1000: the first one put is dropped
    assert c.size == 1000 and len(c) == 5 and c.get(("u0", 0, 200)) is None
    assert c.get(("u1", 0, 200)) is not None  # u1 now the most recently used: u2 goes next
    c.put(("u6", 0, 200), (bytes(200), None))
    assert c.get(("u2", 0, 200)) is None and c.get(("u1", 0, 200)) is not None and c.size == 1000
    c.put(("big", 0, 251), (bytes(251), None))  # more than a quarter of the budget: not kept, nothing dropped
    assert c.get(("big", 0, 251)) is None and len(c) == 5 and c.size == 1000


def test_a_cell_reads_a_hub_draft_at_the_commit_gathering_resolved():
    from kconvert.matrix.spec import CellSpec

    sha = "a" * 40
    assert CellSpec(draft="acme/d", source="hub", revision=sha).read_ref == f"acme/d@{sha}"
    # a revision the user gave stays theirs; a local folder's revision is its content digest, not a Hub ref
    assert CellSpec(draft="acme/d@v2", source="hub", revision=sha).read_ref == "acme/d@v2"
    assert CellSpec(draft="runs/step-1", source="local", revision="b" * 64).read_ref == "runs/step-1"
