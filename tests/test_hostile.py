"""Hostile checkpoints (issue 7, items 2 and 3): files and paths that must be refused with a reason, and
payloads that must never run.

Every refusal is checked through the CLI: exit 2, exactly one `error:` line on stderr naming the file (and the
tensor where one is involved), no traceback, no "internal error". Payload tests plant code that would write a
marker file if it ever ran (a pickle whose __reduce__ calls exec, a modeling_*.py that writes on import) and
check the marker never appears after `inspect` and `fix`, and that the input folder is byte-for-byte unchanged.
"""
from __future__ import annotations

import contextlib
import io
import json
import struct
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kconvert.errors import KConvertError
from kconvert.source import open_checkpoint
from kconvert.source.safetensors_header import INDEX_NAME
from tests.writer_factories import sha256_tree, write_draft, write_safetensors

ROOT = Path(__file__).resolve().parent.parent
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    from kconvert.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def refused(argv: list[str], *must_name: str, tensor: str | None = None) -> str:
    """Run the CLI; assert exit 2 with one error line naming every string in `must_name`; return that line.

    `tensor`: the refusal must name this tensor, checked on the library's error message (that the CLI line keeps a
    '[name]' through rich markup is test_cli_error_line_keeps_bracketed_tensor_names below)."""
    if tensor is not None:
        with pytest.raises(KConvertError) as ei:
            open_checkpoint(argv[1])
        assert f"[{tensor}]" in str(ei.value), str(ei.value)
    rc, _, err = run_cli(argv)
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("hint:")]
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for s in must_name:
        assert s in lines[0], f"{s!r} not named in: {lines[0]}"
    return lines[0]


def index_of(folder: Path) -> dict:
    return json.loads((folder / INDEX_NAME).read_text())


def write_index(folder: Path, doc: dict) -> None:
    (folder / INDEX_NAME).write_text(json.dumps(doc))


# ---------------------------------------------------------------------------------------------------------------
# 2. Files and paths
# ---------------------------------------------------------------------------------------------------------------

