"""SIGINT and SIGTERM at any point of a fix (issue #45, class 5): exit 130 or 143 (128 + the signal, as a shell
reports a process that signal ended), one line on stderr, no traceback, never 70, and the destination absent, or
complete, or the earlier output it replaces intact; no temporary folder left.

The points: every call of fix's byte progress (the hook the command line already hands `kconvert.fix`, at each
file and every `PROGRESS_EVERY` bytes, set small here so the copy phase has many), the signal raised by the
process itself at that call, so each point is deterministic; and points in time from the moment the process has
installed its handlers (read from /proc/PID/status, SigCgt) to its end, which reach start-up, the reading of the
input and the self-check. The draft is built here with 48 MB of tensor data (not holes: the copy phase copies
them by copy_file_range and hashes them through maps of the output, where an interrupt once raised BufferError).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests import factories as F

ROOT = Path(__file__).resolve().parent.parent
SIGNALS = {signal.SIGINT: 130, signal.SIGTERM: 143}

# A child that runs `python -m kconvert ARGV` and, through fix's progress callback, sends itself SIGNAL at its
# N-th call (N = 0: never; it prints the number of calls on exit). Smaller chunks and progress steps than the
# defaults give the copy phase more points; the code that runs is the same.
CHILD = r"""
import atexit, contextlib, os, sys
n, sig = int(sys.argv[1]), int(sys.argv[2])
sys.argv = ["kconvert", *sys.argv[3:]]
from kconvert.writer import stream
stream.PROGRESS_EVERY = 4 << 20  # a progress call every 4 MB, in 1 MB chunks: many points in the copy phase
init = stream.Streamer.__init__
stream.Streamer.__init__ = lambda self, *, chunk, **kw: init(self, chunk=1 << 20, **kw)
from kconvert.cli import _output, fix_cmd
real = _output.byte_progress
calls = [0]
atexit.register(lambda: n == 0 and os.write(2, f"progress calls: {calls[0]}\n".encode()))

@contextlib.contextmanager
def byte_progress(first, *, quiet):
    with real(first, quiet=quiet) as update:
        def hooked(done, total, message):
            calls[0] += 1
            if calls[0] == n:
                os.kill(os.getpid(), sig)
            update(done, total, message)
        yield hooked

