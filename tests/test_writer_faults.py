"""The writer under faults: killed, interrupted, unwritable destination, full disk, file size limit.

Whatever happens, the destination name holds either nothing or a complete checkpoint, the input is never
touched, and only a hidden `.<dest>.kconvert-tmp-*` folder can survive (SIGKILL), which the next run removes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from kconvert.errors import InputError
from kconvert.writer.ops import RenameTensor, RewriteD2TOffsets
from kconvert.source.checkpoint import load_folder
from kconvert.writer import write_checkpoint
from tests.writer_factories import sha256_tree, write_draft, write_safetensors

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import os, sys, time, resource, signal
    from pathlib import Path
    from kconvert.errors import KConvertError
    from kconvert.writer.ops import RenameTensor, RewriteD2TOffsets
    from kconvert.source.checkpoint import load_folder
    from kconvert.writer import write_checkpoint

    src, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    # A mask inherited from the test process (a library that blocked SIGTERM in it) would keep the signal from
    # the writer: say what arrived blocked (the assertion prints it), and start as a user's process starts.
    print("blocked", sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])), flush=True)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    # a background job of a non-interactive shell inherits SIGINT ignored, and Python then installs no handler
    signal.signal(signal.SIGINT, signal.default_int_handler)
    seen = [0]
    if mode == "fsize":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    def progress(done, total, message):
        print("progress", done, total, flush=True)
        seen[0] += 1
        if mode != "fsize":
            # slow after the 2nd line, where the test signals: a loaded machine may take a while to send it
            time.sleep(0.05 if seen[0] < 2 else 0.5)

    ckpt = load_folder(Path(src), ref=src)
    ops = [RenameTensor(n, "layers.0." + n[9:]) for n in ckpt.tensors if n.startswith("midlayer.")]
    try:
        write_checkpoint(ckpt, ops, Path(out), provenance={}, progress=progress)
    except KConvertError as e:
        print("error", e.exit_code, e.message, flush=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    print("done", flush=True)
""")


def _child(src: Path, out: Path, mode: str = "normal") -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-c", CHILD, str(src), str(out), mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


def _big_sparse_draft(folder: Path) -> Path:
    """~600 MB of tensors backed by holes: slow enough to kill mid-write, free on disk."""
    tensors = {
        "midlayer.mlp.gate_proj.weight": ("BF16", (18432, 7168), None),
        "midlayer.mlp.up_proj.weight": ("BF16", (18432, 7168), None),
        "norm.weight": ("F32", (7168,), None),
        "d2t": ("I64", (4,), b"\x00" * 32),
    }
    return write_draft(folder, tensors, shards=2)


def _leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p for p in os.listdir(parent) if p.startswith(f".{name}."))


def _wait_progress(p: subprocess.Popen, n: int = 2) -> None:
    seen = 0
    for line in p.stdout:
        if line.startswith("progress"):
            seen += 1
            if seen >= n:
                return
        elif line.startswith(("done", "error")):
            pytest.fail(f"child finished before it could be interrupted: {line}")
    pytest.fail(f"child ended early: {p.stderr.read()}")


def test_sigkill_mid_write_leaves_nothing_at_the_destination_and_a_rerun_succeeds(tmp_path):
    src = _big_sparse_draft(tmp_path / "in")
    before = sha256_tree(src)
    out = tmp_path / "out"
    p = _child(src, out)
    _wait_progress(p)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert not out.exists()
    left = _leftovers(tmp_path, "out")
    assert len(left) == 1 and ".kconvert-tmp-" in left[0]  # hidden, clearly not the checkpoint
    assert sha256_tree(src) == before
    write_checkpoint(load_folder(src, ref=str(src)), [], out, provenance={})
    assert (out / "kconvert.json").exists()
    assert _leftovers(tmp_path, "out") == []  # the killed run's folder was removed (its pid is gone)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_removes_the_temporary_folder(tmp_path, sig):
    src = _big_sparse_draft(tmp_path / "in")
    out = tmp_path / "out"
    p = _child(src, out)
    _wait_progress(p)
    p.send_signal(sig)
    rest, err = p.communicate(timeout=30)
    assert p.returncode == 130, (rest, err)
    assert not out.exists() and _leftovers(tmp_path, "out") == []


