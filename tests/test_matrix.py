"""`kconvert matrix`: drafts gathered (folders, globs, --from, Hub ids, Hub search), targets given or inferred with
their evidence, one static cell per draft x engine row with inspect's verdict, scores ranked, the cell cache, the
local executor's contract. Every expected verdict comes from `kconvert inspect` itself (called here per cell),
every ranking from a trace built to follow one draft (tests/score_factories.py, by construction)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kconvert.cli import main
from kconvert.commands.inspect import inspect
from kconvert.matrix import CellCache, MatrixRequest, run_matrix
from kconvert.matrix.executors import Task
from kconvert.matrix.executors.local import LocalExecutor
from kconvert.schemas import validate

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
TARGET = str(TINY / "target")
MLA = str(TINY / "drafts" / "mla-torchspec")
LLAMA = str(TINY / "drafts" / "llama-speculators")


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["matrix", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def matrix_json(capsys, *argv: str) -> tuple[int, dict]:
    rc, out, err = cli(capsys, *argv, "--json")
    doc = json.loads(out)
    validate(doc, "matrix")
    return rc, doc


@pytest.fixture(autouse=True)
def _own_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("KCONVERT_HASH_CACHE", str(tmp_path / "sha256.sqlite"))


def _verdict(res) -> str:
    sev = {f.severity for f in res.findings}
    return "fail" if "error" in sev else "warn" if "warning" in sev else "pass"


def test_every_cell_is_inspects_verdict_on_its_engine_row_and_the_json_is_the_schemas(capsys):
    drafts = sorted(str(p) for p in (TINY / "drafts").iterdir()) + sorted(str(p) for p in (TINY / "broken").iterdir())
    rc, doc = matrix_json(capsys, *drafts, "--target", TARGET, "--engines", "all", "--cache", "off")
    from kconvert.engines.expectations import ALL_ROWS

    assert [e["row"] for e in doc["engines"]] == [f"{r.engine}:{r.version}" for r in ALL_ROWS]
    assert len(doc["cells"]) == len(drafts) * len(ALL_ROWS) == doc["summary"]["cells"]
    for c in doc["cells"]:
        res = inspect(c["draft"], target=TARGET, engine=c["engine"], engine_version=c["engine_version"])
        assert c["state"] == _verdict(res) and c["exit_code"] == res.exit_code, c
        assert c["finding_ids"] == sorted({f.id for f in res.findings}), c
        fixable = [f for f in res.findings if f.ops and f.severity != "info"]
        if c["fix"] is not None:
            assert c["fix"]["certain"] == (not c["fix"]["decisions"])
            if c["fix"]["command"]:
                # the line inspect prints as its next step on the row whose command serves this cell's (issue 48:
                # rows whose fixes write the same output share one, kconvert/matrix/fixes.py), except that it names
                # its engine row and writes its own folder under kconvert-fixed/ (issue #31: outside the draft globs)
                import shlex

                got = shlex.split(c["fix"]["command"])
                engine = got[got.index("--engine") + 1] if "--engine" in got else "vllm"
                version = got[got.index("--engine-version") + 1]
                group = next(g for d in doc["drafts"] for g in d["fixes"] if g["command"] == c["fix"]["command"])
                assert f"{c['engine']}:{c['engine_version']}" in group["rows"] and f"{engine}:{version}" in group["rows"]
                out = got[got.index("-o") + 1]
                assert out.startswith("kconvert-fixed/") and out.endswith(f"-{engine}-{version.replace('/', '-')}")
                res = inspect(c["draft"], target=TARGET, engine=engine, engine_version=version)
                printed = [shlex.split(s["command"]) for s in res.to_dict()["next_steps"]
                           if s["command"].startswith("kconvert fix ")]
                assert printed, res.to_dict()["next_steps"]
                want = printed[0]
                want[want.index("-o") + 1] = out
                if "--engine-version" not in want:
                    want += ["--engine-version", version]
                assert got == want
        else:
            assert not fixable
        assert set(c["finding_ids"]) <= set(doc["rules"]) | {"K000"}
    # exit 1: the shipped broken variants fail on vLLM (inspect exits 1 for each of them)
    assert rc == doc["exit_code"] == 1
    assert all(d["target"] == {"id": TARGET, "state": "given", "evidence": ["--target"]} for d in doc["drafts"])
    assert all(d["revision"].startswith("sha256:") for d in doc["drafts"])


def test_an_unknown_engine_row_is_bad_usage_naming_the_known_rows(capsys):
    rc, out, err = cli(capsys, MLA, "--engines", "vllm:0.35", "--cache", "off")
    assert rc == 2
    assert "known rows: vllm:0.32, vllm:0.32/v1, vllm:0.33, vllm:0.33/v1, vllm:0.34, sglang:pre-25454" in " ".join(
        err.split())
    rc, _, err = cli(capsys, MLA, "--engines", "tensorrt", "--cache", "off")
    assert rc == 2 and "no engine 'tensorrt'" in err
    rc, _, err = cli(capsys, "--cache", "off")
    assert rc == 2 and "no drafts" in err
    rc, out, err = cli(capsys, MLA, "--best", "--cache", "off", "--json")
    assert rc == 2 and "give --trace" in err and json.loads(out)["exit_code"] == 2  # the JSON error object


def test_missing_and_hostile_drafts_are_error_cells_and_the_others_still_run(tmp_path, capsys):
    hostile = tmp_path / "hostile"
    shutil.copytree(MLA, hostile)
    with open(hostile / "model.safetensors", "r+b") as f:  # a header length past the end of the file
        f.write((2 ** 40).to_bytes(8, "little"))
    rc, doc = matrix_json(capsys, str(tmp_path / "missing"), str(hostile), MLA, "--target", TARGET,
                          "--engines", "vllm:0.32", "--cache", "off")
    by = {c["draft"]: c for c in doc["cells"]}
    assert by[str(tmp_path / "missing")]["state"] == "error" and "no such folder" in by[str(tmp_path / "missing")][
        "message"]
    assert by[str(hostile)]["state"] == "error" and by[str(hostile)]["exit_code"] == 2
    assert by[MLA]["state"] == "pass"
    assert rc == 2  # nothing failed, but an input was unreadable (inspect's exit code for it)


def test_a_quoted_glob_expands_and_checkpoints_of_one_run_follow_their_step_numbers(tmp_path, capsys, monkeypatch):
    for step in (10, 2, 1):
        shutil.copytree(MLA, tmp_path / "runs" / "a" / f"epoch_{step}")
    shutil.copytree(MLA, tmp_path / "runs" / "b" / "checkpoint-500")
    monkeypatch.chdir(tmp_path)
    rc, doc = matrix_json(capsys, "runs/*/*", "--target", TARGET, "--engines", "vllm:0.32", "--cache", "off")
    assert [(d["draft"], d["step"]) for d in doc["drafts"]] == [
        ("runs/a/epoch_1", 1), ("runs/a/epoch_2", 2), ("runs/a/epoch_10", 10), ("runs/b/checkpoint-500", 500)]
    assert rc == 0
    rc, out, err = cli(capsys, "runs/*/step_*", "--cache", "off")
    assert rc == 2 and "no folder matches" in err


def test_from_file_takes_comments_and_a_target_per_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the example's verifier path is relative to the repository
    listing = tmp_path / "drafts.txt"
    listing.write_text(f"# the shipped drafts\n{MLA} {TARGET}\n\n{LLAMA}   # no target: inferred\n")
    rc, doc = matrix_json(capsys, "--from", str(listing), "--engines", "vllm:0.32", "--cache", "off")
    t = {d["draft"]: d["target"] for d in doc["drafts"]}
    assert t[MLA] == {"id": TARGET, "state": "given", "evidence": ["--from FILE's second column"]}
    # the speculators draft names its verifier (config.json, written by the example's builder)
    assert t[LLAMA]["state"] == "inferred" and t[LLAMA]["id"] == "examples/tiny/target"
    assert "speculators_config.verifier.name_or_path" in t[LLAMA]["evidence"][0]


def _copy_with_config(src: str, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_the_target_is_inferred_from_the_drafts_own_metadata_with_evidence_and_unknown_is_its_own_state(
        tmp_path, capsys):
    from kconvert.matrix.gather import DraftEntry, infer_target

    card = tmp_path / "carded"
    shutil.copytree(MLA, card)
    (card / "README.md").write_text("---\nbase_model: moonshotai/Kimi-K2.5\nlibrary_name: vllm\n---\n# a draft\n")
    t = infer_target(DraftEntry(draft=str(card), folder=card))
    assert t["state"] == "inferred" and t["id"] == "kimi-k2.5"  # the profile whose hub_id it is
    assert t["evidence"] == ["model card base_model = 'moonshotai/Kimi-K2.5'",
                             "moonshotai/Kimi-K2.5 is the built-in profile kimi-k2.5"]
    named = tmp_path / "my-Kimi-K25-eagle3"
    shutil.copytree(MLA, named)
    t = infer_target(DraftEntry(draft=str(named), folder=named))
    assert t["id"] == "kimi-k2.5" and "'Kimi-K25'" in t["evidence"][0]
    # two sources that disagree: no guess
    both = _copy_with_config(LLAMA, tmp_path / "both", lambda c: c["speculators_config"]["verifier"].update(
        name_or_path="meta-llama/Llama-3.1-8B-Instruct"))
    (both / "README.md").write_text("---\nbase_model: Qwen/Qwen3-8B\n---\n")
    t = infer_target(DraftEntry(draft=str(both), folder=both))
    assert t["id"] is None and t["state"] == "unknown" and "disagree" in t["evidence"][-1]
    # nothing names it: every cell is target-less checks, skipped with the message (never a guess)
    bare = tmp_path / "bare"
    shutil.copytree(MLA, bare)
    rc, doc = matrix_json(capsys, str(bare), "--engines", "vllm:0.32,sglang:0.5.23", "--cache", "off")
    assert doc["drafts"][0]["target"]["state"] == "unknown"
    assert [c["state"] for c in doc["cells"]] == ["skipped", "skipped"]
    assert all("target unknown" in c["message"] and c["target"] is None for c in doc["cells"])
    assert rc == 0


def test_a_hub_id_resolves_through_the_offline_cache_to_its_commit(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    from tests.hub_cache import populate_cache

    cache = tmp_path / "hub"
    snap = populate_cache(cache, "acme/kimi-k2.5-eagle3", Path(MLA))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    rc, doc = matrix_json(capsys, "acme/kimi-k2.5-eagle3", "acme/not-cached", "--engines", "vllm:0.32",
                          "--cache", "off")
    d = {x["draft"]: x for x in doc["drafts"]}
    assert d["acme/kimi-k2.5-eagle3"]["source"] == "hub" and d["acme/kimi-k2.5-eagle3"]["revision"] == snap.name
    assert d["acme/kimi-k2.5-eagle3"]["target"]["id"] == "kimi-k2.5"  # by its name, with the evidence
    cells = {c["draft"]: c for c in doc["cells"]}
    res = inspect("acme/kimi-k2.5-eagle3", target="kimi-k2.5", engine="vllm", engine_version="0.32")
    assert cells["acme/kimi-k2.5-eagle3"]["finding_ids"] == sorted({f.id for f in res.findings})
    assert cells["acme/not-cached"]["state"] == "error" and "not in the Hugging Face cache" in \
        cells["acme/not-cached"]["message"]


def test_hub_search_and_author_list_models_through_huggingface_hub(tmp_path):
    from tests.fake_hub_read import FakeReadHub, hub_read_env

    repos = {"acme/kimi-k2.5-eagle3": Path(MLA), "acme/llama-draft": Path(LLAMA), "other/kimi-k2.5-eagle3": Path(MLA)}
    with FakeReadHub(repos) as hub:
        env = {**hub_read_env(hub, tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
        r = subprocess.run([sys.executable, "-m", "kconvert", "matrix", "--hub-search", "kimi", "--hub-author", "acme",
                            "--engines", "vllm:0.32", "--cache", "off", "--json"], capture_output=True, text=True,
                           cwd=ROOT, env=env, timeout=120)
        asked = [q for q in hub.requests if q.path == "/api/models"]
    doc = json.loads(r.stdout)
    validate(doc, "matrix")
    assert [d["draft"] for d in doc["drafts"]] == ["acme/kimi-k2.5-eagle3"], r.stderr
    assert doc["drafts"][0]["revision"] == hub.commit("acme/kimi-k2.5-eagle3")
    assert len(asked) == 1 and doc["drafts"][0]["target"]["id"] == "kimi-k2.5"  # its name names it
    # the same files judged against that target, read locally: the cell read from the Hub says the same
    res = inspect(MLA, target="kimi-k2.5", engine="vllm", engine_version="0.32")
    assert doc["cells"][0]["state"] == _verdict(res)
    # (K003, info: "tensor headers read from the Hub", is the one note a Hub read adds; tests/test_hub_remote.py)
    assert [i for i in doc["cells"][0]["finding_ids"] if i != "K003"] == sorted({f.id for f in res.findings})


def test_the_second_run_computes_only_the_changed_cells_and_refresh_recomputes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(MLA, a)
    shutil.copytree(LLAMA, b)
    cache = CellCache(tmp_path / "cells.sqlite")
    req = MatrixRequest(drafts=[str(a), str(b)], target=TARGET, engines="vllm:0.32,sglang:0.5.23")
    first = run_matrix(req, cache=cache)
    assert first["timings"]["computed"] == 4 and not any(c["cached"] for c in first["cells"])
    again = run_matrix(req, cache=cache)
    assert again["timings"]["computed"] == 0 and all(c["cached"] for c in again["cells"])
    strip = lambda doc: [{k: v for k, v in c.items() if k not in ("cached", "seconds")} for c in doc["cells"]]
    assert strip(again) == strip(first)
    # b changes (its config): only its two cells are computed again, and they say what inspect now says
    cfg = json.loads((b / "config.json").read_text())
    cfg["draft_vocab_size"] = cfg["draft_vocab_size"] + 1
    (b / "config.json").write_text(json.dumps(cfg))
    third = run_matrix(req, cache=cache)
    assert third["timings"]["computed"] == 2
    assert {c["draft"] for c in third["cells"] if not c["cached"]} == {str(b)}
    for c in third["cells"]:
        res = inspect(c["draft"], target=TARGET, engine=c["engine"], engine_version=c["engine_version"])
        assert c["finding_ids"] == sorted({f.id for f in res.findings})
    forced = run_matrix(MatrixRequest(**{**req.__dict__, "refresh": True}), cache=cache)
    assert forced["timings"]["computed"] == 4
    cache.close()


def test_cells_judged_by_other_code_are_not_served_from_the_cache(tmp_path, monkeypatch):
    """The version stays "0.1.0" across every change of a checkout: the code's own digest is in the key."""
    import kconvert.matrix.spec as spec

    a = tmp_path / "a"
    shutil.copytree(MLA, a)
    cache = CellCache(tmp_path / "cells.sqlite")
    req = MatrixRequest(drafts=[str(a)], target=TARGET, engines="vllm:0.32,sglang:0.5.23")
    assert run_matrix(req, cache=cache)["timings"]["computed"] == 2
    assert run_matrix(req, cache=cache)["timings"]["computed"] == 0
    monkeypatch.setattr(spec, "_own_code", lambda: "0" * 64)  # as after a `git pull` that changed a rule
    assert run_matrix(req, cache=cache)["timings"]["computed"] == 2
    cache.close()


