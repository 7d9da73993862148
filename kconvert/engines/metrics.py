"""vLLM's spec-decode counters from a Prometheus ``/metrics`` scrape.

vLLM 0.32 (``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingProm``) registers four counters, all labelled
``model_name`` (the served model name) and ``engine`` (the engine index; one per data-parallel engine):

- ``vllm:spec_decode_num_drafts``: verify steps (one per request per step with a draft);
- ``vllm:spec_decode_num_draft_tokens``: tokens proposed by the draft;
- ``vllm:spec_decode_num_accepted_tokens``: proposed tokens the target accepted;
- ``vllm:spec_decode_num_accepted_tokens_per_pos``: the same per draft position (extra label ``position``,
  ``"0"`` .. ``str(k - 1)``; vLLM creates one series per position up to ``num_speculative_tokens``).

Over HTTP a counter's sample is named ``<name>_total``; prometheus_client also exposes a ``<name>_created``
timestamp (as a gauge family of its own in vLLM's multiprocess mode) that must not be summed. The text is
parsed with ``prometheus_client.parser``, never by hand; names match with or without ``_total``.
"""
from __future__ import annotations

from typing import Any, Mapping

from kconvert.errors import InputError
from kconvert.engines.acceptance import delta

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
REQUEST_SUCCESS = "vllm:request_success"  # finished requests, label finished_reason: spots foreign traffic
SPEC_METRICS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POS)
_KEYS = {DRAFTS: "drafts", DRAFT_TOKENS: "draft_tokens", ACCEPTED: "accepted"}

MODEL_LABEL = "model_name"
ENGINE_LABEL = "engine"
POSITION_LABEL = "position"


def _base_name(sample_name: str) -> str | None:
    """The counter a sample belongs to: ``x_total`` and ``x`` → ``x``; ``x_created`` → None (a timestamp)."""
    if sample_name.endswith("_created"):
        return None
    return sample_name[: -len("_total")] if sample_name.endswith("_total") else sample_name


def parse_samples(text: str, *, source: str = "metrics text") -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a Prometheus text exposition as ``(counter name, labels, value)``, ``_created``
    timestamps dropped and ``_total`` stripped. Raises :class:`InputError` on text the parser refuses."""
    # deferred: prometheus_client is ~30 ms (100 modules); only a scrape being read needs it
    from prometheus_client.parser import text_string_to_metric_families

    out: list[tuple[str, dict[str, str], float]] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = _base_name(sample.name)
                if name is not None:
                    out.append((name, dict(sample.labels), float(sample.value)))
    except (ValueError, TypeError, IndexError) as exc:
        raise InputError(f"{source}: not Prometheus text format ({exc})") from None
    return out


def _count(value: float, what: str, source: str) -> int:
    if value != value or value < 0 or value != int(value):  # NaN, negative, fractional: not a counter
        raise InputError(f"{source}: {what} has value {value!r}, not a counter")
    return int(value)


def spec_decode_counters(text: str, *, model: str | None = None, source: str = "metrics text") -> dict[str, Any]:
    """Spec-decode counters of one scrape, summed over engines and model names (``model`` picks one
    ``model_name``).

    Returns ``drafts``, ``draft_tokens``, ``accepted``, ``accepted_per_pos`` (index = position), ``found``
    (whether any spec-decode series was present: vLLM registers them only with a ``speculative_config``),
    ``model_names`` and ``engines`` seen on those series, ``num_speculative_tokens`` (positions exported,
    None without per-position series) and ``requests_finished`` (``vllm:request_success`` over the same
    label selection, None when absent). Raises :class:`InputError` if ``model`` names no series.
    """
    samples = parse_samples(text, source=source)
    spec = [s for s in samples if s[0] in SPEC_METRICS]
    models = sorted({s[1][MODEL_LABEL] for s in spec if MODEL_LABEL in s[1]})
    engines = sorted({s[1][ENGINE_LABEL] for s in spec if ENGINE_LABEL in s[1]}, key=lambda e: (len(e), e))
    if model is not None:
        if model not in models:
            known = ", ".join(models) or "none"
            raise InputError(f"{source}: no spec-decode counters for model_name {model!r} (model names: {known})")
        samples = [s for s in samples if s[1].get(MODEL_LABEL) == model]
        spec = [s for s in spec if s[1].get(MODEL_LABEL) == model]
    out: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
    per_pos: dict[int, int] = {}
    for name, labels, value in spec:
        if name == ACCEPTED_PER_POS:
            try:
                pos = int(labels[POSITION_LABEL])
            except (KeyError, ValueError):
                raise InputError(f"{source}: {name} sample without an integer position label: {labels}") from None
            if pos < 0:
                raise InputError(f"{source}: {name} has negative position {pos}")
            per_pos[pos] = per_pos.get(pos, 0) + _count(value, f"{name}{labels}", source)
        else:
            out[_KEYS[name]] += _count(value, f"{name}{labels}", source)
    n = max(per_pos) + 1 if per_pos else 0
    out["accepted_per_pos"] = [per_pos.get(i, 0) for i in range(n)]
    finished = [v for name, _labels, v in samples if name == REQUEST_SUCCESS]
    out.update(
        found=bool(spec),
        model_names=models,
        engines=engines,
        num_speculative_tokens=n or None,
        requests_finished=int(sum(finished)) if finished else None,
    )
    return out


def counters_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """``after - before`` of two :func:`spec_decode_counters` results (same server, same model selection).

    Raises :class:`InputError` when a counter went down: the scrapes are swapped, or the server restarted
    between them."""
    try:
        out = delta(before, after)
    except ValueError as exc:
        raise InputError(f"the two scrapes do not belong together: {exc} (swapped, or the server restarted)") from None
    rb, ra = before.get("requests_finished"), after.get("requests_finished")
    out["requests_finished"] = ra - rb if ra is not None and rb is not None else None
    out["num_speculative_tokens"] = after.get("num_speculative_tokens") or before.get("num_speculative_tokens")
    return out


def scrape_delta(before_text: str, after_text: str, *, model: str | None = None) -> dict[str, Any]:
    """Counters between two scrapes' texts (the model selection applies to both)."""
    return counters_delta(
        spec_decode_counters(before_text, model=model, source="before"),
        spec_decode_counters(after_text, model=model, source="after"),
    )