fix_cmd.byte_progress = byte_progress
from kconvert.__main__ import run
run()
"""


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("signals")
    shape = replace(F.TINY, vocab=32768, hidden=512, draft_vocab=8192, heads=4, kv_heads=2, head_dim=128, inter=1024,
                    real=False)
    F.SHAPES["signals"] = shape
    try:
        draft = F.make_draft(root / "draft", "specforge", shape="signals", embeddings=True)
        target = F.make_target(root / "target", "signals")
    finally:
        del F.SHAPES["signals"]
    # the holes become data (zeros written), so that the copy copies and maps bytes
    shard = draft / "model.safetensors"
    size = shard.stat().st_size
    zeros = bytes(8 << 20)
    with open(shard, "r+b") as f:
        start = 8 + int.from_bytes(f.read(8), "little")
        for pos in range(start, size, len(zeros)):
            os.pwrite(f.fileno(), zeros[:min(len(zeros), size - pos)], pos)
    assert os.stat(shard).st_blocks * 512 >= size - (1 << 20)
    (root / "child.py").write_text(CHILD)
    reference = root / "reference"
    p = _run(root, 0, 0, reference)
    assert p.returncode == 0, p.stderr
    calls = int(p.stderr.strip().splitlines()[-1].split(": ")[1])
    assert calls >= 10, p.stderr  # the copy phase has points to stop at
    return root, draft, target, reference, calls


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["KCONVERT_HASH_CACHE"] = "off"  # every run hashes every byte: the same points each time
    env.pop("KCONVERT_DEBUG", None)
    return env


def _fix_args(out: Path, force: bool = False) -> list[str]:
    return ["fix", "draft", "-o", str(out), "--target", "target", "--output-format", "concise", "--no-fsync"] + \
        (["--force"] if force else [])


def _run(root: Path, n: int, sig: int, out: Path, force: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "child.py"), str(n), str(int(sig)), *_fix_args(out, force)],
                          cwd=root, env=_env(), capture_output=True, text=True, timeout=120)


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _left_over(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if ".kconvert-tmp-" in p.name or ".kconvert-old-" in p.name]


def _one_interrupt_line(err: str, sig: int) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == [f"error: interrupted by {signal.Signals(sig).name}"], err[-3000:]


def _check(root: Path, out: Path, p: subprocess.CompletedProcess, sig: int, reference: dict[str, str],
           old: dict[str, str] | None) -> str:
    """One interrupted run: its exit code and line; the destination absent, complete or the old one intact."""
    assert p.returncode == SIGNALS[sig], (p.returncode, p.stderr[-3000:])
    _one_interrupt_line(p.stderr, sig)
    assert _left_over(root) == []
    if not out.exists():
        assert old is None
        return "absent"
    tree = _tree(out)
    if old is not None and tree == old:
        return "old intact"
    # a complete new output: the files of an uninterrupted fix (kconvert.json records times and paths)
    assert {k: v for k, v in tree.items() if k != "kconvert.json"} == \
        {k: v for k, v in reference.items() if k != "kconvert.json"}, sorted(tree)
    return "complete"


@pytest.mark.parametrize("sig", list(SIGNALS), ids=lambda s: signal.Signals(s).name)
def test_a_signal_at_every_progress_point_of_a_fix_exits_128_plus_the_signal_atomically(case, sig):
    """Every point gets one of the two signals (SIGINT the odd ones, SIGTERM the even ones: each run is a process
    start, ~0.7 s), the last ones both."""
    root, _, _, reference_dir, calls = case
    reference = _tree(reference_dir)
    outcomes = {}
    first = 1 if sig == signal.SIGINT else 2
    for n in sorted(set(range(first, calls + 1, 2)) | {calls - 1, calls}):
        out = root / f"out-{n}"
        outcomes[n] = _check(root, out, _run(root, n, sig, out), sig, reference, None)
        shutil.rmtree(out, ignore_errors=True)
    assert "absent" in outcomes.values(), outcomes


@pytest.mark.parametrize("sig", list(SIGNALS), ids=lambda s: signal.Signals(s).name)
def test_a_signal_while_replacing_an_earlier_output_leaves_it_intact_or_replaced(case, sig):
    """--force over an earlier fix output (a file it lists marks the old one): at every other point the old output
    is there as it was, or the new one whole."""
    root, _, _, reference_dir, calls = case
    reference = _tree(reference_dir)
    out = root / "earlier"
    for n in range(1 if sig == signal.SIGINT else 3, calls + 1, 4):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(reference_dir, out)
        (out / "OLD.txt").write_text("the earlier output\n")
        # listed in its kconvert.json: an earlier output holds only what it lists (a file added by hand makes it
        # the user's, which --force never replaces: kconvert.guard.paths.owned_folder)
        record = json.loads((out / "kconvert.json").read_text())
        record["output"]["files"]["OLD.txt"] = {"size": 19}
        (out / "kconvert.json").write_text(json.dumps(record))
        old = _tree(out)
        _check(root, out, _run(root, n, sig, out, force=True), sig, reference, old)


def _handlers_installed(pid: int, *sigs: int) -> bool:
    """Whether process `pid` catches every one of `sigs` (its SigCgt mask in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), 16)
    return all(caught & (1 << (sig - 1)) for sig in sigs)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads handler masks from /proc (Linux)")
