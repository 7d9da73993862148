"""Property-based fuzzing of the validated readers (issue 7, item 1).

Property everywhere: whatever bytes a stranger's checkpoint holds, only `kconvert.errors.KConvertError`
subclasses escape the readers (never a bare ValueError, TypeError, RecursionError, OSError...), a reader that
accepts an input returns something that honours the format, and through the CLI a refused input gives exit 2,
one `error:` line on stderr and never a traceback (nor the CLI's "internal error" safety net).

Targets:
- `read_header` on files written from random bytes, random JSON, and headers that lie about lengths, offsets,
  shapes and dtypes (overlaps, huge lengths, deep nesting, duplicate keys, non-UTF-8, NaN/inf, negative, bool
  and float numbers);
- `parse_index` on random bytes/JSON, and `load_folder` with an index naming hostile paths ('..', absolute,
  backslash, NUL, a symlink out of the folder, a FIFO, a directory), shards named twice, tensors in two shards,
  tensors an index names that a shard lacks and vice versa;
- `read_json_file` / `load_folder` on random config.json, `kconvert.targets.from_config` on random dicts, and
  `kconvert inspect` end to end on random configs and hostile shards.

Budget: `KCONVERT_FUZZ_EXAMPLES` (default 150) scales every target; the default keeps the whole file well under
60 s. Counts are printed by the terminal-summary hook in tests/conftest.py ("fuzz: N inputs tried for X").
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import struct
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kconvert.errors import KConvertError
from kconvert.source.checkpoint import load_folder, read_json_file
from kconvert.source.safetensors_header import DTYPE_SIZES, INDEX_NAME, parse_index, read_header
from kconvert.targets import from_config
from tests.writer_factories import draft_config, draft_tensors, write_safetensors

FUZZ_COUNTS: Counter[str] = Counter()
EXAMPLES = int(os.environ.get("KCONVERT_FUZZ_EXAMPLES", "150"))


def fuzz(scale: float = 1.0):
    return settings(max_examples=max(1, int(EXAMPLES * scale)), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much,
                                           HealthCheck.large_base_example])


def only_kconvert_errors(target: str, fn: Callable[[], Any]) -> tuple[Any, KConvertError | None]:
    """Run fn; a KConvertError is an accepted outcome, any other exception fails the test (propagates)."""
    FUZZ_COUNTS[target] += 1
    try:
        return fn(), None
    except KConvertError as e:
        assert str(e).strip() and "\n" not in str(e), f"error message must be one line: {e!r}"
        return None, e


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    from kconvert.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def assert_clean_cli(rc: int, err: str, *, refused: bool) -> None:
    assert "Traceback" not in err, err
    assert "internal error" not in err, err
    assert rc in (0, 1, 2), (rc, err)
    if refused:
        assert rc == 2, (rc, err)
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("hint:")]
        assert len(lines) == 1 and lines[0].startswith("error: "), err


# ---------------------------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------------------------

NASTY_NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=0, max_value=64),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1.0, 8.0, -0.0, 2**63, 2**64 - 1, 2**64, -1]),
    st.none(),
    st.text(max_size=3),
)
NAMES = st.one_of(
    st.sampled_from(["a", "b", "fc.weight", "d2t", "t2d", "lm_head.weight", "norm.weight", "__metadata__", ""]),
    st.text(max_size=10),  # includes control characters and surrogate-free unicode
)
DTYPES = st.one_of(st.sampled_from(sorted(DTYPE_SIZES)), st.sampled_from(["bf16", "F128", "", "I4", "BF16 "]),
                   st.integers(), st.none(), st.lists(st.just("F32"), max_size=2))
SHAPES = st.one_of(st.lists(st.integers(min_value=0, max_value=6), max_size=4),
                   st.lists(NASTY_NUMBERS, max_size=10),
                   st.sampled_from([[2**40], [2**39, 2**39], [0], [], [1] * 9]),
                   NASTY_NUMBERS, st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
OFFSETS = st.one_of(st.lists(NASTY_NUMBERS, max_size=3),
                    st.tuples(st.integers(0, 200), st.integers(0, 200)).map(list),
                    NASTY_NUMBERS)


@st.composite
def header_objects(draw) -> tuple[Any, int]:
    """A header object (mostly well-formed entries, each possibly corrupted) and the data length it implies."""
    if draw(st.integers(0, 9)) == 0:  # not even an object
        return draw(st.one_of(st.lists(st.integers(), max_size=3), NASTY_NUMBERS)), 0
    hdr: dict[str, Any] = {}
    if draw(st.booleans()):
        hdr["__metadata__"] = draw(st.one_of(
            st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
            st.dictionaries(st.text(max_size=4), NASTY_NUMBERS, max_size=2), st.none(), NASTY_NUMBERS))
    off = 0
    for _ in range(draw(st.integers(0, 5))):
        name = draw(NAMES)
        dtype = draw(st.sampled_from(sorted(DTYPE_SIZES)))
        shape = draw(st.lists(st.integers(0, 5), max_size=3))
        n = math.prod(shape) * DTYPE_SIZES[dtype]
        entry: Any = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        lie = draw(st.integers(0, 12))
        if lie == 1:
            entry["dtype"] = draw(DTYPES)
        elif lie == 2:
            entry["shape"] = draw(SHAPES)
        elif lie == 3:
            entry["data_offsets"] = draw(OFFSETS)
        elif lie == 4:  # overlap the previous tensor
            back = draw(st.integers(1, 16))
            entry["data_offsets"] = [max(0, off - back), max(0, off - back) + n]
        elif lie == 5:  # extra key or missing key
            if draw(st.booleans()):
                entry["extra"] = 1
            else:
                entry.pop(draw(st.sampled_from(["dtype", "shape", "data_offsets"])))
        elif lie == 6:
            entry = draw(NASTY_NUMBERS)
        elif lie == 7:  # a span past the end of the data
            entry["data_offsets"] = [off, off + n + draw(st.integers(1, 2**62))]
        off += n
        hdr[name] = entry
    return hdr, off


@st.composite
def safetensors_files(draw) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:  # random bytes
        return draw(st.binary(max_size=300))
    if kind == 1:  # raw JSON-ish text: deep nesting, duplicate keys, non-UTF-8, NaN/inf, huge numbers
        body = draw(st.sampled_from([
            "[" * 100_000 + "]" * 100_000,
            "{\"a\":" * 70 + "1" + "}" * 70,
            '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],'
            '"data_offsets":[0,4]}}',
            '{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}}',
            '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,Infinity]}}',
            '{"a":{"dtype":"F32","shape":[1],"data_offsets":[-Infinity,4]}}',
            '{"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}}',
            '{"a":{"dtype":"F32","shape":[' + "9" * 5000 + '],"data_offsets":[0,4]}}',
            '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}}',
            '{"a":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}}',
            '{"a":{"dtype":"F32","shape":[1],"data_offsets":[false,4]}}',
            '{"\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
            '{"a\\u0000":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
            '{"__metadata__":{"k":"v","k":"w"}}',
            '{}', '[]', '', 'null', '"x"', '{"a":1,}',
        ]))
        raw = body.encode()
        if draw(st.booleans()):
            pos = draw(st.integers(0, len(raw)))
            raw = raw[:pos] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xfe\xff"])) + raw[pos:]
        data_len = draw(st.integers(0, 64))
    else:
        obj, data_len = draw(header_objects())
        raw = json.dumps(obj, allow_nan=True).encode()  # NaN/Infinity literals pass through
        if draw(st.integers(0, 5)) == 0:
            data_len = draw(st.integers(0, data_len + 8))  # truncated data section
    raw += b" " * draw(st.integers(0, 9))
    length = len(raw)
    lie = draw(st.integers(0, 7))
    if lie == 1:
        length = draw(st.integers(0, 2**64 - 1))
    elif lie == 2:
        length = draw(st.sampled_from([2**64 - 1, 100 * 1024 * 1024 + 1, 2**63, 0, 1]))
    elif lie == 3:
        length = max(0, length + draw(st.integers(-8, 8)))
    out = struct.pack("<Q", length) + raw + draw(st.binary(min_size=data_len, max_size=data_len))
    if draw(st.integers(0, 9)) == 0:
        out = out[:draw(st.integers(0, len(out)))]  # truncated anywhere
    return out


def check_accepted_header(h, size: int) -> None:
    spans = []
    for t in h.tensors.values():
        assert t.dtype in DTYPE_SIZES
        assert all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in t.shape)
        assert h.data_start <= t.start <= t.end <= size
        assert t.end - t.start == math.prod(t.shape) * DTYPE_SIZES[t.dtype]
        if t.end > t.start:
            spans.append((t.start, t.end))
    spans.sort()
    for (a0, e0), (a1, _) in zip(spans, spans[1:]):
        assert a1 >= e0, "overlapping spans accepted"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in h.metadata.items())


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# ---------------------------------------------------------------------------------------------------------------
# 1a. safetensors headers
# ---------------------------------------------------------------------------------------------------------------

@fuzz(3)
@given(blob=safetensors_files())
def test_fuzz_read_header(scratch: Path, blob: bytes) -> None:
    p = scratch / "fuzz.safetensors"
    p.write_bytes(blob)
    h, err = only_kconvert_errors("read_header", lambda: read_header(p, "fuzz.safetensors"))
    if err is not None:
        assert str(err).startswith("fuzz.safetensors"), f"error must name the file: {err}"
    else:
        check_accepted_header(h, len(blob))




def _draft_folder(root: Path) -> Path:
    """A valid tiny draft: config.json and one shard."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(draft_config()))
    write_safetensors(root / "model.safetensors", draft_tensors(), {"format": "pt"})
    return root


