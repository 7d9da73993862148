"""kconvert's one safetensors header writer (kconvert/writer/header.py) writes, byte for byte, the header the
safetensors library writes for the same tensors in the same layout: the oracle is `safetensors.numpy.save`."""
from __future__ import annotations

import json
import struct

import numpy as np
from safetensors.numpy import save

from kconvert.writer.header import safetensors_header


def _library_header(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None) -> tuple[bytes, dict]:
    blob = save(tensors, metadata=metadata)
    n = struct.unpack("<Q", blob[:8])[0]
    return blob[: 8 + n], json.loads(blob[8: 8 + n])


def test_the_header_is_the_one_safetensors_writes_including_metadata_padding_and_utf8_names():
    tensors = {"a": np.zeros((2, 3), np.float32), "b": np.arange(5, dtype=np.int64), "é.weight": np.ones(1, np.float16)}
    for metadata in ({"format": "pt"}, None):
        expected, parsed = _library_header(tensors, metadata)
        # the layout safetensors chose (its own order of the tensors), given to ours as the order to lay out
        order = sorted((k for k in parsed if k != "__metadata__"), key=lambda k: parsed[k]["data_offsets"][0])
        entries = [(k, parsed[k]["dtype"], parsed[k]["shape"], parsed[k]["data_offsets"][1] - parsed[k]["data_offsets"][0])
                   for k in order]
        assert safetensors_header(entries, metadata) == expected


def test_every_padding_length_and_an_empty_tensor_match_the_library():
    """Names of 1 to 8 characters give JSON of every length modulo 8: the space padding (0 to 7 bytes) and the
    length prefix must be the library's for each; a zero-size tensor has an empty [begin, begin] span."""
    for k in range(1, 9):
        name = "w" * k
        tensors = {name: np.arange(3, dtype=np.int32), "z": np.zeros((0,), np.float32)}
        expected, parsed = _library_header(tensors, None)
        order = sorted((t for t in parsed), key=lambda t: (parsed[t]["data_offsets"][0], parsed[t]["data_offsets"][1]))
        entries = [(t, parsed[t]["dtype"], parsed[t]["shape"], parsed[t]["data_offsets"][1] - parsed[t]["data_offsets"][0])
                   for t in order]
        assert safetensors_header(entries, None) == expected, k
    assert safetensors_header([], None) == struct.pack("<Q", 8) + b"{}      "  # '{}' padded to 8 bytes


def test_an_empty_metadata_mapping_writes_no_metadata_entry():
    # safetensors omits __metadata__ when there is none; an empty mapping is none
    assert safetensors_header([("a", "U8", (1,), 1)], {}) == safetensors_header([("a", "U8", (1,), 1)], None)
    raw = safetensors_header([("a", "U8", (1,), 1)], {})
    assert json.loads(raw[8:]) == {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}
