"""SIGINT and SIGTERM at points in time of every command (issue #45, class 5: "at any point of any command"), the
commands enumerated from the CLI's own tree so that a new one fails `test_every_command_has_an_invocation` until
it is given one here. Each runs engine-free on the shipped tiny example, through `python -m kconvert` as a user
runs it: once without a signal (its exit code and duration), then one signal at each of three points in time
measured from the moment its handlers are in place (/proc/PID/status, SigCgt) over that duration, SIGTERM and
SIGINT in turn. Each run exits as the uninterrupted one did (the signal came after its end) or 128 + the signal
with kconvert's interrupt line last on stderr and only once, never a traceback, never killed by the signal's
default action, and leaves no temporary file. tests/test_signals.py holds fix's every progress point."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_tree import leaves
from tests.test_signals import _env, _handlers_installed

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
DATA = ROOT / "tests" / "data"
T = str(TINY / "target")
BROKEN = str(TINY / "broken" / "aux-ids-sglang-convention")
DRAFT = str(TINY / "drafts" / "llama-speculators")
TRACE_ARGS = ["--prompts", "_smoke", "--max-prompts", "1", "--max-tokens", "8", "--layers", "all"]

# one invocation per leaf command; {out} is this case's empty folder, {trace} a trace recorded once for the module
INVOCATIONS: dict[str, list[str]] = {
    "acceptance": ["acceptance", str(DATA / "vllm_metrics_after.txt"),
                   "--before", str(DATA / "vllm_metrics_before.txt")],
    "engines diff": ["engines", "diff", "vllm==0.33.0", "vllm==0.34.0"],
    "engines learn": ["engines", "learn", "vllm==not.a.version"],  # its fetch needs a registry: its refusal here
    "engines list": ["engines", "list"],
    "fix": ["fix", BROKEN, "-o", "{out}/fixed", "--target", T],
    "inspect": ["inspect", BROKEN, "--target", T],
    "matrix": ["matrix", str(TINY / "drafts" / "mla-torchspec"), DRAFT, "--target", T, "--engines", "vllm",
               "--html", "{out}/matrix.html", "--cache", "off"],
    "push": ["push", DRAFT, "me/draft", "--report", "{out}/verify.json", "--dry-run"],
    "push-trace": ["push-trace", "{trace}", "me/trace", "--dry-run"],
    "rules": ["rules"],
    "score": ["score", DRAFT, "--trace", "{trace}"],
    "trace": ["trace", T, "-o", "{out}/trace", *TRACE_ARGS],
    "verify": ["verify", DRAFT, "--target", T, "--dry-run"],
}
SIGNALS = (signal.SIGTERM, signal.SIGINT)
POINTS = (0.15, 0.5, 0.9)


def test_every_command_has_an_invocation():
    assert {" ".join(path) for path, _ in leaves()} == set(INVOCATIONS)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("signals-trace") / "trace"
    p = subprocess.run([sys.executable, "-m", "kconvert", "trace", T, "-o", str(out), *TRACE_ARGS], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return out


def _argv(name: str, out: Path, trace: Path) -> list[str]:
    return [a.replace("{out}", str(out)).replace("{trace}", str(trace)) for a in INVOCATIONS[name]]


def _left_over(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if ".kconvert-tmp-" in p.name or ".kconvert-old-" in p.name]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads handler masks from /proc (Linux)")
@pytest.mark.parametrize("name", sorted(INVOCATIONS))
def test_a_signal_at_any_time_of_every_command_exits_128_plus_the_signal_with_one_line(name, tmp_path, request):
    trace = request.getfixturevalue("trace") if "{trace}" in " ".join(INVOCATIONS[name]) else Path("/nonexistent")
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "verify.json").write_text(json.dumps({"verdict": "pass"}))
    t0 = time.monotonic()
    base = subprocess.run([sys.executable, "-m", "kconvert", *_argv(name, tmp_path / "base", trace)], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=300)
    whole = time.monotonic() - t0
    assert base.returncode in (0, 1, 2, 3), (base.returncode, base.stderr[-2000:])
    for i, frac in enumerate(POINTS):
        sig = SIGNALS[(i + len(name)) % 2]
        out = tmp_path / f"run-{i}"
        out.mkdir()
        (out / "verify.json").write_text(json.dumps({"verdict": "pass"}))
        p = subprocess.Popen([sys.executable, "-m", "kconvert", *_argv(name, out, trace)], cwd=ROOT, env=_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not _handlers_installed(p.pid, *SIGNALS) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        assert p.poll() is None, (name, "ran to its end without SIGINT and SIGTERM handled", p.returncode)
        time.sleep(whole * frac)
        p.send_signal(sig)
        err = p.communicate(timeout=300)[1]
        where = (name, frac, signal.Signals(sig).name, p.returncode, err[-2000:])
        assert "Traceback" not in err and "Exception ignored" not in err, where
        if p.returncode != base.returncode:
            assert p.returncode == 128 + sig, where
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert lines and lines[-1].startswith(f"error: interrupted by {signal.Signals(sig).name}"), where
            assert err.count("interrupted by") == 1, where
        assert _left_over(out) == [], where
