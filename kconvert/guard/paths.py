"""The one guard for every path kconvert reads or writes (issue #45), used by the commands and the library alike.

Reading. Every file kconvert is handed by name (a file option such as `--policy`, `--config`, `--decided-by`, a
report `push` reads, a prompts file, a project configuration found in the working directory, a trace's
`trace.json`, a checkpoint's own `config.json`, index and `kconvert.json`) is read through `read_bytes` and the
functions built on it:

- only a regular file: `stat` refuses a FIFO, a device, a socket or a folder before anything is opened, and the
  file is then opened with O_NONBLOCK and checked again with `fstat` (the path may change in between), so a FIFO
  never blocks the gate and a device is never read;
- at most `max_bytes`: the size is checked before reading, and no more than `max_bytes + 1` bytes are ever read
  (a file that grows meanwhile, or a `/proc` file that reports size 0, cannot make kconvert allocate more);
- UTF-8 (`read_text`), nested at most `MAX_DEPTH` levels, counted on the text before any parser runs so that
  neither `json` nor `tomllib` can meet a RecursionError (and `tomllib` is spared its quadratic dotted keys);
- JSON without duplicate keys or NaN/Infinity, TOML without nan/inf (`read_json`, `read_json_lines`,
  `read_toml`);
- every refusal is one line (an `InputError`, exit 2) that starts with what the caller names: the option and its
  value (`--policy gate.toml: a FIFO, not a regular file`).

Writing. A destination is a new path, an empty folder (or an empty regular file, for a file), or an earlier output of
the same kind that kconvert wrote, recognised by the writer's `owned` test (a fix output's `kconvert.json`, a
trace's `trace.json`, a report's own tool marker: `kconvert.report.formats`). Only those are replaced, and only
replaced with `--force` where a command has one. Anything else (another file, a folder of other files, a symlink,
a FIFO, device or socket where a folder is due) is refused with exit 2 and a message that names what stands there,
never one that suggests `--force`. A report given a FIFO or a character device is written through it, as `cp`
does (opened for writing without O_CREAT, never renamed over); `-` is standard output. A destination that is,
contains or lies inside any input the command reads (each resolved, symlinks followed, as the user gave it) is
refused. SECURITY.md "What kconvert reads" and "How outputs are written" state these promises and the tests that
check each.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from kconvert.errors import InputError, UsageError

# Nesting at most this deep in any JSON or TOML kconvert parses (safetensors headers, indexes, configs, file options):
# far above any real document (a config nests 3-4 levels), far below Python's recursion limit (1000).
MAX_DEPTH = 64
# The cap of a file option whose caller names none: every file option kconvert reads is a few KB to a few MB.
MAX_FILE_BYTES = 64 * 1024 * 1024

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def node_kind(mode: int) -> str:
    """What a file system entry is, as a message says it ("a FIFO", "a character device", ...)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


# --------------------------------------------------------------------------------------------------- reading ---

def _os_reason(e: OSError) -> str:
    return e.strerror or str(e)


def _refuse_read(what: str, noun: str, e: OSError, missing_hint: str | None = None) -> InputError:
    if isinstance(e, FileNotFoundError):
        return InputError(f"{what}: no such {noun}", hint=missing_hint)
    if isinstance(e, PermissionError):
        return InputError(f"{what}: permission denied")
    return InputError(f"{what}: cannot read: {_os_reason(e)}")


def _check_regular(st: os.stat_result, what: str, noun: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what}: is a folder, not a {noun}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what}: {node_kind(st.st_mode)}, not a regular file (kconvert never reads from FIFOs, "
                         "devices or sockets)")


def open_regular(path: str | os.PathLike[str], what: str, *, noun: str = "file",
                 missing_hint: str | None = None) -> tuple[int, os.stat_result]:
    """An open read-only descriptor of `path` and its fstat, only when it is a regular file; else an InputError
    naming `what` (`missing_hint`: the hint when there is nothing at `path`). `stat` first (a device or FIFO is
    refused without being opened at all), then open with O_NONBLOCK (opening a FIFO that was swapped in meanwhile does
    not wait for a writer) and `fstat` the descriptor (what is read is what was checked)."""
    try:
        _check_regular(os.stat(path), what, noun)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _O_CLOEXEC)
    except OSError as e:
        raise _refuse_read(what, noun, e, missing_hint) from None
    try:
        st = os.fstat(fd)
        _check_regular(st, what, noun)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _too_large(what: str, size: int, max_bytes: int) -> InputError:
    return InputError(f"{what}: {size:,} bytes is more than the {max_bytes:,} bytes kconvert reads from it")


