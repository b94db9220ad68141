"""The 신경 gateway packet codec in its three encodings."""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import ConfigError, DecodeError
from gossamer.wire import etf, gateway
from gossamer.wire.etf import Atom
from gossamer.wire.gateway import Op, Packet

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        text,
    ),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=20,
)
packets = st.builds(
    Packet,
    op=st.sampled_from(Op),
    d=json_values,
    t=st.none() | text,
    ts=st.none() | st.integers(min_value=0, max_value=2**63 - 1),
)
encodings = st.sampled_from(gateway.ENCODINGS)


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def binary(raw: bytes) -> bytes:
    return b"m" + u32(len(raw)) + raw


# --------------------------------------------------------------------------- exact forms
# singyeong-as-coded §3 examples, observed on the reference server [run].

HELLO = '{"op":0,"d":{"heartbeat_interval":45000},"t":null,"ts":1795288307165}'
READY = '{"op":2,"d":{"client_id":"a1","restricted":false},"t":null,"ts":1795288307192}'


def test_server_json_packets_are_byte_for_byte_the_reference() -> None:
    hello = Packet(op=Op.HELLO, d={"heartbeat_interval": 45000}, ts=1795288307165)
    ready = Packet(op=Op.READY, d={"client_id": "a1", "restricted": False}, ts=1795288307192)
    assert gateway.encode_packet(hello, "json") == HELLO
    assert gateway.encode_packet(ready, "json") == READY
    assert gateway.decode_packet(HELLO, "json") == hello


def test_client_json_packets_may_omit_t_and_ts() -> None:
    identify = '{"op":1,"d":{"client_id":"a1","application_id":"app-a","auth":"password"}}'
    assert gateway.decode_packet(identify, "json") == Packet(
        op=Op.IDENTIFY, d={"client_id": "a1", "application_id": "app-a", "auth": "password"}
    )
    assert gateway.decode_packet('{"op":5,"d":{"client_id":"a1"}}', "json") == Packet(
        op=Op.HEARTBEAT, d={"client_id": "a1"}
    )
    # d may be missing too (the server reads it as nil); unknown keys are ignored.
    assert gateway.decode_packet('{"op":5,"extra":[1]}', "json") == Packet(op=Op.HEARTBEAT)


def test_received_dispatch_keeps_its_shape() -> None:
    # §6.2: a received SEND carries "target": null besides nonce and payload.
    wire = (
        '{"op":4,"t":"SEND","d":{"nonce":"n-1","payload":{"x":1},"target":null},"ts":1795288309216}'
    )
    packet = gateway.decode_packet(wire, "json")
    assert packet.op is Op.DISPATCH and packet.t == "SEND"
    assert packet.d == {"nonce": "n-1", "payload": {"x": 1}, "target": None}


def test_opcode_numbers() -> None:
    # singyeong.md opcode table; §3.
    assert [(op.value, op.name) for op in Op] == [
        (0, "HELLO"),
        (1, "IDENTIFY"),
        (2, "READY"),
        (3, "INVALID"),
        (4, "DISPATCH"),
        (5, "HEARTBEAT"),
        (6, "HEARTBEAT_ACK"),
        (7, "GOODBYE"),
        (8, "ERROR"),
    ]


def test_msgpack_exact_bytes() -> None:
    packet = Packet(op=Op.HEARTBEAT, d={"client_id": "a1"})
    wire = b"\x84\xa2op\x05\xa1d\x81\xa9client_id\xa2a1\xa1t\xc0\xa2ts\xc0"
    assert gateway.encode_packet(packet, "msgpack") == wire
    assert gateway.decode_packet(wire, "msgpack") == packet
    # singyeong-py omits ts and t; the envelope still decodes.
    assert gateway.decode_packet(msgpack.packb({"op": 5, "d": {}}), "msgpack") == Packet(
        op=Op.HEARTBEAT, d={}
    )


