"""Oracles the tests share. None of them imports kconvert: they read /metrics text with prometheus_client's own
parser, and they hold the one copy of the seed's published counters (tests/data/seed_kimi_k25_aqmedai.metrics.txt,
the scrape of vLLM PR #35966). Checked themselves in tests/test_acceptance.py against the published rates."""
from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

DATA = Path(__file__).parent / "data"
SEED_SCRAPE = DATA / "seed_kimi_k25_aqmedai.metrics.txt"
SEED_K = 4  # num_speculative_tokens of the seed run (vLLM PR #35966's serve args)

_NAMES = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
}
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def prom_counters(text: str, model: str | None = None) -> dict:
    """vLLM's speculative counters in a /metrics text, summed over engines (and models unless ``model``), as
    prometheus_client's parser reads them: only the ``_total`` samples of counter families count."""
    out = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
    per_pos: dict[int, int] = {}
    finished = 0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if model is not None and s.labels.get("model_name") not in (None, model):
                continue
            name = s.name[: -len("_total")] if s.name.endswith("_total") else None
            if name is None:
                continue
            if name in _NAMES:
                out[_NAMES[name]] += int(s.value)
            elif name == _PER_POS:
                p = int(s.labels["position"])
                per_pos[p] = per_pos.get(p, 0) + int(s.value)
            elif name == "vllm:request_success":
                finished += int(s.value)
    out["accepted_per_pos"] = [per_pos.get(i, 0) for i in range(max(per_pos) + 1)] if per_pos else []
    out["requests_finished"] = finished
    return out


def prom_delta(before: str, after: str, model: str | None = None) -> dict:
    a, b = prom_counters(before, model), prom_counters(after, model)
    d = {k: b[k] - a[k] for k in ("drafts", "draft_tokens", "accepted", "requests_finished")}
    n = max(len(a["accepted_per_pos"]), len(b["accepted_per_pos"]))
    pad = lambda v: v + [0] * (n - len(v))  # noqa: E731
    d["accepted_per_pos"] = [y - x for x, y in zip(pad(a["accepted_per_pos"]), pad(b["accepted_per_pos"]))]
    return d


def by_hand(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int]) -> dict:
    """vLLM's definitions (vllm/v1/spec_decode/metrics.py; docs/formats-and-engines.md#acceptance-metrics), written out:
    rate = accepted / draft_tokens; AL = 1 + accepted / drafts (the bonus token the target adds to every
    draft); per-position rate_i = accepted_i / drafts."""
    return {"acceptance_rate": accepted / draft_tokens, "mean_acceptance_length": 1 + accepted / drafts,
            "per_position": [a / drafts for a in per_pos]}


def seed() -> dict:
    """The seed run's counters, read from the one fixture that holds them."""
    c = prom_counters(SEED_SCRAPE.read_text())
    del c["requests_finished"]
    return c