@fuzz(0.4)
@given(blob=safetensors_files())
def test_fuzz_cli_inspect_hostile_shard(scratch: Path, blob: bytes) -> None:
    """End to end: a checkpoint whose shard is hostile is refused in one line (or inspected, if valid)."""
    folder = scratch / "cli_shard"
    if not folder.exists():
        _draft_folder(folder)
    (folder / "model.safetensors").write_bytes(blob)
    p = folder / "model.safetensors"
    h, err = only_kconvert_errors("inspect CLI, hostile shard", lambda: read_header(p, "model.safetensors"))
    rc, _, stderr = run_cli(["inspect", str(folder)])
    assert_clean_cli(rc, stderr, refused=err is not None)
    if err is not None:
        assert "model.safetensors" in stderr


# ---------------------------------------------------------------------------------------------------------------
# 1b. index
# ---------------------------------------------------------------------------------------------------------------

SHARD_A = "model-00001-of-00002.safetensors"
SHARD_B = "model-00002-of-00002.safetensors"
TENSORS_A = ["a.x", "a.y"]
TENSORS_B = ["b.x", "b.y"]
SHARD_PATHS = st.one_of(
    st.sampled_from([
        SHARD_A, SHARD_B, SHARD_A, SHARD_B,  # weights: mostly valid
        f"./{SHARD_A}",  # the same shard under a second name
        f"sub/../{SHARD_A}", f"../{SHARD_A}", "..", ".", "", "/etc/passwd", f"/{SHARD_A}", "C:/x.safetensors",
        f"sub\\{SHARD_A}", f"{SHARD_A}\x00.txt", f"{SHARD_A}/", "missing.safetensors", "sub", "sub/c.safetensors",
        ".hidden/escape.safetensors", "linkdir/outside.safetensors", "loop.safetensors", "fifo.safetensors",
        "config.json", INDEX_NAME, "sub//c.safetensors", "~/x.safetensors",
    ]),
    st.text(max_size=12), st.integers(), st.none(), st.lists(st.just(SHARD_A), max_size=2),
)


