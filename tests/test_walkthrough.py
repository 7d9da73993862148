"""docs/walkthrough.md and the README's five commands run as shown, on whatever install runs the tests (the core
tier of scripts/test.sh: `pip install .`, no torch, no vLLM). Each command's expected exit code is its
`# exit N` comment in the document (0 without one); `out/` is redirected to a temporary folder."""
from __future__ import annotations

import re
import shlex
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def commands(md: Path, heading: str | None = None) -> list[tuple[str, int]]:
    text = md.read_text()
    if heading:
        text = text.split(heading, 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            if line.startswith("kconvert "):
                cmd, _, comment = line.partition("  #")
                m = re.search(r"exit (\d+)", comment)
                out.append((cmd.strip(), int(m.group(1)) if m else 0))
    return out


WALK = commands(ROOT / "docs" / "walkthrough.md")
FIVE = commands(ROOT / "README.md", "## The five commands")


def test_the_documents_hold_the_commands():
    assert [c.split()[1] for c, _ in WALK] == ["inspect", "fix", "inspect", "verify", "matrix"]
    assert [c.split()[1] for c, _ in FIVE] == ["inspect", "fix", "verify", "matrix", "rules"]


@pytest.mark.parametrize("doc", ["walkthrough", "readme"])
def test_every_command_runs_as_shown(doc, tmp_path):
    for cmd, want in WALK if doc == "walkthrough" else FIVE:
        if doc == "readme" and cmd.split()[1] == "inspect":
            want = 1  # the README's draft is the broken one (it says so: K404, exit 1)
        argv = [a.replace("out/", f"{tmp_path}/") for a in shlex.split(cmd)[1:]]
        r = subprocess.run([sys.executable, "-m", "kconvert", *argv], cwd=ROOT, capture_output=True, text=True,
                           timeout=300, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
        assert r.returncode == want, f"{cmd}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    if doc == "walkthrough":
        assert (tmp_path / "matrix.html").is_file() and (tmp_path / "fixed" / "kconvert.json").is_file()
