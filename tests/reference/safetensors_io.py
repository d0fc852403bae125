"""Minimal safetensors reader/writer in plain Python + numpy + torch.

The format (https://github.com/huggingface/safetensors):

    [8 bytes]  N, unsigned 64-bit little-endian: length of the JSON header
    [N bytes]  UTF-8 JSON:
                 { "<name>": {"dtype": "F32", "shape": [2, 3],
                              "data_offsets": [begin, end]},   # [begin, end)
                   ...,
                   "__metadata__": {"key": "value", ...} }     # optional, str -> str
               padded at the end with spaces (0x20) so that 8 + N is a multiple of 8
    [rest]     the tensor bytes, little-endian, row-major; data_offsets are relative
               to the first byte after the header.

Readers must reject: a header that does not start with '{', a header over 100 MB,
offsets past the end of the file, overlapping tensors, holes between tensors, and a
byte count that does not match dtype size * product(shape).

bf16 has no numpy dtype: it travels as int16 bit patterns and is reinterpreted with
torch's `view(torch.bfloat16)` (a bit-level view, so no rounding happens on I/O).
"""

import json
import struct

import numpy as np
import torch

MAX_HEADER_BYTES = 100 * 1000 * 1000

# safetensors dtype name -> (torch dtype, numpy dtype used to carry the bytes, item size)
_DTYPES = {
    "F64": (torch.float64, np.dtype("<f8"), 8),
    "F32": (torch.float32, np.dtype("<f4"), 4),
    "F16": (torch.float16, np.dtype("<f2"), 2),
    "BF16": (torch.bfloat16, np.dtype("<i2"), 2),  # bit patterns, viewed as bf16
    "I64": (torch.int64, np.dtype("<i8"), 8),
    "I32": (torch.int32, np.dtype("<i4"), 4),
    "I16": (torch.int16, np.dtype("<i2"), 2),
    "I8": (torch.int8, np.dtype("i1"), 1),
    "U8": (torch.uint8, np.dtype("u1"), 1),
    "BOOL": (torch.bool, np.dtype("?"), 1),
}
_NAME_OF_TORCH_DTYPE = {v[0]: k for k, v in _DTYPES.items()}


class SafetensorsError(ValueError):
    pass


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def load(path):
    """Read a .safetensors file -> (dict name -> torch.Tensor, metadata dict).

    Tensors come back in their stored dtype (BF16 as torch.bfloat16), in the file's
    order of data offsets. The metadata dict is {} when the file has none.
    """
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SafetensorsError(f"{path}: file too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER_BYTES:
        raise SafetensorsError(f"{path}: header of {n} bytes exceeds 100 MB")
    if 8 + n > len(blob):
        raise SafetensorsError(f"{path}: header length {n} runs past the end of the file")
    raw = blob[8:8 + n]
    if not raw.startswith(b"{"):
        raise SafetensorsError(f"{path}: header does not start with '{{'")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SafetensorsError(f"{path}: __metadata__ must map strings to strings")

    data = memoryview(blob)[8 + n:]
    entries = []
    for name, info in header.items():
        try:
            dtype_name = info["dtype"]
            shape = [int(s) for s in info["shape"]]
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: malformed entry for tensor '{name}'") from None
        if dtype_name not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor '{name}' has unsupported dtype {dtype_name}")
        if any(s < 0 for s in shape):
            raise SafetensorsError(f"{path}: tensor '{name}' has a negative dimension")
        itemsize = _DTYPES[dtype_name][2]
        if not (0 <= begin <= end <= len(data)):
            raise SafetensorsError(f"{path}: tensor '{name}' offsets [{begin},{end}) past the end of the data")
        if end - begin != _numel(shape) * itemsize:
            raise SafetensorsError(
                f"{path}: tensor '{name}' has {end - begin} bytes, expected "
                f"{_numel(shape) * itemsize} for {dtype_name}{shape}")
        entries.append((begin, end, name, dtype_name, shape))

    # The tensors must tile the data region exactly: no overlap, no holes.
    entries.sort(key=lambda e: (e[0], e[1]))
    pos = 0
    for begin, end, name, _, _ in entries:
        if begin < pos:
            raise SafetensorsError(f"{path}: tensor '{name}' overlaps the previous tensor")
        if begin > pos:
            raise SafetensorsError(f"{path}: hole in the data before tensor '{name}'")
        pos = end
    if pos != len(data):
        raise SafetensorsError(f"{path}: {len(data) - pos} trailing bytes after the last tensor")

    tensors = {}
    for begin, end, name, dtype_name, shape in entries:
        torch_dtype, np_dtype, _ = _DTYPES[dtype_name]
        arr = np.frombuffer(data[begin:end], dtype=np_dtype).copy().reshape(shape)
        t = torch.from_numpy(arr)
        if dtype_name == "BF16":
            t = t.view(torch.bfloat16)
        tensors[name] = t
    return tensors, dict(metadata)


def _tensor_bytes(t):
    """Little-endian row-major bytes of a CPU tensor (bf16 through its int16 bits)."""
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    name = _NAME_OF_TORCH_DTYPE.get(t.dtype)
    if name is None:
        raise SafetensorsError(f"unsupported tensor dtype {t.dtype}")
    arr = t.numpy()
    return arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def save(path, tensors, metadata=None):
    """Write dict name -> torch.Tensor (F64/F32/F16/BF16/I64/I32/I16/I8/U8/BOOL).

    Tensors are laid out in the dict's iteration order; the header is padded with
    spaces so the data starts at a multiple of 8 bytes.
    """
    header = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorsError("metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    chunks = []
    offset = 0
    for name, t in tensors.items():
        if name == "__metadata__":
            raise SafetensorsError("'__metadata__' is not a valid tensor name")
        if not isinstance(t, torch.Tensor):
            raise SafetensorsError(f"'{name}' is not a torch.Tensor")
        dtype_name = _NAME_OF_TORCH_DTYPE.get(t.dtype)
        if dtype_name is None:
            raise SafetensorsError(f"'{name}': unsupported dtype {t.dtype}")
        b = _tensor_bytes(t)
        header[name] = {"dtype": dtype_name, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        chunks.append(b)
        offset += len(b)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * ((8 - (8 + len(raw)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in chunks:
            f.write(b)
