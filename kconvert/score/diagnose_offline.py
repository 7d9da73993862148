"""`score --diagnose`: try readings of the draft's files against the trace and name the best by measured
acceptance, offline (verify --diagnose does the same live, one engine start per reading).

The readings tried are those the static findings leave open (aux-layer findings: the ids shifted by one either
way, and a search over the recorded layers when no ids are declared; vocab-mapping findings: d2t as offsets vs
absolute ids; embeddings findings: the draft's vs the target's; norms findings: norm_before_residual on vs off),
those the user asks for (`--try`), and all of them when the draft as loaded accepts little. lm_head rows are
re-selected (full[d2t + arange]) when a full-vocabulary head is given (`--lm-head-from`).

A reading wins only by a margin the trace can resolve: at least 0.02 of mean acceptance length and twice the
standard error of the per-sequence paired difference; otherwise the draft as loaded stays the answer.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable

from kconvert.errors import UsageError
from kconvert.plan import candidates as plan_candidates  # the module; `candidates()` below is this file's
from kconvert.plan.candidates import LOW_AL_FRACTION, Candidate
from kconvert.score.reading import Reading, declared_ids

# the readings score varies, by the finding category whose question each answers (one table for both diagnoses
# and for the next steps that name them: kconvert.plan.candidates.READINGS)
CATEGORY_CHOICES = plan_candidates.READINGS
CHOICES = tuple(CATEGORY_CHOICES.values())
MIN_GAIN = 0.02

__all__ = ["CHOICES", "LOW_AL_FRACTION", "MIN_GAIN", "Candidate", "parse_choices", "wanted_choices", "candidates",
           "search_aux", "run_diagnosis", "fix_args"]


def parse_choices(try_: str | None) -> set[str]:
    """`--try aux,d2t`: the readings asked for, checked against CHOICES (and `all`)."""
    asked = {x.strip().lower() for x in try_.split(",") if x.strip()} if try_ else set()
    unknown = asked - set(CHOICES) - {"all"}
    if unknown:
        raise UsageError(f"--try {', '.join(sorted(unknown))}: choose from {', '.join(CHOICES)} or all")
    return asked


def _candidate(name: str, reading: Reading, base: Reading, why: str) -> Candidate:
    # the kind: the one part of the reading it changes (aux_ids -> "aux", ...), as CHOICES name them
    changed = reading.differs(base)
    kind = _KIND.get(changed[0], changed[0]) if len(changed) == 1 else "+".join(changed)
    return Candidate(name, why, fix_args=fix_args(reading, base), kind=kind, reading=reading)


# Reading's fields (`Reading.differs`) as the choices name the readings that vary them
_KIND = {"aux_ids": "aux", "d2t": "d2t", "embeddings": "embeddings", "lm_head": "lm-head",
         "norm_before_residual": "norm", "keys": "names"}


def wanted_choices(inspect_result: Any, asked: set[str], low: bool) -> set[str]:
    if "all" in asked or low:
        return set(CHOICES)
    out = {c for c in asked if c in CHOICES}
    for f in inspect_result.findings:
        if f.severity in ("error", "warning") and f.category in CATEGORY_CHOICES:
            out.add(CATEGORY_CHOICES[f.category])
    return out


def candidates(base: Reading, d: Any, trace_layers: list[int], num_layers: int, choices: set[str],
               lm_head_from: str | None) -> list[Candidate]:
    out: list[Candidate] = []
    recorded = set(trace_layers)
    if "aux" in choices:
        for shift in (-1, 1):
            ids = tuple(i + shift for i in base.aux_ids)
            if all(0 <= i <= num_layers for i in ids) and set(ids) <= recorded:
                out.append(_candidate(plan_candidates.aux_ids_name(ids), base.with_(aux_ids=ids), base,
                                      f"every aux id {shift:+d} (the other convention)"))
    if "d2t" in choices and "d2t" in d.tensors and base.d2t != "none":
        other = "absolute" if base.d2t == "offsets" else "offsets"
        out.append(_candidate(plan_candidates.d2t_as_name(other), base.with_(d2t=other), base,
                              f"d2t values read as {other} target ids"))
    if "embeddings" in choices and d.has_embeddings:
        other = "target" if base.embeddings == "draft" else "draft"
        out.append(_candidate(plan_candidates.embeddings_name(other), base.with_(embeddings=other), base,
                              f"embed the draft's input tokens with the {other}'s embed_tokens"))
    if "lm-head" in choices and lm_head_from and base.lm_head == "stored" and "d2t" in d.tensors:
        out.append(_candidate(plan_candidates.LM_HEAD_RESELECTED_NAME,
                              base.with_(lm_head="reselected", lm_head_source=lm_head_from), base,
                              f"lm_head rows re-selected as full[d2t + arange] from {lm_head_from}"))
    if "names" in choices and base.keys == "as written" and d.key_layout.prefix:
        out.append(_candidate(plan_candidates.NAMES_WITHOUT_PREFIX_NAME, base.with_(keys="canonical"), base,
                              f"names read without {d.key_layout.prefix!r}, as `kconvert fix` renames them"))
    if "norm" in choices:
        v = not base.norm_before_residual
        out.append(_candidate(plan_candidates.norm_name(v), base.with_(norm_before_residual=v), base,
                              "residual taken " + ("after" if v else "before") + " hidden_norm"))
    return out


def _paired(base_steps: list[list[int]], cand_steps: list[list[int]]) -> tuple[float, float | None]:
    """Difference in mean acceptance length (candidate - as loaded) and its jackknife standard error over
    sequences: AL is a ratio of sums, so whole sequences are left out one at a time. Under two sequences there is no
    error estimate: None (the report is strict JSON, which has no Infinity; issue #45)."""
    pairs = [(sum(a), len(a), sum(b), len(b)) for a, b in zip(base_steps, cand_steps) if a and b]
    n = len(pairs)
    if n == 0:
        return 0.0, None
    tot = [sum(p[i] for p in pairs) for i in range(4)]

    def diff(s: list[float]) -> float:
        return s[2] / s[3] - s[0] / s[1] if s[1] and s[3] else 0.0

    full = diff(tot)
    if n < 2:
        return full, None
    loo = [diff([tot[i] - p[i] for i in range(4)]) for p in pairs]
    m = sum(loo) / n
    return full, math.sqrt((n - 1) / n * sum((x - m) ** 2 for x in loo))


EXHAUSTIVE_SETS = 256  # layer sets tried one by one when there are at most this many
SEARCH_SEQUENCES = 24
SEARCH_FINALISTS = 3


def search_aux(evaluate: Callable[[tuple[int, ...]], float | None], start: tuple[int, ...], layers: list[int],
               max_rounds: int = 6) -> list[dict[str, Any]]:
    """Sets of recorded layers for the aux ids, best first by `evaluate` (mean acceptance length on part of the
    trace). Every set when there are few
    (a 61-layer target has 35,990 sets of three, an 8-layer one 56), else coordinate ascent from `start`: move
    one id at a time to the recorded layer that scores best, until no move helps."""
    tried: dict[tuple[int, ...], float | None] = {}

    def ev(ids: tuple[int, ...]) -> float:
        if ids not in tried:
            tried[ids] = evaluate(ids)
        v = tried[ids]
        return -1.0 if v is None else v

    n = len(start)
    if math.comb(len(layers), n) <= EXHAUSTIVE_SETS:
        for ids in itertools.combinations(sorted(layers), n):
            ev(ids)
    else:
        cur = tuple(sorted(start))
        best = ev(cur)
        for _ in range(max_rounds):
            moved = False
            for pos in range(n):
                for layer in layers:
                    if layer in cur:
                        continue
                    cand = tuple(sorted(cur[:pos] + (layer,) + cur[pos + 1:]))
                    v = ev(cand)
                    if v > best + 1e-9:
                        best, cur, moved = v, cand, True
            if not moved:
                break
    return [{"aux_ids": list(k), "mean_acceptance_length": v}
            for k, v in sorted(tried.items(), key=lambda kv: -(kv[1] if kv[1] is not None else -1.0))]


def run_diagnosis(sr: Any, *, asked: set[str], lm_head_from: str | None, search: bool | None,
                  progress: Callable[[str], None] | None = None, draft_ref: str | None = None,
                  target_ref: str | None = None, report_ref: str | None = None) -> dict[str, Any]:
    """Score the candidate readings of `sr` (a ScoreResult of the draft as loaded) on the same trace."""
    say = progress or (lambda _s: None)
    tr, d, base = sr.trace, sr.inspect.draft, sr.reading
    base_al = sr.result.mean_acceptance_length
    choices = wanted_choices(sr.inspect, asked, plan_candidates.is_low(base_al, sr.settings.num_speculative_tokens))
    cands = candidates(base, d, tr.meta.layers, tr.meta.num_hidden_layers, choices, lm_head_from)
    notes: list[str] = []
    do_search = search if search is not None else ("aux" in choices and _ids_missing(sr))
    search_log = _search_aux_candidates(sr, cands, say) if do_search else []
    if "lm-head" in choices and not lm_head_from and d.has_lm_head and "d2t" in d.tensors:
        notes.append("lm_head rows were not re-selected: give --lm-head-from a full-vocabulary head to try it")
    entries = _score_candidates(sr, cands, say)
    out: dict[str, Any] = {
        "ran": True, "trace": {"path": str(tr.root), "sha256": tr.meta_sha256},
        "choices_tried": sorted(choices), "baseline": {"reading": base.describe(), "mean_acceptance_length": base_al,
                                                       "error": sr.result.error},
        "candidates": entries, "aux_search": search_log[:20] or None, "notes": notes,
        "best": None, "best_reading": None, "fix_command": None,
    }
    best = _winner(entries, base_al)
    if best is not None:
        out["best"], out["best_reading"] = best["candidate"], best["reading"]
        if best["fix_args"] is not None and draft_ref:
            out["fix_command"] = plan_candidates.fix_command(draft_ref, best["fix_args"], target_ref=target_ref,
                                                      report_ref=report_ref)
    return out


def _search_aux_candidates(sr: Any, cands: list, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Search the aux layer sets on part of the trace; the few best join `cands` (scored in full with the others)."""
    from kconvert.score.walk import score_reading  # deferred: torch (~0.8 s) is loaded only once a draft is really scored

    tr, d, base, k = sr.trace, sr.inspect.draft, sr.reading, sr.settings.num_speculative_tokens
    say("diagnose: searching aux layers")
    sub = list(range(min(tr.num_sequences, SEARCH_SEQUENCES)))

    def objective(ids: tuple[int, ...]) -> float | None:
        # the measure itself, on part of the trace. Cheaper proxies do not rank the sets on the tiny example:
        # the first token's accuracy is set by the deepest stream (0.70-0.72 for every set holding layer 7),
        # and acceptance at every position (2.95-2.97 for all of them) is dominated by the easy, repetitive
        # positions, while the cursors an engine visits are those right after a rejection, where the other
        # streams matter (acceptance length 2.50 for [2, 5, 7] vs 2.21 for [2, 4, 7]).
        r = score_reading(d, base.with_(aux_ids=ids), tr, sr.weights, k=k, mode=sr.result.mode, sequences=sub)
        return None if r.error else r.mean_acceptance_length

    search_log = search_aux(objective, base.aux_ids, [x for x in tr.meta.layers if x >= 1])
    # the few best by the cheap objective are scored in full with the others; acceptance length decides
    for entry in search_log[:SEARCH_FINALISTS]:
        found = tuple(entry["aux_ids"])
        if found != base.aux_ids and all(c.reading.aux_ids != found for c in cands):
            cands.append(_candidate(plan_candidates.aux_ids_name(found), base.with_(aux_ids=found), base,
                                    f"among the best of {len(search_log)} layer sets by acceptance length on "
                                    f"{len(sub)} sequences"))
    return search_log


def _score_candidates(sr: Any, cands: list, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each candidate reading scored on the same sequences as the draft as loaded, with its paired gain."""
    from kconvert.score.walk import score_reading  # deferred: torch (~0.8 s), as above
    from kconvert.score.weights import lm_head_loader

    tr, d, base, k = sr.trace, sr.inspect.draft, sr.reading, sr.settings.num_speculative_tokens
    seqs = list(range(min(tr.num_sequences, sr.settings.max_sequences))) if sr.settings.max_sequences else None
    base_al = sr.result.mean_acceptance_length
    base_steps = [s.steps for s in sr.result.sequences]
    loader = lm_head_loader()
    entries = []
    for c in cands:
        say(f"diagnose: {c.name}")
        r = score_reading(d, c.reading, tr, sr.weights, k=k, mode=sr.result.mode, lm_head_source=loader,
                          sequences=seqs)
        entry: dict[str, Any] = {"candidate": c.name, "description": c.description, "reading": c.reading.describe(),
                                 "changes": c.reading.differs(base), "error": r.error,
                                 "mean_acceptance_length": r.mean_acceptance_length,
                                 "acceptance_rate": (r.acceptance() or {}).get("acceptance_rate"),
                                 "fix_args": c.fix_args}
        if r.error is None and base_al is not None:
            m, se = _paired(base_steps, [s.steps for s in r.sequences])
            entry["gain"] = {"mean": m, "stderr": se}
        entries.append(entry)
    return entries


def _winner(entries: list[dict[str, Any]], base_al: float | None) -> dict[str, Any] | None:
    """The best-scoring candidate, when it beats the draft as loaded by MIN_GAIN and twice its paired stderr (or
    the draft as loaded does not run at all); else None."""
    ok = [e for e in entries if e["mean_acceptance_length"] is not None]
    best = max(ok, key=lambda e: e["mean_acceptance_length"], default=None)
    if best is None:
        return None
    if base_al is None:
        return best  # the draft as loaded does not run at all
    g = best.get("gain") or {}
    se = g.get("stderr")
    wins = (best["mean_acceptance_length"] - base_al >= MIN_GAIN and se is not None
            and g.get("mean", 0) > 2 * se)
    return best if wins else None


def _ids_missing(sr: Any) -> bool:
    return declared_ids(sr.inspect.draft, sr.inspect.engine) is None


def fix_args(reading: Reading, base: Reading) -> list[str] | None:
    """The `kconvert fix` flags that make the engine read the files as `reading` does; [] when plain `fix`
    does it (norm_before_residual, written by rule K602), None when no flag can."""
    args: list[str] = []
    for what in reading.differs(base):
        if what == "aux_ids":
            args += plan_candidates.aux_ids_args(reading.aux_ids)
        elif what == "d2t" and reading.d2t == "absolute" and base.d2t == "offsets":
            args += plan_candidates.D2T_ABSOLUTE_ARGS
        elif what == "lm_head" and reading.lm_head == "reselected" and reading.lm_head_source:
            args += plan_candidates.lm_head_args(reading.lm_head_source)
        elif what == "norm_before_residual" and reading.norm_before_residual is False:
            continue  # fix writes norm_before_residual: false where the engine would default it to true (K602)
        elif what == "keys" and reading.keys == "canonical":
            continue  # fix renames the tensors to the engine's layout (K201)
        else:
            return None
    return args
