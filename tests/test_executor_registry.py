"""Executors chosen by name (kconvert/matrix/executors/__init__.py: `register`, `make_executor`): an executor
registered from outside the package runs a real matrix through `kconvert matrix --executor NAME`, receives the
options it was given, and yields the document the default local executor yields; the refusals of the two
shipped executors keep their messages and exit codes. Two tiny drafts on one engine row, static cells only (no
Ray, no engine)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kconvert.cli import main
from kconvert.matrix import executors
from kconvert.matrix.executors import ExecutorOptions, register
from kconvert.schemas import validate

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
DRAFTS = [str(TINY / "drafts" / "mla-torchspec"), str(TINY / "drafts" / "llama-speculators")]
TINY_MATRIX = [*DRAFTS, "--target", str(TINY / "target"), "--engines", "vllm:0.32,sglang:post-32334",
               "--cache", "off", "--json"]


class Recording:
    """Runs each task in this process, in reverse order (so the document's order cannot come from the
    executor's), and keeps what it was made with and what it was given."""

    name = "recording"

    def __init__(self, options: ExecutorOptions):
        self.options = options
        self.keys: list[str] = []

    def run(self, tasks, *, on_result, on_error):
        for t in reversed(tasks):
            self.keys.append(t.key)
            on_result(t.key, t.fn(t.arg))


@pytest.fixture
def recording(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("KCONVERT_HASH_CACHE", str(tmp_path / "sha256.sqlite"))
    made: list[Recording] = []

    @register("recording")
    def create(options: ExecutorOptions) -> Recording:
        made.append(Recording(options))
        return made[-1]

    yield made
    executors.FACTORIES.pop("recording", None)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["matrix", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def comparable(doc: dict) -> dict:
    d = {k: v for k, v in doc.items() if k != "timings"}
    d["cells"] = [{k: v for k, v in c.items() if k != "seconds"} for c in d["cells"]]
    return d


def test_a_registered_executor_runs_the_matrix_and_gives_the_local_executors_document(capsys, recording):
    rc, out, err = run(capsys, *TINY_MATRIX, "--executor", "recording", "--workers", "3")
    doc = json.loads(out)
    validate(doc, "matrix")
    (ex,) = recording
    assert ex.options == ExecutorOptions(workers=3, address=None, runtime_env=None)
    assert len(ex.keys) == len(set(ex.keys)) == 4 == len(doc["cells"])  # 2 drafts x 2 rows, each cell once
    assert doc["timings"]["executor"] == "recording"
    rc_local, out_local, _ = run(capsys, *TINY_MATRIX)
    local = json.loads(out_local)
    assert local["timings"]["executor"] == "local"
    assert comparable(doc) == comparable(local) and rc == rc_local


def test_the_library_call_takes_a_registered_name_too(recording):
    from kconvert.matrix import matrix

    doc = matrix(DRAFTS[:1], target=str(TINY / "target"), engines="vllm:0.32", isolated=True, cache="off",
                 executor="recording", workers=2)
    assert [e.options.workers for e in recording] == [2] and len(recording[0].keys) == len(doc["cells"]) == 1


def test_an_unknown_name_lists_every_executor_including_a_registered_one(capsys, recording):
    rc, out, err = run(capsys, DRAFTS[0], "--executor", "nope", "--cache", "off")
    assert rc == 2 and "--executor 'nope': choose local, ray or recording" in " ".join(err.split())


def test_the_two_shipped_executors_are_named_as_before(capsys):
    rc, out, err = run(capsys, DRAFTS[0], "--executor", "nope", "--cache", "off")
    assert rc == 2 and "--executor 'nope': choose local or ray" in " ".join(err.split())


def test_one_name_cannot_be_registered_twice(recording):
    with pytest.raises(ValueError, match="registered twice"):
        register("recording")(lambda options: None)


@pytest.mark.parametrize("argv, message", [
    (["--ray-address", "auto"], "--ray-address and --ray-runtime-env go with --executor ray"),
    (["--ray-runtime-env", "{}"], "--ray-address and --ray-runtime-env go with --executor ray"),
    (["--executor", "ray", "--ray-runtime-env", "{pip"], "--ray-runtime-env: not JSON: "),
    (["--executor", "ray", "--ray-runtime-env", '["vllm"]'],
     "--ray-runtime-env: a JSON object, e.g. '{\"pip\": [\"vllm==0.33.0\"]}'"),
])
def test_the_ray_options_are_refused_where_they_do_not_apply_before_ray_is_needed(capsys, monkeypatch, argv,
                                                                                   message):
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # a core install: the refusal comes first
    rc, out, err = run(capsys, DRAFTS[0], "--cache", "off", *argv)
    assert rc == 2 and message in " ".join(err.split())
