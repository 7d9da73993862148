"""Report files (`--report`, `--junit`, `--markdown`, `--sarif`, `--html`, `--csv`), written through the path guard
(`kconvert.guard.paths.write_file`): a new path, an empty file or the format's own earlier output (recognised by the
format's `owns`, `kconvert.report.formats`) is written beside and renamed into place, so a reader never sees half a
report; a FIFO or a character device is written through; `-` is standard output; anything else is refused. A
checkpoint is written by `kconvert.writer`, which makes a whole folder appear at once."""
from __future__ import annotations

import os
from typing import Any, Iterable

from kconvert.guard.paths import check_output_file, write_file
from kconvert.report.formats import get


def _option(fmt: Any, document: str) -> str:
    opt = fmt.files.get(document)
    return opt.flag if opt is not None else f"--{fmt.name}"


def check_report(path: str | os.PathLike[str], fmt_name: str, document: str, *, inputs: Iterable[Any] = ()) -> None:
    """Refuse, before the command runs, a report destination `write_report` would refuse after it."""
    fmt = get(fmt_name)
    check_output_file(path, what=f"{_option(fmt, document)} {os.fspath(path)}", inputs=inputs, owns=fmt.owns,
                      kind=f"{fmt.name} report")


def write_report(path: str | os.PathLike[str], fmt_name: str, document: str, text: str, *,
                 inputs: Iterable[Any] = ()) -> None:
    """Write `text`, the `fmt_name` rendering of a `document` (inspect, verify, matrix ...), to `path`; `inputs`:
    what the command read, which the report may not be, hold or lie inside."""
    fmt = get(fmt_name)
    write_file(path, text, what=f"{_option(fmt, document)} {os.fspath(path)}", inputs=inputs, owns=fmt.owns,
               kind=f"{fmt.name} report")


def write_json_report(path: str | os.PathLike[str], document: str, doc: Any, *, inputs: Iterable[Any] = ()) -> None:
    """`doc` as the json format renders it (`verify --server --report`: a measurement, not a rendered report)."""
    write_report(path, "json", document, get("json").render(document, doc), inputs=inputs)
