"""common/weight_files.py: a safetensors file's header read by hand (8-byte little-endian length, JSON, the
tensors' byte ranges) and its size checked against it, on files written here byte by byte."""
import json
import struct

import pytest

from common.weight_files import ModelFileError, check_weights


def _write(path, tensors: dict, data_bytes: int):
    """A safetensors file: {name: (start, end)} byte ranges, `data_bytes` bytes of data after the header."""
    header = json.dumps({"__metadata__": {"format": "pt"},
                         **{k: {"dtype": "F32", "shape": [(e - b) // 4], "data_offsets": [b, e]}
                            for k, (b, e) in tensors.items()}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data_bytes)
    return 8 + len(header)


def test_a_whole_file_passes_and_a_cut_or_padded_one_is_named(tmp_path):
    f = tmp_path / "model.safetensors"
    head = _write(f, {"a": (0, 16), "b": (16, 48)}, 48)
    check_weights(tmp_path, "model.path")
    _write(f, {"a": (0, 16), "b": (16, 48)}, 40)                 # the last tensor's bytes cut short
    with pytest.raises(ModelFileError, match=rf"model.path: {f} has {head + 40:,} bytes, its header "
                                             rf"describes {head + 48:,}: truncated"):
        check_weights(tmp_path, "model.path")
    head = _write(f, {"a": (0, 16)}, 20)                          # bytes past the last tensor: damaged too
    with pytest.raises(ModelFileError, match=f"has {head + 20:,} bytes, its header describes {head + 16:,}"):
        check_weights(tmp_path, "model.path")


def test_a_header_that_cannot_be_read_is_named(tmp_path):
    f = tmp_path / "model-00001-of-00002.safetensors"
    f.write_bytes(struct.pack("<Q", 10 ** 6) + b"{}")             # a length beyond the file
    with pytest.raises(ModelFileError, match=r"checkpoint: .*model-00001-of-00002.safetensors is not a "
                                             r"readable safetensors file \(its header says 1,000,000 bytes"):
        check_weights(tmp_path, "checkpoint")
    f.write_bytes(b"\x01\x02")                                     # shorter than the length field
    with pytest.raises(ModelFileError, match="not a readable safetensors file"):
        check_weights(tmp_path, "checkpoint")
    f.write_bytes(struct.pack("<Q", 3) + b"{no")                  # not JSON
    with pytest.raises(ModelFileError, match="not a readable safetensors file"):
        check_weights(tmp_path, "checkpoint")