def test_the_code_digest_follows_content_not_file_times_or_bytecode(tmp_path):
    import os
    from kconvert.matrix.spec import PACKAGE, code_digest

    root = tmp_path / "pkg"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    base = code_digest(root)
    assert base == code_digest(PACKAGE)  # a fresh copy of the same files: the same cells
    rule = root / "rules" / "vocab_mapping.py"
    os.utime(rule, (1, 1))
    (root / "rules" / "__pycache__").mkdir(exist_ok=True)
    (root / "rules" / "__pycache__" / "vocab_mapping.cpython-311.pyc").write_bytes(b"stale bytecode")
    assert code_digest(root) == base
    rule.write_text(rule.read_text() + "# one more line\n")
    assert code_digest(root) != base
    profile = root / "targets" / "profiles" / "kimi-k2.5.json"
    rule.write_text((PACKAGE / "rules" / "vocab_mapping.py").read_text())
    assert code_digest(root) == base
    profile.write_text(profile.read_text().replace("163840", "163841"))
    assert code_digest(root) != base  # a target profile is data the rules judge by


_WRITER = """
import sys
from kconvert.matrix.cache import CellCache
c = CellCache(sys.argv[1])
for i in range(int(sys.argv[3])):
    c.put(f"{sys.argv[2]}-{i}", {"state": "pass", "draft": sys.argv[2], "i": i, "pad": "x" * 2000})
c.close()
"""