@pytest.mark.parametrize("sig", list(SIGNALS), ids=lambda s: signal.Signals(s).name)
def test_a_signal_at_any_time_of_a_fix_exits_128_plus_the_signal(case, sig):
    """Points in time across the whole command (start-up after the handlers are in place, reading the input, the
    plan, the write, the self-check, the rename), through `python -m kconvert` itself."""
    root, _, _, reference_dir, _ = case
    reference = _tree(reference_dir)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "kconvert", *_fix_args(root / "timed")], cwd=root, env=_env(),
                   capture_output=True, timeout=120, check=True)
    whole = time.monotonic() - t0
    shutil.rmtree(root / "timed")
    for i in range(0, 8, 2) if sig == signal.SIGINT else range(1, 8, 2):
        out = root / f"timed-{i}"
        p = subprocess.Popen([sys.executable, "-m", "kconvert", *_fix_args(out)], cwd=root, env=_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not _handlers_installed(p.pid, signal.SIGTERM) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(whole * i / 8)
        p.send_signal(sig)
        err = p.communicate(timeout=120)[1]
        if p.returncode == 0:  # finished before the signal: nothing to check but the output
            assert _tree(out).keys() == reference.keys()
        else:
            _check(root, out, subprocess.CompletedProcess(p.args, p.returncode, "", err), sig, reference, None)
        shutil.rmtree(out, ignore_errors=True)


def test_a_signal_inside_a_finalizer_is_delivered_again_not_printed_and_lost(capfd):
    """A signal that lands while Python runs a finalizer or a weakref callback raises there, where no exception can
    propagate: Python printed "Exception ignored in: <function WeakKeyDictionary.__init__.<locals>.remove>" and a
    traceback under SIGTERM, and the run went on (a clean-clone CI run of
    test_a_signal_at_any_time_of_a_fix_exits_128_plus_the_signal met it). Under kconvert's handlers the interrupt
    is delivered again to the code that runs next, and nothing is printed."""
    import gc

    from kconvert.cli import _interrupts
    from kconvert.errors import Interrupted

    class Finalized:
        def __del__(self):
            signal.raise_signal(signal.SIGTERM)  # the handler runs inside __del__, at its next instruction
            sum(range(100))

    gc.collect()
    with _interrupts():
        with pytest.raises(Interrupted) as caught:
            f = Finalized()
            del f
            until = time.monotonic() + 5
            while time.monotonic() < until:  # the code that runs next: the interrupt lands here
                pass
    assert caught.value.signum == signal.SIGTERM
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err, err


# The end of the process, after the command: kconvert's handler stays in place until the process is gone. CPython's
# own exit puts SIGINT and SIGTERM back to their default action before its teardown (collection, modules), and a
# SIGTERM there ended a finished fix with no line (-15, a clean-clone CI run of the timed test above, at 7/8).
# The signal is sent from the last moments Python code runs: the last atexit handler, and an object finalized in
# the teardown (which kconvert's exit skips, kconvert.cli._finish; then the process exits 0 having finished).
END = r"""
import atexit, os, signal, sys, threading, time
sig, where, marks = int(sys.argv[1]), sys.argv[2], sys.argv[3]
sys.argv = ["kconvert", *sys.argv[4:]]

class Teardown:
    def __del__(self):
        os.kill(os.getpid(), sig)
        sum(range(10000))

def mark(name):
    with open(os.path.join(marks, name), "w") as f:
        f.write(name)

def late_thread():  # a non-daemon thread still running when the command returns: joined before the end
    time.sleep(0.3)
    mark("thread")

if where == "atexit":
    atexit.register(lambda: os.kill(os.getpid(), sig) or sum(range(10000)))
elif where == "teardown":
    sys.modules["kconvert_test_teardown"] = type(sys)("kconvert_test_teardown")
    sys.modules["kconvert_test_teardown"].obj = Teardown()
atexit.register(mark, "atexit")
threading.Thread(target=late_thread).start()
from kconvert.__main__ import run
run()
"""


@pytest.mark.parametrize("where", ["atexit", "teardown"])
@pytest.mark.parametrize("sig", list(SIGNALS), ids=lambda s: signal.Signals(s).name)
def test_a_signal_at_the_end_of_the_process_exits_128_plus_the_signal_or_0_never_by_its_default_action(
        tmp_path, sig, where):
    (tmp_path / "end.py").write_text(END)
    marks = tmp_path / "marks"
    marks.mkdir()
    p = subprocess.run([sys.executable, str(tmp_path / "end.py"), str(int(sig)), where, str(marks), "rules", "K101",
                        "--json"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, SIGNALS[sig]), (p.returncode, p.stderr[-3000:])
    assert json.loads(p.stdout)["id"] == "K101"  # the command's output, whole
    if p.returncode:
        _one_interrupt_line(p.stderr, sig)
    else:
        assert p.stderr == ""
    # the thread ran to its end (the atexit handler before the signal, or the signal in it, may not leave its mark)
    assert (marks / "thread").exists()
    if where == "teardown":
        assert (marks / "atexit").exists()


def test_the_end_of_the_process_joins_threads_runs_atexit_and_flushes_output(tmp_path):
    """What CPython's exit does before its teardown, kconvert's own end does too: no signal sent."""
    (tmp_path / "end.py").write_text(END)
    marks = tmp_path / "marks"
    marks.mkdir()
    p = subprocess.run([sys.executable, str(tmp_path / "end.py"), "0", "none", str(marks), "rules", "--json"],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)) > 10
    assert sorted(x.name for x in marks.iterdir()) == ["atexit", "thread"]


@pytest.mark.parametrize("handler", ["run", "end", "default"])
def test_an_interrupt_delivered_again_reaches_kconverts_handler_of_the_moment_and_no_other(tmp_path, handler):
    """The re-delivery of an interrupt a finalizer swallowed (kconvert.cli._deliver_again) may come after the run
    has ended: the end's handler says it (143, its line); a handler that is not kconvert's is never triggered."""
    code = (
        "import signal, sys, time\n"
        "from kconvert.cli import _deliver_again\n"
        "from kconvert.errors import Interrupted, exit_on_signal, raise_interrupted\n"
        f"handler = {handler!r}\n"
        "signal.signal(signal.SIGTERM, {'run': raise_interrupted, 'end': exit_on_signal,\n"
        "                               'default': signal.SIG_DFL}[handler])\n"
        "try:\n"
        "    _deliver_again(signal.SIGTERM)\n"
        "    time.sleep(2)\n"
        "except Interrupted:\n"
        "    sys.exit(99)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=60)
    assert (p.returncode, p.stderr) == {"run": (99, ""), "end": (143, "error: interrupted by SIGTERM\n"),
                                        "default": (0, "")}[handler], p.stderr
