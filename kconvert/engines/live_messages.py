"""Engine-neutral request and result of one live run (a target, optionally a draft, a prompt set).

Both are plain dataclasses that round-trip through JSON, because a live run crosses a process boundary: the
parent writes the request, a child process runs the engine and writes the result.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kconvert.engines.acceptance import summarize
from kconvert.engines.output_health import summarize_health


@dataclass
class LiveRequest:
    """What to run.

    ``prompts`` are user messages. ``chat_template``: ``None`` = render with the target tokenizer's chat
    template when it has one, else raw text; ``True`` = require the template; ``False`` = raw text.
    ``draft=None`` runs the target alone (the lossless baseline). ``engine_args`` are passed to the engine
    last and win over everything kconvert sets; ``env`` likewise wins over kconvert's automatic environment.
    ``draft_overrides`` patch the draft's ``config.json`` (vLLM 0.32's ``speculative_config`` has no
    ``hf_overrides`` for the draft, so the engine layer writes a temporary draft folder).
    """

    target: str
    draft: str | None = None
    prompts: list[str] = field(default_factory=list)
    num_speculative_tokens: int = 3
    tp: int = 1
    draft_tp: int | None = None
    chat_template: bool | None = None
    max_tokens: int = 64
    temperature: float = 0.0
    trust_remote_code: bool = False
    engine_args: dict[str, Any] = field(default_factory=dict)
    draft_overrides: dict[str, Any] | None = None
    timeout_s: float = 900.0
    env: dict[str, str] = field(default_factory=dict)
    method: str = "eagle3"
    # further keys of vLLM's speculative_config, as a production serve line writes them (passed as written)
    speculative_extra: dict[str, Any] = field(default_factory=dict)
    # A recording run (`kconvert trace --engine vllm`), no draft: vLLM's extract_hidden_states method writes the
    # residual streams entering these layers (input-of-layer numbering) of every request to `record_dir`.
    record_layers: list[int] | None = None
    record_dir: str | None = None
    # further SamplingParams keyword arguments (a recording run: ignore_eos and the connector's request params)
    sampling_extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LiveRequest":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown live request fields: {', '.join(unknown)}")
        return cls(**data)


@dataclass
class LiveCounters:
    """Spec-decode counters summed over label sets (all zero without a draft)."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)


@dataclass
class LiveTimings:
    engine_start_s: float | None = None
    generate_s: float | None = None
    total_s: float | None = None


@dataclass
class LiveResult:
    """What a live run produced. ``engine_args`` and ``env`` are what the engine really got, including every
    setting kconvert chose automatically (listed in ``auto_settings``) so a report can show them."""

    engine: str
    engine_version: str
    engine_args: dict[str, Any]
    env: dict[str, str]
    counters: LiveCounters
    output_token_ids: list[list[int]]
    output_texts: list[str]
    timings: LiveTimings
    num_prompts: int
    num_speculative_tokens: int | None = None
    platform: str | None = None
    auto_settings: list[str] = field(default_factory=list)
    prompt_token_counts: list[int] = field(default_factory=list)
    chat_template_applied: bool = False
    raw_metrics: list[dict[str, Any]] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)
    # The token ids each prompt was rendered to, and per request the engine's own acceptance record when the
    # run asked for it (engine arg per_request_spec_decode_metrics=detailed: accepted drafts per verify step),
    # so that `kconvert score` can be compared with a live run step by step.
    prompt_token_ids: list[list[int]] = field(default_factory=list)
    spec_decode_per_request: list[dict[str, Any] | None] = field(default_factory=list)
    # a recording run: per request the file vLLM's hidden-states connector wrote (kv_transfer_params)
    hidden_states_paths: list[str | None] = field(default_factory=list)
    # the attention backend names the engine's layers were built with, per model ("target", "draft"), read in
    # vLLM's worker (kconvert/runners/worker_probe.py); None where it could not be asked
    attention_backends: dict[str, list[str]] | None = None
    # the measurement's identity: every recorded key of kconvert.engines.arg_policy as the engine resolved it
    # (read in the worker from its VllmConfig), the recorded environment variables as `$NAME`
    engine_settings: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LiveResult":
        data = dict(data)
        data["counters"] = LiveCounters(**data.get("counters", {}))
        data["timings"] = LiveTimings(**data.get("timings", {}))
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def acceptance(self) -> dict[str, Any]:
        """Acceptance figures of this run (see :mod:`kconvert.engines.acceptance`)."""
        c = self.counters
        return summarize(c.drafts, c.draft_tokens, c.accepted, c.accepted_per_pos, self.num_speculative_tokens)

    def output_health(self) -> dict[str, Any]:
        """How degenerate the target's outputs of this run were (see :mod:`kconvert.engines.output_health`)."""
        return summarize_health(self.output_token_ids)
