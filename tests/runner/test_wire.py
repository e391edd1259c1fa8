"""The judge-subject wire: frames, the data encoding, and what hostile bytes do to the reader."""

from __future__ import annotations

import math
import socket
import struct
import sys
from collections import OrderedDict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "worker"))

from runner import wire


def roundtrip(value: object) -> object:
    return wire.decode(wire.encode(value))


def test_plain_and_tagged_values_roundtrip() -> None:
    value = {"a": [1, 2.5, None, True, "x"], "t": (1, 2), "b": b"\x00\xff", "s": {3, 1}}
    assert roundtrip(value) == value
    odd = {1: "one", "$x": 2}
    assert roundtrip(odd) == odd
    ordered = OrderedDict([("z", 1), ("a", 2)])
    back = roundtrip(ordered)
    assert isinstance(back, OrderedDict) and list(back) == ["z", "a"]
    floats = roundtrip([math.nan, math.inf, -math.inf])
    assert isinstance(floats, list) and math.isnan(floats[0]) and floats[1:] == [math.inf, -math.inf]


def test_tensors_carry_dtype_shape_and_values() -> None:
    torch = pytest.importorskip("torch")
    tensor = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    data = roundtrip(tensor)
    assert isinstance(data, wire.TensorData)
    assert (data.framework, data.dtype, data.shape) == ("torch", "float32", (2, 3))
    assert data.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert torch.equal(wire.decode(wire.encode(tensor), native=True), tensor)


def test_lying_objects_travel_as_opaque_or_plain_values() -> None:
    class Liar(int):
        __class__ = property(lambda self: int)  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = int.__hash__

    class Anything:
        def __eq__(self, other: object) -> bool:
            return True

    assert roundtrip(Liar(5)) == 5 and roundtrip(Liar(5)) != 6
    opaque = roundtrip(Anything())
    assert isinstance(opaque, wire.Opaque) and opaque != 3 and "Anything" in opaque.type_name

    class Sneaky(list):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter([1, 2, 3])

    assert isinstance(roundtrip(Sneaky([9])), wire.Opaque), "a list subclass is not trusted to describe itself"


def test_encoding_is_bounded() -> None:
    nested: list[object] = []
    for _ in range(200):
        nested = [nested]
    with pytest.raises(wire.EncodeError):
        wire.encode(nested)


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">I", 10**9),  # a frame far over the cap is refused before reading it
        struct.pack(">I", 3) + b"[1]",  # not an object
        struct.pack(">I", 3) + b"NaN",  # bare constants are not JSON
        struct.pack(">I", 2) + b"\xff\xfe",  # not UTF-8
        struct.pack(">I", 8) + b"{}",  # short: the peer closed mid-frame
    ],
)
def test_hostile_frames_are_wire_errors(payload: bytes) -> None:
    ours, theirs = socket.socketpair()
    theirs.sendall(payload)
    theirs.close()
    with pytest.raises(wire.WireError):
        wire.recv_frame(ours, max_bytes=1024, deadline=None)
    ours.close()


def test_silence_is_a_timeout() -> None:
    import time

    ours, theirs = socket.socketpair()
    with pytest.raises(wire.WireTimeout):
        wire.recv_frame(ours, max_bytes=1024, deadline=time.monotonic() + 0.1)
    ours.close()
    theirs.close()
