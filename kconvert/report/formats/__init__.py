"""The output formats, one registry: every format kconvert prints (`--output-format`) or writes to a file (`--sarif`,
`--junit`, `--markdown`, `--html`, `--csv`, `--report`) is one module in this package that calls `register` with a
`Format`. The command line reads its choices, its help, the file options of inspect, verify, score and matrix and the
server mode's allow-list from here; adding a format is one module here plus its test (CONTRIBUTING.md).

A format module is imported at start-up (the CLI's options are built from it): it holds the declaration only and
imports its renderer inside the render function.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

from kconvert.guard.text import visible, visible_document

# The documents a format can render: each command's report (`inspect`, `fix`, `verify`, `score`) and the matrix.
DOCUMENTS = ("inspect", "fix", "verify", "score", "matrix")


# Plain classes, not dataclasses: this package is imported at start-up (every command's options), and a dataclass
# costs ~0.5 ms to build; these are three.

class Failure:
    """A failed run, as a machine format answers it on stdout (the one-line error goes to stderr separately)."""

    __slots__ = ("kind", "message", "exit_code", "hint", "command", "source", "last_lines")

    def __init__(self, kind: str, message: str, exit_code: int, *, hint: str | None = None,
                 command: str | None = None, source: str | None = None, last_lines: list[str] | None = None):
        self.kind = kind  # the exception's class name: UsageError, InputError, InternalError, ...
        self.message = message
        self.exit_code = exit_code
        self.hint = hint
        self.command = command  # the command that failed (None: the command line did not parse)
        self.source = source  # the checkpoint it was given, if any
        self.last_lines = last_lines  # an engine's last log lines


class FileOption:
    """`--sarif PATH` and the like: the option that writes a format's rendering of one document to a file."""

    __slots__ = ("flag", "help")

    def __init__(self, flag: str, help: str):
        self.flag = flag
        self.help = help


class Format:
    """One output format. `render(document, doc)` returns the text (None: the command draws its own rich view, the
    `full` format); `help` is its line in `--output-format`'s help (a format without one is written to files
    only); `files` maps a document to its file option on that command; `server` lets `verify --server` print in
    it (a server measurement carries no findings); `render_failure` answers a failed run on stdout (None: the
    stderr line only); `rank` orders the choices and the help (lower first, ties by name); `owns` recognises an
    earlier file of this format, the only existing file its file option replaces."""

    __slots__ = ("name", "documents", "render", "extension", "help", "server", "files", "render_failure", "rank",
                 "owns")

    def __init__(self, *, name: str, documents: tuple[str, ...],
                 render: Callable[[str, dict[str, Any]], str] | None, extension: str, help: str = "",
                 server: bool = False, files: Mapping[str, FileOption] | None = None,
                 render_failure: Callable[[Failure], str] | None = None, rank: int = 50,
                 owns: Callable[[Path], bool] | None = None):
        self.name = name
        self.documents = tuple(documents)
        self.render = render
        self.extension = extension  # of the file it writes ("" when it writes none)
        self.help = help
        self.server = server
        self.files = dict(files or {})
        self.render_failure = render_failure
        self.rank = rank
        # owns(path): the regular file at `path` is an earlier output of this format that kconvert wrote, read by
        # the document's own tool marker (`kconvert.guard.paths.check_output_file` replaces only such a file, or an
        # empty one); None: nothing is recognised, so an existing non-empty file is never replaced
        self.owns = owns

    def __repr__(self) -> str:
        return f"Format({self.name!r})"

    @property
    def stdout(self) -> bool:
        """A choice of `--output-format`."""
        return bool(self.help)

    def renders(self, document: str) -> bool:
        return document in self.documents


# Earlier outputs are read through the path guard, never more than this: kconvert's largest report (a matrix of
# thousands of cells) is a few MB.
MAX_OWNED_BYTES = 64 * 1024 * 1024