@st.composite
def index_docs(draw) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        return json.dumps(draw(st.one_of(NASTY_NUMBERS, st.lists(st.integers(), max_size=2),
                                         st.dictionaries(st.text(max_size=3), NASTY_NUMBERS, max_size=2),
                                         st.fixed_dictionaries({"weight_map": NASTY_NUMBERS})))).encode()
    wm: dict[str, Any] = {n: SHARD_A for n in TENSORS_A} | {n: SHARD_B for n in TENSORS_B}
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.integers(0, 3))
        name = draw(st.sampled_from(TENSORS_A + TENSORS_B + ["ghost", "c.x"]) | st.text(max_size=6))
        if op == 0 and wm:  # drop a tensor the shard holds
            wm.pop(draw(st.sampled_from(sorted(wm))), None)
        else:  # (re)place a tensor anywhere
            wm[name] = draw(SHARD_PATHS)
    raw = json.dumps({"metadata": {"total_size": draw(NASTY_NUMBERS)}, "weight_map": wm}).encode()
    if kind == 2:  # duplicate key in the weight map, written by hand
        raw = raw.replace(b'"weight_map": {', b'"weight_map": {"a.x": "' + SHARD_B.encode() + b'", ', 1)
    elif kind == 3:
        pos = draw(st.integers(0, len(raw)))
        raw = raw[:pos] + b"\xff" + raw[pos:]
    return raw


