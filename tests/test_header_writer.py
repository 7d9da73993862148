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