def test_the_cache_is_safe_under_two_concurrent_writer_processes(tmp_path):
    import sqlite3

    db = tmp_path / "cells.sqlite"
    n = 300
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(db), who, str(n)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for who in ("p1", "p2")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    con = sqlite3.connect(str(db))
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT COUNT(*) FROM cells").fetchone()[0] == 2 * n
    con.close()
    cache = CellCache(db)
    assert cache.get("p1-299")["i"] == 299 and cache.get("p2-0")["draft"] == "p2"
    cache.close()


def test_a_pool_of_two_gives_the_document_one_worker_gives(tmp_path):
    req = MatrixRequest(drafts=[str(p) for p in sorted((TINY / "drafts").iterdir())], target=TARGET,
                        engines="vllm:0.32,sglang:post-32334")
    one = run_matrix(req, executor=LocalExecutor(1))
    two = run_matrix(req, executor=LocalExecutor(2))

    def same(doc):
        d = {k: v for k, v in doc.items() if k != "timings"}
        d["cells"] = [{k: v for k, v in c.items() if k != "seconds"} for c in d["cells"]]
        return d

    assert same(one) == same(two)


def _boom(arg):
    if arg == "bad":
        raise ValueError("a cell that raised")
    if arg == "die":
        os._exit(9)  # the worker process dies
    if arg == "stop":
        raise KeyboardInterrupt
    return {"arg": arg}