def test_truncated_shard_names_file_and_tensor(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    p = d / "model.safetensors"
    size = p.stat().st_size
    with open(p, "r+b") as f:
        f.truncate(size - 3)  # the last tensor (t2d, written last) loses its final bytes
    refused(["inspect", str(d)], "model.safetensors", "truncated", tensor="t2d")


def test_truncated_inside_header(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    p = d / "model.safetensors"
    p.write_bytes(p.read_bytes()[:40])
    refused(["inspect", str(d)], "model.safetensors", "header length")


def test_missing_shard(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d", shards=2)
    (d / SHARD2).unlink()
    refused(["inspect", str(d)], SHARD2, "missing")


def test_shard_named_twice_under_two_spellings(tmp_path: Path) -> None:
    """The index reaches one shard as 'X' and as './X': its tensors would be read twice."""
    d = write_draft(tmp_path / "d", shards=2)
    doc = index_of(d)
    first = next(n for n, s in doc["weight_map"].items() if s == SHARD1)
    doc["weight_map"][first] = f"./{SHARD1}"
    write_index(d, doc)
    refused(["inspect", str(d)], SHARD1)


def test_tensor_in_two_shards(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d", shards=2)
    write_safetensors(d / SHARD2, {"fc.weight": ("BF16", (8, 24), b"\0" * 384),
                                   **{n: ("F32", (1,), b"\0" * 4) for n in ("x",)}})
    doc = index_of(d)
    doc["weight_map"]["x"] = SHARD2
    write_index(d, doc)
    refused(["inspect", str(d)], SHARD2, "two shards", tensor="fc.weight")


def test_index_names_tensor_shard_lacks(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d", shards=2)
    doc = index_of(d)
    doc["weight_map"]["ghost.weight"] = SHARD1
    write_index(d, doc)
    refused(["inspect", str(d)], SHARD1, "lacks", tensor="ghost.weight")


def test_shard_holds_tensor_index_lacks(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d", shards=2)
    doc = index_of(d)
    name = next(n for n, s in doc["weight_map"].items() if s == SHARD2)
    del doc["weight_map"][name]
    write_index(d, doc)
    refused(["inspect", str(d)], SHARD2, "not in", tensor=name)


@pytest.mark.parametrize("path", ["../outside.safetensors", "/etc/passwd", "sub\\x.safetensors",
                                  "x\x00.safetensors", "a//b.safetensors", "C:/x.safetensors"])
def test_index_path_outside_or_malformed(tmp_path: Path, path: str) -> None:
    write_safetensors(tmp_path / "outside.safetensors", {"fc.weight": ("F32", (1,), b"\0" * 4)})
    d = write_draft(tmp_path / "d", shards=2)
    doc = index_of(d)
    doc["weight_map"]["fc.weight"] = path
    write_index(d, doc)
    refused(["inspect", str(d)], INDEX_NAME, tensor="fc.weight")


def test_cli_error_line_keeps_bracketed_tensor_names(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d", shards=2)
    doc = index_of(d)
    doc["weight_map"]["ghost.weight"] = SHARD1
    write_index(d, doc)
    line = refused(["inspect", str(d)], SHARD1)
    assert "[ghost.weight]" in line


def test_hostile_tensor_name_with_markup_closing_tag(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    write_safetensors(d / "model.safetensors", {"[/oops]": ("F32", (4,), b"\0" * 16)})
    p = d / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-2])  # truncated: the error names the tensor
    r = subprocess.run([sys.executable, "-m", "kconvert", "inspect", str(d)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2 and "[/oops]" in r.stderr


def test_symlinked_shard_outside_folder(tmp_path: Path) -> None:
    outside = write_draft(tmp_path / "elsewhere")
    d = write_draft(tmp_path / "d", shards=2)
    (d / SHARD2).unlink()
    os.symlink(outside / "model.safetensors", d / SHARD2)
    refused(["inspect", str(d)], SHARD2, "outside")


def test_index_path_through_symlinked_folder_outside(tmp_path: Path) -> None:
    """A symlinked folder is not walked by the listing; the index naming a file through it is refused."""
    outside = write_draft(tmp_path / "elsewhere")
    d = write_draft(tmp_path / "d", shards=2)
    os.symlink(outside, d / "linked")
    doc = index_of(d)
    doc["weight_map"]["fc.weight"] = "linked/model.safetensors"
    write_index(d, doc)
    refused(["inspect", str(d)], "linked/model.safetensors", "outside")


def test_symlinked_config_outside_folder(tmp_path: Path) -> None:
    (tmp_path / "secret.json").write_text("{}")
    d = write_draft(tmp_path / "d")
    (d / "config.json").unlink()
    os.symlink(tmp_path / "secret.json", d / "config.json")
    refused(["inspect", str(d)], "config.json", "outside")


def test_symlink_loop(tmp_path: Path) -> None:
    """Bug fixed: Path.resolve() raised RuntimeError on a loop (an 'internal error' through the CLI)."""
    d = write_draft(tmp_path / "d")
    os.symlink("loop-b", d / "loop-a")
    os.symlink("loop-a", d / "loop-b")
    refused(["inspect", str(d)], "loop-")


def test_index_names_fifo(tmp_path: Path) -> None:
    """Bug fixed: an index naming a FIFO inside the folder made read_header block forever (a hung CI gate)."""
    d = write_draft(tmp_path / "d", shards=2)
    os.mkfifo(d / ".pipe")
    doc = index_of(d)
    doc["weight_map"]["fc.weight"] = ".pipe"
    write_index(d, doc)
    refused(["inspect", str(d)], ".pipe", "not a regular file")


def test_index_names_directory(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d", shards=2)
    (d / "sub.safetensors").mkdir()
    doc = index_of(d)
    doc["weight_map"]["fc.weight"] = "sub.safetensors"
    write_index(d, doc)
    refused(["inspect", str(d)], "sub.safetensors", "directory")


def test_oversized_index_refused_before_reading(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d", shards=2)
    with open(d / INDEX_NAME, "r+b") as f:  # sparse: 65 MB of address space, no disk
        f.truncate(65 * 1024 * 1024)
    refused(["inspect", str(d)], INDEX_NAME, "cap")


# --- permissions (as root, chmod does not deny reads: drop the DAC capabilities in a child process) -----------

_NO_DAC_CHILD = textwrap.dedent(r"""
    import ctypes, json, os, sys, io, contextlib
    sys.path.insert(0, sys.argv[1])
    if os.geteuid() == 0:
        # Drop CAP_DAC_OVERRIDE (1) and CAP_DAC_READ_SEARCH (2) from this process: root then obeys file modes.
        class Hdr(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]
        libc = ctypes.CDLL(None, use_errno=True)
        hdr, data = Hdr(0x20080522, 0), (Data * 2)()
        if libc.capget(ctypes.byref(hdr), data) != 0:
            print(json.dumps({"skip": "capget failed: errno %d" % ctypes.get_errno()})); sys.exit(0)
        mask = ~((1 << 1) | (1 << 2)) & 0xFFFFFFFF
        for f in ("effective", "permitted", "inheritable"):
            setattr(data[0], f, getattr(data[0], f) & mask)
        if libc.capset(ctypes.byref(hdr), data) != 0:
            print(json.dumps({"skip": "capset failed: errno %d" % ctypes.get_errno()})); sys.exit(0)
    probe = sys.argv[3]
    try:
        open(probe, "rb").close() if os.path.isfile(probe) else os.listdir(probe)
        print(json.dumps({"skip": "file modes are not enforced for this process even without "
                                  "CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH"})); sys.exit(0)
    except PermissionError:
        pass
    from kconvert.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(json.loads(sys.argv[2]))
    print(json.dumps({"rc": rc, "stderr": err.getvalue()}))
""")


def refused_without_dac(argv: list[str], probe: Path, *must_name: str) -> None:
    r = subprocess.run([sys.executable, "-c", _NO_DAC_CHILD, str(ROOT), json.dumps(argv), str(probe)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr[-2000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in res:
        pytest.skip(res["skip"])
    err = res["stderr"]
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("hint:")]
    assert res["rc"] == 2 and len(lines) == 1 and lines[0].startswith("error: "), res
    for s in must_name:
        assert s in lines[0], (s, lines[0])


@pytest.fixture
def world_traversable(tmp_path: Path):
    # the child drops its DAC override: every parent of the fixture must be traversable by mode alone
    # (pytest makes /tmp/pytest-of-<user> 0700); modes are restored afterwards.
    base = tmp_path / "perm"
    base.mkdir()
    changed: list[tuple[Path, int]] = []
    try:
        for p in [base, *base.parents]:
            if p == Path("/"):
                break
            mode = p.stat().st_mode & 0o7777
            if mode & 0o001 == 0:
                try:
                    os.chmod(p, mode | 0o711)
                except PermissionError:
                    pytest.skip(f"{p} is not traversable and cannot be made so")
                changed.append((p, mode))
        yield base
    finally:
        for p, mode in reversed(changed):
            os.chmod(p, mode)


def test_folder_without_read_permission(world_traversable: Path) -> None:
    d = write_draft(world_traversable / "d")
    os.chmod(d, 0)
    try:
        refused_without_dac(["inspect", str(d)], d, str(d), "permission denied")
    finally:
        os.chmod(d, 0o755)


def test_shard_without_read_permission(world_traversable: Path) -> None:
    d = write_draft(world_traversable / "d")
    os.chmod(d / "model.safetensors", 0)
    try:
        refused_without_dac(["inspect", str(d)], d / "model.safetensors", "model.safetensors", "permission denied")
    finally:
        os.chmod(d / "model.safetensors", 0o644)


def test_config_without_read_permission(world_traversable: Path) -> None:
    d = write_draft(world_traversable / "d")
    os.chmod(d / "config.json", 0)
    try:
        refused_without_dac(["inspect", str(d)], d / "config.json", "config.json", "permission denied")
    finally:
        os.chmod(d / "config.json", 0o644)


# --- names and kinds of files ---------------------------------------------------------------------------------

def test_non_utf8_file_name_inside_folder(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    fd = os.open(os.fsencode(d) + b"/weights-\xff\xfe.safetensors", os.O_CREAT | os.O_WRONLY, 0o644)
    os.close(fd)
    refused(["inspect", str(d)], str(d), "not valid UTF-8")


def test_non_utf8_folder_name_as_bytes_and_through_cli(tmp_path: Path) -> None:
    """A folder whose own name is not UTF-8 is readable: as a bytes path through the library (bug fixed:
    open_checkpoint raised TypeError on bytes) and as a surrogate-escaped str through the CLI."""
    raw = os.fsencode(tmp_path) + b"/draft-\xff"
    write_draft(Path(os.fsdecode(raw)))
    ck = open_checkpoint(raw)
    assert "fc.weight" in ck.tensors
    r = subprocess.run([sys.executable, "-m", "kconvert", "inspect", os.fsdecode(raw), "--json"],
                       capture_output=True, timeout=120, cwd=ROOT)
    assert r.returncode in (0, 1), r.stderr.decode(errors="replace")
    assert b"Traceback" not in r.stderr
    json.loads(r.stdout)


def test_config_json_is_a_directory(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    (d / "config.json").unlink()
    (d / "config.json").mkdir()
    refused(["inspect", str(d)], "config.json")


def test_config_json_not_an_object(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    (d / "config.json").write_text("[1, 2]")
    refused(["inspect", str(d)], "config.json", "not a JSON object")


def test_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    refused(["inspect", str(tmp_path / "empty")], "empty", "no config.json")


def test_source_is_a_file(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    refused(["inspect", str(d / "model.safetensors")], "model.safetensors", "not a folder")


def test_target_folder_without_config(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    (tmp_path / "target").mkdir()
    refused(["inspect", str(d), "--target", str(tmp_path / "target")], "target", "no config.json")


def test_target_config_is_a_directory(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    (tmp_path / "target" / "config.json").mkdir(parents=True)
    refused(["inspect", str(d), "--target", str(tmp_path / "target")], "config.json")


def test_target_config_missing_required_keys(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text('{"architectures": true, "hidden_size": "64"}')
    refused(["inspect", str(d), "--target", str(tmp_path / "target")], "config.json", "lacks")


def test_library_raises_only_kconvert_errors(tmp_path: Path) -> None:
    """The same refusals through the library: a KConvertError subclass, never another exception."""
    from kconvert.commands.inspect import inspect

    d = write_draft(tmp_path / "d", shards=2)
    (d / SHARD2).unlink()
    with pytest.raises(KConvertError):
        inspect(str(d))


# ---------------------------------------------------------------------------------------------------------------
# 3. Nothing executed
# ---------------------------------------------------------------------------------------------------------------

class _WritesMarker:
    """Unpickling this object runs exec(...) which creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pickle payload ran')",))


def _evil_pickle(marker: Path) -> bytes:
    return pickle.dumps({"state_dict": _WritesMarker(marker)})


def test_pickle_payload_is_live(tmp_path: Path) -> None:
    """Control: the payload really writes its marker when unpickled (so its absence below means something)."""
    marker = tmp_path / "control-marker"
    pickle.loads(_evil_pickle(marker))
    assert marker.exists()


@pytest.fixture
def pickled_draft(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "PICKLE_RAN"
    d = write_draft(tmp_path / "d")
    (d / "pytorch_model.bin").write_bytes(_evil_pickle(marker))
    (d / "training_state.pt").write_bytes(_evil_pickle(marker))
    return d, marker


def test_pickle_reported_by_inspect_never_unpickled(pickled_draft: tuple[Path, Path]) -> None:
    d, marker = pickled_draft
    before = sha256_tree(d)
    rc, out, err = run_cli(["inspect", str(d), "--json"])
    assert rc in (0, 1), err
    doc = json.loads(out)
    k001 = [f for f in doc["findings"] if f["id"] == "K001"]
    assert k001 and "pytorch_model.bin" in k001[0]["message"] and "training_state.pt" in k001[0]["message"]
    assert not marker.exists()
    assert sha256_tree(d) == before


def test_pickle_reported_by_fix_never_unpickled_nor_copied(pickled_draft: tuple[Path, Path], tmp_path: Path) -> None:
    d, marker = pickled_draft
    before = sha256_tree(d)
    out_dir = tmp_path / "fixed"
    rc, out, err = run_cli(["fix", str(d), "-o", str(out_dir), "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    assert any(f["id"] == "K001" for f in doc["findings"])
    assert not marker.exists()
    assert sha256_tree(d) == before
    assert not list(out_dir.glob("*.bin")) and not list(out_dir.glob("*.pt"))
    prov = json.loads((out_dir / "kconvert.json").read_text())
    assert "pytorch_model.bin" in prov.get("skipped", {})


@pytest.fixture
def remote_code_draft(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "REMOTE_CODE_RAN"
    d = write_draft(tmp_path / "d")
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}
    cfg["trust_remote_code"] = True
    (d / "config.json").write_text(json.dumps(cfg))
    payload = f"open({str(marker)!r}, 'w').write('remote code ran')\n"
    (d / "modeling_evil.py").write_text(payload + "class EvilModel: pass\n")
    (d / "configuration_evil.py").write_text(payload + "class EvilConfig: pass\n")
    (d / "__init__.py").write_text(payload)
    return d, marker


def test_remote_code_reported_by_inspect_never_imported(remote_code_draft: tuple[Path, Path]) -> None:
    d, marker = remote_code_draft
    before = sha256_tree(d)
    rc, out, err = run_cli(["inspect", str(d), "--json"])
    assert rc in (0, 1), err
    k002 = [f for f in json.loads(out)["findings"] if f["id"] == "K002"]
    assert k002 and "auto_map" in k002[0]["message"] and "modeling_evil.py" in k002[0]["message"]
    assert not marker.exists()
    assert "modeling_evil" not in sys.modules and "configuration_evil" not in sys.modules
    assert sha256_tree(d) == before


def test_remote_code_fix_drops_auto_map_and_never_imports(remote_code_draft: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    d, marker = remote_code_draft
    before = sha256_tree(d)
    out_dir = tmp_path / "fixed"
    rc, out, err = run_cli(["fix", str(d), "-o", str(out_dir), "--json"])
    assert rc == 0, err
    assert any(f["id"] == "K002" for f in json.loads(out)["findings"])
    cfg = json.loads((out_dir / "config.json").read_text())
    assert "auto_map" not in cfg and "trust_remote_code" not in cfg
    assert not marker.exists()
    assert "modeling_evil" not in sys.modules
    assert sha256_tree(d) == before


def test_payloads_never_run_in_a_fresh_process(pickled_draft: tuple[Path, Path], tmp_path: Path) -> None:
    """The installed entry point, in its own process, with both payloads planted: nothing runs."""
    d, marker = pickled_draft
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    cfg["trust_remote_code"] = True
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    for argv in (["inspect", str(d)], ["fix", str(d), "-o", str(tmp_path / "out")]):
        r = subprocess.run([sys.executable, "-m", "kconvert", *argv], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
        assert r.returncode in (0, 1), r.stderr
        assert "Traceback" not in r.stderr
        assert not marker.exists()


def test_small_tensor_unreadable_after_header(tmp_path: Path) -> None:
    """Bug fixed: Checkpoint.read_bytes let an OSError escape when a shard became unreadable after its header
    was read (the rules catch only KConvertError)."""
    d = write_draft(tmp_path / "d")
    ck = open_checkpoint(str(d))
    (d / "model.safetensors").unlink()
    (d / "model.safetensors").mkdir()
    with pytest.raises(KConvertError) as ei:
        ck.read_array("d2t")
    assert "model.safetensors [d2t]" in str(ei.value)


@pytest.mark.parametrize("bad", ["\n", "x\nerror: forged.safetensors", "\x1b[31mred", "a\rb"])
def test_control_characters_in_index_paths_and_names(tmp_path: Path, bad: str) -> None:
    """Bug fixed (found by the fuzz campaign): an index path or tensor name holding a newline was echoed raw,
    splitting the one-line refusal (and able to forge a second 'error:' line)."""
    d = write_draft(tmp_path / "d", shards=2)
    doc = index_of(d)
    doc["weight_map"]["fc.weight"] = bad
    write_index(d, doc)
    refused(["inspect", str(d)], INDEX_NAME, "control characters")
    doc = index_of(d)
    del doc["weight_map"]["fc.weight"]
    doc["weight_map"][bad] = SHARD1
    write_index(d, doc)
    refused(["inspect", str(d)], INDEX_NAME, "control characters")


def test_control_characters_in_file_names(tmp_path: Path) -> None:
    d = write_draft(tmp_path / "d")
    write_safetensors(d / "x\nerror: forged.safetensors", {"other": ("F32", (1,), b"\0" * 4)})
    refused(["inspect", str(d)], "control characters")


@pytest.mark.parametrize("name", ["\x85", "a\u2028b", "x\u2029error: forged"])
def test_unicode_line_breaks_in_a_tensor_name_keep_the_refusal_on_one_line(tmp_path: Path, name: str) -> None:
    """Bug fixed (found by the fuzzer: a tensor named "\\x85" in a truncated shard): characters that are not
    ASCII controls but that str.splitlines() breaks at split the one-line refusal. They are printed escaped."""
    d = write_draft(tmp_path / "d")
    header = json.dumps({name: {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]}}).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)  # data missing: truncated
    # U+0085 (NEL) is a C1 control, refused as a name since issue #45; the others are read, then refused as truncated
    line = refused(["inspect", str(d)], "model.safetensors",
                   "control characters" if name == "\x85" else "past the end of the file")
    assert "forged" not in line or "\\u2029" in line


def test_trust_remote_code_alone_is_reported_and_dropped(tmp_path: Path) -> None:
    """`trust_remote_code: true` with no auto_map and no .py file: a key that asks whoever loads the folder to trust
    remote code (the rule checks both keys, kconvert/rules/security.py); inspect names it, fix removes it."""
    d = write_draft(tmp_path / "d")
    cfg = json.loads((d / "config.json").read_text())
    cfg["trust_remote_code"] = True
    (d / "config.json").write_text(json.dumps(cfg))
    rc, out, err = run_cli(["inspect", str(d), "--json"])
    assert rc in (0, 1), err
    [k002] = [f for f in json.loads(out)["findings"] if f["id"] == "K002"]
    assert k002["message"] == "remote code is referenced (never imported by kconvert): config 'trust_remote_code'"
    assert [e["where"] for e in k002["evidence"]] == ["trust_remote_code"]
    rc, out, err = run_cli(["fix", str(d), "-o", str(tmp_path / "fixed"), "--json"])
    assert rc == 0, err
    assert "trust_remote_code" not in json.loads((tmp_path / "fixed" / "config.json").read_text())
