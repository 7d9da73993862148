"""Both diagnosis tables (verify --diagnose live, score --diagnose offline) come from one renderer,
`kconvert.report.terminal.render_diagnosis`, and both print text from the files or an engine as written: a
candidate name or an engine error holding rich markup ("[/bold]", "[red]") is escaped, not interpreted (an
unescaped closing tag with no opener raises rich.errors.MarkupError). Costs well under a second."""
from __future__ import annotations

from rich.console import Console

from kconvert.report.terminal import render_diagnosis

HOSTILE = "bad [/bold] tag [red]x"


def _render(diag: dict) -> str:
    console = Console(record=True, width=200, color_system=None)
    render_diagnosis(console, diag)
    return console.export_text()


def test_live_table_prints_markup_in_names_and_errors_as_written():
    diag = {"ran": True, "baseline": 1.5, "best": HOSTILE, "fix_command": f"kconvert fix d -o d-fixed '{HOSTILE}'",
            "candidates": [{"candidate": HOSTILE, "mean_acceptance_length": 2.25},
                           {"candidate": "d2t read as absolute ids", "error": HOSTILE}]}
    text = _render(diag)
    assert "Diagnosis (as loaded: AL 1.500)" in text
    assert text.count(HOSTILE) >= 3  # the name, the best line, the fix command
    assert f"engine failed: {HOSTILE}" in text and "2.250" in text


def test_offline_table_prints_markup_in_names_and_errors_as_written():
    diag = {"ran": True, "baseline": {"mean_acceptance_length": None, "error": HOSTILE},
            "candidates": [{"candidate": HOSTILE, "mean_acceptance_length": 2.0, "gain": None},
                           {"candidate": "d2t as absolute", "mean_acceptance_length": None, "error": HOSTILE}],
            "notes": [HOSTILE], "best": HOSTILE, "fix_command": "kconvert fix d -o d-fixed"}
    text = _render(diag)
    assert f"does not run: {HOSTILE}" in text
    assert f"fails: {HOSTILE}" in text and f"best: {HOSTILE}" in text
    assert "apply it with: kconvert fix d -o d-fixed" in text
