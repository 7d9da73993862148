"""The trace: what a target produced on a prompt set, enough to score any EAGLE-3 draft without the target.

A trace is a folder of two files (schemas/trace.schema.json describes both):

- ``trace.json``: provenance (target, revision, dtype, prompt set, recorder) and the layout;
- ``trace.safetensors``: every sequence concatenated along one token axis:

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
from kconvert.source.safetensors_header import DTYPE_SIZES, TensorInfo, loads_strict_json, read_header
from kconvert.writer.header import safetensors_header

FORMAT = "kconvert-trace"
VERSION = 1
META_NAME = "trace.json"
DATA_NAME = "trace.safetensors"
MAX_META_BYTES = 16 * 1024 * 1024
HIDDEN_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
ST_TO_NAME = {v: k for k, v in HIDDEN_DTYPES.items()}
LAYER_CONVENTION = ("input-of-layer (vLLM): layer k is the residual stream entering target layer k; "
                    "k = num_hidden_layers is the stream after the last layer, before the final norm")
INDEX_TENSORS = ("input_ids", "next_token", "seq_offsets", "prompt_lens", "output_lens", "embed_ids")


def hidden_name(layer: int) -> str:
    return f"hidden.{layer}"


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


class TraceWriter:
    """Writes a trace into a hidden temporary folder beside ``out_dir`` and renames it into place at the end.

    Sequences are appended one at a time; their rows are spooled to one temporary file per tensor (bounded
    memory whatever the trace length), then assembled into ``trace.safetensors`` behind one header.
    """

    def __init__(self, out_dir: str | os.PathLike[str], meta: TraceMeta, *, force: bool = False):
        from kconvert.writer.atomic import TempFolder, check_destination

        self.out_dir = Path(out_dir)
        check_destination(self.out_dir, force=force, input_root=None)
        if meta.dtype not in HIDDEN_DTYPES:
            raise UsageError(f"trace dtype {meta.dtype!r}: choose one of {', '.join(HIDDEN_DTYPES)}")
        self.meta = meta
        self.force = force
        self.st_dtype = HIDDEN_DTYPES[meta.dtype]
        self.tmp = TempFolder(self.out_dir)
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
        ids = sorted(i for i in self.used if 0 <= i < m.vocab_size)
        if len(ids) != len(self.used):
            raise ValueError(f"token ids outside the target vocabulary (0..{m.vocab_size - 1})")
        embed_ids = np.asarray(ids, dtype=np.int64)
        self._spool("embed_ids", embed_ids.astype("<i8").tobytes(), len(ids))
        rows = embed_rows(ids)
        if tuple(rows.shape) != (len(ids), m.hidden_size):
            raise ValueError(f"embedding rows: shape {tuple(rows.shape)}")
        self._spool("embed_tokens", _tensor_bytes(rows, self.st_dtype), len(ids))
        if lm_head is not None:
            if tuple(lm_head.shape) != (m.vocab_size, m.hidden_size):
                raise ValueError(f"lm_head: shape {tuple(lm_head.shape)}")
            self._spool("lm_head", _tensor_bytes(lm_head, self.st_dtype), m.vocab_size)
        small = {
            "seq_offsets": np.asarray(self.offsets, dtype=np.int64),
            "prompt_lens": np.asarray(self.prompt_lens, dtype=np.int64),
            "output_lens": np.asarray(self.output_lens, dtype=np.int64),
        }
        for name, arr in small.items():
            self._spool(name, arr.astype("<i8").tobytes(), arr.shape[0])
        self.close_spools()
        N = self.offsets[-1]
        H = m.hidden_size
        shapes: dict[str, tuple[str, tuple[int, ...]]] = {
            "input_ids": ("I64", (N,)), "next_token": ("I64", (N,)),
            "seq_offsets": ("I64", (len(self.offsets),)), "prompt_lens": ("I64", (len(self.prompt_lens),)),
            "output_lens": ("I64", (len(self.output_lens),)), "embed_ids": ("I64", (len(ids),)),
            "embed_tokens": (self.st_dtype, (len(ids), H)),
        }
        for k in m.layers:
            shapes[hidden_name(k)] = (self.st_dtype, (N, H))
        if lm_head is not None:
            shapes["lm_head"] = (self.st_dtype, (m.vocab_size, H))
        entries = []
        for name, (dt, shape) in shapes.items():
            nbytes = math.prod(shape) * DTYPE_SIZES[dt]
            spool = self.tmp.path / f".{name}.spool"
            if spool.stat().st_size != nbytes:
                raise ValueError(f"{name}: {spool.stat().st_size} bytes spooled, header says {nbytes}")
            entries.append((name, dt, shape, nbytes))
        head = safetensors_header(entries, {"format": FORMAT, "version": str(VERSION)})
        sha = hashlib.sha256()
        data_path = self.tmp.path / DATA_NAME
        with open(data_path, "wb") as out:
            out.write(head)
            sha.update(head)
            for name in shapes:
                spool = self.tmp.path / f".{name}.spool"
                with open(spool, "rb") as f:
                    while chunk := f.read(8 * 1024 * 1024):
                        out.write(chunk)
                        sha.update(chunk)
                spool.unlink()
            out.flush()
            if durable:
                os.fsync(out.fileno())
        m.num_sequences = len(self.prompt_lens)
        m.num_positions = N
        m.has_lm_head = lm_head is not None
        m.data = {"file": DATA_NAME, "size": data_path.stat().st_size, "sha256": sha.hexdigest()}
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
        self._fd: int | None = None

    # -- raw access ---------------------------------------------------------------------------------------
    def _read(self, info: TensorInfo, start: int, length: int) -> bytes:
        if self._fd is None:
            self._fd = os.open(self.root / DATA_NAME, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        data = os.pread(self._fd, length, start)
        if len(data) != length:
            raise InputError(f"{DATA_NAME} [{info.name}]: only {len(data)} of {length} bytes could be read "
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
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

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
        return {"path": str(self.root), "sha256": self.meta_sha256, "target": m.target, "dtype": m.dtype,
                "layers": m.layers, "prompt_set": m.prompt_set, "continuation": m.continuation,
                "recorder": m.recorder, "num_sequences": m.num_sequences, "num_positions": m.num_positions,
                "num_output_tokens": int(self.output_lens.sum())}


def open_trace(path: str | os.PathLike[str], *, check_data_sha256: bool = True) -> Trace:
    """Open and validate a trace folder: trace.json against its schema, the safetensors header with kconvert's
    validated reader, every tensor's dtype and shape against the metadata, and the index tensors' bounds."""
    from kconvert.schemas import validate

    root = Path(os.fsdecode(path)).expanduser()
    if not root.is_dir():
        raise InputError(f"{root}: not a trace folder (record one with `kconvert trace`)")
    meta_path = root / META_NAME
    if not meta_path.is_file():
        raise InputError(f"{root}: no {META_NAME} (is this a trace folder?)")
    raw = _read_small(meta_path)
    try:
        doc = loads_strict_json(raw, "")
    except ValueError as e:
        raise InputError(f"{META_NAME}: {e}") from None
    validate(doc, "trace", what=META_NAME)
    meta = TraceMeta.from_dict(doc)
    if any(k < 0 or k > meta.num_hidden_layers for k in meta.layers) or len(set(meta.layers)) != len(meta.layers):
        raise InputError(f"{META_NAME}: layers {meta.layers} must be distinct ids within 0..{meta.num_hidden_layers}")
    data_path = root / DATA_NAME
    if meta.data.get("file") != DATA_NAME or not data_path.is_file():
        raise InputError(f"{root}: no {DATA_NAME}")
    header = read_header(data_path, DATA_NAME)
    size = data_path.stat().st_size
    if meta.data.get("size") != size:
        raise InputError(f"{DATA_NAME}: {size} bytes, {META_NAME} records {meta.data.get('size')}")
    if check_data_sha256:
        _check_sha256(data_path, meta.data.get("sha256"))
    t = header.tensors
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
            raise InputError(f"{DATA_NAME} [{name}]: {info.dtype} {list(info.shape)}, expected {dts[0]} "
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
    trace = Trace(root, meta, hashlib.sha256(raw).hexdigest(), t, np.zeros(0), np.zeros(0), np.zeros(0),
                  np.zeros(0))
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
    return trace


def _read_small(path: Path) -> bytes:
    try:
        st = path.stat()
        if st.st_size > MAX_META_BYTES:
            raise InputError(f"{path.name}: {st.st_size} bytes is too large")
        return path.read_bytes()
    except OSError as e:
        raise InputError(f"{path.name}: cannot read: {e.strerror or e}") from None


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
