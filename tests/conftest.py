import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Print how many inputs each fuzz target tried (tests/test_fuzz.py counts them in FUZZ_COUNTS)."""
    mod = sys.modules.get("tests.test_fuzz")
    counts = getattr(mod, "FUZZ_COUNTS", None)
    if not counts:
        return
    terminalreporter.section("fuzz")
    for target, n in sorted(counts.items()):
        terminalreporter.write_line(f"fuzz: {n} inputs tried for {target}")
    terminalreporter.write_line(f"fuzz: {sum(counts.values())} inputs tried in total")


# kconvert remembers file digests in a user-level cache (kconvert.source.hashcache); the tests use their own,
# set here so that the engine and CLI child processes inherit it.
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

_HASH_CACHE_DIR = Path(tempfile.mkdtemp(prefix="kconvert-test-hashcache-"))
os.environ["KCONVERT_HASH_CACHE"] = str(_HASH_CACHE_DIR / "sha256.sqlite")


def pytest_unconfigure(config):
    """The session's hash cache goes with it (one folder per pytest process was left in /tmp before)."""
    shutil.rmtree(_HASH_CACHE_DIR, ignore_errors=True)