@pytest.mark.parametrize("workers", [1, 2])
def test_the_local_executor_keeps_the_contract_errors_are_reported_never_raised(workers):
    got, errors = {}, {}
    tasks = [Task(key=k, fn=_boom, arg=k) for k in ("a", "bad", "b")] + (
        [Task(key="die", fn=_boom, arg="die")] if workers > 1 else [])
    LocalExecutor(workers).run(tasks, on_result=got.__setitem__, on_error=errors.__setitem__)
    assert got == {"a": {"arg": "a"}, "b": {"arg": "b"}}
    assert errors["bad"] == "ValueError: a cell that raised"
    if workers > 1:
        assert "worker process died" in errors["die"]


def _pid(arg):
    return {**_boom(arg), "pid": os.getpid()}


def test_a_group_runs_in_one_worker_and_each_of_its_tasks_keeps_its_own_result_or_error():
    """The static cells of one draft are a group (they share the worker's Hub read cache): each still gets its
    own result or error, and a worker dying under a group costs only the task that kills it."""
    def run(args: dict[str, str]) -> tuple[dict, dict]:
        got, errors = {}, {}
        tasks = [Task(key=k, fn=_pid, arg=a, group=k[0]) for k, a in args.items()]
        LocalExecutor(2).run(tasks, on_result=got.__setitem__, on_error=errors.__setitem__)
        return got, errors

    got, errors = run({"x0": "x0", "x1": "bad", "x2": "x2", "y0": "y0", "y1": "y1", "y2": "y2"})
    assert set(got) == {"x0", "x2", "y0", "y1", "y2"} and errors == {"x1": "ValueError: a cell that raised"}
    assert got["x0"]["pid"] == got["x2"]["pid"] and got["y0"]["pid"] == got["y1"]["pid"] == got["y2"]["pid"]
    # a death breaks the pool (whatever ran in it is run again, each task alone): only the killer is an error
    got, errors = run({"x0": "x0", "x1": "x1", "z0": "z0", "z1": "die", "z2": "z2"})
    assert set(got) == {"x0", "x1", "z0", "z2"} and list(errors) == ["z1"] and "worker process died" in errors["z1"]