def read_bytes(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_FILE_BYTES,
               noun: str = "file", missing_hint: str | None = None) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (see the module's docstring); InputError otherwise."""
    fd, st = open_regular(path, what, noun=noun, missing_hint=missing_hint)
    try:
        if st.st_size > max_bytes:
            raise _too_large(what, st.st_size, max_bytes)
        chunks: list[bytes] = []
        got = 0
        while got <= max_bytes:
            # one read may return less than asked (a file on a network file system): read until end of file,
            # never past max_bytes + 1 in all
            b = os.read(fd, max_bytes + 1 - got)
            if not b:
                break
            chunks.append(b)
            got += len(b)
    except OSError as e:
        raise InputError(f"{what}: cannot read: {_os_reason(e)}") from None
    finally:
        os.close(fd)
    if got > max_bytes:
        raise _too_large(what, got, max_bytes)
    return b"".join(chunks)


def read_head(path: str | os.PathLike[str], what: str, size: int) -> bytes:
    """The first `size` bytes of a regular file (fewer when it is shorter)."""
    fd, _ = open_regular(path, what)
    try:
        return os.read(fd, size)
    except OSError as e:
        raise InputError(f"{what}: cannot read: {_os_reason(e)}") from None
    finally:
        os.close(fd)


def decode_utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{what}: not UTF-8 text ({e.reason} at byte {e.start})") from None


# JSON's structure outside strings: a string (escapes included; an unterminated one matches nothing, so its
# brackets are counted, which can only over-count an invalid document) or a bracket.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\[\s\S])*"|[\[\]{}]')


@functools.cache
def _toml_token() -> re.Pattern[str]:
    """TOML's structure outside strings: comments, the four kinds of strings (a multi-line one may end with up to
    two more quotes, TOML 1.0 "String"), newlines and the characters that make structure: tables and arrays,
    inline tables, dotted keys. Compiled at the first TOML read (every command start-up reads JSON, few TOML)."""
    return re.compile(r'''\#[^\n]*|"""(?:[^\\]|\\[\s\S])*?"""(?:""?)?|\'\'\'[\s\S]*?\'\'\'(?:\'\'?)?'''
                      r'''|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[\[\]{},.=\n]''')


def json_depth_ok(text: str, max_depth: int = MAX_DEPTH) -> bool:
    """True when `text`, read as JSON (or JSON lines), nests at most `max_depth` arrays and objects. Counted outside
    strings before any parser runs: Python's json recurses once per level and would raise RecursionError."""
    depth = 0
    for m in _JSON_TOKEN.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > max_depth:
                return False
        elif c in "]}":
            depth = max(0, depth - 1)  # a stray closer (invalid anyway) must not hide the nesting that follows
    return True


def toml_depth_ok(text: str, max_depth: int = MAX_DEPTH) -> bool:
    """True when `text`, read as TOML, nests at most `max_depth` levels: tables of a `[a.b.c]` header, parts of a
    dotted key `a.b.c = ...`, inline tables and arrays, counted together along each path (an over-count by one for
    a float value, never an under-count of a valid document). tomllib recurses once per inline level and builds
    dotted keys in quadratic time (10,000 parts: 3 s), both before it can refuse anything."""
    table = 0  # levels of the current [table] header
    opened: list[int] = []  # per open [ or {: the levels of the key it is the value of
    nested = 0  # sum(opened)
    dots = 0  # dots in the current key since the last separator
    at_line_start = True  # a [ here opens a table header
    pos = 0
    token = _toml_token()
    while True:
        m = token.search(text, pos)
        if m is None:
            return True
        tok, pos = m.group(), m.end()
        if tok[0] in "#\"'":
            at_line_start = at_line_start and tok[0] == "#"
            continue
        if tok == "\n":
            dots = 0
            at_line_start = not opened
            continue
        if tok == "[" and at_line_start and not opened:
            # a table header, [a.b] or [[a.b]] (an array of tables: one level more)
            array = text.startswith("[", pos)
            if array:
                pos += 1
            parts = 1
            while True:
                h = token.search(text, pos)
                if h is None or h.group() in ("]", "\n"):
                    pos = h.end() if h is not None else len(text)
                    break
                parts += h.group() == "."
                pos = h.end()
            table = parts + array
            dots, at_line_start = 0, False
            if table > max_depth:
                return False
            continue
        at_line_start = False
        if tok in "[{":
            opened.append(dots + 1)
            nested += dots + 1
            dots = 0
        elif tok in "]}":
            if opened:
                nested -= opened.pop()
            dots = 0
        elif tok == ",":
            dots = 0
        elif tok == ".":
            dots += 1
        if table + nested + dots + 1 > max_depth:
            return False
    return True  # pragma: no cover - the loop returns


def _deeper(what: str, max_depth: int) -> InputError:
    return InputError(f"{what}: nests deeper than {max_depth} levels")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    # Python's json reads NaN, Infinity and -Infinity, which RFC 8259 (section 6) does not allow and serde_json,
    # JSON.parse and most other parsers refuse: a config holding one would be written back as non-JSON.
    raise ValueError(f"{name} is not a JSON number (strict JSON: no NaN or Infinity)")


def _finite_float(text: str) -> float:
    # 1e999 is JSON but overflows a double: Python's json makes it inf, serde_json refuses it ("number out of range")
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"number {text[:40]} is out of range")
    return x


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def lone_surrogate(obj: Any, depth: int = 0) -> str | None:
    """A string holding a lone UTF-16 surrogate (from a `\\ud800`-style escape), or None. Python's json accepts
    such an escape, serde_json (safetensors) refuses it: "lone leading surrogate in hex escape"."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return obj
        return None
    items = list(obj.items()) if isinstance(obj, dict) else obj if isinstance(obj, list) else []
    for it in items:
        for x in (it if isinstance(obj, dict) else (it,)):
            bad = lone_surrogate(x, depth + 1)
            if bad is not None:
                return bad
    return None


def loads_json(raw: bytes | str, what: str, *, max_depth: int = MAX_DEPTH, constants: bool = False,
               parse_int: Callable[[str], Any] | None = None, surrogates: bool = True) -> Any:
    """Strict JSON, the one reader of JSON kconvert did not write: UTF-8, nesting counted before parsing, no
    duplicate key, no NaN or Infinity and no number beyond a double (RFC 8259 section 6), no string holding a lone
    UTF-16 surrogate escape (`"\\ud800"`: RFC 8259 section 8.2, I-JSON RFC 7493; no UTF-8 form, so nothing read
    could be written back). `constants`: NaN and Infinity read as Python's json reads them (only to recognise a
    file as kconvert's own, never to use it); `surrogates=False` leaves that check to a caller that words it
    (safetensors headers). Raises ValueError whose text names `what` ("" leaves the naming to the caller: the
    checkpoint readers wrap it with the file and tensor)."""
    def problem(text: str) -> str:
        return f"{what} is {text}" if what else text

    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(problem(f"not UTF-8 ({e.reason} at byte {e.start})")) from None
    else:
        text = raw
    if not json_depth_ok(text, max_depth):
        raise ValueError((f"{what} nests" if what else "nested") + f" deeper than {max_depth} levels")
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_int=parse_int,
                         parse_constant=None if constants else _no_constant,
                         parse_float=None if constants else _finite_float)
    except (ValueError, RecursionError) as e:
        raise ValueError(problem(f"not valid JSON: {e}")) from None
    # Only a \uD800-\uDFFF escape makes a surrogate (UTF-8 has none): walk the strings only when one is written.
    bad = lone_surrogate(obj) if surrogates and _SURROGATE_ESCAPE.search(text) else None
    if bad is not None:
        raise ValueError(problem(f"not valid JSON: the string {bad!r:.60} holds a lone UTF-16 surrogate escape"))
    return obj


def read_text(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_FILE_BYTES,
              noun: str = "file", missing_hint: str | None = None) -> str:
    """A regular file of at most `max_bytes`, as UTF-8 text."""
    return decode_utf8(read_bytes(path, what, max_bytes=max_bytes, noun=noun, missing_hint=missing_hint), what)


def read_json(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_FILE_BYTES, noun: str = "file",
              max_depth: int = MAX_DEPTH, missing_hint: str | None = None, constants: bool = False) -> Any:
    """A regular file of strict JSON (`loads_json`; `constants`: NaN and Infinity read as Python's json reads them)."""
    text = read_text(path, what, max_bytes=max_bytes, noun=noun, missing_hint=missing_hint)
    try:
        return loads_json(text, "", max_depth=max_depth, constants=constants)
    except ValueError as e:
        raise InputError(f"{what}: {e}") from None


def read_json_lines(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_FILE_BYTES,
                    max_depth: int = MAX_DEPTH, where: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON-lines file, each strict JSON; a line that is not is
    refused as `<where>:<line>: ...` (`where`: the file's path, by default `what`)."""
    text = read_text(path, what, max_bytes=max_bytes)
    if not json_depth_ok(text, max_depth):
        raise _deeper(what, max_depth)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = loads_json(line, "", max_depth=max_depth)
        except ValueError as e:
            raise InputError(f"{where or what}:{lineno}: {e}") from None
        yield lineno, obj


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"{text} is not a finite number")
    return x


def read_toml(path: str | os.PathLike[str], what: str, *, max_bytes: int = 4 * 1024 * 1024,
              max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """A regular file of TOML, nested at most `max_depth` levels (checked before tomllib runs), without nan/inf."""
    if sys.version_info >= (3, 11):  # deferred: only a configuration or a policy is TOML
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    text = read_text(path, what, max_bytes=max_bytes)
    if not toml_depth_ok(text, max_depth):
        raise _deeper(what, max_depth)
    try:
        return tomllib.loads(text, parse_float=_finite)
    except RecursionError:  # pragma: no cover - toml_depth_ok over-counts; kept as the last line of defence
        raise _deeper(what, max_depth) from None
    except ValueError as e:  # tomllib.TOMLDecodeError, or a nan/inf refused by _finite
        raise InputError(f"{what}: not valid TOML: {e}") from None


# --------------------------------------------------------------------------------------------------- writing ---

def _real(p: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(os.fspath(p)))


# A Hub id as kconvert's arguments spell one (`org/name`, `org/name@revision`); huggingface_hub's own validator
# judges it where it is parsed (kconvert.source.hub.hub_id_problem): here it only finds the cache folders to keep.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[^\s/][^\s]*)?$")


def _hub_cache_folders(ref: str) -> list[str]:
    """The folders of Hugging Face's cache that hold the repository `ref` names (a model's and a dataset's: a draft,
    a target and a trace are read from there), those that exist: the snapshot a Hub id resolves to is made of
    symlinks into the repository's `blobs/`, so the whole repository folder is the input. A `--report` inside a
    snapshot and a `fix -o` inside `blobs/` were written into the cache kconvert read from."""
    m = _HUB_ID.match(ref)
    if not m:
        return []
    from huggingface_hub import constants  # deferred: only for an argument shaped as a Hub id

    repo = ref.split("@", 1)[0].replace("/", "--")
    return [f for kind in ("models", "datasets")
            if os.path.isdir(f := os.path.join(constants.HF_HUB_CACHE, f"{kind}--{repo}"))]


def existing_inputs(values: Iterable[Any]) -> list[str]:
    """The values among `values` (option values, None allowed) that name something on this machine: a local path,
    or for a Hub id its repository's folders in the Hugging Face cache. A Hub id with nothing cached, or a profile
    name, names nothing here that could be written over."""
    out = []
    for v in values:
        if v is None or isinstance(v, bool):
            continue
        s = os.fspath(v) if isinstance(v, os.PathLike) else str(v)
        if s and s != "-" and os.path.lexists(os.path.expanduser(s)):
            out.append(os.path.expanduser(s))
        elif s:
            out.extend(_hub_cache_folders(s))
    return out


def check_apart(dest: str | os.PathLike[str], inputs: Iterable[Any], what: str) -> None:
    """Refuse a destination that is, contains or lies inside an input, each resolved (symlinks followed) as the
    user gave it: writing there would change what the command reads."""
    d = _real(os.path.expanduser(os.fspath(dest)))
    for given in existing_inputs(inputs):
        i = _real(given)
        if d == i:
            raise UsageError(f"{what}: is the input {given}; kconvert never writes over what it reads")
        if d in i.parents:
            raise UsageError(f"{what}: contains the input {given}; kconvert never writes over what it reads")
        if i in d.parents:
            raise UsageError(f"{what}: lies inside the input {given}; kconvert never writes into what it reads")


def check_distinct(dests: Iterable[tuple[str, str | os.PathLike[str]]]) -> None:
    """Refuse two destinations of one command that are the same path or one inside the other (`what`, path pairs,
    each resolved as check_apart resolves them): the second write would replace the first's, or be refused only
    after the first was written (`inspect --report o.json --sarif o.json` wrote o.json, then exited 2)."""
    seen: list[tuple[str, Path]] = []
    stdout: str | None = None
    for what, dest in dests:
        if os.fspath(dest) == "-":  # standard output: one document there, or two run together unparseable
            if stdout is not None:
                raise UsageError(f"{what}: standard output is also {stdout}'s; give one of them a file")
            stdout = what
            continue
        d = _real(os.path.expanduser(os.fspath(dest)))
        for other, o in seen:
            if d == o:
                raise UsageError(f"{what}: is also {other}'s destination; give each output a path of its own")
            if o in d.parents or d in o.parents:
                raise UsageError(f"{what}: {'lies inside' if o in d.parents else 'contains'} {other}'s "
                                 "destination; give each output a path of its own")
        seen.append((what, d))


def _check_parent(dest: Path, what: str) -> None:
    """A new destination's parent must be a folder (or not exist yet: it is created); a symlink to one is fine."""
    for parent in dest.parents:
        if os.path.lexists(parent):
            if not os.path.isdir(parent):
                raise InputError(f"{what}: cannot write there: {parent} is not a folder")
            return


def _is_empty_dir(path: Path) -> bool:
    try:
        with os.scandir(path) as it:
            return next(it, None) is None
    except OSError:
        return False


def owned_folder(folder: Path, manifest: str, listed: Callable[[Any], Iterable[str] | None], *,
                 max_bytes: int = 16 * 1024 * 1024) -> bool:
    """True when `folder` is an earlier output kconvert wrote: its `manifest` (kconvert.json, trace.json) is strict
    JSON that `listed` recognises (returning the files it records, None when it is not kconvert's), and the folder
    holds nothing but the manifest and those files (regular files, in folders of their own): a file the user
    added afterwards makes it theirs, and it is not replaced."""
    try:
        # constants: recognising is not validating, and kconvert's own writers may still write a NaN
        doc = read_json(folder / manifest, manifest, max_bytes=max_bytes, constants=True)
        names = listed(doc)
    except (InputError, AttributeError, TypeError, KeyError):
        return False
    if names is None:
        return False
    allowed = {manifest, *names}
    for dirpath, dirnames, filenames in os.walk(folder):
        rel_dir = os.path.relpath(dirpath, folder)
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            try:
                mode = os.lstat(os.path.join(dirpath, name)).st_mode
            except OSError:
                return False
            if rel not in allowed or not stat.S_ISREG(mode):
                return False
    return True


def check_output_folder(dest: str | os.PathLike[str], *, what: str, force: bool, inputs: Iterable[Any] = (),
                        owned: Callable[[Path], bool], kind: str) -> None:
    """Refuse, before anything is written, a folder destination that is not a new path, an empty folder, or (with
    `force`) an earlier output `owned` recognises; `kind` names such an output in the messages ("fix output")."""
    out = Path(os.path.expanduser(os.fspath(dest)))
    check_apart(out, inputs, what)
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        _check_parent(out, what)
        return
    except OSError as e:
        raise InputError(f"{what}: cannot check it: {_os_reason(e)}") from None
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        raise UsageError(f"{what}: is a symlink; kconvert writes a {kind} only to a new path, into an empty folder or "
                         f"over its own earlier {kind}: choose another path")
    if not stat.S_ISDIR(mode):
        raise UsageError(f"{what}: is {node_kind(mode)}, not a folder kconvert may write: choose another path")
    if _is_empty_dir(out):
        return
    if not owned(out):
        raise UsageError(f"{what}: already exists and is not a {kind} kconvert wrote; kconvert replaces only its own "
                         "earlier output: choose another path")
    if not force:
        raise UsageError(f"{what}: already exists (an earlier {kind}); --force replaces it")


def replaceable_folder(dest: Path, owned: Callable[[Path], bool] | None) -> str:
    """At the rename that puts a folder output in place, what stands at `dest` now: "new" (nothing), "empty" (an
    empty folder, which rename(2) replaces in one step), "owned" (an earlier output `owned` recognises) or
    "other" (anything else, which is never replaced)."""
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        return "new"
    if not stat.S_ISDIR(st.st_mode):
        return "other"
    if _is_empty_dir(dest):
        return "empty"
    return "owned" if owned is not None and owned(dest) else "other"


def _owned_file(path: Path, owns: Callable[[Path], bool] | None) -> bool:
    if owns is None:
        return False
    try:
        return bool(owns(path))
    except Exception:  # a recogniser that cannot read what stands there has not recognised it: it is not replaced
        return False


def check_output_file(dest: str | os.PathLike[str], *, what: str, inputs: Iterable[Any] = (),
                      owns: Callable[[Path], bool] | None, kind: str, through: bool = True) -> str:
    """How a file output may be written, or a refusal (UsageError, exit 2). "stdout" for `-`; "through" for a FIFO
    or a character device (`through`: written through it, as cp does; else refused); "replace" for a new path, an
    empty regular file, or an earlier output `owns` recognises (written beside and renamed into place); anything
    else is refused. `kind` names the output in messages ("JSON report")."""
    if os.fspath(dest) == "-":
        return "stdout"
    out = Path(os.path.expanduser(os.fspath(dest)))
    check_apart(out, inputs, what)
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        _check_parent(out, what)
        return "replace"
    except OSError as e:
        raise InputError(f"{what}: cannot check it: {_os_reason(e)}") from None
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            target = os.stat(out).st_mode
        except OSError:
            target = None
        if through and target is not None and (stat.S_ISFIFO(target) or stat.S_ISCHR(target)):
            return "through"
        what_is = "a symlink to nothing" if target is None else f"a symlink to {node_kind(target)}"
        raise UsageError(f"{what}: is {what_is}; kconvert writes a {kind} only to a new path or over its own earlier "
                         "one (or through a FIFO or character device): choose another path, or - for standard output")
    if through and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        return "through"
    if stat.S_ISREG(mode):
        if st.st_size == 0 or _owned_file(out, owns):
            return "replace"
        raise UsageError(f"{what}: already exists and is not a {kind} kconvert wrote; kconvert replaces only its own "
                         "earlier output: choose another path")
    raise UsageError(f"{what}: is {node_kind(mode)}, not a file kconvert may write: choose another path")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _umask() -> int:
    # The process umask can only be read by setting it; set it straight back (kconvert writes no file meanwhile).
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_file(dest: str | os.PathLike[str], data: bytes | str, *, what: str, inputs: Iterable[Any] = (),
               owns: Callable[[Path], bool] | None, kind: str) -> None:
    """Write one file output by the rules of `check_output_file`: standard output for `-`; through a FIFO or a
    character device (opened for writing without O_CREAT or O_TRUNC, checked again after opening, never renamed
    over); otherwise into a temporary file beside it, fsynced, and renamed into place, so a reader never sees half
    of it; what stands there is checked again just before the rename."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    how = check_output_file(dest, what=what, inputs=inputs, owns=owns, kind=kind)
    if how == "stdout":
        sys.stdout.flush()
        out = getattr(sys.stdout, "buffer", None)
        if out is not None:
            out.write(raw)
        else:  # a text stream without a buffer (a test's StringIO)
            sys.stdout.write(raw.decode("utf-8"))
        sys.stdout.flush()
        return
    path = Path(os.path.expanduser(os.fspath(dest)))
    if how == "through":
        _write_through(path, raw, what)
        return
    _write_replacing(path, raw, what, owns, kind)


def _write_through(path: Path, raw: bytes, what: str) -> None:
    try:
        # no O_CREAT: the node must already be there (a FIFO waits here for its reader, as cp does); no O_TRUNC: a
        # FIFO or a device has no length
        fd = os.open(path, os.O_WRONLY | _O_CLOEXEC)
    except OSError as e:
        raise InputError(f"{what}: cannot write: {_os_reason(e)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
            raise UsageError(f"{what}: changed into {node_kind(mode)} while kconvert opened it; nothing written")
        _write_all(fd, raw)
    except OSError as e:
        raise InputError(f"{what}: cannot write: {_os_reason(e)}") from None
    finally:
        os.close(fd)


def _write_replacing(path: Path, raw: bytes, what: str, owns: Callable[[Path], bool] | None, kind: str) -> None:
    import tempfile  # deferred: only a report file is written this way

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:
        raise InputError(f"{what}: cannot write: {_os_reason(e)}") from None
    try:
        # mkstemp creates 0600 for its own privacy; a report is an ordinary file, so it gets the mode open(2)
        # would give it (0666 under the umask: 0644 under umask 022)
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        # what stands there may have changed since the command started: the same rules, once more, at the rename
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and not (stat.S_ISREG(st.st_mode) and (st.st_size == 0 or _owned_file(path, owns))):
            raise UsageError(f"{what}: changed while kconvert wrote ({node_kind(st.st_mode)} not written by "
                             f"kconvert stands there now); left as it is, nothing written")
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{what}: cannot write: {_os_reason(e)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "check_apart", "check_output_file", "check_output_folder", "decode_utf8",
           "existing_inputs", "json_depth_ok", "loads_json", "node_kind", "open_regular", "owned_folder",
           "read_bytes", "read_head", "read_json", "read_json_lines", "read_text", "read_toml",
           "replaceable_folder", "toml_depth_ok", "write_file"]
