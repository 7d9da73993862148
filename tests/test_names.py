"""One definition of file names and suffixes (kconvert.source.names): inspect, fix and push agree on what a pickle
file is. Before, `.pickle` was a pickle to the push gate only: inspect did not flag `optimizer.pickle`, fix copied
it, and push refused the folder fix had just written."""
from __future__ import annotations

from pathlib import Path

import pytest

from kconvert.commands.fix import fix
from kconvert.commands.push import push
from kconvert.commands.inspect import inspect
from kconvert.source import names
from tests.factories import make_draft, make_target
from tests.test_push import REPO, make_report, write_report


@pytest.mark.parametrize("name", ["optimizer.pickle", "training_state.PKL", "rng_state.pth", "sub/extra.ckpt"])
def test_a_pickle_file_is_flagged_by_inspect_left_out_by_fix_and_the_fixed_folder_pushes(tmp_path: Path, name):
    draft = make_draft(tmp_path / "draft", "specforge")
    (draft / name).parent.mkdir(parents=True, exist_ok=True)
    (draft / name).write_bytes(b"\x80\x04K\x01.")  # a pickle of the int 1: never loaded, only listed
    target = str(make_target(tmp_path / "target"))

    res = inspect(str(draft), target=target)
    k001 = [f for f in res.findings if f.id == "K001"]
    assert k001 and name in k001[0].message

    out = tmp_path / "fixed"
    result = fix(str(draft), out, target=target, engine="sglang", engine_version="post-25454")
    assert result.written == out
    assert not (out / name).exists()
    assert not any(p.name == Path(name).name for p in out.rglob("*"))

    report = write_report(tmp_path / "verify.json", make_report(out))
    pushed = push(out, REPO, report=report, dry_run=True)
    assert "config.json" in {f.name for f in pushed.files}


def test_every_stage_reads_the_same_names():
    from kconvert.hub import binding
    from kconvert.source import checkpoint, safetensors_header
    from kconvert.writer import write

    assert safetensors_header.INDEX_NAME == checkpoint.INDEX_NAME == binding.INDEX_NAME == write.INDEX_NAME \
        == names.INDEX_NAME
    assert binding.CONFIG_NAME == write.CONFIG_NAME == names.CONFIG_NAME
    assert write.PROVENANCE_NAME == names.PROVENANCE_NAME
    for suffix in names.PICKLE_SUFFIXES:
        assert names.is_pickle(f"x{suffix.upper()}")
    assert not names.is_pickle("model.safetensors")
