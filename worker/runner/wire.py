"""The judge-subject wire: length-prefixed JSON frames and the data encoding both sides share.

Contract:
- A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (one object). A frame
  longer than the reader's cap, a short read, bad UTF-8 or bad JSON is a ``WireError``; the reader never
  allocates more than its cap.
- ``encode(value)`` turns a Python value into plain JSON data; ``decode(data)`` turns it back. Plain JSON
  stays plain (``None``, ``bool``, ``int``, ``str``, finite ``float``, ``list``, ``dict`` with ``str`` keys
  not starting with ``$``). Everything else is one single-key object tagged with ``$``:
  ``{"$float": "nan"|"inf"|"-inf"}``, ``{"$tuple": [...]}``, ``{"$bytes": base64}``,
  ``{"$dict": {"type": "collections.OrderedDict", "items": [[k, v], ...]}}`` (non-``str`` keys, ``$`` keys
  or a ``dict`` subclass), ``{"$set": [...]}``, ``{"$tensor": {"framework": "torch"|"numpy"|"tensorflow",
  "dtype": "float32", "shape": [2, 3], "values": [flat, row-major, encoded]}}`` and, for anything else,
  ``{"$object": {"type": "module.Qualname", "repr": "first 200 characters"}}``.
- Types are read with ``type(x)``, never ``isinstance`` or ``__class__``: an object that lies about its
  class is an ``$object``. Containers are walked with the base type's own methods, so an overridden
  ``__iter__``/``items``/``__eq__`` changes nothing. Depth and element counts are capped (``EncodeError``).
- ``decode`` on the judge side builds plain values: tensors become ``TensorData`` (``.to_torch()``,
  ``.to_numpy()``, ``.tolist()``), objects become ``Opaque``. On the subject side ``decode(..., native=True)``
  builds real torch tensors / numpy arrays so probes and learner code get what they expect; the judge's
  client uses ``native="loaded"``: real tensors only for a framework the tests already imported.
Stdlib only: both sandboxes import this module.
"""

from __future__ import annotations

import base64
import json
import math
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

HEADER = struct.Struct(">I")
MAX_DEPTH = 64
MAX_ELEMENTS = 2_000_000
REPR_CHARS = 200


class WireError(Exception):
    """A frame could not be read or was not valid."""


class WireTimeout(WireError):
    """The peer did not answer in time."""


class WireClosed(WireError):
    """The peer closed the connection (usually: the process exited)."""


class EncodeError(ValueError):
    """A value cannot be sent (too deep, too big)."""


@dataclass(frozen=True)
class TensorData:
    """A tensor or array as data: framework, dtype name, shape and flat row-major values."""

    framework: str
    dtype: str
    shape: tuple[int, ...]
    values: list[Any] = field(repr=False)

    def tolist(self) -> Any:
        """Return the values nested by ``shape``."""
        return _nest(self.values, list(self.shape))

    def to_numpy(self) -> Any:
        import numpy

        return numpy.array(self.values, dtype=self.dtype if self.dtype != "bfloat16" else "float32").reshape(self.shape)

    def to_torch(self) -> Any:
        import torch

        dtype = getattr(torch, self.dtype, None)
        return torch.tensor(self.values, dtype=dtype).reshape(self.shape)


@dataclass(frozen=True)
class Opaque:
    """An object the wire cannot carry: its type name and a short repr, for messages."""

    type_name: str
    text: str

    def __repr__(self) -> str:
        return self.text


def _nest(flat: list[Any], shape: list[int]) -> Any:
    if not shape:
        return flat[0] if flat else None
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _qualname(kind: type) -> str:
    module = getattr(kind, "__module__", "") or ""
    name = getattr(kind, "__qualname__", "") or getattr(kind, "__name__", "?")
    return name if module == "builtins" else f"{module}.{name}"


def _safe_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a hostile __repr__ must not break encoding
        text = f"<unprintable {type(value).__name__}: {type(exc).__name__}>"
    if not isinstance(text, str):  # repr() of a str subclass is still checked by type below
        text = "<unprintable>"
    return str.__str__(text)[:REPR_CHARS]


def _plain_value(value: Any, kind: type) -> int | float | str | None:
    """Return the builtin value inside an ``int``/``float``/``str`` subclass instance, read by the base type."""
    if issubclass(kind, int):
        return int.__int__(value)
    if issubclass(kind, float):
        return float.__float__(value)
    if issubclass(kind, str):
        return str.__str__(value)
    return None