@pytest.fixture(scope="module")
def index_folder(tmp_path_factory) -> Path:
    """A two-shard draft plus traps an index may name: a sub folder holding a third shard, a hidden symlink
    out of the folder, a symlinked folder out of it, a FIFO. The index is rewritten for every example."""
    root = tmp_path_factory.mktemp("index")
    outside = tmp_path_factory.mktemp("outside")
    write_safetensors(outside / "outside.safetensors", {"o.x": ("F32", (2,), b"\0" * 8)})
    folder = root / "draft"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(draft_config()))
    write_safetensors(folder / SHARD_A, {n: ("F32", (2,), b"\0" * 8) for n in TENSORS_A})
    write_safetensors(folder / SHARD_B, {n: ("F32", (2,), b"\0" * 8) for n in TENSORS_B})
    write_safetensors(folder / "sub" / "c.safetensors", {"c.x": ("F32", (2,), b"\0" * 8)})
    (folder / ".hidden").mkdir()
    os.symlink(outside / "outside.safetensors", folder / ".hidden" / "escape.safetensors")
    os.symlink(outside, folder / "linkdir")
    os.mkfifo(folder / ".hidden" / "fifo")
    os.symlink(".hidden/fifo", folder / ".hidden" / "fifo-link")
    return folder


@fuzz(2)
@given(raw=index_docs())
def test_fuzz_parse_index(raw: bytes) -> None:
    wm, err = only_kconvert_errors("parse_index", lambda: parse_index(raw))
    if err is None:
        assert isinstance(wm, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items())


@fuzz(2)
@given(raw=index_docs(), fifo=st.booleans())
def test_fuzz_load_folder_with_index(index_folder: Path, raw: bytes, fifo: bool) -> None:
    if fifo:  # point the index at a FIFO inside the folder (through a hidden name the listing skips)
        raw = raw.replace(b"fifo.safetensors", b".hidden/fifo-link")
    (index_folder / INDEX_NAME).write_bytes(raw)
    ck, err = only_kconvert_errors("load_folder with index", lambda: load_folder(index_folder, ref="draft"))
    if err is not None:
        return
    real_root = index_folder.resolve()
    wm = ck.index
    assert wm is not None and set(wm) == set(ck.tensors)
    for name, t in ck.tensors.items():
        assert wm[name] == t.file
        assert real_root in (index_folder / t.file).resolve().parents, f"{t.file} escapes the folder"
    assert "o.x" not in ck.tensors


# ---------------------------------------------------------------------------------------------------------------
# 1c. config.json and target configs
# ---------------------------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**66), max_value=2**66),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8)),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
CONFIG_KEYS = ["architectures", "model_type", "hidden_size", "num_hidden_layers", "vocab_size", "draft_vocab_size",
               "text_config", "torch_dtype", "dtype", "rope_theta", "rope_scaling", "rope_parameters",
               "kv_lora_rank", "q_lora_rank", "head_dim", "num_attention_heads", "num_key_value_heads",
               "max_position_embeddings", "tie_word_embeddings", "eagle_config", "auto_map", "trust_remote_code",
               "transformer_layer_config", "speculators_config", "speculators_model_type",
               "eagle_aux_hidden_state_layer_ids", "intermediate_size", "vision_config", "target_hidden_size",
               "norm_before_residual", "rms_norm_eps", "_torchspec_version"]