def owned_text(path: Path, test: Callable[[str], bool]) -> bool:
    """`test` on the text of a regular UTF-8 file of at most MAX_OWNED_BYTES (False for anything else)."""
    from kconvert.guard.paths import read_text  # the guard is below this package; deferred with the formats' code
    from kconvert.errors import InputError

    try:
        return bool(test(read_text(path, str(path), max_bytes=MAX_OWNED_BYTES)))
    except InputError:
        return False


def owned_json(path: Path, test: Callable[[Any], bool]) -> bool:
    """`test` on the JSON document of a file `owned_text` reads (False when it is not JSON)."""
    from kconvert.guard.paths import loads_json

    def parsed(text: str) -> bool:
        try:
            # constants: kconvert's own earlier reports were written by json.dumps, which writes NaN as NaN
            return test(loads_json(text, "", constants=True))
        except ValueError:
            return False

    return owned_text(path, parsed)


def kconvert_tool(doc: Any) -> bool:
    """A JSON document kconvert wrote: its `tool.name` is kconvert (schemas/report.schema.json, matrix, error)."""
    tool = doc.get("tool") if isinstance(doc, dict) else None
    return isinstance(tool, dict) and tool.get("name") == "kconvert"


_REGISTRY: dict[str, Format] = {}
_LOADED: list[bool] = []


def register(fmt: Format) -> Format:
    """Add a format (a format module calls it once, at import); a second format of the same name is refused."""
    unknown = set(fmt.documents) - set(DOCUMENTS) or set(fmt.files) - set(fmt.documents)
    if unknown:
        raise ValueError(f"format {fmt.name!r}: {sorted(unknown)} not among the documents it renders {DOCUMENTS}")
    if fmt.name in _REGISTRY and _REGISTRY[fmt.name] is not fmt:
        raise ValueError(f"format {fmt.name!r} is registered twice")
    _REGISTRY[fmt.name] = fmt
    return fmt


def _load() -> None:
    """Import every format module of this package once (a directory listing: no module list to keep)."""
    if _LOADED:
        return
    _LOADED.append(True)
    here = os.path.dirname(__file__)
    for entry in sorted(os.listdir(here)):
        if entry.endswith(".py") and not entry.startswith("_"):
            __import__(f"{__name__}.{entry[:-3]}")


def formats() -> tuple[Format, ...]:
    """Every registered format, in help order."""
    _load()
    return tuple(sorted(_REGISTRY.values(), key=lambda f: (f.rank, f.name)))


def get(name: str) -> Format:
    _load()
    return _REGISTRY[name]


def output_formats() -> tuple[Format, ...]:
    """The choices of `--output-format`."""
    return tuple(f for f in formats() if f.stdout)


def file_options(document: str) -> tuple[tuple[Format, FileOption], ...]:
    """The file options of the command that renders `document` (`--report`, `--sarif`, ...)."""
    return tuple((f, f.files[document]) for f in formats() if document in f.files)


def render(name: str, document: str, doc: dict[str, Any]) -> str:
    """`doc` in format `name`, every string of it escaped first (`kconvert.guard.text`): the one door from a
    document to a renderer, so no renderer sees a raw control character."""
    fmt = get(name)
    if fmt.render is None or not fmt.renders(document):
        raise ValueError(f"format {name!r} does not render a {document} document")
    return fmt.render(document, visible_document(doc))


def render_failure(name: str, failure: Failure) -> str | None:
    """A failed run in format `name` (None: the format answers on stderr only), its texts escaped as `render`
    escapes a document's."""
    fmt = get(name)
    if fmt.render_failure is None:
        return None
    shown = Failure(failure.kind, visible(failure.message), failure.exit_code,
                    hint=None if failure.hint is None else visible(failure.hint),
                    command=failure.command, source=None if failure.source is None else visible(failure.source),
                    last_lines=None if failure.last_lines is None else [visible(x) for x in failure.last_lines])
    return fmt.render_failure(shown)
