"""The user's decisions (kconvert/rules/decisions.py) against the flags' documented spellings: the `--help` texts of
`--aux-ids` ("e.g. 2,30,58, or 'default'"), `--aux-convention` (input or output), `--d2t` (offsets or absolute)
in kconvert/cli/_common.py and `trace --layers` (layer numbers or all) in kconvert/cli/trace_cmd.py, the command
lines docs/manual.md prints (`--aux-ids 2,30,58`, `--aux-convention input`), Python's int() (which accepts blanks
and a sign around digits, https://docs.python.org/3/library/functions.html#int), and the usage errors' text a user reads.

Engine-free, in-process, milliseconds each (issue #30: the survivors of
`bench/mutation.py kconvert/rules/decisions.py`)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kconvert.errors import UsageError
from kconvert.rules.decisions import (AUX_CONVENTIONS, D2T_KINDS, Decisions, Options, decisions_from_flags, given,
                                      parse_aux_ids, parse_layers)

ROOT = Path(__file__).resolve().parent.parent
COMMON = (ROOT / "kconvert" / "cli" / "_common.py").read_text()
TRACE = (ROOT / "kconvert" / "cli" / "trace_cmd.py").read_text()
MANUAL = (ROOT / "docs" / "manual.md").read_text()


# --- --aux-ids ---------------------------------------------------------------------------------------------------

def test_the_help_texts_spell_the_values_checked_here():
    assert "(e.g. 2,30,58), or " in COMMON and "'default' for the engine defaults" in COMMON
    assert "input (vLLM, speculators) or output" in COMMON and "offsets or absolute" in COMMON
    assert "--aux-ids 2,30,58" in MANUAL and "--aux-convention input" in MANUAL
    assert "numbering (k = entering layer k), or " in TRACE and '"all. Default' in TRACE
    assert AUX_CONVENTIONS == ("input", "output") and D2T_KINDS == ("offsets", "absolute")


def test_aux_ids_absent_is_no_decision():
    assert parse_aux_ids(None) == (None, False)


@pytest.mark.parametrize("value, want", [("2,30,58", [2, 30, 58]), ("2, 30, 58", [2, 30, 58]),
                                         (" 2 ,30 ,58 ", [2, 30, 58]), ("2,30,58,", [2, 30, 58]),
                                         ("0", [0]), ("3", [3]), ("1,,4", [1, 4]),
                                         ("1, ,4", [1, 4])])
def test_aux_ids_are_comma_separated_layer_numbers(value, want):
    assert parse_aux_ids(value) == (want, False)


@pytest.mark.parametrize("value", ["default", "DEFAULT", " Default "])
def test_aux_ids_default_is_the_engine_defaults_in_any_case(value):
    assert parse_aux_ids(value) == (None, True)


@pytest.mark.parametrize("value", ["2;30;58", "two", "2,x,58", "2.0,30"])
def test_aux_ids_that_are_not_numbers_are_a_usage_error_with_an_example(value):
    with pytest.raises(UsageError) as e:
        parse_aux_ids(value)
    assert e.value.message == (f"--aux-ids {value!r}: give comma-separated layer numbers, e.g. 2,30,58, "
                               "or 'default'")
    assert e.value.__cause__ is None and e.value.__suppress_context__  # `from None`: one line, no traceback chain


@pytest.mark.parametrize("value", ["", " ", ",", "2,-1,58", "-1"])
def test_aux_ids_that_name_no_layer_or_a_negative_one_are_a_usage_error(value):
    with pytest.raises(UsageError) as e:
        parse_aux_ids(value)
    assert e.value.message == f"--aux-ids {value!r}: give non-negative layer numbers"


# --- trace --layers --------------------------------------------------------------------------------------------

def test_layers_absent_is_the_default():
    assert parse_layers(None) is None


@pytest.mark.parametrize("value", ["all", "ALL", " All "])
def test_layers_all_in_any_case(value):
    assert parse_layers(value) == "all"


@pytest.mark.parametrize("value, want", [("2,30,58", [2, 30, 58]), (" 1, 2 ,3, ", [1, 2, 3]), ("0", [0]),
                                         ("1,,4", [1, 4]), ("1, ,4", [1, 4])])
def test_layers_are_comma_separated_numbers(value, want):
    assert parse_layers(value) == want


def test_layers_that_are_not_numbers_are_a_usage_error():
    with pytest.raises(UsageError) as e:
        parse_layers("2;3")
    assert e.value.message == ("--layers '2;3': comma-separated layer numbers (vLLM's input-of-layer numbering), "
                               "or all")
    assert e.value.__cause__ is None and e.value.__suppress_context__


@pytest.mark.parametrize("value", ["", ",", "3,-2"])
def test_layers_empty_or_negative_are_a_usage_error(value):
    with pytest.raises(UsageError) as e:
        parse_layers(value)
    assert e.value.message == f"--layers {value!r}: give non-negative layer numbers"


# --- decisions_from_flags, flags ----------------------------------------------------------------------------------

def test_the_flags_make_the_decisions():
    d = decisions_from_flags("2,30,58", "input", "offsets", cast_dtype="BF16", tp=8)
    assert d == Decisions(aux_ids=[2, 30, 58], aux_ids_default=False, aux_convention="input", d2t_kind="offsets",
                          cast_dtype="BF16", tp=8)
    d = decisions_from_flags("default", "output", "absolute")
    assert d.aux_ids is None and d.aux_ids_default is True and d.aux_convention == "output" \
        and d.d2t_kind == "absolute"
    assert decisions_from_flags(None, None, None) == Decisions()


def test_an_unknown_convention_or_d2t_reading_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError) as e:
        decisions_from_flags(None, "Input", None)
    assert e.value.message == "--aux-convention 'Input': choose input or output"
    with pytest.raises(UsageError) as e:
        decisions_from_flags(None, None, "offset")
    assert e.value.message == "--d2t 'offset': choose offsets or absolute"


def test_the_defaults_decide_nothing():
    d = Decisions()
    assert (d.aux_ids, d.aux_ids_default, d.aux_convention, d.d2t_kind, d.lm_head_source, d.cast_dtype,
            d.rope_from_target, d.tp, d.draft_tp) == (None, False, None, None, None, None, False, None, None)
    assert d.flags() == []


def test_flags_spell_the_decisions_back_as_the_manual_prints_them():
    # docs/manual.md prints `--aux-ids 2,30,58` and `--aux-convention input`
    assert Decisions(aux_ids=[2, 30, 58]).flags() == ["--aux-ids", "2,30,58"]
    assert Decisions(aux_convention="input").flags() == ["--aux-convention", "input"]
    assert Decisions(d2t_kind="absolute").flags() == ["--d2t", "absolute"]
    assert Decisions(aux_ids_default=True).flags() == ["--aux-ids", "default"]
    assert Decisions(aux_ids=[2, 30, 58], aux_convention="output", d2t_kind="offsets", cast_dtype="BF16",
                     tp=8).flags() == ["--aux-ids", "2,30,58", "--aux-convention", "output", "--d2t", "offsets"]


def test_default_wins_over_ids_when_both_are_set():
    # `--aux-ids default` carries no ids (parse_aux_ids); a Decisions with both spells the default only
    assert Decisions(aux_ids=[2, 3, 4], aux_ids_default=True).flags() == ["--aux-ids", "default"]


# --- given: decisions= or its earlier name options= -----------------------------------------------------------------

def test_options_is_the_earlier_name_of_decisions():
    assert Options is Decisions


def test_given_takes_either_name_and_refuses_both():
    d, o = Decisions(aux_convention="input"), Decisions(aux_convention="output")
    assert given(d, None) is d and given(None, o) is o and given(None, None) is None
    with pytest.raises(UsageError) as e:
        given(d, o)
    assert e.value.message == "pass the decisions once: decisions= or its earlier name options=, not both"
