"""vLLM's and tokenspeed's spec-decode counters from a Prometheus ``/metrics`` scrape (tokenspeed's: ``TOKENSPEED``
below).

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

from dataclasses import dataclass
from typing import Any, Mapping

from kconvert.errors import InputError
from kconvert.engines.acceptance import delta


@dataclass(frozen=True)
class SpecMetrics:
    """One engine's spec-decode counters in Prometheus: their names and labels. Every engine listed here counts
    accepted draft tokens without the bonus token, so kconvert.engines.acceptance.summarize reads them alike."""

    engine: str
    drafts: str
    draft_tokens: str
    accepted: str
    accepted_per_pos: str | None  # None: the engine exports no per-position counter
    request_success: str  # finished requests: spots foreign traffic
    engine_label: str  # the label telling data-parallel engines apart

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.drafts, self.draft_tokens, self.accepted, self.accepted_per_pos) if n)


VLLM = SpecMetrics("vllm", drafts="vllm:spec_decode_num_drafts", draft_tokens="vllm:spec_decode_num_draft_tokens",
                   accepted="vllm:spec_decode_num_accepted_tokens",
                   accepted_per_pos="vllm:spec_decode_num_accepted_tokens_per_pos",
                   request_success="vllm:request_success", engine_label="engine")
# tokenspeed 0.1.1 runtime/metrics/collector.py EngineMetrics._init_prometheus: three counters labelled model_name,
# app_key and dp_rank (engine/event_loop.py); num_drafts counts verify rounds per request slot, num_draft_tokens
# slots x (speculative_num_draft_tokens - 1), num_accepted_tokens "excludes the bonus token sampled after verify"
# (engine/generation_output_processor.py _aggregate_spec_decode_step: output_length - 1 per slot). No
# per-position counter. Exposed in prometheus_client's multiprocess mode (utils/common.py
# add_prometheus_middleware): `_total` samples, no `_created`. tokenspeed:request_success: metrics/collector.py
# RequestMetrics (labels model_name, app_key).
TOKENSPEED = SpecMetrics("tokenspeed", drafts="tokenspeed:spec_decode_num_drafts",
                         draft_tokens="tokenspeed:spec_decode_num_draft_tokens",
                         accepted="tokenspeed:spec_decode_num_accepted_tokens", accepted_per_pos=None,
                         request_success="tokenspeed:request_success", engine_label="dp_rank")
BY_ENGINE = {m.engine: m for m in (VLLM, TOKENSPEED)}

DRAFTS = VLLM.drafts
DRAFT_TOKENS = VLLM.draft_tokens
ACCEPTED = VLLM.accepted
ACCEPTED_PER_POS = VLLM.accepted_per_pos
REQUEST_SUCCESS = VLLM.request_success  # finished requests, label finished_reason: spots foreign traffic
SPEC_METRICS = VLLM.names

MODEL_LABEL = "model_name"
ENGINE_LABEL = VLLM.engine_label
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


def spec_decode_counters(text: str, *, model: str | None = None, source: str = "metrics text",
                         names: SpecMetrics = VLLM) -> dict[str, Any]:
    """Spec-decode counters of one scrape, summed over engines and model names (``model`` picks one
    ``model_name``).

    Returns ``drafts``, ``draft_tokens``, ``accepted``, ``accepted_per_pos`` (index = position), ``found``
    (whether any spec-decode series was present: vLLM registers them only with a ``speculative_config``),
    ``model_names`` and ``engines`` seen on those series, ``num_speculative_tokens`` (positions exported,
    None without per-position series) and ``requests_finished`` (``vllm:request_success`` over the same
    label selection, None when absent). Raises :class:`InputError` if ``model`` names no series.
    """
    samples = parse_samples(text, source=source)
    spec = [s for s in samples if s[0] in names.names]
    keys = {names.drafts: "drafts", names.draft_tokens: "draft_tokens", names.accepted: "accepted"}
    models = sorted({s[1][MODEL_LABEL] for s in spec if MODEL_LABEL in s[1]})
    engines = sorted({s[1][names.engine_label] for s in spec if names.engine_label in s[1]},
                     key=lambda e: (len(e), e))
    if model is not None:
        if model not in models:
            known = ", ".join(models) or "none"
            raise InputError(f"{source}: no spec-decode counters for model_name {model!r} (model names: {known})")
        samples = [s for s in samples if s[1].get(MODEL_LABEL) == model]
        spec = [s for s in spec if s[1].get(MODEL_LABEL) == model]
    out: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
    per_pos: dict[int, int] = {}
    for name, labels, value in spec:
        if name == names.accepted_per_pos:
            try:
                pos = int(labels[POSITION_LABEL])
            except (KeyError, ValueError):
                raise InputError(f"{source}: {name} sample without an integer position label: {labels}") from None
            if pos < 0:
                raise InputError(f"{source}: {name} has negative position {pos}")
            per_pos[pos] = per_pos.get(pos, 0) + _count(value, f"{name}{labels}", source)
        else:
            out[keys[name]] += _count(value, f"{name}{labels}", source)
    n = max(per_pos) + 1 if per_pos else 0
    out["accepted_per_pos"] = [per_pos.get(i, 0) for i in range(n)]
    finished = [v for name, _labels, v in samples if name == names.request_success]
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


def scrape_delta(before_text: str, after_text: str, *, model: str | None = None,
                 names: SpecMetrics = VLLM) -> dict[str, Any]:
    """Counters between two scrapes' texts (the model selection applies to both)."""
    return counters_delta(
        spec_decode_counters(before_text, model=model, source="before", names=names),
        spec_decode_counters(after_text, model=model, source="after", names=names),
    )

