"""kconvert.report.formats is the one place a format is declared: a format registered there (and nowhere else) is a
choice of `--output-format` with its help line, renders an inspect report, gets its file option on inspect and
matrix, is allowed by `verify --server` when it says so, and is refused for a document it does not render.

The dummy format is registered in a child process before the command line is built (as a format module of the
package is, at import), so the parent's command line stays the shipped one."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kconvert.report import formats
from kconvert.report.formats import FileOption, Format

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
TARGET = str(TINY / "target")
MLA = str(TINY / "drafts" / "mla-torchspec")
BROKEN = str(TINY / "broken" / "model-prefixed-keys")  # K201 error, K902 warnings

# The dummy format's renderings: the finding ids of an inspect report, the cell states of a matrix, in the registry's
# render(document, doc) signature; what a test checks them against is the `--json` document of another run.
_CHILD = r"""
import os
import sys
from kconvert.report.formats import FileOption, Format, register


def render(document, doc):
    if document == "matrix":
        return "dummy matrix: " + " ".join(c["state"] for c in doc["cells"]) + "\n"
    return f"dummy {document}: " + " ".join(sorted({f["id"] for f in doc["findings"]})) + "\n"


register(Format(name="dummy", help="a test's one-line rendering", documents=os.environ["DUMMY_DOCUMENTS"].split(","),
                render=render, extension=".dummy", server=True,
                files={"inspect": FileOption("--dummy", "Also write the dummy rendering to this file."),
                       "matrix": FileOption("--dummy", "Also write the dummy matrix to this file.")}))
from kconvert.cli import main

sys.exit(main(sys.argv[1:]))
"""


def kconvert_with_dummy(tmp_path: Path, *argv: str, documents: str = "inspect,verify,matrix"
                        ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "KCONVERT_OUTPUT_FORMAT")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", DUMMY_DOCUMENTS=documents, XDG_CACHE_HOME=str(tmp_path / "xdg"), COLUMNS="200",
               KCONVERT_HASH_CACHE=str(tmp_path / "sha256.sqlite"))
    return subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300)


def kconvert_json(*argv: str) -> tuple[int, dict]:
    """The shipped command line (no dummy) in this process: the facts the dummy's rendering is checked against."""
    import contextlib
    import io

    from kconvert.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main([*argv, "--json"])
    return rc, json.loads(out.getvalue())


def test_a_registered_format_is_a_choice_of_output_format_with_its_help_line(tmp_path):
    r = kconvert_with_dummy(tmp_path, "inspect", "--help")
    assert r.returncode == 0, r.stderr
    help_text = " ".join(r.stdout.split())
    choices = re.search(r"--output-format <([a-z|]+)>", help_text).group(1).split("|")
    assert choices == ["full", "concise", "dummy", "github", "gitlab", "json", "junit", "sarif"]
    assert "dummy: a test's one-line rendering;" in help_text
    assert "--dummy <str> Also write the dummy rendering to this file." in help_text
    # the shipped command line lists the shipped formats only
    shipped = subprocess.run([sys.executable, "-m", "kconvert", "inspect", "--help"], capture_output=True, text=True,
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}, timeout=120)
    assert "dummy" not in shipped.stdout and "<full|concise|github|gitlab|json|junit|sarif>" in shipped.stdout


def test_a_registered_format_renders_an_inspect_report_on_stdout_and_to_its_file(tmp_path):
    rc, doc = kconvert_json("inspect", BROKEN, "--target", TARGET)
    ids = sorted({f["id"] for f in doc["findings"]})
    assert rc == 1 and "K201" in ids  # a failing draft: the rendering below is not of an empty list
    r = kconvert_with_dummy(tmp_path, "inspect", BROKEN, "--target", TARGET, "--output-format", "dummy")
    assert (r.returncode, r.stdout) == (rc, f"dummy inspect: {' '.join(ids)}\n"), r.stderr
    # its file option, beside another format on stdout
    r = kconvert_with_dummy(tmp_path, "inspect", BROKEN, "--target", TARGET, "--dummy", "out/inspect.dummy",
                            "--output-format", "json")
    assert r.returncode == rc, r.stderr
    assert json.loads(r.stdout)["findings"] == doc["findings"]
    assert (tmp_path / "out" / "inspect.dummy").read_text() == f"dummy inspect: {' '.join(ids)}\n"


def test_a_registered_format_with_a_matrix_renderer_is_a_file_option_of_matrix(tmp_path):
    argv = ("matrix", MLA, BROKEN, "--target", TARGET, "--engines", "vllm", "--cache", "off")
    rc, doc = kconvert_json(*argv)
    states = [c["state"] for c in doc["cells"]]
    assert "pass" in states and "fail" in states
    help_text = " ".join(kconvert_with_dummy(tmp_path, "matrix", "--help").stdout.split())
    assert "--dummy <str> Also write the dummy matrix to this file." in help_text
    r = kconvert_with_dummy(tmp_path, *argv, "--dummy", "matrix.dummy", "--csv", "matrix.csv")
    assert r.returncode == rc, r.stderr
    assert (tmp_path / "matrix.dummy").read_text() == f"dummy matrix: {' '.join(states)}\n"
    assert len((tmp_path / "matrix.csv").read_text().splitlines()) == 1 + len(states)  # the shipped ones still


def test_the_server_mode_reads_its_allow_list_from_the_registry(tmp_path):
    url = "http://127.0.0.1:9"  # a dry run contacts nothing
    r = kconvert_with_dummy(tmp_path, "verify", "--server", url, "--dry-run", "--output-format", "dummy")
    assert r.returncode == 0 and r.stdout.startswith(f"dry run: would measure the vllm server at {url}"), r.stderr
    r = kconvert_with_dummy(tmp_path, "verify", "--server", url, "--dry-run", "--output-format", "sarif")
    assert r.returncode == 2
    assert "use full, concise, dummy, github or json" in " ".join(r.stderr.split())


def test_a_format_is_refused_for_a_document_it_does_not_render(tmp_path):
    r = kconvert_with_dummy(tmp_path, "verify", "--server", "http://127.0.0.1:9", "--dry-run", "--output-format",
                            "dummy", documents="inspect,matrix")
    assert r.returncode == 2 and r.stdout == ""
    assert "--output-format dummy does not render a verify report" in " ".join(r.stderr.split())


def test_the_registry_refuses_a_second_format_of_a_name_and_a_file_option_for_a_document_it_does_not_render():
    with pytest.raises(ValueError, match="registered twice"):
        formats.register(Format(name="sarif", documents=("inspect",), render=None, extension=""))
    with pytest.raises(ValueError, match="not among the documents"):
        formats.register(Format(name="dummy-x", documents=("inspect",), render=None, extension="",
                                files={"matrix": FileOption("--x", "x")}))
    assert "dummy-x" not in {f.name for f in formats.formats()}


def test_every_shipped_format_module_declares_a_format_and_its_help_line_is_in_the_cli_help():
    from kconvert.cli._common import FORMATS, format_help

    modules = sorted(p.stem for p in Path(formats.__file__).parent.glob("*.py") if not p.stem.startswith("_"))
    assert modules == sorted(f.name for f in formats.formats())
    assert FORMATS == ("full", "concise", "github", "gitlab", "json", "junit", "sarif")
    assert [f.name for f in formats.formats() if f.server] == ["full", "concise", "github", "json"]
    for f in formats.output_formats():
        assert f"{f.name}: {f.help}" in format_help()
