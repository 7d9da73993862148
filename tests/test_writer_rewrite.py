"""kconvert/writer/rewrite.py against facts outside it (issue #30: the survivors of its mutation run).

Expected values come from: the safetensors format's little-endian integer and float encodings
(https://github.com/huggingface/safetensors README "Format": "little-endian"), written out byte by byte here;
IEEE 754 binary32/binary16 bit patterns and bfloat16 = the top 16 bits of binary32 with round-to-nearest-even
(the patterns are derived by hand in comments; a NaN's quiet bit is the top mantissa bit, IEEE 754-2008 6.2.1);
the integer ranges of two's-complement and unsigned 16/32/64-bit integers; vLLM's and SGLang's reading of `d2t` as
offsets (target id = draft id + d2t[draft id]: docs/formats-and-engines.md#vllm-032-loading-rules, vllm llama_eagle3.py) and `t2d` as a
boolean mask over the target vocabulary; and byte spans of files written here. All in-process, milliseconds each.
"""
from __future__ import annotations

import os
import struct
import warnings

import numpy as np
import pytest

from kconvert.errors import InputError
from kconvert.source.safetensors_header import TensorInfo
from kconvert.writer import rewrite
from kconvert.writer.rewrite import (
    bf16_to_f32,
    cast_chunks,
    d2t_offsets,
    decode_ints,
    encode_ints,
    f32_to_bf16,
    range_chunks,
    read_exact,
    reselect_rows,
    t2d_mask,
    target_ids,
)


def _u16(*bits: int) -> np.ndarray:
    return np.array(bits, dtype=np.uint16)


def _f32_from_bits(*bits: int) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(np.float32)


# --- read_exact / range_chunks: byte spans of a file ---------------------------------------------------------------

