"""The trace: what a target produced on a prompt set, enough to score any EAGLE-3 draft without the target.

A trace is a folder of two files (schemas/trace.schema.json describes both):

- ``trace.json``: provenance (target, revision, dtype, prompt set, recorder), the layout and the format version
  (``VERSION``, major.minor: a reader refuses a newer major, reads a newer minor and the 1.0 traces);
- ``trace.safetensors`` (or, with ``shard_size``, shards ``trace-00001-of-0000N.safetensors`` of whole tensors,
  listed in ``trace.json``): every sequence concatenated along one token axis:

  ``input_ids`` I64 [N]        prompt, continuation and lookahead tokens of every sequence
  ``next_token`` I64 [N]       the target's greedy next token at each position, from the same forward as the states
  ``seq_offsets`` I64 [S+1]    sequence boundaries on the token axis
  ``prompt_lens`` I64 [S]      prompt tokens of each sequence
  ``output_lens`` I64 [S]      tokens an engine emits for it (greedy, until EOS inclusive or max_tokens)
  ``hidden.<k>`` [N, H]        residual stream entering target layer k (vLLM's numbering; k = L is the stream
                               after the last layer, before the final norm), in the trace's dtype
  ``embed_ids`` I64 [U]        sorted token ids whose target embedding rows are kept
  ``embed_tokens`` [U, H]      the target's ``embed_tokens`` rows for them
  ``lm_head`` [V, H]           optional: the target's ``lm_head`` (drafts without their own share it)

Past ``output_lens`` each sequence carries ``lookahead`` more greedy tokens (EOS ignored): an engine verifies
all k drafted tokens of the last step and counts those accepted past the end, so scoring the last step
exactly needs them.

Never a pickle: safetensors plus JSON, every header and offset validated on read (kconvert.source's header
reader), every index bounded, and memory bounded: a sequence's rows are read by byte range when scored.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from kconvert.errors import InputError, UsageError
from kconvert.guard.paths import check_output_folder, owned_folder, read_bytes
from kconvert.source.safetensors_header import DTYPE_SIZES, TensorInfo, loads_strict_json, read_header
from kconvert.writer.header import safetensors_header

FORMAT = "kconvert-trace"
# The format's version, major.minor (schemas/trace.schema.json `version`). A minor version only adds what a reader
# of the same major may ignore; a new major is refused by older readers. History:
#   1.0  one trace.safetensors; written as the integer `1` before the format was versioned major.minor, read as 1.0
#   1.1  `version` is a "major.minor" string; `data` may list shards (`--shard-size`)
VERSION = "1.1"
META_NAME = "trace.json"
DATA_NAME = "trace.safetensors"
SHARD_NAME = "trace-{:05d}-of-{:05d}.safetensors"
MAX_META_BYTES = 16 * 1024 * 1024
HIDDEN_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
ST_TO_NAME = {v: k for k, v in HIDDEN_DTYPES.items()}
LAYER_CONVENTION = ("input-of-layer (vLLM): layer k is the residual stream entering target layer k; "
                    "k = num_hidden_layers is the stream after the last layer, before the final norm")
INDEX_TENSORS = ("input_ids", "next_token", "seq_offsets", "prompt_lens", "output_lens", "embed_ids")


def hidden_name(layer: int) -> str:
    return f"hidden.{layer}"


def data_file_name(i: int, n: int) -> str:
    """trace.safetensors, or the i-th of n shards (HF's own shard naming, 1-based)."""
    return DATA_NAME if n == 1 else SHARD_NAME.format(i + 1, n)


def tensor_shapes(positions: int, sequences: int, unique_tokens: int, hidden: int, layers: Iterable[int],
                  st_dtype: str, lm_head_rows: int | None = None) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor of a trace as (safetensors dtype, shape), in the order they are written: the index tensors, the
    embedding rows, the hidden states by layer, the head."""
    N, S, U, H = positions, sequences, unique_tokens, hidden
    shapes: dict[str, tuple[str, tuple[int, ...]]] = {
        "input_ids": ("I64", (N,)), "next_token": ("I64", (N,)), "seq_offsets": ("I64", (S + 1,)),
        "prompt_lens": ("I64", (S,)), "output_lens": ("I64", (S,)), "embed_ids": ("I64", (U,)),
        "embed_tokens": (st_dtype, (U, H)),
    }
    for k in layers:
        shapes[hidden_name(k)] = (st_dtype, (N, H))
    if lm_head_rows is not None:
        shapes["lm_head"] = (st_dtype, (lm_head_rows, H))
    return shapes


def shard_groups(entries: list[tuple[str, str, tuple[int, ...], int]], shard_size: int | None) -> list[list]:
    """Split (name, dtype, shape, nbytes) entries, in order, into shards of whole tensors: a new shard starts when
    the next tensor would take the current one past `shard_size` bytes (a tensor larger than it gets a shard of its
    own), as transformers' `save_pretrained(max_shard_size=...)` does. None: one file."""
    if not shard_size:
        return [list(entries)]
    groups: list[list] = [[]]
    used = 0
    for e in entries:
        if groups[-1] and used + e[3] > shard_size:
            groups.append([])
            used = 0
        groups[-1].append(e)
        used += e[3]
    return groups


def parse_version(v: Any) -> tuple[int, int]:
    """(major, minor) of trace.json's `version`: "1.1", or the integer 1 the 1.0 writers wrote."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v, 0
    if isinstance(v, str):
        major, dot, minor = v.partition(".")
        if dot and major.isdigit() and minor.isdigit():
            return int(major), int(minor)
    raise InputError(f"{META_NAME}: version {v!r} is not a trace format version (major.minor)")


def check_version(doc: Any) -> tuple[int, int]:
    """Refuse a trace of another format or of a newer major version, before its schema is checked (a newer
    major may be laid out differently); a newer minor version of this major is read (it only adds fields)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        fmt = doc.get("format") if isinstance(doc, dict) else None
        raise InputError(f"{META_NAME}: not a kconvert trace (format {fmt!r})")
    got = parse_version(doc.get("version"))
    ours = parse_version(VERSION)
    if got[0] > ours[0]:
        rec = doc.get("recorder") if isinstance(doc.get("recorder"), dict) else {}
        who = rec.get("version") if isinstance(rec.get("version"), str) else None
        from kconvert._version import DISTRIBUTION, __version__

        raise InputError(f"{META_NAME}: trace format {got[0]}.{got[1]} is newer than this kconvert ({__version__}) "
                         f"reads (format {ours[0]}.x, up to {VERSION})"
                         + (f"; it was written by kconvert {who}, which reads it" if who else ""),
                         hint=f"upgrade: pip install -U '{DISTRIBUTION}>={who}'" if who else f"upgrade: pip install -U {DISTRIBUTION}")
    return got


@dataclass
class TraceMeta:
    """trace.json, as a dataclass (schemas/trace.schema.json)."""

    target: dict[str, Any]
    dtype: str  # of the hidden states and embedding rows: bfloat16 | float16 | float32
    layers: list[int]
    hidden_size: int
    vocab_size: int
    num_hidden_layers: int
    prompt_set: dict[str, Any]
    continuation: dict[str, Any]
    recorder: dict[str, Any]
    num_sequences: int = 0
    num_positions: int = 0
    has_lm_head: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "created": self.created, "target": self.target,
            "dtype": self.dtype, "layers": self.layers, "layer_convention": LAYER_CONVENTION,
            "hidden_size": self.hidden_size, "vocab_size": self.vocab_size,
            "num_hidden_layers": self.num_hidden_layers, "prompt_set": self.prompt_set,
            "continuation": self.continuation, "recorder": self.recorder, "num_sequences": self.num_sequences,
            "num_positions": self.num_positions, "has_lm_head": self.has_lm_head, "data": self.data,
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TraceMeta":
        return cls(target=d["target"], dtype=d["dtype"], layers=list(d["layers"]), hidden_size=d["hidden_size"],
                   vocab_size=d["vocab_size"], num_hidden_layers=d["num_hidden_layers"],
                   prompt_set=d["prompt_set"], continuation=d["continuation"], recorder=d["recorder"],
                   num_sequences=d["num_sequences"], num_positions=d["num_positions"],
                   has_lm_head=d.get("has_lm_head", False), data=d.get("data", {}), created=d.get("created", ""),
                   notes=list(d.get("notes", [])))

    @property
    def lookahead(self) -> int:
        return int(self.continuation.get("lookahead", 0))


@dataclass
class Sequence:
    """One recorded sequence: tokens and the target's greedy labels (numpy int64)."""

    index: int
    start: int  # offset on the trace's token axis
    input_ids: np.ndarray
    next_token: np.ndarray
    prompt_len: int
    output_len: int

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def stop(self) -> int:
        """Exclusive end of what an engine emits: prompt + output tokens."""
        return self.prompt_len + self.output_len


# --------------------------------------------------------------------------------------------- writing ---

def _tensor_bytes(arr: Any, st_dtype: str) -> bytes:
    """Little-endian bytes of a numpy array or torch tensor in safetensors dtype `st_dtype`."""
    if hasattr(arr, "detach"):  # torch, without importing it here
        import torch

        t = arr.detach().cpu().contiguous()
        want = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "I64": torch.int64}[st_dtype]
        t = t.to(want)
        if st_dtype == "BF16":
            return t.view(torch.int16).numpy().astype("<i2", copy=False).tobytes()
        return t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
    a = np.asarray(arr)
    if st_dtype == "BF16":
        raise UsageError("bfloat16 rows must be given as torch tensors")
    np_dtype = {"F16": "<f2", "F32": "<f4", "I64": "<i8"}[st_dtype]
    return np.ascontiguousarray(a).astype(np_dtype, copy=False).tobytes()


