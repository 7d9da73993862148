"""The project settings as a library caller reads them (kconvert/project.py): the configuration found upward
from the working directory, the caller's values over it, its refusals as UsageError naming the file, and
`kconvert.matrix.matrix` resolving them as `kconvert matrix` does. The CLI's side (messages, exit codes) is in
tests/test_cli_habits.py and tests/test_first_hour.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from kconvert.errors import UsageError
from kconvert.project import project_settings

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
REASON = "rope scaling dropped on purpose; verify measured AL 2.9"


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "kconvert.toml").write_text(
        f'target = "{TINY / "target"}"\nfail-on = "warning"\nengine = "sglang"\n\n[ignore]\nK902 = "{REASON}"\n',
        encoding="utf-8")
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("KCONVERT_HASH_CACHE", str(tmp_path / "sha256.sqlite"))
    return tmp_path / "kconvert.toml"


def test_a_library_caller_gets_the_configuration_found_upward(project):
    ps = project_settings()
    assert (ps.target, ps.fail_on, ps.engine, ps.engine_version) == (str(TINY / "target"), "warning", "sglang", None)
    assert ps.selection.config_file == str(project)
    assert [(i.selector, i.reason, i.source) for i in ps.selection.ignore] == [("K902", REASON, str(project))]


def test_the_callers_values_win_and_isolated_reads_nothing(project):
    ps = project_settings(target="kimi-k2.5", fail_on="error", engine="vllm", ignore="K4")
    assert (ps.target, ps.fail_on, ps.engine) == ("kimi-k2.5", "error", "vllm")
    assert [i.selector for i in ps.selection.ignore] == ["K4"]
    ps = project_settings(isolated=True)
    assert (ps.target, ps.fail_on, ps.engine, ps.selection.is_default) == (None, "error", "vllm", True)


def test_a_bad_key_is_a_usage_error_naming_the_file(project):
    project.write_text('fail-on = "warnings"\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"kconvert\.toml: fail-on = 'warnings'.*did you mean 'warning'"):
        project_settings()


def test_the_library_matrix_reads_the_configuration_as_the_command(project):
    from kconvert.matrix import matrix

    doc = matrix([str(TINY / "drafts" / "mla-torchspec")], engines="vllm:0.32", cache="off")
    assert [c["target"] for c in doc["cells"]] == [str(TINY / "target")]
    assert matrix([str(TINY / "drafts" / "mla-torchspec")], engines="vllm:0.32", cache="off",
                  isolated=True)["cells"][0]["target"] is None
