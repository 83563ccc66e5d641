"""What crosses between a student's notebook and the judge at grading, and how: framed messages
over a Unix socket, each a JSON header and raw byte blobs (`send`, `receive`), and values
encoded as data (`Codec`), never as pickles. Nothing the student's process sends is run,
imported or unpickled, and every size in it is checked before it is read.

Tensors travel as their storages. Each storage of the judge's tensors is sent with a message (its
bytes) and mirrored in the student's process under a number (a `handle`); a tensor is a view
(offset, shape, strides, dtype) of one. After the call the mirrors' bytes come back, so what the
student's code wrote reaches the judge's tensors, as in one process. A storage the student's code
made comes back whole.

Tags of encoded values (JSON objects with one key): `tuple`, `set`, `frozenset`, `dict` (a list
of key-value pairs), `float` (nan, inf, -inf as text), `dtype`, `device`, `slice`, `config` (a
`triton.Config`), `record` (a dataclass of the course's runtime, by name and fields), `tensor`,
`opaque` (something that is not data, by its type's name: the reader gets an `Opaque`)."""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAGIC = b"CRS1"
MAX_HEADER_BYTES = 64 << 20
MAX_BLOBS = 1 << 16
MAX_MESSAGE_BYTES = 16 << 30  # all blobs of one message together
MAX_DEPTH = 64
MAX_ITEMS = 1 << 20  # elements of all lists, tuples and dicts of one value together
MAX_TEXT = 1 << 20  # characters of one string
MAX_DIMS = 16
RECORDS = "grader.runtime."  # the modules whose dataclasses travel as records (roofline.Ceilings)


class WireError(ValueError):
    """A message or value that is not what the protocol allows: the peer is broken or hostile."""


# -- framing -------------------------------------------------------------------------------------


def send(sock: socket.socket, header: dict, blobs: Sequence = ()) -> None:
    """One message: MAGIC, the header's length and JSON, the number of blobs, each blob's length
    and bytes."""
    text = json.dumps(header, allow_nan=False).encode()
    parts = [MAGIC, struct.pack("<I", len(text)), text, struct.pack("<I", len(blobs))]
    sock.sendall(b"".join(parts))
    for blob in blobs:
        view = memoryview(blob).cast("B")
        sock.sendall(struct.pack("<Q", view.nbytes))
        sock.sendall(view)


def exactly(sock: socket.socket, n: int, into: memoryview | None = None):
    """The next `n` bytes from `sock`, read into `into` (n bytes) where given, else into a new
    bytearray; ConnectionError where the peer closes it first."""
    data = bytearray(n) if into is None else into
    view, got = memoryview(data), 0
    while got < n:
        read = sock.recv_into(view[got:], n - got)
        if read == 0:
            raise ConnectionError("the peer closed the connection")
        got += read
    return data


class Landing:
    """Host memory kept from one message to the next, in slots: where a large blob is read, or a
    storage copied to the host. Memory written before takes a copy about nine times faster than
    fresh memory, which pays a page fault for each page (storage bytes copied from an H200 at
    13.5 GB/s against 1.5 GB/s). What a slot holds lasts until the slot is used again."""

    def __init__(self):
        self._slots: list[bytearray] = []

    def __call__(self, slot: int, n: int) -> memoryview:
        while len(self._slots) <= slot:
            self._slots.append(bytearray())
        if len(self._slots[slot]) < n:
            self._slots[slot] = bytearray(n)
        return memoryview(self._slots[slot])[:n]


