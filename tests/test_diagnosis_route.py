"""Where the files leave a decision open that a diagnosis measures, the next lines name the measurement (issue #48
item 3 follow-up; docs/design.md "Findings": where evidence disagrees the finding names the measurement that
settles it, `verify --diagnose` live and `score --diagnose` offline).

- What "a diagnosis measures" means is said once (kconvert/plan/candidates.py READINGS, LIVE_READINGS,
  `diagnoses`) and held here to the candidates the two diagnoses really build (verify --diagnose:
  kconvert/commands/verify/diagnose_live.py `candidates_for`; score --diagnose: kconvert/score/diagnose_offline.py
  `candidates`, each candidate's kind read from the part of the reading it changes), over every shipped draft
  (tests/shipped.py) on every engine row. For K404's two conventions the check is concrete: both readings its
  evidence names (the streams the draft was trained on under each) are the draft as loaded or a candidate.
- Every such open decision, on every shipped draft and row, gets the `score --diagnose` line and, on a vLLM row
  where the draft it measures passes the static checks, the `verify --diagnose` line: on the draft as it is, or on
  the copy the fix line writes when one is printed for a failing draft (tests/test_printed_commands.py runs them as
  printed for the zoo and the examples; tests/test_producers.py for the converted SpecForge draft).

Engine-free; about 5 s (the zoo replicas are built once per module).
"""
from __future__ import annotations

import shlex

import pytest

from kconvert.engines.expectations import ALL_ROWS
from kconvert.plan.candidates import LIVE_READINGS, READINGS, SCORE, VERIFY, diagnoses
from kconvert.results.next_steps import fix_output_dir
from tests import shipped


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """(draft key, row, inspect result) for every shipped EAGLE-3 draft and engine row."""
    import kconvert

    out = []
    for s in shipped.drafts(tmp_path_factory.mktemp("route")):
        if s.method != "eagle3":
            continue  # another method's checkpoint: no diagnosis runs on it (verify and score refuse it)
        target = shipped.load_target(s.target)
        for row in ALL_ROWS:
            out.append((s.key, row, kconvert.inspect(str(s.folder), target=target, engine=row.engine,
                                                     engine_version=row.version)))
    return out


def _offline_candidates(res):
    """score --diagnose's candidates for `res` with every choice open and a trace recording every layer."""
    from kconvert.score.diagnose_offline import CHOICES, candidates
    from kconvert.score.reading import engine_reading

    L, V = res.target.num_hidden_layers, res.target.vocab_size
    base = engine_reading(res.draft, res.engine, L, V, target=res.target)
    return base, candidates(base, res.draft, list(range(L + 1)), L, set(CHOICES), lm_head_from="full-head")


def test_each_diagnosis_tries_the_readings_said_to_be_its_own(results):
    from kconvert.commands.verify.diagnose_live import candidates_for

    live, offline = set(), set()
    for _, row, res in results:
        if row.engine == "vllm":  # verify --diagnose starts vLLM only
            live |= {c.kind for c in candidates_for(res)}
        offline |= {c.kind for c in _offline_candidates(res)[1]}
    # each diagnosis builds a candidate of every kind it is said to try, and of no other
    assert live == set(LIVE_READINGS)
    assert offline == set(READINGS.values())


def _ids(candidate) -> tuple[int, ...] | None:
    args = candidate.fix_args or []
    if "--aux-ids" in args and args[args.index("--aux-ids") + 1] != "default":
        return tuple(int(i) for i in args[args.index("--aux-ids") + 1].split(","))
    return None


def test_both_readings_of_an_unsettled_convention_are_measured_by_each_diagnosis(results):
    from kconvert.commands.verify.diagnose_live import candidates_for

    seen = 0
    for key, row, res in results:
        for f in res.findings:
            if f.id != "K404" or not f.needs_decision:
                continue
            # the streams the draft was trained on under each reading (the evidence), against what the engine
            # feeds as loaded (observed) and the streams a candidate feeds
            readings = {e.where: (tuple(e.observed), tuple(e.expected)) for e in f.evidence
                        if e.where.startswith("read as ")}
            assert set(readings) == {"read as input", "read as output"}, (key, row.key, f.evidence)
            fed = {fed for fed, _ in readings.values()}
            base, offline = _offline_candidates(res)
            assert fed == {base.aux_ids}, (key, row.key, fed, base.aux_ids)
            tried = {base.aux_ids} | {c.reading.aux_ids for c in offline if c.kind == "aux"}
            assert {trained for _, trained in readings.values()} <= tried, (key, row.key)
            assert SCORE in diagnoses(f)
            if row.engine == "vllm":
                tried = fed | {_ids(c) for c in candidates_for(res)}
                assert {trained for _, trained in readings.values()} <= tried, (key, row.key)
                assert VERIFY in diagnoses(f)
            seen += 1
    assert seen >= 20  # the zoo's Kimi drafts and the converted SpecForge draft, on several rows


def _argv(step) -> list[str]:
    return shlex.split(step["command"])


def test_every_open_decision_a_diagnosis_measures_gets_the_lines_that_measure_it(results):
    measured = 0
    for key, row, res in results:
        doc = res.to_dict()
        steps = doc["next_steps"]
        open_ = [f for f in res.findings if diagnoses(f)]
        scores = [_argv(s) for s in steps if _argv(s)[1] == "score"]
        verifies = [_argv(s) for s in steps if _argv(s)[1] == "verify" and "--diagnose" in _argv(s)]
        if not open_:
            assert not scores and not verifies, (key, row.key, steps)
            continue
        measured += 1
        fixes = [_argv(s) for s in steps if _argv(s)[1] == "fix"]
        ref = res.checkpoint.ref
        # measured where the decision is taken: the fix line's output for a failing draft it repairs, else as it is
        subject = fixes[0][fixes[0].index("-o") + 1] if res.failing and fixes else ref
        if res.failing and fixes:
            assert subject == fix_output_dir(ref, row.engine, hub=False)
        assert [a[2] for a in scores] == [subject], (key, row.key, steps)
        assert "--diagnose" in scores[0] and "--trace" in scores[0]
        # score reads the files as this row's engine loads them
        assert scores[0][scores[0].index("--engine-version") + 1] == row.version \
            if "--engine-version" in scores[0] else row.version == _default_version(row.engine)
        live = [f for f in open_ if VERIFY in diagnoses(f)]
        passes = not res.failing or (fixes and "--partial" not in fixes[0])
        if row.engine == "vllm" and live and passes:
            assert [a[2] for a in verifies] == [subject], (key, row.key, steps)
        else:
            assert not verifies, (key, row.key, steps)
    assert measured >= 50


def _default_version(engine: str) -> str:
    from kconvert.engines.expectations import engine_rules

    return engine_rules(engine, None).version