GOOD_VALUES = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8, "num_hidden_layers": 1,
               "vocab_size": 64, "draft_vocab_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
               "intermediate_size": 16, "torch_dtype": "bfloat16", "head_dim": 4,
               "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}


@st.composite
def config_dicts(draw, depth: int = 0) -> dict[str, Any]:
    """Plausible configs (known keys, half of them well-typed) with random values mixed in."""
    cfg: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(CONFIG_KEYS), max_size=14, unique=True)):
        if key in GOOD_VALUES and draw(st.booleans()):
            cfg[key] = GOOD_VALUES[key]
        elif key in ("text_config", "transformer_layer_config") and depth == 0 and draw(st.booleans()):
            cfg[key] = draw(config_dicts(depth=1))
        else:
            cfg[key] = draw(JSON_VALUES)
    cfg.update(draw(st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=2)))
    return cfg


@st.composite
def config_files(draw) -> bytes:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        return json.dumps(draw(JSON_VALUES), allow_nan=True).encode()
    if kind == 2:
        return draw(st.sampled_from([b"[" * 10_000, b'{"a":1,"a":2}', b"\xef\xbb\xbf{}", b'{"a":NaN}',
                                     b'{"a":' * 65 + b"1" + b"}" * 65, b'{"a":"\xff"}', b"", b"{}"]))
    return json.dumps(draw(config_dicts()), allow_nan=True).encode()


@fuzz(1.5)
@given(raw=config_files())
def test_fuzz_read_json_and_load_folder_config(scratch: Path, raw: bytes) -> None:
    folder = scratch / "cfg"
    if not folder.exists():
        _draft_folder(folder)
    (folder / "config.json").write_bytes(raw)
    only_kconvert_errors("read_json_file", lambda: read_json_file(folder / "config.json", "config.json"))
    ck, err = only_kconvert_errors("load_folder, random config.json", lambda: load_folder(folder, ref="cfg"))
    if err is None:
        assert isinstance(ck.config, dict)


def check_target(t) -> None:
    def opt_int(v):
        return v is None or (isinstance(v, int) and not isinstance(v, bool))

    for k in ("num_hidden_layers", "hidden_size", "vocab_size"):
        v = getattr(t, k)
        assert isinstance(v, int) and not isinstance(v, bool), (k, v)
    for k in ("max_position_embeddings", "num_attention_heads", "num_key_value_heads", "head_dim"):
        assert opt_int(getattr(t, k)), k
    assert isinstance(t.architectures, list) and all(isinstance(a, str) for a in t.architectures), t.architectures
    for k in ("model_type", "text_model_type", "torch_dtype"):
        assert getattr(t, k) is None or isinstance(getattr(t, k), str), (k, getattr(t, k))
    assert t.rope_theta is None or (isinstance(t.rope_theta, (int, float)) and not isinstance(t.rope_theta, bool))
    assert t.rope_scaling is None or isinstance(t.rope_scaling, dict)
    assert t.mla is None or isinstance(t.mla, dict)
    assert t.tie_word_embeddings is None or isinstance(t.tie_word_embeddings, bool)
    t.summary()


@st.composite
def target_dicts(draw) -> Any:
    """Target configs that mostly pass the required-keys gate, so the rest of from_config is reached."""
    t = draw(config_dicts())
    for k, v in (("num_hidden_layers", 8), ("hidden_size", 64), ("vocab_size", 512)):
        if draw(st.integers(0, 9)):
            t[k] = v
    if draw(st.booleans()):
        return t
    outer = draw(config_dicts())
    outer["text_config"] = t
    return outer


@fuzz(2)
@given(cfg=st.one_of(target_dicts(), config_dicts(), JSON_VALUES))
def test_fuzz_target_from_config(cfg: Any) -> None:
    t, err = only_kconvert_errors("target.from_config", lambda: from_config(cfg, name="t", origin="folder"))
    if err is None:
        check_target(t)


