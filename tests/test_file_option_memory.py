"""Every input option pointed at an endless stream stays under a stated memory bound (issue #45, class 2:
`verify --policy /dev/zero` grew to 20.5 GB before the kernel's OOM killer stopped it).

One child process runs every input option the command line declares (tests/path_options.py `path_options`),
each given in turn: a sparse regular file of 8 GiB (no disk), a FIFO a thread feeds forever, and a private
character device with /dev/zero's numbers (mknod in the test's own folder; skipped without root, required under
CI=true). The child first runs each command once (its imports done), then sets RLIMIT_AS to its own size plus
BOUND: an allocation past that raises MemoryError, which kconvert reports as exit 70. Every run must end (a 30 s
alarm) with an exit code in {0, 1, 2, 3, 130, 143}; the child reports its peak size (VmPeak) for the record.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOUND = 256 * 1024 * 1024  # bytes above the process's size once its imports are done
STREAM_BYTES = 8 * 1024 ** 3  # the sparse file: far above every read cap, far above BOUND

CHILD = r"""
import contextlib, io, json, os, resource, signal, sys, threading
from pathlib import Path

sys.path.insert(0, sys.argv[1])
work, bound, size, with_device = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
from tests.path_options import argv_with, build_inputs, path_options, private_char_device, valid_input, BASE
from kconvert.cli import main

inputs = build_inputs(work / "in")
scratch = work / "scratch"
scratch.mkdir()
options = [o for o in path_options() if o.role == "input"]

class Hung(BaseException):
    pass

def fire(signum, frame):
    raise Hung()

def run(argv):
    signal.signal(signal.SIGALRM, fire)
    signal.alarm(30)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            rc = main(argv)
        return rc, err.getvalue().strip().splitlines()[-1:] or [""]
    except Hung:
        return "hung", [""]
    except MemoryError:
        return "MemoryError", [""]
    finally:
        signal.alarm(0)

def vm(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

os.chdir(work)
# each command once, as given what it expects: its imports (torch for score) are done before the limit
for opt in {o.command: o for o in options}.values():
    run(argv_with(opt, str(inputs[valid_input(opt)]), inputs, scratch))
limit = vm("VmSize") + bound
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

streams = {}
sparse = work / "sparse"
with open(sparse, "wb") as f:
    f.truncate(size)
streams["sparse file"] = sparse
fifo = work / "fifo"
os.mkfifo(fifo)
streams["FIFO fed forever"] = fifo
if with_device:
    zero = work / "zero"
    private_char_device(zero, like="/dev/zero")
    streams["/dev/zero's device"] = zero

stop = threading.Event()
def feed():
    while not stop.is_set():
        try:
            with open(fifo, "wb") as f:  # waits for a reader: none, when kconvert never opens the FIFO
                while not stop.is_set():
                    f.write(b"\0" * 65536)
        except OSError:
            pass
threading.Thread(target=feed, daemon=True).start()

results = []
for opt in options:
    for name, path in streams.items():
        rc, last = run(argv_with(opt, str(path), inputs, scratch))
        results.append({"option": f"{opt.command} {opt.flag}", "stream": name, "rc": rc, "line": last[0][:300]})
stop.set()
with contextlib.suppress(OSError):
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets a waiting feeder open, then fail on its write
print(json.dumps({"limit": limit, "peak": vm("VmPeak"), "results": results}))
os._exit(0)
"""


def test_every_input_option_pointed_at_an_endless_stream_stays_under_the_memory_bound(tmp_path):
    with_device = True
    try:
        os.mknod(tmp_path / "probe", 0o600 | 0o020000, os.stat("/dev/zero").st_rdev)
    except PermissionError:
        if os.environ.get("CI") == "true":
            raise
        with_device = False  # mknod needs CAP_MKNOD (root); CI=true runs it
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", XDG_CACHE_HOME=str(tmp_path / "xdg"))
    env.pop("GITHUB_ACTIONS", None)
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(work), str(BOUND), str(STREAM_BYTES),
                        "1" if with_device else "0"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    bad = [x for x in doc["results"] if x["rc"] not in (0, 1, 2, 3, 130, 143)]
    assert doc["results"] and not bad, "\n".join(map(str, bad))
    assert doc["peak"] <= doc["limit"]
    print(f"memory: limit {doc['limit'] / 2**20:.0f} MiB (imports + {BOUND / 2**20:.0f} MiB), "
          f"peak {doc['peak'] / 2**20:.0f} MiB, {len(doc['results'])} runs")
