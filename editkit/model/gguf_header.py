"""A GGUF file's metadata and tensor table, read without its tensor data (GGUF v2/v3, little-endian).

    header = read_header(path)
    header.metadata["general.architecture"]   # (value, GGUFValueType, array element type or None)
    header.tensors[0].name, .shape, .type     # numpy order (rows first), GGMLQuantizationType
    raw(path, header, header.tensors[0])      # its bytes as stored

gguf-py's GGUFReader builds a numpy view per element of every metadata array: half a minute on two cores for
Gemma's 262,144 tokens, scores and types, for each read. An export reads its source's header once, here, with
`struct` over the bytes; string values stay bytes, so they are written back exactly as they were.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..core.errors import EditkitError

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType

MAGIC = b"GGUF"
ALIGNMENT = 32  # GGUF's default tensor data alignment (general.alignment overrides it)
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_NUMPY = {0: "u1", 1: "i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8",
          12: "<f8"}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class Entry:
    """One tensor of the table: its name, shape in numpy order, GGML type, offset in the data and size."""

    name: str
    shape: tuple[int, ...]
    type: GGMLQuantizationType
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Header:
    metadata: dict[str, Any]  # key -> (value, GGUFValueType, element type of an array or None)
    tensors: list[Entry]
    data_start: int  # where tensor data begins in the file


class _Cursor:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from("<" + fmt, self.data, self.at)[0]
        self.at += struct.calcsize("<" + fmt)
        return value

    def string(self) -> bytes:
        n = self.take("Q")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def value(self, vtype: int) -> Any:
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            sub, n = self.take("I"), self.take("Q")
            if sub == STRING:
                return [self.string() for _ in range(n)], sub
            if sub not in _NUMPY:
                raise ValueError(f"array of type {sub}")
            dtype = np.dtype(_NUMPY[sub])
            out = np.frombuffer(self.data, dtype, n, self.at).tolist()
            self.at += n * dtype.itemsize
            return out, sub
        if vtype not in _SCALAR:
            raise ValueError(f"value of type {vtype}")
        return self.take(_SCALAR[vtype])


def read_header(path: Path, chunk: int = 64 * 2 ** 20) -> Header:
    """The metadata and tensor table of the GGUF file at `path`; EditkitError if it is not one."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

    size = Path(path).stat().st_size
    with open(path, "rb") as f:
        data = f.read(min(size, chunk))
    try:
        while True:
            try:
                return _parse(data, GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType)
            except struct.error:
                if len(data) >= size:
                    raise
                with open(path, "rb") as f:  # the header is larger than what was read: read more
                    data = f.read(min(size, 4 * len(data)))
    except (struct.error, ValueError, KeyError) as exc:
        raise EditkitError(f"{path} is not a readable GGUF file ({exc})") from None


def _parse(data: bytes, sizes: Any, qtype: Any, vtype: Any) -> Header:
    c = _Cursor(data)
    if data[:4] != MAGIC:
        raise ValueError("no GGUF magic")
    c.at = 4
    version = c.take("I")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version}")
    n_tensors, n_kv = c.take("Q"), c.take("Q")
    metadata = {}
    for _ in range(n_kv):
        key = c.string().decode("utf-8")
        t = c.take("I")
        value = c.value(t)
        if t == ARRAY:
            value, sub = value
            metadata[key] = (value, vtype(t), vtype(sub))
        else:
            metadata[key] = (value.decode("utf-8") if t == STRING else value, vtype(t), None)
    tensors = []
    for _ in range(n_tensors):
        name = c.string().decode("utf-8")
        dims = [c.take("Q") for _ in range(c.take("I"))]
        kind = qtype(c.take("I"))
        offset = c.take("Q")
        block, nbytes = sizes[kind]
        tensors.append(Entry(name, tuple(reversed(dims)), kind, offset, int(np.prod(dims)) // block * nbytes))
    align = int(metadata.get("general.alignment", (ALIGNMENT,))[0])
    return Header(metadata, tensors, (c.at + align - 1) // align * align)


def raw(path: Path, header: Header, entry: Entry) -> npt.NDArray[np.uint8]:
    """A tensor's bytes as the file stores them (a read-only memory map)."""
    return np.memmap(path, np.uint8, "r", header.data_start + entry.offset, (entry.nbytes,))