def _float(value: float) -> Any:
    if math.isnan(value):
        return {"$float": "nan"}
    if math.isinf(value):
        return {"$float": "inf" if value > 0 else "-inf"}
    return value


class _Encoder:
    def __init__(self) -> None:
        self.elements = 0

    def count(self, n: int) -> None:
        self.elements += n
        if self.elements > MAX_ELEMENTS:
            raise EncodeError(f"the value has more than {MAX_ELEMENTS} elements")

    def encode(self, value: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise EncodeError(f"the value is nested more than {MAX_DEPTH} levels deep")
        self.count(1)
        kind = type(value)
        if value is None or kind is bool or kind is str:
            return value
        if kind is int:
            return value
        if kind is float:
            return _float(value)
        if kind is list:
            return [self.encode(v, depth + 1) for v in list.__iter__(value)]
        if kind is tuple:
            return {"$tuple": [self.encode(v, depth + 1) for v in tuple.__iter__(value)]}
        if kind is set or kind is frozenset:
            items = sorted((self.encode(v, depth + 1) for v in set.__iter__(set(value))), key=json.dumps)
            return {"$set": items}
        if kind is bytes or kind is bytearray:
            return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
        if issubclass(kind, dict):
            items = list(dict.items(value))
            if kind is dict and all(type(k) is str and not k.startswith("$") for k, _ in items):
                return {k: self.encode(v, depth + 1) for k, v in items}
            pairs = [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in items]
            return {"$dict": {"type": _qualname(kind), "items": pairs}}
        tensor = self.tensor(value, kind)
        if tensor is not None:
            return tensor
        plain = _plain_value(value, kind)
        if plain is not None:
            # int/float/str subclasses travel as their plain value: their own __eq__ or __repr__ stays home.
            return {"$object": {"type": _qualname(kind), "repr": _safe_repr(plain), "value": self.encode(plain, depth)}}
        return {"$object": {"type": _qualname(kind), "repr": _safe_repr(value)}}

    def tensor(self, value: Any, kind: type) -> Any:
        """Encode a torch tensor, numpy array/scalar or TensorFlow tensor; ``None`` if it is none of them."""
        module = getattr(kind, "__module__", "") or ""
        if module.startswith("torch") and _qualname(kind) in ("torch.Tensor", "torch.nn.parameter.Parameter"):
            data = value.detach().cpu()
            dtype = str(data.dtype).removeprefix("torch.")
            if dtype == "bfloat16":
                data = data.float()
            return self.array("torch", dtype, list(data.shape), data.reshape(-1).tolist())
        if module == "numpy" and kind.__name__ == "ndarray":
            return self.array("numpy", str(value.dtype), list(value.shape), value.reshape(-1).tolist())
        if module == "numpy" and hasattr(value, "dtype") and hasattr(value, "item"):
            return self.array("numpy", str(value.dtype), [], [value.item()])
        if module.startswith("tensorflow") and hasattr(value, "numpy") and hasattr(value, "dtype"):
            array = value.numpy()
            return self.array("tensorflow", str(array.dtype), list(array.shape), array.reshape(-1).tolist())
        return None

    def array(self, framework: str, dtype: str, shape: list[int], flat: list[Any]) -> Any:
        self.count(len(flat))
        values = [_float(v) if type(v) is float else v for v in flat]
        if any(type(v) not in (int, float, bool, dict) for v in values):
            values = [self.encode(v, 1) for v in values]  # complex and the like: as objects
        return {"$tensor": {"framework": framework, "dtype": dtype, "shape": [int(n) for n in shape], "values": values}}


def encode(value: Any) -> Any:
    """Return ``value`` as plain JSON data (see the module contract)."""
    return _Encoder().encode(value, 0)


def _decode_float(text: Any) -> float:
    if text not in ("nan", "inf", "-inf"):
        raise WireError(f"bad $float {text!r}")
    return float(text)


def _native_tensor(data: TensorData, native: bool | str) -> Any:
    if native == "loaded" and data.framework not in sys.modules:
        return data  # the judge gets real tensors only from frameworks its tests already imported
    try:
        if data.framework in ("torch",):
            return data.to_torch()
        if data.framework in ("numpy",):
            return data.to_numpy()
        if data.framework == "tensorflow":
            import tensorflow as tf

            return tf.constant(data.to_numpy())
    except ImportError:
        pass
    return data


def decode(data: Any, *, native: bool | str = False, depth: int = 0) -> Any:
    """Rebuild a value from ``encode``'s output; raise ``WireError`` on anything malformed."""
    if depth > MAX_DEPTH + 2:
        raise WireError("value nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v, native=native, depth=depth + 1) for v in data]
    if type(data) is not dict:
        raise WireError(f"unexpected JSON type {type(data).__name__}")
    tags = [k for k in data if k.startswith("$")]
    if not tags:
        return {k: decode(v, native=native, depth=depth + 1) for k, v in data.items()}
    if len(data) != 1:
        raise WireError("a tagged value must have exactly one key")
    tag, body = tags[0], data[tags[0]]
    if tag == "$float":
        return _decode_float(body)
    if tag == "$tuple" and type(body) is list:
        return tuple(decode(v, native=native, depth=depth + 1) for v in body)
    if tag == "$set" and type(body) is list:
        try:
            return {decode(v, native=native, depth=depth + 1) for v in body}
        except TypeError as exc:
            raise WireError("unhashable set element") from exc
    if tag == "$bytes" and type(body) is str:
        try:
            return base64.b64decode(body, validate=True)
        except ValueError as exc:
            raise WireError("bad $bytes") from exc
    if tag == "$dict" and type(body) is dict and type(body.get("items")) is list:
        pairs = []
        for pair in body["items"]:
            if type(pair) is not list or len(pair) != 2:
                raise WireError("bad $dict item")
            key, item = (decode(part, native=native, depth=depth + 1) for part in pair)
            pairs.append((key, item))
        try:
            if body.get("type") == "collections.OrderedDict":
                from collections import OrderedDict

                return OrderedDict(pairs)
            return dict(pairs)
        except TypeError as exc:
            raise WireError("unhashable $dict key") from exc
    if tag == "$tensor" and type(body) is dict:
        shape, values = body.get("shape"), body.get("values")
        if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape) or type(values) is not list:
            raise WireError("bad $tensor")
        expected = math.prod(shape)
        if len(values) != expected:
            raise WireError("$tensor values do not match its shape")
        tensor = TensorData(
            framework=str(body.get("framework", "")),
            dtype=str(body.get("dtype", "")),
            shape=tuple(shape),
            values=[decode(v, native=native, depth=depth + 1) for v in values],
        )
        return _native_tensor(tensor, native) if native else tensor
    if tag == "$object" and type(body) is dict:
        if "value" in body:
            return decode(body["value"], native=native, depth=depth + 1)
        return Opaque(type_name=str(body.get("type", "?"))[:200], text=str(body.get("repr", ""))[:REPR_CHARS])
    raise WireError(f"unknown tag {tag!r}")


def send_frame(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one frame; raise ``WireClosed`` if the peer is gone."""
    body = json.dumps(message, allow_nan=False, separators=(",", ":")).encode("utf-8")
    try:
        sock.sendall(HEADER.pack(len(body)) + body)
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise WireClosed("the peer closed the connection") from exc


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireTimeout("no answer in time")
            sock.settimeout(left)
        try:
            chunk = sock.recv(min(n - len(chunks), 1 << 20))
        except TimeoutError as exc:
            raise WireTimeout("no answer in time") from exc
        except (ConnectionResetError, BrokenPipeError) as exc:
            raise WireClosed("the peer closed the connection") from exc
        if not chunk:
            raise WireClosed("the peer closed the connection")
        chunks += chunk
    return bytes(chunks)


def recv_frame(sock: socket.socket, *, max_bytes: int, deadline: float | None = None) -> dict[str, Any]:
    """Read one frame of at most ``max_bytes`` and return its JSON object; see the module contract."""
    (length,) = HEADER.unpack(_recv_exact(sock, HEADER.size, deadline))
    if length > max_bytes:
        raise WireError(f"a reply of {length} bytes is larger than the limit of {max_bytes} bytes")
    body = _recv_exact(sock, length, deadline)
    try:
        message = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WireError("a reply was not valid JSON") from exc
    if type(message) is not dict:
        raise WireError("a reply was not a JSON object")
    return message


def _reject_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not allowed on the wire")
