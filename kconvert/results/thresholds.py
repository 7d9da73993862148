"""Thresholds for the deployment gate: from flags or a TOML policy file (schemas/policy.schema.json) keyed by
target and prompt set, with expected values taken from a model card converted to vLLM's conventions."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kconvert.errors import InputError, UsageError
from kconvert.guard.paths import read_toml
from kconvert.prompts import load_prompts
from kconvert.schemas import validate

MAX_POLICY_BYTES = 1024 * 1024

# How a published "acceptance length" counts, and how it maps to vLLM's mean acceptance length (AL, bonus
# token included). SGLang / SpecForge `accept_length` = completion tokens / verify steps: the same as vLLM's AL
# at equal num_speculative_tokens. "accepted" = accepted draft tokens per step, without the bonus token.
CONVENTIONS = {
    "vllm": ("vLLM mean acceptance length (bonus token included)", 0.0),
    "sglang": ("SGLang/SpecForge accept_length (bonus token included)", 0.0),
    "accepted": ("accepted draft tokens per step (no bonus token)", 1.0),
}

# The output-health gate (issue #46 item 4; kconvert/engines/output_health.py): fail when more than this share of
# the prompts' outputs degenerated into a short loop, since the acceptance is then counted on the loop. Measured
# (bench/NOTES.md, "Output health": bench/output_health.py, the demo's fixed draft, every prompt set, bf16 and
# float32): the shipped tiny example, whose untrained target itself loops on a third of its prompts, at most 0.5
# (code, bf16); its copy whose lm_head makes it loop (tests/live_runs.py looping_target) at least 0.969 (code), at
# a mean acceptance length of 3.92 that would pass any floor. 0.75 keeps 0.25 above the one and 0.22 below the
# other. "off" disables the check.
DEFAULT_MAX_DEGENERATE_SHARE = 0.75
OFF = "off"


@dataclass
class Thresholds:
    min_acceptance_length: float | None = None
    min_acceptance_rate: float | None = None
    min_per_position: list[float] = field(default_factory=list)
    expected: dict[str, Any] | None = None  # {"value", "convention", "tolerance", "source"}
    source: str = "flags"
    notes: list[str] = field(default_factory=list)
    # the output-health gate: the largest share of degenerate outputs allowed (None: not checked)
    max_degenerate_share: float | None = None
    # a published curve to gate against (kconvert/results/references.py reference_block), None without --reference
    reference: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"min_acceptance_length": self.min_acceptance_length, "min_acceptance_rate": self.min_acceptance_rate,
                "min_per_position": self.min_per_position, "expected": self.expected, "source": self.source,
                "notes": self.notes, "max_degenerate_share": self.max_degenerate_share,
                "reference": self.reference}

    @property
    def empty(self) -> bool:
        return (self.min_acceptance_length is None and self.min_acceptance_rate is None
                and not self.min_per_position and self.expected is None and self.max_degenerate_share is None
                and self.reference is None)


def expected_to_vllm_al(value: float, convention: str) -> float:
    if convention not in CONVENTIONS:
        raise UsageError(f"expected convention {convention!r}: choose {', '.join(CONVENTIONS)}")
    return value + CONVENTIONS[convention][1]


def apply_expected(th: Thresholds, value: float, convention: str, tolerance: float, source: str) -> None:
    al = expected_to_vllm_al(value, convention)
    floor = al * (1 - tolerance)
    th.expected = {"value": value, "convention": convention, "as_vllm_al": al, "tolerance": tolerance,
                   "source": source}
    th.notes.append(f"expected {value} ({CONVENTIONS[convention][0]}) = vLLM AL {al:.3f}; "
                    f"gate at {floor:.3f} ({tolerance:.0%} tolerance)")
    if th.min_acceptance_length is None or floor > th.min_acceptance_length:
        th.min_acceptance_length = floor


def load_policy(path: str | Path, *, target: str, prompt_set: str, k: int) -> Thresholds:
    p = Path(path)
    # the read guard: a regular file of at most 1 MB (a policy is a few [[gate]] tables), UTF-8, nested at most 64
    # levels before tomllib runs, no nan/inf
    doc = read_toml(p, f"--policy {p}", max_bytes=MAX_POLICY_BYTES)
    validate(doc, "policy", what=str(p))
    chosen = None
    for entry in doc.get("gate", []):
        if fnmatch.fnmatch(target, entry.get("target", "*")) and fnmatch.fnmatch(prompt_set, entry.get("prompt_set", "*")) \
                and entry.get("num_speculative_tokens", k) == k:
            chosen = entry
            break
    if chosen is None:
        raise InputError(f"{p}: no [[gate]] entry matches target {target!r}, prompt set {prompt_set!r}, k={k}")
    th = Thresholds(min_acceptance_length=chosen.get("min_acceptance_length"),
                    min_acceptance_rate=chosen.get("min_acceptance_rate"),
                    min_per_position=list(chosen.get("min_per_position", [])),
                    source=f"{p} [target={chosen.get('target', '*')}, prompt_set={chosen.get('prompt_set', '*')}]",
                    max_degenerate_share=degenerate_share_limit(chosen.get("max_degenerate_share"),
                                                                f"{p}: max_degenerate_share"))
    exp = chosen.get("expected")
    if exp:
        apply_expected(th, float(exp["value"]), exp.get("convention", "vllm"), float(exp.get("tolerance", 0.1)),
                       exp.get("source", str(p)))
    return th


@dataclass
class Gate:
    """The gate as `kconvert verify`'s flags give it, resolved by `verify` once the run's k is known (a replayed
    serve line sets k, and a policy's entry is chosen by k): the policy's entry when a policy file is given, else
    the floors given; an expected value (converted to vLLM's AL) on top of either."""

    min_acceptance_length: float | None = None
    min_acceptance_rate: float | None = None
    min_per_position: str | None = None  # comma-separated rates, e.g. "0.7,0.5,0.3" (--min-per-position)
    policy: str | Path | None = None
    expected: float | None = None
    expected_convention: str = "sglang"
    tolerance: float = 0.1
    # --max-degenerate-share: a share, "off", or None for the policy entry's value, else the measured default
    max_degenerate_share: float | str | None = None
    # --reference: a published curve's id (kconvert/results/reference_curves.json), gated at the run's k
    reference: str | None = None

    def resolve(self, *, target: str, prompts: str, k: int, run: dict[str, Any] | None = None) -> Thresholds:
        """The thresholds for a run at k; `run` names this run's conditions (hardware, prompts, temperature, ...)
        for a reference's comparison."""
        if self.policy:
            th = load_policy(self.policy, target=target, prompt_set=load_prompts(prompts)[0], k=k)
        else:
            th = Thresholds(min_acceptance_length=self.min_acceptance_length,
                            min_acceptance_rate=self.min_acceptance_rate,
                            min_per_position=_rates(self.min_per_position, "--min-per-position"),
                            max_degenerate_share=DEFAULT_MAX_DEGENERATE_SHARE)
        if self.max_degenerate_share is not None:
            th.max_degenerate_share = degenerate_share_limit(self.max_degenerate_share, "--max-degenerate-share")
        if self.expected is not None:
            apply_expected(th, self.expected, self.expected_convention, self.tolerance, "--expected-accept-length")
        if self.reference is not None:
            from kconvert.results.references import load_reference, reference_block

            ref = load_reference(self.reference)
            block = reference_block(ref, k, self.tolerance, run or {}, expected_to_vllm_al(ref.at(k), ref.metric))
            th.reference = block
            th.notes.append(f"reference {block['id']}: AL {block['value']} at k={k} ({block['source']}); gate at "
                            f"{block['floor']:.3f} ({self.tolerance:.0%} tolerance)"
                            + (f"; differs: {', '.join(d['what'] for d in block['differs'])}" if block["differs"]
                               else ""))
        return th


def degenerate_share_limit(value: Any, what: str) -> float | None:
    """A `max_degenerate_share` as given (a number from 0 to 1, "off", or None for the measured default) as the
    limit the gate applies (None: the check is off)."""
    if value is None:
        return DEFAULT_MAX_DEGENERATE_SHARE
    if isinstance(value, str) and value.strip().lower() == OFF:
        return None
    try:
        share = float(value)
    except (TypeError, ValueError):
        share = float("nan")
    if isinstance(value, bool) or not 0.0 <= share <= 1.0:
        raise UsageError(f"{what} {value!r}: a share from 0 to 1 (default {DEFAULT_MAX_DEGENERATE_SHARE}), or "
                         f"{OFF} to skip the output-health check")
    return share


def _rates(text: str | None, what: str) -> list[float]:
    if not text:
        return []
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what} {text!r}: comma-separated numbers, e.g. 0.7,0.5,0.3") from None


@dataclass
class Check:
    name: str
    passed: bool
    observed: Any
    required: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        return vars(self).copy()


def evaluate(th: Thresholds, acceptance: dict[str, Any], health: dict[str, Any] | None = None) -> list[Check]:
    """The gate's checks: the acceptance floors, and the output health of the run's outputs
    (`kconvert.engines.output_health.summarize_health`) when `th.max_degenerate_share` is set."""
    checks: list[Check] = []
    al = acceptance.get("mean_acceptance_length")
    rate = acceptance.get("acceptance_rate")
    if th.min_acceptance_length is not None:
        ok = al is not None and al >= th.min_acceptance_length
        checks.append(Check("min_acceptance_length", ok, al, th.min_acceptance_length,
                            f"mean acceptance length {_f(al)} {'>=' if ok else '<'} {th.min_acceptance_length:.3f}"))
    if th.min_acceptance_rate is not None:
        ok = rate is not None and rate >= th.min_acceptance_rate
        checks.append(Check("min_acceptance_rate", ok, rate, th.min_acceptance_rate,
                            f"acceptance rate {_f(rate)} {'>=' if ok else '<'} {th.min_acceptance_rate:.3f}"))
    per = acceptance.get("per_position") or []
    for i, need in enumerate(th.min_per_position):
        got = per[i] if i < len(per) else None
        ok = got is not None and got >= need
        checks.append(Check(f"min_per_position[{i}]", ok, got, need,
                            f"position {i} acceptance {_f(got)} {'>=' if ok else '<'} {need:.3f}"))
    if th.reference is not None:
        checks.append(reference_check(th.reference, al))
    if th.max_degenerate_share is not None:
        checks.append(health_check(th.max_degenerate_share, health))
    return checks


def reference_check(block: dict[str, Any], al: float | None) -> Check:
    """The live AL against a published curve's figure at the run's k: how far it is, and what differs (each
    differing condition moves the figure by itself, so a gap is not the draft's alone)."""
    from kconvert.results.references import compare

    cmp = compare(block, al)
    block["comparison"] = cmp
    ok = al is not None and al >= block["floor"]
    differs = "; ".join(f"{d['what']} {d['reference']} vs {d['this_run']}" for d in block["differs"])
    gap = "" if al is None else f" ({cmp['difference']:+.3f}, {cmp['ratio']:.0%} of it)"
    return Check("reference", ok, al, block["floor"],
                 f"mean acceptance length {_f(al)} vs {block['id']}'s {block['as_vllm_al']:.2f} at "
                 f"k={block['k']}{gap} {'>=' if ok else '<'} floor {block['floor']:.3f}"
                 + (f"; differs: {differs}" if differs else ""))


def health_check(limit: float, health: dict[str, Any] | None) -> Check:
    """Fail when more of the target's outputs degenerated than `limit` allows: the acceptance was then counted on
    the target's loops, which any draft predicts, so it does not measure the draft (issue #46 item 4)."""
    share = (health or {}).get("degenerate_share")
    ok = share is not None and share <= limit
    if share is None:
        return Check("max_degenerate_share", False, None, limit, "output health: not measured (no outputs)")
    what = f"output health: {health['degenerate_prompts']} of {health['prompts']} outputs degenerate ({share:.0%})"
    if ok:
        return Check("max_degenerate_share", True, share, limit, f"{what} <= {limit:.0%} allowed")
    return Check("max_degenerate_share", False, share, limit,
                 f"{what} > {limit:.0%} allowed: the acceptance was counted on the target's loops, which any draft "
                 f"predicts, so it is not the draft's quality (check the target and the prompts; "
                 f"--max-degenerate-share {OFF} skips this check)")


def _f(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3f}"
