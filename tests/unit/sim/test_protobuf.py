"""Decoding Kubernetes protobuf bodies: the envelope, zero fields Go always writes, refusals.

Bodies are spelled here in protobuf's wire format by hand (tag, length, bytes), independent of
the decoder's own message descriptions; real kubectl bodies are covered by the kubectl tests.
"""

from __future__ import annotations

import pytest

from nodeops.sim.server import protobuf


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _ld(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _vi(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _ld(1, api_version.encode()) + _ld(2, kind.encode())
    return protobuf.MAGIC + _ld(1, type_meta) + _ld(2, raw)


def _map_entry(key: str, value: bytes) -> bytes:
    return _ld(1, key.encode()) + _ld(2, value)


def test_a_configmap_with_go_zero_fields_decodes_to_its_json() -> None:
    meta = (
        _ld(1, b"cfg")
        + _ld(2, b"")  # generateName ""
        + _ld(3, b"team")
        + _ld(4, b"")  # selfLink ""
        + _ld(8, b"")  # zero creationTimestamp
        + _ld(11, _map_entry("app", b"web"))
    )
    raw = _ld(1, meta) + _ld(2, _map_entry("a", b"b")) + _ld(3, _map_entry("bin", b"\x00\x01"))
    obj = protobuf.decode(_envelope("v1", "ConfigMap", raw))
    assert obj == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": "team", "labels": {"app": "web"}},
        "data": {"a": "b"},
        "binaryData": {"bin": "AAE="},
    }


def test_int_or_string_and_a_zero_status_as_go_writes_them() -> None:
    spec = _ld(1, _vi(1, 1) + _ld(3, b"50%")) + _ld(3, _vi(1, 0) + _vi(2, 2))
    status = _vi(1, 0) + _vi(3, 0) + _vi(4, 0)  # all-zero counters of an unset status
    raw = _ld(1, _ld(1, b"pdb")) + _ld(2, spec) + _ld(3, status)
    obj = protobuf.decode(_envelope("policy/v1", "PodDisruptionBudget", raw))
    assert obj["spec"] == {"minAvailable": "50%", "maxUnavailable": 2}
    assert "status" not in obj or obj["status"] == {}


def test_a_field_that_would_be_lost_refuses_the_body() -> None:
    meta = _ld(1, b"cfg") + _ld(99, b"something")
    with pytest.raises(protobuf.UnsupportedKind, match=r"fields \[99\] of ObjectMeta"):
        protobuf.decode(_envelope("v1", "ConfigMap", _ld(1, meta)))


def test_undescribed_kinds_and_garbage() -> None:
    with pytest.raises(protobuf.UnsupportedKind, match="Kind=Widget"):
        protobuf.decode(_envelope("example.com/v1", "Widget", b""))
    with pytest.raises(protobuf.ProtobufError, match="magic"):
        protobuf.decode(b'{"kind": "ConfigMap"}')
    with pytest.raises(protobuf.ProtobufError):
        protobuf.decode(protobuf.MAGIC + b"\x0a\xff\xff")
    assert protobuf.is_protobuf("application/vnd.kubernetes.protobuf; charset=utf-8")
    assert not protobuf.is_protobuf("application/json")
