"""Hub ids resolve through the real huggingface_hub code, offline, from a pre-populated cache."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.factories import make_draft, make_target
from tests.hub_cache import populate_cache


def run_cli(args: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache), HF_HOME=str(cache.parent / "hf_home"))
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_hub_id_is_read_from_the_offline_cache(tmp_path):
    draft = make_draft(tmp_path / "src", "specforge")
    cache = tmp_path / "cache"
    populate_cache(cache, "acme/kimi-draft", draft)
    r = run_cli(["inspect", "acme/kimi-draft", "--json"], cache)
    assert r.returncode == 1, r.stderr  # SpecForge ids on vLLM: K404
    doc = json.loads(r.stdout)
    assert doc["subject"]["kind"] == "hub"
    assert doc["subject"]["repo_id"] == "acme/kimi-draft"
    assert doc["format"]["producer"] == "specforge"
    assert any(f["id"] == "K404" for f in doc["findings"])


def test_hub_revision_is_honoured(tmp_path):
    cache = tmp_path / "cache"
    populate_cache(cache, "acme/d", make_draft(tmp_path / "a", "specforge"), revision="main")
    populate_cache(cache, "acme/d", make_draft(tmp_path / "b", "speculators"), revision="v2")
    r = run_cli(["inspect", "acme/d@v2", "--json"], cache)
    doc = json.loads(r.stdout)
    assert doc["format"]["producer"] == "speculators"
    assert doc["subject"]["revision"] == "v2"


def test_hub_target_config_is_read_from_the_offline_cache(tmp_path):
    cache = tmp_path / "cache"
    populate_cache(cache, "acme/d", make_draft(tmp_path / "a", "torchspec"))
    populate_cache(cache, "moon/tiny-k25", make_target(tmp_path / "t"))
    r = run_cli(["inspect", "acme/d", "--target", "moon/tiny-k25", "--json"], cache)
    doc = json.loads(r.stdout)
    assert doc["target"]["origin"] == "hub"
    assert doc["target"]["num_hidden_layers"] == 8
    assert doc["target"]["weight_prefix"] == "language_model."


def test_hub_id_missing_from_the_cache_offline_is_a_clear_error(tmp_path):
    r = run_cli(["inspect", "acme/not-there"], tmp_path / "cache")
    assert r.returncode == 2
    assert "not in the Hugging Face cache" in r.stderr
    assert "Traceback" not in r.stderr


def test_hub_cache_without_weights_skips_tensor_checks_with_a_note(tmp_path):
    cache = tmp_path / "cache"
    populate_cache(cache, "acme/cfg-only", make_draft(tmp_path / "a", "specforge"), skip=("model.safetensors",))
    r = run_cli(["inspect", "acme/cfg-only", "--json"], cache)
    doc = json.loads(r.stdout)
    assert any("tensor checks are skipped" in f["message"] for f in doc["findings"])


def test_fix_reads_a_hub_id_from_the_cache_and_writes_a_local_copy(tmp_path):
    cache = tmp_path / "cache"
    populate_cache(cache, "acme/d", make_draft(tmp_path / "a", "specforge"))
    out = tmp_path / "out"
    r = run_cli(["fix", "acme/d", "-o", str(out)], cache)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    prov = json.loads((out / "kconvert.json").read_text())
    assert prov["input"]["source"] == "acme/d"
    assert not (out / "model.safetensors").is_symlink()


def _unreachable_endpoint() -> str:
    """A loopback port nothing listens on: connections are refused at once, and no traffic leaves the machine."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run_cli_unreachable(args: list[str], cache: Path) -> tuple[subprocess.CompletedProcess, float]:
    """The CLI with the Hub unreachable but HF_HUB_OFFLINE unset: what a user on a machine without network meets."""
    import time

    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_HUB_CACHE=str(cache), HF_HOME=str(cache.parent / "hf_home"), HF_ENDPOINT=_unreachable_endpoint())
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, env=env,
                       timeout=120)
    return r, time.monotonic() - start


def test_hub_target_unreachable_and_uncached_fails_at_once(tmp_path):
    # huggingface_hub's hf_hub_download retries a failed metadata request with backoff (1+2+4+8+8 s) when nothing
    # is cached; kconvert asks the endpoint once and reads the cache instead (issue #49: about 40 s before).
    draft = make_draft(tmp_path / "d", "specforge")
    r, took = run_cli_unreachable(["inspect", str(draft), "--target", "moon/not-cached"], tmp_path / "cache")
    assert r.returncode == 2, r.stderr
    assert "--target moon/not-cached: config.json not in the Hugging Face cache and the Hub is not reachable" \
        in r.stderr
    assert took < 12, f"took {took:.1f} s"


def test_hub_target_unreachable_is_read_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    populate_cache(cache, "moon/tiny-k25", make_target(tmp_path / "t"))
    draft = make_draft(tmp_path / "d", "torchspec")
    r, took = run_cli_unreachable(["inspect", str(draft), "--target", "moon/tiny-k25", "--json"], cache)
    doc = json.loads(r.stdout)
    assert doc["target"]["origin"] == "hub" and doc["target"]["num_hidden_layers"] == 8
    assert took < 12, f"took {took:.1f} s"