def test_etf_server_packets_use_atom_envelope_keys_and_binary_inner_keys() -> None:
    # The Elixir client reads payload[:op] (atom keys) and frame.d["heartbeat_interval"]
    # (binary keys) — see docs/wire.md "ETF keys".
    hello = Packet(op=Op.HELLO, d={"heartbeat_interval": 45000}, ts=1795288307165)
    wire = (
        b"\x83t"
        + u32(4)
        + b"w\x02opa\x00"
        + b"w\x01dt"
        + u32(1)
        + binary(b"heartbeat_interval")
        + b"b"
        + (45000).to_bytes(4, "big")
        + b"w\x01tw\x03nil"
        + b"w\x02tsn\x06\x00"
        + (1795288307165).to_bytes(6, "little")
    )
    assert gateway.encode_packet(hello, "etf") == wire
    assert gateway.decode_packet(wire, "etf") == hello
    term = etf.decode(wire)
    assert isinstance(term, dict)
    assert set(term) == {Atom("op"), Atom("d"), Atom("t"), Atom("ts")}
    assert term[Atom("d")] == {b"heartbeat_interval": 45000}


def test_etf_client_identify_as_the_elixir_client_sends_it() -> None:
    # Elixir client 0.4.14: Map.from_struct(%Payload{op, t, d}) |> stringify_keys(true):
    # binary envelope keys, t nil, no ts, binary keys one level into d, auth possibly nil.
    wire = etf.encode(
        {
            b"op": 1,
            b"t": None,
            b"d": {b"application_id": b"app-a", b"client_id": b"c" * 32, b"auth": None},
        }
    )
    assert gateway.decode_packet(wire, "etf") == Packet(
        op=Op.IDENTIFY, d={"application_id": "app-a", "client_id": "c" * 32, "auth": None}
    )


def test_etf_atoms_and_atom_keys_read_as_strings() -> None:
    wire = etf.encode({Atom("op"): 4, Atom("t"): Atom("SEND"), Atom("d"): {Atom("k"): Atom("v")}})
    assert gateway.decode_packet(wire, "etf") == Packet(op=Op.DISPATCH, t="SEND", d={"k": "v"})


# --------------------------------------------------------------------------- properties


@given(packets, encodings)
def test_round_trip(packet: Packet, encoding: gateway.Encoding) -> None:
    data = gateway.encode_packet(packet, encoding)
    assert isinstance(data, str) == (encoding == "json")
    assert gateway.decode_packet(data, encoding) == packet


@given(packets, encodings, encodings)
def test_any_decoded_packet_re_encodes_in_any_encoding(
    packet: Packet, first: gateway.Encoding, second: gateway.Encoding
) -> None:
    relayed = gateway.decode_packet(gateway.encode_packet(packet, first), first)
    assert gateway.decode_packet(gateway.encode_packet(relayed, second), second) == packet


@given(st.binary(max_size=80), st.sampled_from(["msgpack", "etf"]))
def test_random_bytes_raise_only_decode_error(data: bytes, encoding: gateway.Encoding) -> None:
    try:
        packet = gateway.decode_packet(data, encoding)
    except DecodeError:
        return
    assert gateway.decode_packet(gateway.encode_packet(packet, encoding), encoding) == packet


@given(st.binary(max_size=80))
def test_random_etf_terms_raise_only_decode_error(data: bytes) -> None:
    try:
        packet = gateway.decode_packet(b"\x83t" + data, "etf")
    except DecodeError:
        return
    assert isinstance(packet.op, Op)


@given(st.text(max_size=80))
def test_random_text_raises_only_decode_error(data: str) -> None:
    try:
        packet = gateway.decode_packet(data, "json")
    except DecodeError:
        return
    assert gateway.decode_packet(gateway.encode_packet(packet, "json"), "json") == packet


