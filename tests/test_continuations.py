"""`kconvert trace --continuations FILE` reads JSON lines of token ids (kconvert.prompts.read_continuations, the
same JSON-lines reader as the prompt files): each refusal is one line naming the file and line. Costs < 1 s."""
from __future__ import annotations

import json

import pytest

from kconvert.errors import InputError
from kconvert.prompts import read_continuations


def test_reads_token_id_lines_and_skips_blank_ones(tmp_path):
    p = tmp_path / "c.jsonl"
    rows = [{"prompt_token_ids": [1, 2], "output_token_ids": [3]}, {"prompt_token_ids": [4], "output_token_ids": []}]
    p.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n", encoding="utf-8")
    assert read_continuations(str(p)) == rows


@pytest.mark.parametrize("body, message", [
    (b'{"prompt_token_ids": [1], "output_token_ids": [2]}\nnot json\n', "c.jsonl:2: not valid JSON: "),
    (b'{"prompt_token_ids": [true], "output_token_ids": [2]}\n', "c.jsonl:1: expected {\"prompt_token_ids\""),
    (b'{"prompt_token_ids": [], "output_token_ids": [2]}\n', "c.jsonl:1: expected"),
    (b"\n\n", "c.jsonl: no continuations"),
    (b"\xff\xfe{}\n", "c.jsonl: not UTF-8 text"),
])
def test_refuses_what_is_not_token_ids_in_one_line(tmp_path, body, message):
    p = tmp_path / "c.jsonl"
    p.write_bytes(body)
    with pytest.raises(InputError) as e:
        read_continuations(p)
    assert message in e.value.message and "\n" not in e.value.message


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_continuations(tmp_path / "nope.jsonl")