def test_on_keyboard_interrupt_the_executor_re_raises_after_what_was_delivered():
    got = {}
    tasks = [Task(key=k, fn=_boom, arg=k) for k in ("a", "stop", "b")]
    with pytest.raises(KeyboardInterrupt):
        LocalExecutor(1).run(tasks, on_result=got.__setitem__, on_error=lambda k, m: None)
    assert got == {"a": {"arg": "a"}}  # nothing started after the interrupt


def test_executor_ray_without_ray_installed_exits_3_naming_the_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as on a core install
    rc, out, err = cli(capsys, MLA, "--executor", "ray", "--cache", "off")
    assert rc == 3 and "pip install 'kconvert-eagle3[ray]'" in err


def test_best_prints_the_draft_the_trace_follows_and_never_ranks_a_static_fail(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from tests.factories import make_draft
    from tests.score_factories import HAND_COUNTERS, constant_proposer, hand_pattern, pattern_trace

    runs = tmp_path / "runs"
    # step-200 proposes z everywhere, step-100 a token the trace never holds; the trace is hand_pattern's, whose
    # verify steps tests/score_factories.py derives by hand: 19 drafts, 18 accepted for z, none for the other
    _, z = constant_proposer(runs / "step-200")
    _, never = constant_proposer(runs / "step-100", token=0)
    assert never != z
    checked, _ = hand_pattern(z, z + 1)
    trace = pattern_trace(tmp_path / "trace", checked, avoid={z, z + 1, never})
    # ids in the output convention on a TorchSpec draft whose first id is 1: K404, an error on vLLM
    make_draft(runs / "step-300", "torchspec", config=lambda c: (
        c.pop("eagle_aux_hidden_state_layer_ids"), c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[1, 4, 6])))
    monkeypatch.chdir(tmp_path)
    args = ["runs/*", "--trace", str(trace), "--engines", "vllm:0.32", "--threads", "1", "--cache",
            str(tmp_path / "cells.sqlite")]
    rc, doc = matrix_json(capsys, *args)
    assert [d["draft"] for d in doc["drafts"]] == ["runs/step-100", "runs/step-200", "runs/step-300"]
    d = {x["draft"]: x for x in doc["drafts"]}
    assert doc["ranking"]["order"] == ["runs/step-200", "runs/step-100"] and doc["ranking"]["best"] == "runs/step-200"
    assert d["runs/step-200"]["score"]["acceptance_length"] == pytest.approx(
        1 + HAND_COUNTERS["accepted"] / HAND_COUNTERS["drafts"])
    assert d["runs/step-200"]["score"]["per_position"] == pytest.approx(
        [n / HAND_COUNTERS["drafts"] for n in HAND_COUNTERS["accepted_per_pos"]])
    assert d["runs/step-100"]["score"]["acceptance_length"] == 1.0  # 19 drafts, none accepted
    assert d["runs/step-300"]["rank"] is None and d["runs/step-300"]["score"] is None
    assert "K404" in d["runs/step-300"]["error"]
    rc, out, err = cli(capsys, *args, "--best")  # the scores come from the cache now
    assert (rc, out) == (0, "runs/step-200\n")