@given(st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
def test_random_json_like_text_raises_only_decode_error(data: str) -> None:
    try:
        packet = gateway.decode_packet('{"op":1,"d":' + data, "json")
    except DecodeError:
        return
    assert packet.op is Op.IDENTIFY


@given(packets, encodings)
def test_every_truncation_and_trailing_garbage_is_rejected(
    packet: Packet, encoding: gateway.Encoding
) -> None:
    data = gateway.encode_packet(packet, encoding)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            gateway.decode_packet(data[:cut], encoding)
    garbage: Any = "x" if isinstance(data, str) else b"\x00"
    with pytest.raises(DecodeError):
        gateway.decode_packet(data + garbage, encoding)


# --------------------------------------------------------------------------- malformed


def test_wrong_frame_type_gets_the_server_text() -> None:
    # §2: a mismatched frame type is answered with exactly this op 8 text.
    with pytest.raises(DecodeError) as info:
        gateway.decode_packet(HELLO.encode(), "json")
    assert info.value.reason == (
        "decode: payload: invalid websocket opcode/encoding combo: {binary, json}"
    )
    with pytest.raises(DecodeError, match=r"combo: \{text, msgpack\}"):
        gateway.decode_packet("{}", "msgpack")
    with pytest.raises(DecodeError, match=r"combo: \{text, etf\}"):
        gateway.decode_packet("{}", "etf")


@pytest.mark.parametrize(
    "wire",
    ['{"op":9,"d":null}', '{"op":-1}', '{"d":{}}', '{"op":"1"}', '{"op":1.0}', '{"op":true}'],
)
def test_bad_opcodes_get_the_server_text(wire: str) -> None:
    # §3: "Unknown op numbers → op 8 `invalid client op nil`".
    with pytest.raises(DecodeError) as info:
        gateway.decode_packet(wire, "json")
    assert info.value.reason == "invalid client op nil"


@pytest.mark.parametrize(
    ("wire", "detail"),
    [
        ("[1,2]", "must be a map"),
        ('"op"', "must be a map"),
        ('{"op":4,"t":5}', "t must be"),
        ('{"op":4,"t":["SEND"]}', "t must be"),
        ('{"op":5,"ts":1.5}', "ts must be"),
        ('{"op":5,"ts":false}', "ts must be"),
    ],
)
def test_malformed_envelopes_are_unrecoverable(wire: str, detail: str) -> None:
    with pytest.raises(DecodeError, match="decode: payload: unrecoverable") as info:
        gateway.decode_packet(wire, "json")
    assert detail in info.value.fields["detail"]


def test_invalid_json_gets_a_jason_style_message() -> None:
    # §7 lists Jason's message, e.g. 'unexpected byte at position 1: 0x6E ("n")'.
    with pytest.raises(DecodeError, match=r'unexpected byte at position 1: 0x6E \("n"\)'):
        gateway.decode_packet("{nope}", "json")
    with pytest.raises(DecodeError, match="unexpected end of input at position 7"):
        gateway.decode_packet('{"op":1', "json")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (msgpack.ExtType(5, b"x"), "has no JSON form"),
        (b"\xff\xfe", "not UTF-8"),
        (math.nan, "NaN"),
        ({1: "x"}, "not a string"),
    ],
)
def test_msgpack_values_without_a_json_form_are_rejected(value: object, reason: str) -> None:
    wire = msgpack.packb({"op": 4, "d": {"k": value}}, use_bin_type=True)
    with pytest.raises(DecodeError, match="unrecoverable") as info:
        gateway.decode_packet(wire, "msgpack")
    assert reason in info.value.fields["detail"]


def test_msgpack_binaries_read_as_text() -> None:
    wire = msgpack.packb({b"op": 4, "d": {b"k": b"v"}}, use_bin_type=True)
    assert gateway.decode_packet(wire, "msgpack") == Packet(op=Op.DISPATCH, d={"k": "v"})


@pytest.mark.parametrize(
    ("term", "reason"),
    [
        ({Atom("op"): 4, Atom("d"): (1, 2)}, "tuple has no JSON form"),
        ({Atom("op"): 4, Atom("d"): b"\xff"}, "not UTF-8"),
        ({Atom("op"): 4, Atom("d"): 2**70}, "64-bit"),
        ({Atom("op"): 4, Atom("d"): {1: 2}}, "not a string"),
        ({Atom("op"): 4, b"op": 4}, "duplicate envelope key"),
        ({Atom("op"): 4, Atom("d"): {Atom("a"): 1, b"a": 2}}, "duplicate map key 'a'"),
        ({Atom("op"): 4, Atom("ts"): 2**64}, "ts must be"),
    ],
)
def test_etf_values_without_a_json_form_are_rejected(term: object, reason: str) -> None:
    with pytest.raises(DecodeError, match="unrecoverable") as info:
        gateway.decode_packet(etf.encode(term), "etf")
    assert reason in info.value.fields["detail"]