def receive(sock: socket.socket, landing: Landing | None = None) -> tuple[dict, list]:
    """One message, every size checked against the limits before it is read; its blobs read into
    `landing`'s slots where given (valid until its next message), else into new bytearrays."""
    head = exactly(sock, 8)
    if bytes(head[:4]) != MAGIC:
        raise WireError("a message that does not start with the protocol's magic bytes")
    (size,) = struct.unpack("<I", head[4:])
    if size > MAX_HEADER_BYTES:
        raise WireError(f"a header of {size} bytes, over the {MAX_HEADER_BYTES} allowed")
    try:
        header = json.loads(bytes(exactly(sock, size)))
    except (ValueError, RecursionError) as exc:
        raise WireError(f"a header that is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError("a header that is not a JSON object")
    (count,) = struct.unpack("<I", exactly(sock, 4))
    if count > MAX_BLOBS:
        raise WireError(f"{count} blobs, over the {MAX_BLOBS} allowed")
    blobs, total = [], 0
    for _ in range(count):
        (length,) = struct.unpack("<Q", exactly(sock, 8))
        total += length
        if total > MAX_MESSAGE_BYTES:
            raise WireError(f"blobs of over {MAX_MESSAGE_BYTES} bytes in one message")
        into = None if landing is None else landing(len(blobs), length)
        blobs.append(exactly(sock, length, into))
    return header, blobs


# -- storages ------------------------------------------------------------------------------------


def flat(storage):
    """A torch UntypedStorage as a tensor of its bytes (a view: writing it writes the storage)."""
    import torch

    flat = torch.empty(0, dtype=torch.uint8, device=storage.device)
    return flat.set_(storage, 0, (storage.nbytes(),), (1,))


def storage_bytes(storage, into: memoryview | None = None) -> memoryview:
    """The bytes of a torch UntypedStorage on the host (`_on_host`)."""
    return _on_host(flat(storage), into)


def _on_host(source, into: memoryview | None) -> memoryview:
    """A uint8 tensor's bytes on the host: copied into `into` (a buffer of their size, a
    `Landing`'s slot) where given, else, where it lives on a GPU, into new memory."""
    if into is None:
        return memoryview(source.cpu().numpy()).cast("B")
    if len(into):
        host_tensor(into).copy_(source)
    return into


def host_tensor(data):
    """A buffer as a CPU uint8 tensor: sharing its bytes where it is writable (a bytearray, a
    `Landing`'s slot), else of a copy."""
    import torch

    data = bytearray(data) if memoryview(data).readonly else data
    return torch.frombuffer(data, dtype=torch.uint8)


def fill_storage(storage, data) -> None:
    """Write `data` (as many bytes as the storage holds) into a torch UntypedStorage."""
    if len(data) != storage.nbytes():
        raise WireError(f"{len(data)} bytes for a storage of {storage.nbytes()}")
    if len(data):
        flat(storage).copy_(host_tensor(data))


def dtype_named(name: object):
    """The torch dtype called `name` ("float16"), or WireError."""
    import torch

    dtype = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise WireError(f"not a dtype: {name!r}")
    return dtype


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def view(storage, dtype, offset: object, shape: object, stride: object):
    """The tensor of `dtype` over `storage` at (offset, shape, stride), all in elements, checked
    to lie inside the storage (torch's own set_ would grow it instead)."""
    import torch

    dims = _ints(shape, "shape")
    steps = _ints(stride, "stride")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise WireError(f"an offset of {offset!r}")
    if len(dims) != len(steps) or len(dims) > MAX_DIMS:
        raise WireError(f"shape {dims} and strides {steps} do not match")
    size = dtype.itemsize
    if storage.nbytes() % size:
        raise WireError(f"a storage of {storage.nbytes()} bytes read as {dtype_name(dtype)}")
    reach = offset + sum((n - 1) * s for n, s in zip(dims, steps, strict=True)) + 1
    if math.prod(dims) and reach * size > storage.nbytes():
        raise WireError(f"a view reaching element {reach} of a storage of {storage.nbytes()} B")
    t = torch.empty(0, dtype=dtype, device=storage.device)
    return t.set_(storage, offset, tuple(dims), tuple(steps))


def spec(t, storage: int) -> dict:
    """Tensor `t` as what crosses for it: a view of the storage known by the handle `storage`."""
    return {
        "storage": storage,
        "offset": t.storage_offset(),
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "dtype": dtype_name(t.dtype),
    }


def view_of(storage, found: dict):
    """The tensor a `spec` describes, over `storage`, checked as `view` checks it."""
    dtype = dtype_named(found.get("dtype"))
    return view(storage, dtype, found.get("offset"), found.get("shape"), found.get("stride"))


def _ints(value: object, what: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise WireError(f"a {what} that is not a list of non-negative integers: {value!r}")
    return value


def contiguous_bytes(t, into: memoryview | None = None) -> memoryview:
    """The bytes of tensor `t` laid out contiguously, on the host (`_on_host`)."""
    import torch

    return _on_host(t.detach().contiguous().reshape(-1).view(torch.uint8), into)


def from_bytes(data, dtype, shape: object, device: str):
    """A new tensor of `dtype` and `shape` on `device` from its contiguous bytes, checked."""
    import torch

    dims = _ints(shape, "shape")
    if len(dims) > MAX_DIMS or len(data) != math.prod(dims) * dtype.itemsize:
        raise WireError(f"{len(data)} bytes for a {dtype_name(dtype)} tensor of shape {dims}")
    out = torch.empty(dims, dtype=dtype, device=device)
    if len(data):
        out.reshape(-1).view(torch.uint8).copy_(host_tensor(data))
    return out


# -- values ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Opaque:
    """A value the other side could not send as data (a class, a module, an object of its own)."""

    type_name: str

    def __repr__(self) -> str:
        return f"<{self.type_name}, which the grader cannot read>"


@dataclass
class Codec:
    """Encodes and decodes values for one message: `tensor_out(t)` gives a tensor's encoding,
    `tensor_in(spec)` the tensor an encoding names; `strict` (the judge's side) refuses opaques."""

    tensor_out: Callable[[object], dict] | None = None
    tensor_in: Callable[[dict], object] | None = None
    strict: bool = False
    _items: int = 0

    # encoding

    def encode(self, value, depth: int = 0):
        if depth > MAX_DEPTH:
            raise WireError("a value nested too deeply to send")
        # torch's types exist only where torch is imported: a notebook that never imports it
        # is not made to (seconds of a kernel's start)
        torch = sys.modules.get("torch")
        if value is None or isinstance(value, bool | str | int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, list):
            return [self.encode(v, depth + 1) for v in self._counted(value)]
        if isinstance(value, tuple):
            return {"tuple": [self.encode(v, depth + 1) for v in self._counted(value)]}
        if isinstance(value, set | frozenset):
            tag = "set" if isinstance(value, set) else "frozenset"
            return {tag: [self.encode(v, depth + 1) for v in self._counted(value)]}
        if isinstance(value, dict):
            return {
                "dict": [
                    [self.encode(k, depth + 1), self.encode(v, depth + 1)]
                    for k, v in self._counted(value.items())
                ]
            }
        if torch is not None and isinstance(value, torch.dtype):
            return {"dtype": dtype_name(value)}
        if torch is not None and isinstance(value, torch.device):
            return {"device": str(value)}
        if isinstance(value, slice):
            return {
                "slice": [self.encode(p, depth + 1) for p in (value.start, value.stop, value.step)]
            }
        if torch is not None and isinstance(value, torch.Tensor):
            if self.tensor_out is None:
                raise WireError("a tensor where none can be sent")
            return {"tensor": self.tensor_out(value)}
        kind = type(value)
        if kind.__name__ == "Config" and kind.__module__.startswith("triton"):
            return {"config": self.encode(_config_fields(value), depth + 1)}
        if dataclasses.is_dataclass(kind) and kind.__module__.startswith(RECORDS):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return {
                "record": [f"{kind.__module__}.{kind.__qualname__}", self.encode(fields, depth + 1)]
            }
        item = getattr(value, "item", None)
        if callable(item) and getattr(value, "shape", None) == () and kind.__module__ == "numpy":
            number = item()  # a numpy scalar, sent as the Python number it holds
            if isinstance(number, bool | int | float):
                return self.encode(number, depth)
        if self.strict:
            raise WireError(f"a {kind.__name__} cannot be sent to the other process")
        return {"opaque": kind.__name__[:100]}

    def _counted(self, items):
        items = list(items)
        self._items += len(items)
        if self._items > MAX_ITEMS:
            raise WireError(f"values of more than {MAX_ITEMS} items")
        return items

    # decoding

    def decode(self, data, depth: int = 0):
        if depth > MAX_DEPTH:
            raise WireError("a value nested too deeply")
        if data is None or isinstance(data, bool | int | float):
            return data
        if isinstance(data, str):
            if len(data) > MAX_TEXT:
                raise WireError(f"a string of {len(data)} characters")
            return data
        if isinstance(data, list):
            return [self.decode(v, depth + 1) for v in self._counted(data)]
        if not isinstance(data, dict) or len(data) != 1:
            raise WireError(f"not an encoded value: {str(data)[:80]}")
        ((tag, inner),) = data.items()
        if tag == "tuple" and isinstance(inner, list):
            return tuple(self.decode(v, depth + 1) for v in self._counted(inner))
        if tag in ("set", "frozenset") and isinstance(inner, list):
            items = [self.decode(v, depth + 1) for v in self._counted(inner)]
            if not all(isinstance(v, str | int | float | bool | tuple | type(None)) for v in items):
                raise WireError("a set of things that are not plain values")
            return set(items) if tag == "set" else frozenset(items)
        if tag == "dict" and isinstance(inner, list):
            out = {}
            for pair in self._counted(inner):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise WireError("a dict entry that is not a pair")
                key = self.decode(pair[0], depth + 1)
                if not isinstance(key, str | int | float | bool | tuple | type(None)):
                    raise WireError(f"a dict key of type {type(key).__name__}")
                out[key] = self.decode(pair[1], depth + 1)
            return out
        if tag == "float" and inner in ("nan", "inf", "-inf"):
            return float(inner)
        if tag == "dtype":
            return dtype_named(inner)
        if tag == "device" and isinstance(inner, str) and len(inner) < 32:
            import torch

            return torch.device(inner)
        if tag == "slice" and isinstance(inner, list) and len(inner) == 3:
            parts = [self.decode(p, depth + 1) for p in inner]
            if not all(p is None or isinstance(p, int) for p in parts):
                raise WireError("a slice of things that are not integers")
            return slice(*parts)
        if tag == "tensor" and isinstance(inner, dict):
            if self.tensor_in is None:
                raise WireError("a tensor where none can be read")
            return self.tensor_in(inner)
        if tag == "config":
            return _config(self.decode(inner, depth + 1))
        if tag == "record" and isinstance(inner, list) and len(inner) == 2:
            return _record(inner[0], self.decode(inner[1], depth + 1))
        if tag == "opaque" and isinstance(inner, str):
            return Opaque(inner[:100])
        raise WireError(f"an unknown tag {tag!r}")


def _record(name: object, fields: object):
    import importlib

    module, _, qualname = str(name).rpartition(".")
    if not module.startswith(RECORDS) or not isinstance(fields, dict) or "." in qualname:
        raise WireError(f"not a record of the course's runtime: {name!r}")
    kind = getattr(importlib.import_module(module), qualname, None)
    if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
        raise WireError(f"not a record of the course's runtime: {name!r}")
    try:
        return kind(**fields)
    except (TypeError, ValueError) as exc:
        raise WireError(f"a {qualname} that cannot be built: {exc}") from None


CONFIG_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def _config_fields(config) -> dict:
    fields = {"kwargs": dict(config.kwargs)}
    for name in CONFIG_FIELDS:
        if hasattr(config, name):
            fields[name] = getattr(config, name)
    if getattr(config, "pre_hook", None) is not None:
        raise WireError("a triton.Config with a pre_hook cannot be sent")
    return fields


def _config(fields):
    import triton

    if not isinstance(fields, dict) or not isinstance(fields.get("kwargs"), dict):
        raise WireError("a triton.Config without its kwargs")
    options = {}
    for name in CONFIG_FIELDS:
        value = fields.get(name)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool):
                raise WireError(f"a triton.Config whose {name} is {value!r}")
            options[name] = value
    return triton.Config(fields["kwargs"], **options)