def trace_data_files(doc: Any) -> list[str] | None:
    """The data files a trace.json lists, or None when it is not a kconvert trace's: with it, what makes a folder an
    earlier trace that `--force` may replace."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    d = doc.get("data")
    entries = d["files"] if isinstance(d, dict) and "files" in d else [d]
    return [e["file"] for e in entries]


def trace_owned(folder: Path) -> bool:
    """`folder` is an earlier trace: trace.json and the data files it lists, nothing else
    (`kconvert.guard.paths.owned_folder`)."""
    return owned_folder(folder, META_NAME, trace_data_files, max_bytes=MAX_META_BYTES)


def check_trace_destination(out: str | os.PathLike[str], *, force: bool, inputs: Iterable[Any] = ()) -> None:
    """Refuse a trace folder destination before anything is recorded (`kconvert.guard.paths.check_output_folder`):
    only a new path, an empty folder or (with `force`) an earlier trace, apart from every input."""
    check_output_folder(out, what=str(out), force=force, inputs=inputs, owned=trace_owned, kind="trace")


def request_inputs(request: Any) -> list[Any]:
    """What a trace request reads, as the user gave it (a target folder, a prompts or continuations file, a dump
    folder): a trace folder may be none of them, nor hold nor lie inside one."""
    return [getattr(request, name, None) for name in ("target", "prompts", "continuations_from", "dump")]


class TraceWriter:
    """Writes a trace into a hidden temporary folder beside ``out_dir`` and renames it into place at the end.

    Sequences are appended one at a time; their rows are spooled to one temporary file per tensor (bounded
    memory whatever the trace length), then assembled into ``trace.safetensors`` behind one header (or into shards
    of at most ``shard_size`` bytes of whole tensors, each behind its own).
    """

    def __init__(self, out_dir: str | os.PathLike[str], meta: TraceMeta, *, force: bool = False,
                 shard_size: int | None = None, inputs: Iterable[Any] = ()):
        from kconvert.writer.atomic import TempFolder

        if shard_size is not None and shard_size < 1:
            raise UsageError("--shard-size must be positive")
        self.shard_size = shard_size

        self.out_dir = Path(out_dir)
        check_trace_destination(self.out_dir, force=force, inputs=inputs)
        if meta.dtype not in HIDDEN_DTYPES:
            raise UsageError(f"trace dtype {meta.dtype!r}: choose one of {', '.join(HIDDEN_DTYPES)}")
        self.meta = meta
        self.force = force
        self.st_dtype = HIDDEN_DTYPES[meta.dtype]
        self.tmp = TempFolder(self.out_dir, owned=trace_owned)
        self._spools: dict[str, Any] = {}
        self._rows: dict[str, int] = {}
        self.offsets = [0]
        self.prompt_lens: list[int] = []
        self.output_lens: list[int] = []
        self.used: set[int] = set()
        self.done = False

    def _spool(self, name: str, data: bytes, rows: int) -> None:
        f = self._spools.get(name)
        if f is None:
            f = self._spools[name] = open(self.tmp.path / f".{name}.spool", "wb")
            self._rows[name] = 0
        f.write(data)
        self._rows[name] += rows

    def add_sequence(self, input_ids: Iterable[int], next_token: Iterable[int], prompt_len: int, output_len: int,
                     hidden: dict[int, Any]) -> None:
        ids = np.asarray(list(input_ids), dtype=np.int64)
        nxt = np.asarray(list(next_token), dtype=np.int64)
        n = ids.shape[0]
        if nxt.shape != (n,) or not 0 < prompt_len <= prompt_len + output_len <= n:
            raise ValueError(f"inconsistent sequence: {n} tokens, {nxt.shape} labels, prompt {prompt_len}, "
                             f"output {output_len}")
        if set(hidden) != set(self.meta.layers):
            raise ValueError(f"hidden states for layers {sorted(hidden)}, trace records {self.meta.layers}")
        for k in self.meta.layers:
            h = hidden[k]
            if tuple(h.shape) != (n, self.meta.hidden_size):
                raise ValueError(f"hidden.{k}: shape {tuple(h.shape)}, want {(n, self.meta.hidden_size)}")
            self._spool(hidden_name(k), _tensor_bytes(h, self.st_dtype), n)
        self._spool("input_ids", ids.astype("<i8").tobytes(), n)
        self._spool("next_token", nxt.astype("<i8").tobytes(), n)
        self.offsets.append(self.offsets[-1] + n)
        self.prompt_lens.append(int(prompt_len))
        self.output_lens.append(int(output_len))
        self.used.update(ids.tolist())
        self.used.update(nxt.tolist())

    def finish(self, embed_rows: Any, lm_head: Any | None = None, *, durable: bool = True) -> Path:
        """``embed_rows(ids) -> [len(ids), H]`` gives the target's embedding rows; ``lm_head`` the full head."""
        from kconvert.writer.atomic import interrupt_guard

        with interrupt_guard():
            try:
                return self._finish(embed_rows, lm_head, durable)
            except BaseException:
                self.close_spools()
                self.tmp.discard()
                raise

    def close_spools(self) -> None:
        for f in self._spools.values():
            f.close()

    def _finish(self, embed_rows: Any, lm_head: Any | None, durable: bool) -> Path:
        m = self.meta
        if not self.prompt_lens:
            raise UsageError("the trace has no sequences")
        shapes = self._spool_tail(embed_rows, lm_head)
        files = self._assemble(shapes, durable)
        m.num_sequences = len(self.prompt_lens)
        m.num_positions = self.offsets[-1]
        m.has_lm_head = lm_head is not None
        m.data = files[0] if len(files) == 1 else {"files": files}
        m.created = m.created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        doc = m.to_dict()
        from kconvert.schemas import validate

        validate(doc, "trace", what=META_NAME)
        with open(self.tmp.path / META_NAME, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
            f.flush()
            if durable:
                os.fsync(f.fileno())
        self.tmp.commit(force=self.force, durable=durable)
        self.done = True
        return self.out_dir

    def _spool_tail(self, embed_rows: Any, lm_head: Any | None) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Spool the embedding rows, the head and the index tensors; return every tensor's (dtype, shape), in the
        order they are laid out (`tensor_shapes`)."""
        m, H = self.meta, self.meta.hidden_size
        ids = sorted(i for i in self.used if 0 <= i < m.vocab_size)
        if len(ids) != len(self.used):
            raise ValueError(f"token ids outside the target vocabulary (0..{m.vocab_size - 1})")
        rows = embed_rows(ids)
        if tuple(rows.shape) != (len(ids), H):
            raise ValueError(f"embedding rows: shape {tuple(rows.shape)}")
        self._spool("embed_tokens", _tensor_bytes(rows, self.st_dtype), len(ids))
        if lm_head is not None:
            if tuple(lm_head.shape) != (m.vocab_size, H):
                raise ValueError(f"lm_head: shape {tuple(lm_head.shape)}")
            self._spool("lm_head", _tensor_bytes(lm_head, self.st_dtype), m.vocab_size)
        for name, vals in (("seq_offsets", self.offsets), ("prompt_lens", self.prompt_lens),
                           ("output_lens", self.output_lens), ("embed_ids", ids)):
            self._spool(name, np.asarray(vals, dtype="<i8").tobytes(), len(vals))
        self.close_spools()
        return tensor_shapes(self.offsets[-1], len(self.prompt_lens), len(ids), H, m.layers, self.st_dtype,
                             m.vocab_size if lm_head is not None else None)

    def _assemble(self, shapes: dict[str, tuple[str, tuple[int, ...]]], durable: bool) -> list[dict[str, Any]]:
        """Write the spools into one safetensors file (or shards of at most `shard_size` bytes, whole tensors
        each) behind headers; the spooled sizes are checked against the shapes first."""
        entries = []
        for name, (dt, shape) in shapes.items():
            nbytes = math.prod(shape) * DTYPE_SIZES[dt]
            spool = self.tmp.path / f".{name}.spool"
            if spool.stat().st_size != nbytes:
                raise ValueError(f"{name}: {spool.stat().st_size} bytes spooled, header says {nbytes}")
            entries.append((name, dt, shape, nbytes))
        groups = shard_groups(entries, self.shard_size)
        files = []
        for i, group in enumerate(groups):
            name = data_file_name(i, len(groups))
            head = safetensors_header(group, {"format": FORMAT, "version": VERSION})
            sha = hashlib.sha256(head)
            with open(self.tmp.path / name, "wb") as out:
                out.write(head)
                for tname, *_ in group:
                    spool = self.tmp.path / f".{tname}.spool"
                    with open(spool, "rb") as f:
                        while chunk := f.read(8 * 1024 * 1024):
                            out.write(chunk)
                            sha.update(chunk)
                    spool.unlink()
                out.flush()
                if durable:
                    os.fsync(out.fileno())
            files.append({"file": name, "size": (self.tmp.path / name).stat().st_size, "sha256": sha.hexdigest()})
        return files

    def abort(self) -> None:
        self.close_spools()
        self.tmp.discard()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        # an unfinished trace never stays behind, whatever stopped it
        if not self.done:
            self.abort()


# --------------------------------------------------------------------------------------------- reading ---

class Trace:
    """A validated, open trace. Reads rows by byte range; nothing but the small index tensors is held."""

    def __init__(self, root: Path, meta: TraceMeta, meta_sha256: str, tensors: dict[str, TensorInfo],
                 offsets: np.ndarray, prompt_lens: np.ndarray, output_lens: np.ndarray, embed_ids: np.ndarray):
        self.root = root
        self.meta = meta
        self.meta_sha256 = meta_sha256
        self.tensors = tensors
        self.offsets = offsets
        self.prompt_lens = prompt_lens
        self.output_lens = output_lens
        self.embed_ids = embed_ids
        self._fds: dict[str, int] = {}
        self.format_version = parse_version(VERSION)
        self.hub: dict[str, Any] | None = None  # {"repo_id", "revision", "commit"} when read from the Hub

    # -- raw access ---------------------------------------------------------------------------------------
    def _read(self, info: TensorInfo, start: int, length: int) -> bytes:
        fd = self._fds.get(info.file)
        if fd is None:
            fd = self._fds[info.file] = os.open(self.root / info.file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        data = os.pread(fd, length, start)
        if len(data) != length:
            raise InputError(f"{info.file} [{info.name}]: only {len(data)} of {length} bytes could be read "
                             "(the file changed or was truncated after it was opened)")
        return data

    def _rows(self, name: str, first: int, count: int) -> tuple[bytes, TensorInfo]:
        info = self.tensors[name]
        width = math.prod(info.shape[1:]) * DTYPE_SIZES[info.dtype]
        if not 0 <= first <= first + count <= info.shape[0]:
            raise InputError(f"{DATA_NAME} [{name}]: rows {first}..{first + count} outside 0..{info.shape[0]}")
        return self._read(info, info.start + first * width, count * width), info

    def _int_rows(self, name: str, first: int, count: int) -> np.ndarray:
        data, _ = self._rows(name, first, count)
        return np.frombuffer(data, dtype="<i8").astype(np.int64)

    def float_rows(self, name: str, first: int, count: int):
        """Rows of a float tensor as a torch tensor in the stored dtype (bf16 stays bf16)."""
        import torch

        data, info = self._rows(name, first, count)
        dt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}[info.dtype]
        t = torch.frombuffer(bytearray(data), dtype=dt) if data else torch.empty(0, dtype=dt)
        return t.reshape(count, *info.shape[1:])

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    def __enter__(self) -> "Trace":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    # -- content --------------------------------------------------------------------------------------------
    @property
    def num_sequences(self) -> int:
        return int(self.prompt_lens.shape[0])

    def sequence(self, i: int) -> Sequence:
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        ids = self._int_rows("input_ids", start, end - start)
        nxt = self._int_rows("next_token", start, end - start)
        V = self.meta.vocab_size
        if ids.size and (ids.min() < 0 or ids.max() >= V or nxt.min() < 0 or nxt.max() >= V):
            raise InputError(f"{DATA_NAME}: sequence {i} holds token ids outside 0..{V - 1}")
        return Sequence(i, start, ids, nxt, int(self.prompt_lens[i]), int(self.output_lens[i]))

    def hidden(self, seq: Sequence, layer: int, count: int | None = None):
        name = hidden_name(layer)
        if name not in self.tensors:
            raise UsageError(f"the trace holds no hidden states for layer {layer} (recorded: "
                             f"{', '.join(map(str, self.meta.layers))}); record it with --layers")
        return self.float_rows(name, seq.start, seq.length if count is None else count)

    def embedding_rows(self):
        """(ids, rows): the target's embedding rows kept in the trace."""
        return self.embed_ids, self.float_rows("embed_tokens", 0, int(self.embed_ids.shape[0]))

    def lm_head(self):
        if "lm_head" not in self.tensors:
            return None
        return self.float_rows("lm_head", 0, self.meta.vocab_size)

    def summary(self) -> dict[str, Any]:
        m = self.meta
        return {"path": str(self.root), "sha256": self.meta_sha256, "hub": self.hub,
                "format_version": "{}.{}".format(*self.format_version), "target": m.target, "dtype": m.dtype,
                "layers": m.layers, "prompt_set": m.prompt_set, "continuation": m.continuation,
                "recorder": m.recorder, "num_sequences": m.num_sequences, "num_positions": m.num_positions,
                "num_output_tokens": int(self.output_lens.sum())}


def open_trace(ref: str | os.PathLike[str], *, check_data_sha256: bool = True) -> Trace:
    """Open and validate a trace: a local folder, or a Hub dataset `org/name[@revision]` (read through
    huggingface_hub's cache, `resolve_trace`). An existing path always wins over a Hub id.

    trace.json's format and version are checked first (a newer major version is refused), then the document
    against its schema, every safetensors header with kconvert's validated reader, every tensor's dtype and shape
    against the metadata, and the index tensors' bounds."""
    root, hub = resolve_trace(ref)
    # a Hub snapshot's files link into the repository's blobs, two folders up (huggingface_hub's cache layout)
    trace = _open_folder(root, check_data_sha256, allowed_root=root.parent.parent if hub else None)
    trace.hub = hub
    return trace


def resolve_trace(ref: str | os.PathLike[str]) -> tuple[Path, dict[str, Any] | None]:
    """(local folder, Hub provenance or None) of a trace reference. A path that exists is a folder; otherwise an
    `org/name[@revision]` is a Hub dataset repository, downloaded into (or, with HF_HUB_OFFLINE=1, found in)
    huggingface_hub's cache. Only trace.json, the trace's safetensors files and the card are fetched."""
    text = os.fsdecode(ref)
    root = Path(text).expanduser()
    if os.path.exists(root) or isinstance(ref, os.PathLike):  # os.path: a too long name is no path, no OSError
        return root, None
    from kconvert.source.hub import hub_errors, is_hub_id, split_hub_id

    if not is_hub_id(text):
        raise InputError(f"{text}: not a trace folder: no such path (record one with `kconvert trace`)")
    from huggingface_hub import snapshot_download

    repo_id, revision = split_hub_id(text)
    with hub_errors(f"{text}", missing_hint="not a local folder either; download it once online (`kconvert score "
                                            "... --trace org/name` fills the cache), or pass a trace folder"):
        folder = Path(snapshot_download(repo_id, repo_type="dataset", revision=revision,
                                        allow_patterns=[META_NAME, "trace*.safetensors", "README.md"]))
    return folder, {"repo_id": repo_id, "revision": revision, "commit": folder.name}


def _data_files(meta: TraceMeta) -> list[dict[str, Any]]:
    d = meta.data
    return list(d["files"]) if "files" in d else [d]


def _open_folder(root: Path, check_data_sha256: bool, allowed_root: Path | None = None) -> Trace:
    from kconvert.schemas import validate
    from kconvert.source.safetensors_header import check_relative_path

    if not root.is_dir():
        raise InputError(f"{root}: not a trace folder (record one with `kconvert trace`)")
    meta_path = root / META_NAME
    if not os.path.lexists(meta_path):  # a FIFO or folder of that name is refused by name by the read guard
        raise InputError(f"{root}: no {META_NAME} (is this a trace folder?)")
    raw = _read_small(meta_path)
    try:
        doc = loads_strict_json(raw, "")
    except ValueError as e:
        raise InputError(f"{META_NAME}: {e}") from None
    version = check_version(doc)
    if version > parse_version(VERSION):
        # a newer minor version of this major only adds fields: read the ones this version knows
        from kconvert.schemas import load_schema

        doc = {k: v for k, v in doc.items() if k in load_schema("trace")["properties"]}
    validate(doc, "trace", what=META_NAME)
    meta = TraceMeta.from_dict(doc)
    if any(k < 0 or k > meta.num_hidden_layers for k in meta.layers) or len(set(meta.layers)) != len(meta.layers):
        raise InputError(f"{META_NAME}: layers {meta.layers} must be distinct ids within 0..{meta.num_hidden_layers}")
    t: dict[str, TensorInfo] = {}
    for entry in _data_files(meta):
        rel = check_relative_path(root, entry.get("file"), f"{META_NAME} data.file", allowed_root=allowed_root)
        path = root / rel
        if not os.path.lexists(path):
            raise InputError(f"{root}: no {rel}")
        header = read_header(path, rel)  # a FIFO, device or folder of that name is refused by name there
        size = path.stat().st_size
        if entry.get("size") != size:
            raise InputError(f"{rel}: {size} bytes, {META_NAME} records {entry.get('size')}")
        if check_data_sha256:
            _check_sha256(path, entry.get("sha256"))
        twice = sorted(set(t) & set(header.tensors))
        if twice:
            raise InputError(f"{rel}: tensor {twice[0]} is also in another file of the trace")
        t.update(header.tensors)
    _check_tensors(meta, t)
    trace = Trace(root, meta, hashlib.sha256(raw).hexdigest(), t, np.zeros(0), np.zeros(0), np.zeros(0),
                  np.zeros(0))
    trace.format_version = version
    _read_index(trace)
    return trace


def _check_tensors(meta: TraceMeta, t: dict[str, TensorInfo]) -> None:
    """Every tensor the metadata implies is there, in its dtype and shape; nothing else is."""
    N, S, H = meta.num_positions, meta.num_sequences, meta.hidden_size
    st = HIDDEN_DTYPES[meta.dtype]
    want: dict[str, tuple[tuple[str, ...], tuple[int, ...] | None]] = {
        "input_ids": (("I64",), (N,)), "next_token": (("I64",), (N,)), "seq_offsets": (("I64",), (S + 1,)),
        "prompt_lens": (("I64",), (S,)), "output_lens": (("I64",), (S,)), "embed_ids": (("I64",), None),
    }
    for k in meta.layers:
        want[hidden_name(k)] = ((st,), (N, H))
    for name, (dts, shape) in want.items():
        info = t.get(name)
        if info is None:
            raise InputError(f"{DATA_NAME}: tensor {name} is missing")
        if info.dtype not in dts or (shape is not None and info.shape != shape):
            raise InputError(f"{info.file} [{name}]: {info.dtype} {list(info.shape)}, expected {dts[0]} "
                             f"{list(shape) if shape else '[U]'}")
    U = t["embed_ids"].shape[0]
    emb = t.get("embed_tokens")
    if emb is None or emb.dtype != st or emb.shape != (U, H):
        raise InputError(f"{DATA_NAME} [embed_tokens]: expected {st} [{U}, {H}]")
    if meta.has_lm_head:
        lm = t.get("lm_head")
        if lm is None or lm.dtype != st or lm.shape != (meta.vocab_size, H):
            raise InputError(f"{DATA_NAME} [lm_head]: expected {st} [{meta.vocab_size}, {H}]")
    extra = sorted(set(t) - set(want) - {"embed_tokens", "lm_head"})
    if extra:
        raise InputError(f"{DATA_NAME}: unexpected tensors {', '.join(extra[:5])}")


def _read_index(trace: Trace) -> None:
    """Read and bound the small index tensors."""
    meta, t = trace.meta, trace.tensors
    N, S, U = meta.num_positions, meta.num_sequences, t["embed_ids"].shape[0]
    offsets = trace._int_rows("seq_offsets", 0, S + 1)
    prompt_lens = trace._int_rows("prompt_lens", 0, S)
    output_lens = trace._int_rows("output_lens", 0, S)
    embed_ids = trace._int_rows("embed_ids", 0, U)
    lens = np.diff(offsets)
    if offsets[0] != 0 or offsets[-1] != N or (lens <= 0).any():
        raise InputError(f"{DATA_NAME} [seq_offsets]: not increasing from 0 to {N}")
    if (prompt_lens <= 0).any() or (output_lens < 0).any() or (prompt_lens + output_lens > lens).any():
        raise InputError(f"{DATA_NAME}: a sequence's prompt and output lengths exceed its tokens")
    if U and (embed_ids.min() < 0 or embed_ids.max() >= meta.vocab_size or (np.diff(embed_ids) <= 0).any()):
        raise InputError(f"{DATA_NAME} [embed_ids]: not strictly increasing ids within the vocabulary")
    trace.offsets, trace.prompt_lens, trace.output_lens, trace.embed_ids = offsets, prompt_lens, output_lens, embed_ids


def _read_small(path: Path) -> bytes:
    return read_bytes(path, path.name, max_bytes=MAX_META_BYTES)


def _check_sha256(path: Path, expected: Any) -> None:
    from kconvert.source import hashcache
    from kconvert.source.checkpoint import sha256_file

    if not isinstance(expected, str):
        raise InputError(f"{META_NAME}: data.sha256 missing")
    got = hashcache.lookup(path)
    if got is None:
        got = sha256_file(path)
        hashcache.store(path, got)
    if got != expected:
        raise InputError(f"{DATA_NAME}: sha256 {got[:16]}… does not match {META_NAME} ({expected[:16]}…): the "
                         "data file was changed or belongs to another trace")