def test_etf_decode_errors_are_unrecoverable_with_the_cause() -> None:
    with pytest.raises(DecodeError, match="unrecoverable") as info:
        gateway.decode_packet(b"\x83g" + bytes(20), "etf")  # a pid
    assert "unsupported external term tag 103" in info.value.fields["detail"]


@pytest.mark.parametrize("encoding", gateway.ENCODINGS)
def test_size_and_depth_bounds(encoding: gateway.Encoding) -> None:
    deep: Any = 1
    for _ in range(10):
        deep = [deep]
    data = gateway.encode_packet(Packet(op=Op.DISPATCH, d=deep), encoding)
    assert gateway.decode_packet(data, encoding, max_depth=11).d == deep
    with pytest.raises(DecodeError, match="deeper than 10"):
        gateway.decode_packet(data, encoding, max_depth=10)
    with pytest.raises(DecodeError, match="exceeds 20"):
        gateway.decode_packet(data, encoding, max_size=20)
    with pytest.raises(ValueError, match="deeper than 10"):
        gateway.encode_packet(Packet(op=Op.DISPATCH, d=deep), encoding, max_depth=10)


def test_very_deep_input_is_refused_by_the_depth_bound() -> None:
    with pytest.raises(DecodeError, match="unrecoverable") as info:
        gateway.decode_packet('{"op":1,"d":' + "[" * 5000 + "]" * 5000 + "}", "json")
    assert "deeper than" in info.value.fields["detail"]
    with pytest.raises(DecodeError, match="unrecoverable") as info:
        gateway.decode_packet(b"\x82\xa2op\x01\xa1d" + b"\x91" * 5000 + b"\xc0", "msgpack")
    assert "msgpack" in info.value.fields["detail"]
    with pytest.raises(DecodeError, match="unrecoverable") as info:
        gateway.decode_packet(b"\x83t" + u32(1) + b"w\x01d" + (b"l" + u32(1)) * 5000, "etf")
    assert "deeper than" in info.value.fields["detail"]


def test_multibyte_text_counts_as_utf8_bytes() -> None:
    wire = '{"op":5,"d":"' + "한" * 10 + '"}'
    size = len(wire.encode())
    assert len(wire) < size - 1  # a character count alone would let it through
    assert gateway.decode_packet(wire, "json", max_size=size).d == "한" * 10
    with pytest.raises(DecodeError, match=f"exceeds {size - 1} bytes"):
        gateway.decode_packet(wire, "json", max_size=size - 1)


@pytest.mark.parametrize(
    ("packet", "reason"),
    [
        (Packet(op=Op.DISPATCH, d=math.inf), "NaN or infinite"),
        (Packet(op=Op.DISPATCH, d={1: "x"}), "not a string"),
        (Packet(op=Op.DISPATCH, d={"s": {1, 2}}), "set has no JSON form"),
        (Packet(op=Op.DISPATCH, d=2**64), "64-bit"),
        (Packet(op=Op.DISPATCH, d=(1, 2)), "tuple"),
        (Packet(op=Op.DISPATCH, ts=True), "ts must be"),
    ],
)
@pytest.mark.parametrize("encoding", gateway.ENCODINGS)
def test_encoder_refuses_values_outside_the_json_domain(
    packet: Packet, reason: str, encoding: gateway.Encoding
) -> None:
    with pytest.raises(ValueError, match=reason):
        gateway.encode_packet(packet, encoding)