@fuzz(0.6)
@given(cfg=config_dicts())
def test_fuzz_cli_inspect_random_config(scratch: Path, cfg: dict) -> None:
    """End to end over formats/ and rules/: a random (but JSON-object) config with valid tensors never
    produces a traceback or an internal error; inspect reports findings (exit 0/1) or refuses (exit 2)."""
    folder = scratch / "cli_cfg"
    if not folder.exists():
        _draft_folder(folder)
    if cfg.get("architectures") and not isinstance(cfg["architectures"], list):
        # Known bug outside the readers (kconvert/formats/speculators.py iterates `architectures`), pinned by
        # test_architectures_not_a_list_is_refused_cleanly below; drawn elsewhere so the rest stays fuzzed.
        cfg["architectures"] = ["LlamaForCausalLMEagle3"]
    (folder / "config.json").write_text(json.dumps(cfg, allow_nan=True))
    FUZZ_COUNTS["inspect CLI, random config"] += 1
    rc, _, stderr = run_cli(["inspect", str(folder), "--json"])
    assert_clean_cli(rc, stderr, refused=rc == 2)


@fuzz(0.3)
@given(cfg=target_dicts())
def test_fuzz_cli_inspect_random_target(scratch: Path, cfg: Any) -> None:
    """`inspect DRAFT --target FOLDER` with a random target config.json: findings or one-line refusal."""
    draft = scratch / "cli_tgt_draft"
    if not draft.exists():
        _draft_folder(draft)
    target = scratch / "cli_tgt"
    target.mkdir(exist_ok=True)
    (target / "config.json").write_text(json.dumps(cfg, allow_nan=True))
    FUZZ_COUNTS["inspect CLI, random target config"] += 1
    rc, _, stderr = run_cli(["inspect", str(draft), "--target", str(target), "--json"])
    assert_clean_cli(rc, stderr, refused=rc == 2)


@pytest.mark.parametrize("archs", [True, 5, 1.5])
def test_architectures_not_a_list_is_refused_cleanly(tmp_path: Path, archs: Any) -> None:
    folder = _draft_folder(tmp_path / "d")
    (folder / "config.json").write_text(json.dumps(draft_config() | {"architectures": archs}))
    rc, _, stderr = run_cli(["inspect", str(folder)])
    assert_clean_cli(rc, stderr, refused=rc == 2)


# Found by the fuzz campaign and a shape sweep: shapes a valid header may declare that rules did not expect.
ODD_SHAPE_BUGS = [
    ("midlayer.self_attn.q_proj.weight", (0,), "rules/shapes.py fc_width IndexError"),
    ("midlayer.mlp.up_proj.weight", (), "rules/attention.py attention_shapes IndexError"),
    ("d2t", (), "rules/vocab_mapping.py (then vocab.py:20) IndexError"),
    ("d2t", (3, 0), "rules/vocab_mapping.py (then vocab.py:22) numpy broadcast ValueError"),
    ("t2d", (), "rules/vocab_mapping.py (then vocab.py:30) IndexError"),
    ("lm_head.weight", (), "formats/torchspec.py:25 IndexError (no d2t, vocab_size set)"),
]


@pytest.mark.parametrize("name,shape,where", ODD_SHAPE_BUGS, ids=[b[2].split()[0] + "-" + b[0] for b in ODD_SHAPE_BUGS])
def test_odd_shapes_of_known_tensors(tmp_path: Path, name: str, shape: tuple, where: str) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    t = draft_tensors()
    dt = t[name][0]
    t[name] = (dt, shape, b"\1" * (math.prod(shape) * {"BF16": 2, "I64": 8, "BOOL": 1}[dt]))
    cfg = draft_config()
    if name == "lm_head.weight":  # torchspec.detect's full-vocabulary test runs only without d2t
        t.pop("d2t")
        t.pop("t2d")
    (folder / "config.json").write_text(json.dumps(cfg))
    write_safetensors(folder / "model.safetensors", t)
    rc, _, stderr = run_cli(["inspect", str(folder)])
    assert_clean_cli(rc, stderr, refused=rc == 2)