class _InterruptedAfterOne:
    """The local executor on the first task, then the KeyboardInterrupt a SIGINT raises while the next one runs."""

    name = "local"

    def run(self, tasks, *, on_result, on_error):
        LocalExecutor(1).run(tasks[:1], on_result=on_result, on_error=on_error)
        raise KeyboardInterrupt


def test_an_interrupted_run_keeps_the_cells_it_finished_and_caches_only_those(tmp_path):
    cache = CellCache(tmp_path / "cells.sqlite")
    req = MatrixRequest(drafts=[MLA, LLAMA], target=TARGET, engines="vllm:0.32,vllm:0.33")
    doc = run_matrix(req, executor=_InterruptedAfterOne(), cache=cache)
    validate(doc, "matrix")
    assert doc["interrupted"] is True and len(doc["cells"]) == 4
    done = [c for c in doc["cells"] if c["state"] != "error"]
    assert len(done) == 1 and len(cache) == 1
    assert all(c["message"] == "interrupted before this cell finished" for c in doc["cells"] if c not in done)
    # the next run takes the finished cell from the cache and computes the three others
    again = run_matrix(req, cache=cache)
    assert again["timings"]["computed"] == 3 and "interrupted" not in again
    cache.close()


@pytest.mark.parametrize("name, step", [
    ("runs/a/epoch_3", 3), ("out/step-12000", 12000), ("ckpts/checkpoint-500", 500), ("x/global_step1200", 1200),
    ("m/iter_0004000", 4000), ("runs/epoch_2/draft", 2), ("AQ-MedAI/Kimi-K25-eagle3", None), ("drafts/v2", None)])
def test_the_step_is_the_number_a_checkpoints_name_gives_it(name, step):
    from kconvert.matrix.gather import step_of

    assert step_of(name) == step


def test_an_empty_hub_search_is_refused_by_the_command_and_the_library_alike(capsys):
    from kconvert.errors import UsageError
    from kconvert.matrix import matrix

    rc, out, err = cli(capsys, "--hub-search", " ", "--cache", "off")
    assert rc == 2 and "--hub-search: give the text to search for" in err
    with pytest.raises(UsageError, match="^--hub-search: give the text to search for$"):
        matrix(hub_search=" ", cache="off", isolated=True)