def test_unknown_encoding_is_the_callers_mistake() -> None:
    with pytest.raises(ConfigError, match="unknown gateway encoding"):
        gateway.encode_packet(Packet(op=Op.HELLO), "xml")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown gateway encoding"):
        gateway.decode_packet("{}", "xml")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_depth"):
        gateway.decode_packet("{}", "json", max_depth=5000)
    with pytest.raises(ConfigError, match="max_depth"):
        gateway.encode_packet(Packet(op=Op.HELLO), "json", max_depth=0)
    assert gateway.is_text_encoding("json")
    assert not gateway.is_text_encoding("etf")


# --- element cap (DESIGN.md convention 3) ----------------------------------------------


def _hostile_msgpack(item: bytes, size: int = gateway.DEFAULT_MAX_SIZE) -> bytes:
    """{"op": 2, "d": [[item] * 1000, ...]} filling ``size`` bytes: every container is
    short, so only a total count can stop it."""
    inner = b"\xdc" + (1000).to_bytes(2, "big") + item * 1000
    n = (size - 16) // len(inner)
    return b"\x82\xa2op\x02\xa1d\xdd" + n.to_bytes(4, "big") + inner * n


def _hostile_etf(item: bytes, size: int = gateway.DEFAULT_MAX_SIZE) -> bytes:
    inner = b"l" + (1000).to_bytes(4, "big") + item * 1000 + b"j"
    n = (size - 32) // len(inner)
    head = b"\x83t" + (2).to_bytes(4, "big") + b"w\x02opa\x02w\x01d"
    return head + b"l" + n.to_bytes(4, "big") + inner * n + b"j"


HOSTILE = [
    ("msgpack", _hostile_msgpack(b"\x90")),  # empty arrays
    ("msgpack", _hostile_msgpack(b"\x80")),  # empty maps
    ("msgpack", _hostile_msgpack(b"\x01")),  # one-byte ints
    ("msgpack", b"\x82\xa2op\x02\xa1d\xdd" + (1_000_000).to_bytes(4, "big") + b"\x90" * 1_000_000),
    ("etf", _hostile_etf(b"j")),  # empty lists
    ("etf", _hostile_etf(b"t\x00\x00\x00\x00")),  # empty maps
    ("etf", _hostile_etf(b"a\x01")),  # small ints
]


@pytest.mark.parametrize(("encoding", "frame"), HOSTILE)
def test_a_frame_of_many_tiny_values_is_refused_with_bounded_memory(
    encoding: gateway.Encoding, frame: bytes
) -> None:
    """Without the cap these 1 MiB frames cost 9 to 145 bytes of Python objects per input
    byte (up to 145 MiB); with it, the decode stops at max_elements values."""
    assert len(frame) <= gateway.DEFAULT_MAX_SIZE
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError) as excinfo:
            gateway.decode_packet(frame, encoding)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert excinfo.value.fields["max_elements"] == gateway.DEFAULT_MAX_ELEMENTS
    assert "max_elements=65536" in str(excinfo.value.fields["detail"])
    assert peak < 8 * 2**20  # measured 0.5 to 4.5 MiB


@pytest.mark.parametrize("encoding", ["msgpack", "etf"])
def test_the_element_cap_is_exact_and_configurable(encoding: gateway.Encoding) -> None:
    d = [[0] * 10 for _ in range(10)]  # 111 values in d, a few more in the envelope
    wire = gateway.encode_packet(Packet(op=Op.DISPATCH, d=d), encoding)
    assert gateway.decode_packet(wire, encoding, max_elements=200).d == d
    with pytest.raises(DecodeError) as excinfo:
        gateway.decode_packet(wire, encoding, max_elements=100)
    assert excinfo.value.fields["max_elements"] == 100
    with pytest.raises(ConfigError):
        gateway.decode_packet(wire, encoding, max_elements=1)


def test_an_accepted_frame_at_the_cap_stays_bounded() -> None:
    """The costliest accepted msgpack frame: just under max_elements empty maps."""
    frame = _hostile_msgpack(b"\x80", size=64_000)
    tracemalloc.start()
    try:
        packet = gateway.decode_packet(frame, "msgpack")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(packet.d, list) and sum(map(len, packet.d)) > 60_000
    assert peak < 24 * 2**20