def test_read_exact_reads_the_span(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    fd = os.open(p, os.O_RDONLY)
    try:
        assert read_exact(fd, 3, 4, "f") == b"3456"
        assert read_exact(fd, 0, 0, "f") == b""
    finally:
        os.close(fd)


def test_read_exact_on_a_short_file_says_how_many_bytes_are_missing(tmp_path):
    """10 bytes on disk, 10 asked from offset 4: 6 are there, 4 missing."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    fd = os.open(p, os.O_RDONLY)
    try:
        with pytest.raises(InputError) as e:
            read_exact(fd, 4, 10, "model.safetensors [fc.weight]")
    finally:
        os.close(fd)
    assert e.value.message == ("model.safetensors [fc.weight]: file ended 4 bytes early "
                               "(truncated while reading?)")


def test_read_exact_carries_on_after_short_reads(tmp_path, monkeypatch):
    """POSIX pread(2) may transfer fewer bytes than asked ("The value returned may be less than nbyte"), and Linux
    caps one read at 0x7ffff000 bytes (read(2) NOTES): here every read returns at most 3 bytes, and the 7 bytes
    from offset 2 still come back whole and in order."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    real = os.preadv
    calls = []

    def short(fd, buffers, offset):
        calls.append(offset)
        if len(calls) > 20:
            raise AssertionError("read_exact does not advance")
        return real(fd, [memoryview(buffers[0])[:3]], offset)

    monkeypatch.setattr(rewrite.os, "preadv", short)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert read_exact(fd, 2, 7, "f") == b"2345678"
    finally:
        os.close(fd)
    assert calls == [2, 5, 8]


def test_range_chunks_yields_the_span_in_chunks_of_at_most_chunk_bytes(tmp_path):
    """[3, 14) of 0..f in chunks of 4: '3456', '789a', 'bcd' (11 bytes, the last chunk shorter)."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789abcdef")
    assert list(range_chunks(p, 3, 14, "f", chunk=4)()) == [b"3456", b"789a", b"bcd"]
    assert list(range_chunks(p, 3, 14, "f", chunk=11)()) == [b"3456789abcd"]
    assert list(range_chunks(p, 5, 5, "f", chunk=4)()) == []


def test_range_chunks_default_chunk_is_8_mib(tmp_path):
    """rewrite.CHUNK_BYTES is 8 MiB (its definition; bounded memory per chunk): a 9 MiB span is 8 MiB + 1 MiB."""
    p = tmp_path / "f"
    with open(p, "wb") as f:
        f.truncate(9 << 20)
    assert [len(c) for c in range_chunks(p, 0, 9 << 20, "f")()] == [8 << 20, 1 << 20]


def test_range_chunks_past_the_end_is_an_input_error_naming_the_tensor(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    with pytest.raises(InputError, match=r"^w: file ended 2 bytes early"):
        list(range_chunks(p, 4, 12, "w", chunk=100)())


def test_range_chunks_reads_lazily_and_closes_its_descriptor(tmp_path):
    """Nothing is opened until iterated; after the last chunk the descriptor is closed (no fd left open)."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    before = set(os.listdir("/proc/self/fd"))
    src = range_chunks(p, 0, 10, "f", chunk=3)
    assert set(os.listdir("/proc/self/fd")) == before
    assert b"".join(src()) == b"0123456789"
    assert set(os.listdir("/proc/self/fd")) == before


# --- decode_ints / encode_ints: safetensors' little-endian integers ------------------------------------------------

@pytest.mark.parametrize("dtype, raw, values", [
    ("I64", b"\xff" * 8 + b"\x05" + b"\x00" * 7, [-1, 5]),
    ("I32", b"\xff\xff\xff\xff\x02\x00\x00\x00", [-1, 2]),
    ("U32", b"\xff\xff\xff\xff\x02\x00\x00\x00", [4294967295, 2]),
    ("U64", b"\xff\xff\xff\xff\xff\xff\xff\x7f", [2**63 - 1]),
    ("I16", b"\xff\xff\x00\x01", [-1, 256]),
    ("U16", b"\xff\xff\x00\x01", [65535, 256]),
])
def test_decode_ints_reads_little_endian_integers_as_int64(dtype, raw, values):
    got = decode_ints(raw, dtype)
    assert got.dtype == np.int64 and got.tolist() == values


@pytest.mark.parametrize("dtype", ["F32", "BF16", "BOOL", "U8", "I8"])
def test_decode_ints_refuses_other_dtypes(dtype):
    with pytest.raises(InputError) as e:
        decode_ints(b"\x00" * 4, dtype)
    assert e.value.message == f"expected an integer tensor, found {dtype}"


@pytest.mark.parametrize("dtype, values, raw", [
    ("I64", [-1, 5], b"\xff" * 8 + b"\x05" + b"\x00" * 7),
    ("I32", [-1, 2], b"\xff\xff\xff\xff\x02\x00\x00\x00"),
    ("U32", [4294967295], b"\xff\xff\xff\xff"),
    ("I16", [-1, 256], b"\xff\xff\x00\x01"),
    ("U16", [65535], b"\xff\xff"),
    ("U64", [2**40], b"\x00\x00\x00\x00\x00\x01\x00\x00"),
])
def test_encode_ints_writes_little_endian_bytes(dtype, values, raw):
    assert encode_ints(np.array(values, dtype=np.int64), dtype) == raw


@pytest.mark.parametrize("dtype, lo, hi", [
    ("I32", -2**31, 2**31 - 1), ("I16", -2**15, 2**15 - 1), ("U16", 0, 2**16 - 1), ("U32", 0, 2**32 - 1),
])
def test_encode_ints_takes_the_whole_range_and_refuses_one_past_either_end(dtype, lo, hi):
    """Two's-complement / unsigned ranges: [lo, hi] fit, lo - 1 and hi + 1 do not."""
    assert len(encode_ints(np.array([lo, hi], dtype=np.int64), dtype)) == 2 * {"I16": 2, "U16": 2}.get(dtype, 4)
    for bad in (lo - 1, hi + 1):
        with pytest.raises(InputError) as e:
            encode_ints(np.array([0, bad], dtype=np.int64), dtype)
        assert e.value.message == f"values do not fit {dtype}"


def test_encode_ints_of_nothing_is_no_bytes():
    assert encode_ints(np.array([], dtype=np.int64), "I32") == b""


# --- d2t / t2d: vLLM's and SGLang's reading (target id = draft id + d2t[draft id]) -------------------------------

def test_d2t_offsets_subtracts_the_draft_id():
    """Absolute target ids [5, 7, 100] for draft ids 0, 1, 2: offsets 5-0, 7-1, 100-2."""
    assert d2t_offsets(np.array([5, 7, 100], dtype=np.int64)).tolist() == [5, 6, 98]


def test_t2d_mask_marks_the_target_ids_the_offsets_reach():
    """Offsets [5, 6, 98] reach target ids 5, 7, 100: a 101-long mask true at exactly those."""
    m = t2d_mask(np.array([5, 6, 98], dtype=np.int64), 101)
    assert m.dtype == np.bool_ and m.shape == (101,)
    assert np.flatnonzero(m).tolist() == [5, 7, 100]


def test_target_ids_are_draft_id_plus_offset_inside_the_vocabulary():
    """Offsets [0, 0, 97] -> ids 0, 1, 99: 0 and vocab-1 are both inside a vocabulary of 100."""
    assert target_ids(np.array([0, 0, 97], dtype=np.int64), 100, "x").tolist() == [0, 1, 99]


@pytest.mark.parametrize("offsets, first_bad, its_id", [
    ([0, 99, 0], 1, 100),       # id == vocab: one past the last row
    ([0, -2, 500], 1, -1),      # a negative id, before a second bad one (the first is named)
    ([-1], 0, -1),
])
def test_target_ids_outside_the_vocabulary_name_the_first_bad_draft_id(offsets, first_bad, its_id):
    with pytest.raises(InputError) as e:
        target_ids(np.array(offsets, dtype=np.int64), 100, "re-select lm_head.weight from /t")
    assert e.value.message == (f"re-select lm_head.weight from /t: draft id {first_bad} maps to target id {its_id}, "
                               "outside a vocabulary of 100")


# --- reselect_rows: rows of a 2-D tensor by byte range ---------------------------------------------------------------

def _lm_head_file(tmp_path, vocab: int, hidden: int, dtype: str = "<f4", head: bytes = b"HEADER--"):
    """A file holding `head` then a [vocab, hidden] matrix whose row r is filled with r."""
    rows = np.repeat(np.arange(vocab, dtype=np.float32)[:, None], hidden, axis=1).astype(dtype)
    p = tmp_path / "lm.bin"
    p.write_bytes(head + rows.tobytes())
    size = np.dtype(dtype).itemsize
    info = TensorInfo(name="lm_head.weight", file="lm.bin", dtype={"<f4": "F32", "<f2": "F16"}[dtype],
                      shape=(vocab, hidden), start=len(head), end=len(head) + vocab * hidden * size)
    return p, info


def test_reselect_rows_reads_the_rows_asked_in_their_order(tmp_path):
    """ids [3, 4, 5, 9, 2, 0]: rows filled with those numbers, in that order (runs 3-5 and single rows)."""
    p, info = _lm_head_file(tmp_path, 12, 4)
    ids = np.array([3, 4, 5, 9, 2, 0], dtype=np.int64)
    out = np.frombuffer(b"".join(reselect_rows(p, info, ids)()), "<f4").reshape(6, 4)
    assert out[:, 0].tolist() == [3, 4, 5, 9, 2, 0] and (out == out[:, :1]).all()


def test_reselect_rows_chunks_hold_whole_rows(tmp_path):
    """Rows of 4 x F32 = 16 bytes; a 40-byte chunk holds 2 whole rows: 5 ids -> chunks of 2, 2, 1 rows."""
    p, info = _lm_head_file(tmp_path, 12, 4)
    ids = np.array([1, 2, 3, 7, 8], dtype=np.int64)
    pieces = list(reselect_rows(p, info, ids, chunk=40)())
    assert [len(x) for x in pieces] == [32, 32, 16]
    assert [np.frombuffer(x, "<f4")[::4].tolist() for x in pieces] == [[1, 2], [3, 7], [8]]


def test_reselect_rows_with_a_chunk_smaller_than_a_row_yields_one_row_a_chunk(tmp_path):
    p, info = _lm_head_file(tmp_path, 12, 4)
    pieces = list(reselect_rows(p, info, np.array([6, 5], dtype=np.int64), chunk=10)())
    assert [np.frombuffer(x, "<f4").tolist() for x in pieces] == [[6.0] * 4, [5.0] * 4]


def test_reselect_rows_of_one_byte_rows(tmp_path):
    """A [6, 1] U8 matrix: rows of 1 byte; a chunk of 3 bytes holds 3 rows."""
    p = tmp_path / "u8.bin"
    p.write_bytes(b"HH" + bytes([10, 11, 12, 13, 14, 15]))
    info = TensorInfo(name="m", file="u8.bin", dtype="U8", shape=(6, 1), start=2, end=8)
    pieces = list(reselect_rows(p, info, np.array([5, 4, 3, 0, 1], dtype=np.int64), chunk=3)())
    assert pieces == [bytes([15, 14, 13]), bytes([10, 11])]


def test_reselect_rows_default_chunk_is_8_mib(tmp_path):
    """Rows of 1 MiB (a [12, 262144] F32 matrix, sparse on disk): 8 rows fit one 8 MiB chunk, 10 ids = 8 + 2."""
    p = tmp_path / "big.bin"
    with open(p, "wb") as f:
        f.truncate(12 << 20)
    info = TensorInfo(name="m", file="big.bin", dtype="F32", shape=(12, 1 << 18), start=0, end=12 << 20)
    pieces = list(reselect_rows(p, info, np.arange(10, dtype=np.int64))())
    assert [len(x) for x in pieces] == [8 << 20, 2 << 20]


def test_reselect_rows_of_an_empty_matrix_reads_nothing(tmp_path):
    """A [0, 4] tensor has no rows: no id can be asked (target_ids refuses every id of a 0-row vocabulary), and
    re-selecting none of them yields no bytes."""
    p = tmp_path / "e.bin"
    p.write_bytes(b"HH")
    info = TensorInfo(name="m", file="e.bin", dtype="F32", shape=(0, 4), start=2, end=2)
    assert list(reselect_rows(p, info, np.array([], dtype=np.int64))()) == []


def test_reselect_rows_past_the_end_of_a_truncated_file_names_file_and_tensor(tmp_path):
    p, info = _lm_head_file(tmp_path, 12, 4)
    with open(p, "r+b") as f:
        f.truncate(8 + 10 * 16)  # rows 10 and 11 gone
    with pytest.raises(InputError) as e:
        list(reselect_rows(p, info, np.array([11], dtype=np.int64))())
    assert e.value.message == "lm.bin [lm_head.weight]: file ended 16 bytes early (truncated while reading?)"


def test_reselect_rows_closes_its_descriptor(tmp_path):
    p, info = _lm_head_file(tmp_path, 12, 4)
    before = set(os.listdir("/proc/self/fd"))
    b"".join(reselect_rows(p, info, np.array([1], dtype=np.int64))())
    assert set(os.listdir("/proc/self/fd")) == before


# --- f32 <-> bf16: the top half of binary32, rounded to nearest even -------------------------------------------------

@pytest.mark.parametrize("f32_bits, bf16_bits", [
    (0x3F800000, 0x3F80),   # 1.0
    (0x3F808000, 0x3F80),   # 1 + 2^-8: exactly half way, 0x3F80 is even: down
    (0x3F818000, 0x3F82),   # 1 + 3*2^-8: half way between 0x3F81 (odd) and 0x3F82 (even): up
    (0x3F808001, 0x3F81),   # just above half: up
    (0x3F807FFF, 0x3F80),   # just below half: down
    (0xC0200000, 0xC020),   # -2.5
    (0x7F800000, 0x7F80),   # +inf
    (0x7F7FFFFF, 0x7F80),   # largest binary32 rounds past bf16's largest finite (0x7F7F) to inf
    (0x00000001, 0x0000),   # smallest subnormal rounds to +0
])
def test_f32_to_bf16_rounds_to_nearest_even(f32_bits, bf16_bits):
    assert f32_to_bf16(_f32_from_bits(f32_bits)).tolist() == [bf16_bits]


@pytest.mark.parametrize("f32_bits, bf16_bits", [
    (0x7FC00000, 0x7FC0),   # the quiet NaN stays itself
    (0x7F800001, 0x7FC0),   # a signalling NaN whose payload sits in the low half: rounding would make it +inf
    (0xFF800001, 0xFFC0),   # the same, negative
    (0x7FFFFFFF, 0x7FFF),   # all-ones payload: rounding would carry into the sign bit
])
def test_f32_to_bf16_keeps_nan_a_quiet_nan_with_the_sign_and_high_payload(f32_bits, bf16_bits):
    assert f32_to_bf16(_f32_from_bits(f32_bits)).tolist() == [bf16_bits]


def test_f32_to_bf16_returns_uint16_bits():
    assert f32_to_bf16(np.array([1.0], np.float32)).dtype == np.uint16


def test_bf16_to_f32_puts_the_bits_in_the_top_half():
    got = bf16_to_f32(_u16(0x3F80, 0xC020, 0x0001, 0x7F80))
    assert got.dtype == np.float32
    assert got.view(np.uint32).tolist() == [0x3F800000, 0xC0200000, 0x00010000, 0x7F800000]


# --- cast_chunks: F32/F16/BF16 bytes, re-aligned to whole elements --------------------------------------------------

def _src(*pieces):
    return lambda: iter(pieces)


# 1.0 and -2.5 in each encoding (little-endian): binary32 0x3F800000 / 0xC0200000, binary16 0x3C00 / 0xC100,
# bfloat16 0x3F80 / 0xC020.
F32 = struct.pack("<II", 0x3F800000, 0xC0200000)
F16 = struct.pack("<HH", 0x3C00, 0xC100)
BF16 = struct.pack("<HH", 0x3F80, 0xC020)


@pytest.mark.parametrize("src, dst, data, want", [
    ("F32", "BF16", F32, BF16), ("F32", "F16", F32, F16), ("BF16", "F32", BF16, F32),
    ("F16", "F32", F16, F32), ("F16", "BF16", F16, BF16), ("BF16", "F16", BF16, F16), ("F32", "F32", F32, F32),
])
def test_cast_chunks_converts_the_encodings(src, dst, data, want):
    assert b"".join(cast_chunks(_src(data), src, dst)()) == want


def test_cast_chunks_joins_elements_split_across_chunks():
    """F32 [1.0, -2.5] arriving as 3 + 1 + 4 bytes (memoryview pieces too): one element a whole chunk later."""
    pieces = [F32[:3], memoryview(F32[3:4]), F32[4:]]
    out = list(cast_chunks(_src(*pieces), "F32", "BF16")())
    assert out == [BF16[:2], BF16[2:]]


def test_cast_chunks_yields_nothing_for_a_chunk_with_no_whole_element():
    out = list(cast_chunks(_src(F32[:2], F32[2:6], F32[6:]), "F32", "BF16")())
    assert b"".join(out) == BF16 and out == [BF16[:2], BF16[2:]]


@pytest.mark.parametrize("src, data, left", [("F32", F32 + b"\x01\x02\x03", 3), ("F16", F16 + b"\x01", 1)])
def test_cast_chunks_refuses_trailing_bytes(src, data, left):
    with pytest.raises(InputError) as e:
        list(cast_chunks(_src(data), src, "BF16")())
    assert e.value.message == f"cast {src}->BF16: {left} trailing bytes are not a whole element"


def test_cast_f32_to_f16_overflow_is_inf_without_a_warning():
    """70000 > binary16's largest finite 65504: +inf (0x7C00); the overflow is expected, not warned about."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = b"".join(cast_chunks(_src(struct.pack("<f", 70000.0)), "F32", "F16")())
    assert out == struct.pack("<H", 0x7C00)


def test_float_dtypes_are_the_three_cast_names():
    """The manual's `--cast bf16` and the cast op's refusal message name F32, F16 and BF16."""
    assert rewrite.FLOAT_DTYPES == ("F32", "F16", "BF16")


def test_every_float_encoding_is_decoded_to_float32():
    # a cast goes through float32 (the widest of the three, so every F16 and BF16 value is exact there) one chunk
    # at a time: F16 0x3C00 = 1.0, 0xC000 = -2.0, 0x0001 = 2^-24 (the smallest subnormal); BF16 0x3F80 = 1.0,
    # 0xC020 = -2.5; F32 0x3F800000 = 1.0
    f16 = rewrite._to_f32(_u16(0x3C00, 0xC000, 0x0001).tobytes(), "F16")
    bf16 = rewrite._to_f32(_u16(0x3F80, 0xC020).tobytes(), "BF16")
    f32 = rewrite._to_f32(struct.pack("<I", 0x3F800000), "F32")
    assert (f16.dtype, bf16.dtype, f32.dtype) == (np.dtype(np.float32),) * 3
    assert f16.tolist() == [1.0, -2.0, 2.0 ** -24] and bf16.tolist() == [1.0, -2.5] and f32.tolist() == [1.0]
