"""The live path on a vLLM release no engine here can run (issue #47 item 6): every vLLM symbol kconvert's runners
and `kconvert trace --engine vllm` use, enumerated from kconvert's own code with ast (tests/vllm_symbols.py), exists
in the release's Python files with a compatible signature. Read from the files with ast: nothing is imported or run.
docs/gpu.md says what this proves and what it does not."""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from tests.vllm_symbols import Release, check

ROOT = Path(__file__).resolve().parents[1]


def _installed_root() -> Path | None:
    spec = importlib.util.find_spec("vllm")
    return Path(spec.origin).parent.parent if spec and spec.origin else None


RELEASES = {"0.34.0": ROOT / ".vllm-oracle" / "vllm-0.34.0", "0.33.0": ROOT / ".vllm-oracle" / "vllm-0.33.0",
            "installed": _installed_root()}


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_every_vllm_symbol_kconvert_uses_exists_in_the_release_with_a_compatible_signature(release):
    root = RELEASES[release]
    if root is None or not (root / "vllm" / "__init__.py").is_file():
        pytest.skip(f"vLLM {release}'s Python files are not here (tests/vllm_oracle/record.py fetches them)")
    uses = check(Release(root))
    failed = [f"{u.where}: {u.symbol}: {u.why}" for u in uses if u.ok is False]
    assert not failed, "\n".join(failed)
    # what the issue names is among what was enumerated and checked, so the enumeration cannot silently shrink
    said = " ".join(u.symbol for u in uses if u.ok)
    for part in ("vllm.LLM", "LLM.generate", "LLM.get_metrics", "LLM.collective_rpc", "LLM.get_tokenizer",
                 "Metric.value", "Metric.values", "TokensPrompt(prompt_token_ids)", "SamplingParams",
                 "['worker_extension_cls']", "['speculative_config']", "CompilationConfig.static_forward_context",
                 "ExampleHiddenStatesConnector._submit_async_write (overridden)", "extract_from_kv_cache",
                 "CompletionOutput.token_ids", "example_hidden_states_connector.py"):
        assert part in said, part


class _Renamed(Release):
    """A release with one method renamed in one module: what an incompatible release looks like to the check."""

    def __init__(self, root: Path, module: str, old: str, new: str):
        super().__init__(root)
        self._change = (module, old, new)

    def tree(self, module: str):
        t = super().tree(module)
        if t is not None and module == self._change[0]:
            if not hasattr(self, "_changed"):
                self._changed = ast.parse(ast.unparse(t))
                for node in ast.walk(self._changed):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == self._change[1]:
                        node.name = self._change[2]
            return self._changed
        return t


def test_the_check_fails_on_a_release_that_renamed_what_kconvert_calls():
    root = RELEASES["0.34.0"]
    if not (root / "vllm" / "__init__.py").is_file():
        pytest.skip("vLLM 0.34.0's Python files are not here")
    uses = check(_Renamed(root, "vllm.entrypoints.llm", "collective_rpc", "collective_rpc_v2"))
    failed = [u for u in uses if u.ok is False]
    assert failed and all("collective_rpc" in u.symbol for u in failed)
    assert {u.where.split(":")[0] for u in failed} == {"kconvert/runners/vllm_worker.py"}


def test_trace_recording_finds_its_parts_where_0_34_keeps_them(tmp_path, monkeypatch):
    """vLLM 0.34 moved the extract_hidden_states method with Model Runner V2 (v1/worker/gpu/spec_decode/); kconvert
    trace --engine vllm looked for the V1 file and would refuse 0.34 as unable to record."""
    import kconvert.trace.record_vllm as rv

    root = RELEASES["0.34.0"]
    if not (root / "vllm" / "__init__.py").is_file():
        pytest.skip("vLLM 0.34.0's Python files are not here")

    class Spec:
        submodule_search_locations = [str(root / "vllm")]

    monkeypatch.setattr(rv, "find_spec", lambda name: Spec())
    monkeypatch.setattr("kconvert.engines.installed.installed_version", lambda engine: "0.34.0")
    assert rv.check_recording_vllm() == "0.34.0"
