"""One cache of live `kconvert verify` runs on the shipped tiny example, shared by every live test module of a
pytest session, so that an engine run one module needs (a good draft at the example's settings) is not started
again by another (examples, score agreement, TP)."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
TARGET = str(TINY / "target")
# Same prompts and lengths for every run so that acceptance lengths compare.
SETTINGS = dict(prompts="all", max_prompts=None, max_tokens=64, num_speculative_tokens=3, timeout_s=900, lossless=False)
# Token-for-token comparisons run in float32: in bf16 the CPU kernels of a k+1-token verification step and of a
# one-token decode step round differently, and this chaotic tiny target amplifies that into other greedy
# outputs (measured: bf16 speculative vs plain runs differ; float32 runs are identical).
FP32 = (("dtype", "float32"),)
GOOD = {"mla": "drafts/mla-torchspec", "llama": "drafts/llama-speculators"}
# The seed deployment's serve line: `vllm serve moonshotai/Kimi-K2.5 --tensor-parallel-size 8
# --speculative-config '<SEED_SPEC>'` (draft at TP 8, k=4), replayed on the tiny example.
SEED_SPEC = ('{"model": "AQ-MedAI/Kimi-K25-eagle3", "method": "eagle3", "num_speculative_tokens": 4, '
             '"draft_tensor_parallel_size": 8}')
SEED_TP = 8

_runs: dict[tuple, object] = {}


def run_verify(draft: str, engine_args: tuple = (), **kw):
    """`kconvert.verify` of `draft` next to the tiny target with SETTINGS (overridden by `kw`; `replay=(json, tp)`
    replays a serve line's speculative config and TP), once per session."""
    from kconvert.commands.verify import VerifySettings, verify

    key = (draft, engine_args, tuple(sorted(kw.items())))
    if key not in _runs:
        replay = kw.pop("replay", None)  # (speculative-config JSON, tensor-parallel-size) of a serve line
        st = VerifySettings(**{**SETTINGS, **kw, "engine_args": dict(engine_args)})
        if replay is not None:
            from kconvert.engines.serve_lines import parse_speculative_config

            st = st.replay(parse_speculative_config(replay[0], tensor_parallel_size=replay[1]))
        _runs[key] = verify(draft, TARGET, settings=st)
    return _runs[key]


def al(vr) -> float:
    return vr.acceptance["mean_acceptance_length"]


def qwen3_layer_draft(folder: Path) -> Path:
    """The shipped speculators draft's layer as a Qwen3 layer, as `speculators train --draft-arch qwen3` writes one:
    `transformer_layer_config.model_type: qwen3` and Qwen3's per-head q_norm/k_norm [head_dim] (values near 1, a
    fixed seed), every other tensor the trained draft's."""
    import torch
    from safetensors.torch import load_file, save_file

    src = TINY / GOOD["llama"]
    folder.mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    layer = cfg["transformer_layer_config"]
    layer.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3")
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    t = load_file(str(src / "model.safetensors"))
    gen = torch.Generator().manual_seed(3)
    for w in ("q_norm", "k_norm"):
        t[f"layers.0.self_attn.{w}.weight"] = (1 + 0.05 * torch.randn(layer["head_dim"], generator=gen)).to(
            t["norm.weight"].dtype)
    save_file(t, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


# The looping target (issue #46 item 4): the shipped target with the lm_head row of its most frequent greedy output
# token, '\\' (id 73: 3939 of the 6144 tokens of its float32 outputs on `all`, bench/NOTES.md "Output health"), scaled
# by LOOP_GAIN. Every layer is the shipped one, so the residual streams the draft reads (aux layers 2, 5, 7) are those
# of the shipped target on the same text, and on a run of '\\' the shipped target itself continues it (92 % of its
# '\\' tokens are followed by another): the good draft predicts the loop and is accepted almost always, as
# tokenspeed #1305's draft was on a looping target. Measured with LOOP_GAIN 8 (float32, 96 prompts x 64 tokens):
# 95 of 96 outputs degenerate, mean acceptance length 3.92 of 4 for drafts/mla-torchspec.
LOOP_TOKEN = 73
LOOP_GAIN = 8.0


def looping_target(folder: Path) -> Path:
    """A copy of the shipped target whose greedy outputs loop on one token (LOOP_TOKEN, LOOP_GAIN above), built
    from the shipped files by that one deterministic change."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    src = TINY / "target"
    folder.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, folder / f.name)
    t = load_file(str(src / "model.safetensors"))
    head = t["language_model.lm_head.weight"]
    head[LOOP_TOKEN] = (head[LOOP_TOKEN].float() * LOOP_GAIN).to(head.dtype)
    save_file(t, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def engine_counters(raw: list[dict]) -> dict:
    """The spec-decode counters straight from the engine's raw get_metrics() dump (one series per engine), summed
    here without kconvert's own code: the outside value live tests compare kconvert's figures with."""
    out = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": None}
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for m in raw:
        if m["name"] in names:
            out[names[m["name"]]] += m["value"]
        elif m["name"] == "vllm:spec_decode_num_accepted_tokens_per_pos":
            vals = m["values"]
            out["accepted_per_pos"] = vals if out["accepted_per_pos"] is None else [
                a + b for a, b in zip(out["accepted_per_pos"], vals)]
    return out