def test_an_exception_mid_write_removes_the_temporary_folder(tmp_path):
    src = write_draft(tmp_path / "in", shards=2)

    def boom(done, total, message):
        if "wrote" in message:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_checkpoint(load_folder(src, ref=str(src)), [], tmp_path / "out", provenance={}, progress=boom)
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_force_keeps_the_old_destination_when_the_new_write_fails(tmp_path):
    src = write_draft(tmp_path / "in")
    write_checkpoint(load_folder(src, ref=str(src)), [], tmp_path / "out", provenance={})  # an earlier output
    before = sha256_tree(tmp_path / "out")

    def boom(done, total, message):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_checkpoint(load_folder(src, ref=str(src)), [], tmp_path / "out", force=True, provenance={},
                         progress=boom)
    assert sha256_tree(tmp_path / "out") == before
    assert sorted(os.listdir(tmp_path)) == ["in", "out"]


@pytest.mark.parametrize("where", ["parent-is-a-file", "under-a-file", "proc"])
def test_unwritable_destination_is_an_input_error_with_no_leftovers(tmp_path, where):
    src = write_draft(tmp_path / "in")
    (tmp_path / "afile").write_text("x")
    out = {
        "parent-is-a-file": tmp_path / "afile" / "out",
        "under-a-file": tmp_path / "afile" / "deeper" / "out",
        "proc": Path("/proc") / f"kconvert-test-{uuid.uuid4().hex}" / "out",  # fails even as root
    }[where]
    with pytest.raises(InputError) as e:
        write_checkpoint(load_folder(src, ref=str(src)), [], out, provenance={})
    assert e.value.exit_code == 2 and "\n" not in e.value.message
    assert sorted(os.listdir(tmp_path)) == ["afile", "in"]


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a 2 MB tmpfs here ({r.stderr.decode().strip()}); "
                    "test_file_size_limit_is_an_input_error covers EFBIG")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _three_mb_draft(folder: Path) -> Path:
    import numpy as np

    data = np.random.default_rng(0).standard_normal(3 * 2**20 // 4).astype(np.float32)
    return write_draft(folder, {"w": ("F32", (data.size,), data), "d2t": ("I64", (2,), b"\x00" * 16)})


def test_full_disk_is_an_input_error_with_no_leftovers(tmp_path, tiny_tmpfs):
    src = _three_mb_draft(tmp_path / "in")
    with pytest.raises(InputError, match="no space left on device") as e:
        write_checkpoint(load_folder(src, ref=str(src)), [], tiny_tmpfs / "out", provenance={},
                         check_space=False)
    assert e.value.exit_code == 2
    assert os.listdir(tiny_tmpfs) == []


def test_too_little_free_space_is_refused_before_writing(tmp_path, tiny_tmpfs):
    src = _three_mb_draft(tmp_path / "in")
    # 3 MiB of tensor data (3.1 MB with its header) against a 2 MiB tmpfs (2.1 MB)
    with pytest.raises(InputError, match=r"needs 3\.1 MB, only 2\.1 MB free on that disk"):
        write_checkpoint(load_folder(src, ref=str(src)), [], tiny_tmpfs / "out", provenance={})
    assert os.listdir(tiny_tmpfs) == []


def test_file_size_limit_is_an_input_error_with_no_leftovers(tmp_path):
    """RLIMIT_FSIZE provokes EFBIG on any filesystem, as root too."""
    src = _three_mb_draft(tmp_path / "in")
    p = _child(src, tmp_path / "out", "fsize")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 2, (out, err)
    assert "error 2" in out and "file too large" in out
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_renames_and_d2t_ops_do_not_touch_the_input_on_failure(tmp_path):
    src = write_draft(tmp_path / "in", shards=2)
    before = sha256_tree(src)
    ck = load_folder(src, ref=str(src))
    ops = [RenameTensor(n, "layers.0." + n[9:]) for n in ck.tensors if n.startswith("midlayer.")]
    ops.append(RewriteD2TOffsets())

    def boom(done, total, message):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_checkpoint(ck, ops, tmp_path / "out", provenance={}, progress=boom)
    assert sha256_tree(src) == before and sorted(os.listdir(tmp_path)) == ["in"]


def test_sparse_factory_is_really_sparse(tmp_path):
    p = write_safetensors(tmp_path / "x.safetensors", {"w": ("BF16", (18432, 7168), None)})
    assert os.stat(p).st_blocks * 512 < 1_000_000
