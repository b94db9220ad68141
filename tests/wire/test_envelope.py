"""The authenticated envelope: format, integrity, replay windows, restarts, rotation, limits."""

from __future__ import annotations

import dataclasses
import functools
import random
import struct
from collections.abc import Callable

import cramjam
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import ConfigError, CryptoError, DecodeError, LocalProtocolError
from gossamer.wire import envelope
from gossamer.wire.envelope import (
    DEFAULT_WINDOW,
    MAX_SEQ,
    MIN_SIZE,
    Opened,
    ReplayWindows,
    SenderSession,
    overhead,
    seal,
    unseal,
)
from gossamer.wire.keyring import MAX_KEY_ID, Key, Keyring, derive_session

KEY1 = Key.from_bytes(bytes(range(1, 33)), key_id=1)
KEY2 = Key.from_bytes(bytes(range(101, 133)), key_id=2)
PASSPHRASE = "correct horse battery staple, generated"


def randbytes(seed: int) -> Callable[[int], bytes]:
    return random.Random(seed).randbytes


def ring(*keys: Key, cluster: str = "alpha", primary: int | None = None) -> Keyring:
    return Keyring(cluster=cluster, keys=keys or (KEY1,), primary=primary)


def start(sender: str = "n1", *, epoch: int = 1, seed: int = 1) -> SenderSession:
    return SenderSession(sender=sender, epoch=epoch, randbytes=randbytes(seed))


def fields(data: bytes) -> dict[str, object]:
    """Read the header by the offsets of the documented layout (module docstring)."""
    n = data[6]
    epoch, session_id, seq = struct.unpack_from(">Q16sQ", data, 7 + n)
    return {
        "version": data[0],
        "flags": data[1],
        "key_id": int.from_bytes(data[2:6], "big"),
        "sender": data[7 : 7 + n].decode(),
        "epoch": epoch,
        "session_id": session_id,
        "seq": seq,
        "head_size": 39 + n,
    }


def effective_nonce(keyring: Keyring, data: bytes) -> tuple[bytes, bytes]:
    """(subkey, GCM nonce) of a datagram, recomputed from the documented derivation, and
    checked against the datagram by decrypting it with the bare primitive."""
    f = fields(data)
    head_size = f["head_size"]
    assert isinstance(head_size, int) and isinstance(f["seq"], int)
    assert isinstance(f["key_id"], int) and isinstance(f["session_id"], bytes)
    key = keyring.get(f["key_id"])
    assert key is not None
    subkey = derive_session(key, cluster=keyring.cluster, ident=data[6 : head_size - 8])
    nonce = f["session_id"][-4:] + f["seq"].to_bytes(8, "big")
    assert nonce == data[head_size - 12 : head_size]
    AESGCM(subkey).decrypt(nonce, data[head_size:], data[:head_size])  # raises unless right
    return subkey, nonce


def kind_of(excinfo: pytest.ExceptionInfo[CryptoError]) -> object:
    return excinfo.value.fields["kind"]


# --- round trip and layout ---------------------------------------------------------------

senders = st.text(min_size=1, max_size=40).filter(lambda s: len(s.encode()) <= 255)


@given(
    payload=st.binary(max_size=4096),
    sender=senders,
    seq=st.integers(min_value=0, max_value=MAX_SEQ),
    epoch=st.integers(min_value=0, max_value=2**64 - 1),
    key_id=st.integers(min_value=1, max_value=MAX_KEY_ID),
    cluster=senders,
    compress=st.booleans(),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_round_trip(
    *,
    payload: bytes,
    sender: str,
    seq: int,
    epoch: int,
    key_id: int,
    cluster: str,
    compress: bool,
    seed: int,
) -> None:
    keyring = Keyring(cluster=cluster, keys=Key.from_bytes(KEY1.secret, key_id=key_id))
    session = SenderSession(sender=sender, epoch=epoch, randbytes=randbytes(seed))
    data = seal(keyring, session, seq=seq, payload=payload, compress=compress)
    if not compress:
        assert len(data) == overhead(sender) + len(payload)
    opened = unseal(keyring, data, replay=ReplayWindows())
    assert opened == Opened(
        sender=sender, seq=seq, key_id=key_id, payload=payload, new_session=True
    )
    assert session.last_seq == seq


def test_header_fields_sit_where_the_layout_says() -> None:
    session = start("node-7", epoch=1234)
    data = seal(ring(KEY2), session, seq=77, payload=b"hello")
    assert fields(data) == {
        "version": 1,
        "flags": 0,
        "key_id": 2,
        "sender": "node-7",
        "epoch": 1234,
        "session_id": session.session_id,
        "seq": 77,
        "head_size": 45,
    }
    assert len(data) == 45 + 5 + 16 == overhead("node-7") + 5
    assert b"hello" not in data


def test_known_answer() -> None:
    """Pins format v1 byte for byte: any change to the layout or derivation fails here."""
    keyring = Keyring(
        cluster="alpha", keys=Key.from_passphrase(PASSPHRASE, key_id=7, cluster="alpha")
    )
    session = SenderSession(
        sender="n1", epoch=1_700_000_000_000_000, randbytes=lambda n: bytes(range(n))
    )
    data = seal(keyring, session, seq=5, payload=b"gossamer")
    assert data == bytes.fromhex(
        # version 1, flags 0, key id 7, sender "n1", epoch, session id 00..0f, seq 5:
        "01 00 00000007 02 6e31 00060a24181e4000 000102030405060708090a0b0c0d0e0f 0000000000000005"
        # the ciphertext of b"gossamer", then the GCM tag:
        "ecc6b3eae756e62d 67afd828b4e6e1ecdb7c521ad1c238a9"
    )
    assert unseal(keyring, data, replay=ReplayWindows()).payload == b"gossamer"


def test_the_result_is_a_true_frozen_opened() -> None:
    """unseal builds its result without the dataclass __init__ (for speed): same thing."""
    opened = unseal(ring(), seal(ring(), start(), seq=3, payload=b"x"), replay=ReplayWindows())
    expected = Opened(sender="n1", seq=3, key_id=1, payload=b"x", new_session=True)
    assert type(opened) is Opened and opened == expected and hash(opened) == hash(expected)
    assert repr(opened) == repr(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opened.seq = 4  # type: ignore[misc]


# --- integrity ---------------------------------------------------------------------------


def test_every_bit_flip_is_rejected() -> None:
    keyring = ring()
    data = seal(keyring, start(), seq=3, payload=b"small msg")
    for position in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[position] ^= 1 << bit
            with pytest.raises((DecodeError, CryptoError)):
                unseal(keyring, bytes(flipped), replay=ReplayWindows())
    # The rejected variants poisoned neither the key cache nor anything else.
    assert unseal(keyring, data, replay=ReplayWindows()).payload == b"small msg"


def test_every_truncation_and_extension_is_rejected() -> None:
    keyring = ring()
    data = seal(keyring, start(), seq=3, payload=b"small msg")
    for cut in range(len(data)):
        with pytest.raises((DecodeError, CryptoError)):
            unseal(keyring, data[:cut], replay=ReplayWindows())
    with pytest.raises(CryptoError) as excinfo:
        unseal(keyring, data + b"\x00", replay=ReplayWindows())
    assert kind_of(excinfo) == "forged"


def test_wrong_key_with_the_same_id_is_a_forgery() -> None:
    data = seal(ring(KEY1), start(), seq=0, payload=b"x")
    impostor = Key.from_bytes(KEY2.secret, key_id=1)
    with pytest.raises(CryptoError) as excinfo:
        unseal(ring(impostor), data, replay=ReplayWindows())
    assert kind_of(excinfo) == "forged"


@given(st.binary(max_size=400))
def test_random_bytes_raise_only_decode_or_crypto_errors(data: bytes) -> None:
    with pytest.raises((DecodeError, CryptoError)):
        unseal(ring(), data, replay=ReplayWindows())


@given(
    key_id=st.sampled_from([1, 2, 3]),
    flags=st.sampled_from([0, 1, 2, 0x80]),
    sender=st.binary(min_size=0, max_size=20),
    tail=st.binary(min_size=32, max_size=32),
    body=st.binary(max_size=100),
)
def test_plausible_headers_with_garbage_raise_only_decode_or_crypto_errors(
    key_id: int, flags: int, sender: bytes, tail: bytes, body: bytes
) -> None:
    """Random bytes rarely get past the version byte; these reach the key lookup and GCM."""
    data = (
        bytes((1, flags)) + key_id.to_bytes(4, "big") + bytes((len(sender),)) + sender + tail + body
    )
    with pytest.raises((DecodeError, CryptoError)):
        unseal(ring(KEY1, KEY2, primary=1), data, replay=ReplayWindows())


@given(st.data())
def test_mutated_envelopes_raise_only_decode_or_crypto_errors(data: st.DataObject) -> None:
    keyring = ring()
    original = bytearray(seal(keyring, start(), seq=9, payload=b"payload" * 3, compress=True))
    mutated = bytearray(original)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=0, max_value=len(mutated) - 1))
        mutated[position] = data.draw(st.integers(min_value=0, max_value=255))
    if mutated == original:
        assert unseal(keyring, bytes(mutated), replay=ReplayWindows()).seq == 9
    else:
        with pytest.raises((DecodeError, CryptoError)):
            unseal(keyring, bytes(mutated), replay=ReplayWindows())


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda d: d[:10], "shorter than the minimum"),
        (lambda d: b"\xff" + d[1:], "unsupported envelope version"),
        (lambda d: d[:1] + b"\x02" + d[2:], "reserved flag bits"),
        (lambda d: d[:6] + b"\x00" + d[7:], "empty sender"),
        (lambda d: d[:6] + b"\xff" + d[7:], "truncated"),
        (lambda d: d[:7] + b"\xff" + d[8:], "not UTF-8"),
    ],
)
def test_malformed_headers_say_why(mutate: Callable[[bytes], bytes], reason: str) -> None:
    data = mutate(seal(ring(), start("ab"), seq=0, payload=b"x" * 40))
    with pytest.raises(DecodeError, match=reason):
        unseal(ring(), data, replay=ReplayWindows())


def test_a_failed_unseal_leaves_the_window_unchanged() -> None:
    keyring, session, replay = ring(), start(), ReplayWindows()
    data = seal(keyring, session, seq=5, payload=b"genuine")
    forged = data[:-1] + bytes((data[-1] ^ 1,))
    with pytest.raises(CryptoError):
        unseal(keyring, forged, replay=replay)
    assert "n1" not in replay
    assert unseal(keyring, data, replay=replay).seq == 5
    forged_next = seal(keyring, session, seq=6, payload=b"x")[:-1] + b"\x00"
    with pytest.raises(CryptoError):
        unseal(keyring, forged_next, replay=replay)
    assert replay.highest_seq("n1") == 5


# --- replay window -----------------------------------------------------------------------


def test_a_replay_is_rejected() -> None:
    keyring, replay = ring(), ReplayWindows()
    data = seal(keyring, start(), seq=0, payload=b"once")
    assert unseal(keyring, data, replay=replay).payload == b"once"
    with pytest.raises(CryptoError) as excinfo:
        unseal(keyring, data, replay=replay)
    assert kind_of(excinfo) == "duplicate"


def test_out_of_order_within_the_window_is_accepted_once() -> None:
    keyring, session, replay = ring(), start(), ReplayWindows()
    datagrams = [seal(keyring, session, seq=seq, payload=b"%d" % seq) for seq in range(40)]
    order = list(range(40))
    random.Random(7).shuffle(order)
    assert [unseal(keyring, datagrams[i], replay=replay).seq for i in order] == order
    for i in order:
        with pytest.raises(CryptoError) as excinfo:
            unseal(keyring, datagrams[i], replay=replay)
        assert kind_of(excinfo) == "duplicate"


def test_too_old_is_rejected_and_the_window_edge_is_exact() -> None:
    keyring, session, replay = ring(), start(), ReplayWindows()
    datagrams = {
        seq: seal(keyring, session, seq=seq, payload=b"") for seq in (0, 1, DEFAULT_WINDOW, 5000)
    }
    unseal(keyring, datagrams[DEFAULT_WINDOW], replay=replay)
    with pytest.raises(CryptoError) as excinfo:
        unseal(keyring, datagrams[0], replay=replay)  # DEFAULT_WINDOW behind the highest
    assert kind_of(excinfo) == "too-old"
    assert unseal(keyring, datagrams[1], replay=replay).seq == 1  # just inside
    unseal(keyring, datagrams[5000], replay=replay)  # a jump wider than the window
    with pytest.raises(CryptoError) as excinfo:
        unseal(keyring, datagrams[DEFAULT_WINDOW], replay=replay)
    assert kind_of(excinfo) == "too-old"


@given(
    width=st.integers(min_value=1, max_value=40),
    seqs=st.lists(st.integers(min_value=0, max_value=120), max_size=80),
)
def test_window_agrees_with_a_model(width: int, seqs: list[int]) -> None:
    """Accepted exactly when never accepted before and less than ``width`` below the top."""
    keyring, session, replay = ring(), start(), ReplayWindows(width=width)
    datagrams = [seal(keyring, session, seq=seq, payload=b"") for seq in range(121)]
    accepted: set[int] = set()
    for seq in seqs:
        expected = seq not in accepted and (not accepted or seq > max(accepted) - width)
        try:
            unseal(keyring, datagrams[seq], replay=replay)
        except CryptoError as error:
            assert not expected, error
            assert error.fields["kind"] in {"duplicate", "too-old"}
        else:
            assert expected
            accepted.add(seq)
    assert replay.highest_seq("n1") == (max(accepted) if accepted else None)


def test_senders_have_separate_windows_and_the_table_is_bounded() -> None:
    keyring, replay = ring(), ReplayWindows(max_senders=2)
    a, b, c = start("a"), start("b", seed=2), start("c", seed=3)
    assert unseal(keyring, seal(keyring, a, seq=0, payload=b""), replay=replay).sender == "a"
    assert unseal(keyring, seal(keyring, b, seq=0, payload=b""), replay=replay).sender == "b"
    with pytest.raises(CryptoError) as excinfo:
        unseal(keyring, seal(keyring, c, seq=0, payload=b""), replay=replay)
    assert kind_of(excinfo) == "too-many-senders"
    replay.forget("a")
    assert unseal(keyring, seal(keyring, c, seq=1, payload=b""), replay=replay).sender == "c"
    assert len(replay) == 2 and "a" not in replay and "c" in replay


def _outcome(call: Callable[[], Opened]) -> object:
    try:
        return call()
    except CryptoError as error:
        return ("CryptoError", error.reason, error.fields)
    except DecodeError as error:
        return ("DecodeError", error.reason, error.fields)


@given(
    picks=st.lists(
        st.tuples(st.integers(min_value=0, max_value=47), st.integers(0, 3)), max_size=120
    ),
    width=st.integers(min_value=1, max_value=12),
)
def test_the_fast_path_agrees_with_the_full_checks(
    picks: list[tuple[int, int]], width: int
) -> None:
    """unseal (with its native fast path for a known session's fresh messages) accepts and
    rejects exactly what its Python code alone does, with the same errors and windows, for
    replays, reordering, restarts, key ids, forgeries, truncation, reserved flags,
    compression and a key removed halfway."""
    sender_ring = ring(KEY1, KEY2, primary=1)
    sessions = [start("a", epoch=1), start("a", epoch=2, seed=2), start("b", seed=3)]
    pool: list[bytes] = []
    for session in sessions:
        for seq in range(8):
            sender_ring.make_primary(1 + seq % 2)
            # Half compressed: the native fast path leaves those to the Python code.
            payload = b"%d" % seq * (1 + 20 * (seq % 2))
            pool.append(seal(sender_ring, session, seq=seq, payload=payload, compress=seq % 4 < 2))
    fast_ring, full_ring = ring(KEY1, KEY2, primary=1), ring(KEY1, KEY2, primary=1)
    fast, full = ReplayWindows(width=width), ReplayWindows(width=width)
    for step, (index, mutation) in enumerate(picks):
        data = pool[index % len(pool)]
        if index >= len(pool):  # a damaged copy
            data = [
                data[:-1] + bytes((data[-1] ^ 1,)),  # forged tag
                data[:-20],  # truncated
                data[:1] + b"\x02" + data[2:],  # reserved flag
                data[:-1],  # truncated by one
            ][mutation]
        if step == len(picks) // 2:
            fast_ring.remove(2)
            full_ring.remove(2)
        got = _outcome(functools.partial(unseal, fast_ring, data, replay=fast))
        slow = functools.partial(envelope._unseal_python, full_ring, data, full, 65_536)
        assert got == _outcome(slow)

    def windows(replay: ReplayWindows) -> dict[bytes, tuple[int, int, int]]:
        return {raw: (w.epoch, w.top, w.bits) for raw, w in replay._windows.items()}

    assert windows(fast) == windows(full)
    assert len(fast._fast) <= 2 * len(fast)  # bounded by the windows


def test_fast_path_entries_go_with_their_window() -> None:
    keyring, replay = ring(), ReplayWindows()
    first, second = start("a", epoch=1), start("a", epoch=2, seed=2)
    for seq in range(3):
        assert (
            not unseal(
                keyring, seal(keyring, first, seq=seq, payload=b""), replay=replay
            ).new_session
            or seq == 0
        )
    assert len(replay._fast) == 1
    assert unseal(keyring, seal(keyring, second, seq=0, payload=b""), replay=replay).new_session
    (entry,) = replay._fast.values()  # the restart replaced the old session's entry
    assert entry[0].epoch == 2
    replay.forget("a")
    assert not replay._fast and not len(replay)


@pytest.mark.parametrize("kwargs", [{"width": 0}, {"width": 1 << 17}, {"max_senders": 0}])
def test_bad_window_parameters_are_config_errors(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        ReplayWindows(**kwargs)


# --- restarts ----------------------------------------------------------------------------


def test_a_restart_repeats_seq_numbers_but_never_a_nonce_and_is_not_a_replay() -> None:
    keyring, replay = ring(), ReplayWindows()
    before, after = start(epoch=100, seed=1), start(epoch=200, seed=2)
    first = [seal(keyring, before, seq=seq, payload=b"same") for seq in range(32)]
    second = [seal(keyring, after, seq=seq, payload=b"same") for seq in range(32)]
    opened = [unseal(keyring, d, replay=replay) for d in first + second]
    assert [o.seq for o in opened] == list(range(32)) * 2
    assert [o.new_session for o in opened].count(True) == 2
    assert opened[0].new_session and opened[32].new_session
    assert replay.epoch("n1") == 200

    pairs = [effective_nonce(keyring, d) for d in first + second]
    assert len({nonce for _, nonce in pairs}) == 64  # the GCM nonces themselves differ
    assert len(set(pairs)) == 64
    assert len({subkey for subkey, _ in pairs}) == 2  # one subkey per session
    # Same seq, same payload, two sessions: no shared keystream (cf. Chatter's many-time pad).
    assert all(a[-20:] != b[-20:] for a, b in zip(first, second, strict=True))


def test_a_restart_that_reuses_the_random_session_id_still_gets_a_new_subkey() -> None:
    """A simulator restarting a node with the same seed: the epoch alone separates them."""
    keyring = ring()
    one = seal(keyring, start(epoch=1, seed=5), seq=0, payload=b"x")
    two = seal(keyring, start(epoch=2, seed=5), seq=0, payload=b"x")
    assert fields(one)["session_id"] == fields(two)["session_id"]
    assert effective_nonce(keyring, one)[0] != effective_nonce(keyring, two)[0]


def test_messages_from_before_a_restart_are_stale() -> None:
    keyring, replay = ring(), ReplayWindows()
    before, after = start(epoch=100, seed=1), start(epoch=200, seed=2)
    old = [seal(keyring, before, seq=seq, payload=b"") for seq in range(3)]
    unseal(keyring, old[0], replay=replay)
    unseal(keyring, seal(keyring, after, seq=0, payload=b""), replay=replay)
    for data in old:  # seen (old[0]) or not, the old session is over
        with pytest.raises(CryptoError) as excinfo:
            unseal(keyring, data, replay=replay)
        assert kind_of(excinfo) == "stale-session"


def test_same_epoch_other_session_is_stale() -> None:
    keyring, replay = ring(), ReplayWindows()
    unseal(keyring, seal(keyring, start(epoch=5, seed=1), seq=0, payload=b""), replay=replay)
    with pytest.raises(CryptoError) as excinfo:
        unseal(keyring, seal(keyring, start(epoch=5, seed=2), seq=0, payload=b""), replay=replay)
    assert kind_of(excinfo) == "stale-session"


def test_a_clock_that_went_backwards_needs_forget() -> None:
    keyring, replay = ring(), ReplayWindows()
    unseal(keyring, seal(keyring, start(epoch=500, seed=1), seq=9, payload=b""), replay=replay)
    late = seal(keyring, start(epoch=400, seed=2), seq=0, payload=b"")
    with pytest.raises(CryptoError):
        unseal(keyring, late, replay=replay)
    replay.forget("n1")
    assert unseal(keyring, late, replay=replay).new_session


def test_a_forged_restart_cannot_reset_the_window() -> None:
    keyring, session, replay = ring(), start(epoch=1), ReplayWindows()
    data = seal(keyring, session, seq=0, payload=b"")
    unseal(keyring, data, replay=replay)
    forged = bytearray(data)
    forged[9:17] = (2).to_bytes(8, "big")  # claim a later epoch
    with pytest.raises(CryptoError) as excinfo:
        unseal(keyring, bytes(forged), replay=replay)
    assert kind_of(excinfo) == "forged"
    assert replay.epoch("n1") == 1
    with pytest.raises(CryptoError):
        unseal(keyring, data, replay=replay)


# --- keys: rotation, cluster binding ---------------------------------------------------------


def test_rotation_without_downtime() -> None:
    sender_ring, receiver_ring = ring(KEY1), ring(KEY1)
    session, replay = start(), ReplayWindows()
    in_flight = seal(sender_ring, session, seq=0, payload=b"old key")
    late = seal(sender_ring, session, seq=1, payload=b"old key, late")
    # 1. install everywhere, 2. make primary (the sender first here), 3. remove.
    for keyring in (sender_ring, receiver_ring):
        keyring.install(KEY2)
    sender_ring.make_primary(2)
    fresh = seal(sender_ring, session, seq=2, payload=b"new key")
    assert unseal(receiver_ring, fresh, replay=replay).key_id == 2
    assert unseal(receiver_ring, in_flight, replay=replay).key_id == 1  # previous key still opens
    receiver_ring.make_primary(2)
    receiver_ring.remove(1)
    with pytest.raises(CryptoError) as excinfo:
        unseal(receiver_ring, late, replay=replay)
    assert kind_of(excinfo) == "unknown-key"
    assert replay.highest_seq("n1") == 2


def test_a_key_removed_and_reinstalled_under_its_id_is_used_afresh() -> None:
    keyring, session = ring(KEY1, KEY2, primary=2), start()
    seal(keyring, session, seq=0, payload=b"")
    keyring.remove(1)
    replacement = Key.from_bytes(bytes(range(50, 82)), key_id=1)
    keyring.install(replacement)
    keyring.make_primary(1)
    data = seal(keyring, session, seq=1, payload=b"x")
    assert unseal(ring(replacement), data, replay=ReplayWindows()).payload == b"x"


def test_another_cluster_with_the_same_passphrase_cannot_open() -> None:
    alpha = Keyring(
        cluster="alpha", keys=Key.from_passphrase(PASSPHRASE, key_id=1, cluster="alpha")
    )
    beta = Keyring(cluster="beta", keys=Key.from_passphrase(PASSPHRASE, key_id=1, cluster="beta"))
    data = seal(alpha, start(), seq=0, payload=b"for alpha")
    with pytest.raises(CryptoError) as excinfo:
        unseal(beta, data, replay=ReplayWindows())
    assert kind_of(excinfo) == "forged"
    assert unseal(alpha, data, replay=ReplayWindows()).payload == b"for alpha"


def test_another_cluster_with_the_same_raw_key_cannot_open() -> None:
    data = seal(ring(cluster="alpha"), start(), seq=0, payload=b"x")
    with pytest.raises(CryptoError) as excinfo:
        unseal(ring(cluster="beta"), data, replay=ReplayWindows())
    assert kind_of(excinfo) == "forged"


def test_one_session_follows_its_keyring_and_primary() -> None:
    session, alpha, beta = start(), ring(cluster="alpha"), ring(cluster="beta")
    to_alpha = seal(alpha, session, seq=0, payload=b"a")
    to_beta = seal(beta, session, seq=1, payload=b"b")
    assert unseal(alpha, to_alpha, replay=ReplayWindows()).payload == b"a"
    assert unseal(beta, to_beta, replay=ReplayWindows()).payload == b"b"
    with pytest.raises(CryptoError):
        unseal(alpha, to_beta, replay=ReplayWindows())


# --- sealing rules and limits ----------------------------------------------------------------


def test_seq_must_grow_within_a_session() -> None:
    keyring, session = ring(), start()
    seal(keyring, session, seq=5, payload=b"")
    for seq in (5, 4, -1, MAX_SEQ + 1, 6.0):
        with pytest.raises(LocalProtocolError):
            seal(keyring, session, seq=seq, payload=b"")  # type: ignore[arg-type]
    assert session.last_seq == 5
    seal(keyring, session, seq=MAX_SEQ, payload=b"")
    with pytest.raises(LocalProtocolError):
        seal(keyring, session, seq=MAX_SEQ, payload=b"")


def test_payload_size_is_bounded_both_ways() -> None:
    keyring, session = ring(), start()
    with pytest.raises(LocalProtocolError):
        seal(keyring, session, seq=0, payload=b"x" * 101, max_payload=100)
    assert session.last_seq is None  # nothing was sealed, the seq is still free
    data = seal(keyring, session, seq=0, payload=b"x" * 101, max_payload=101)
    with pytest.raises(DecodeError, match="exceeds"):
        unseal(keyring, data, replay=ReplayWindows(), max_payload=100)
    assert unseal(keyring, data, replay=ReplayWindows(), max_payload=101).payload == b"x" * 101


def test_compression_is_off_by_default_and_shrinks_when_asked() -> None:
    keyring, session = ring(), start()
    payload = b"abcdefgh" * 200
    plain = seal(keyring, session, seq=0, payload=payload)
    packed = seal(keyring, session, seq=1, payload=payload, compress=True)
    assert len(plain) == overhead("n1") + len(payload) and plain[1] == 0
    assert len(packed) < len(plain) // 4 and packed[1] == envelope.FLAG_COMPRESSED
    replay = ReplayWindows()
    assert unseal(keyring, packed, replay=replay).payload == payload
    incompressible = random.Random(3).randbytes(300)
    assert seal(keyring, session, seq=2, payload=incompressible, compress=True)[1] == 0


def test_a_decompression_bomb_is_refused_before_it_is_inflated() -> None:
    keyring, replay = ring(), ReplayWindows()
    bomb = seal(keyring, start(), seq=0, payload=bytes(60_000), compress=True)
    assert len(bomb) < 4_000
    with pytest.raises(DecodeError, match="would exceed"):
        unseal(keyring, bomb, replay=replay, max_payload=10_000)
    assert "n1" not in replay  # rejected before the window was touched


def _authentic(
    keyring: Keyring, session: SenderSession, *, seq: int, flags: int, body: bytes
) -> bytes:
    """Seal ``body`` as is with any flags, from the documented layout and derivation, so
    that authentic-but-malformed contents can be tested."""
    raw = session.sender.encode()
    ident = bytes((len(raw),)) + raw + session.epoch.to_bytes(8, "big") + session.session_id
    key = keyring.primary
    header = bytes((1, flags)) + key.key_id.to_bytes(4, "big") + ident + seq.to_bytes(8, "big")
    subkey = derive_session(key, cluster=keyring.cluster, ident=ident)
    nonce = session.session_id[-4:] + seq.to_bytes(8, "big")
    return header + AESGCM(subkey).encrypt(nonce, body, header)


def test_the_documented_derivation_is_what_seal_uses() -> None:
    keyring, session = ring(), start()
    assert _authentic(keyring, session, seq=4, flags=0, body=b"abc") == seal(
        keyring, session, seq=4, payload=b"abc"
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\xff\xff\xff\xff\xff\xff", "bad Snappy preamble"),
        (b"\x05\x00", "corrupt Snappy"),
        (bytes(cramjam.snappy.compress_raw(b"hello world"))[:-3], "corrupt Snappy"),
        (b"", "corrupt Snappy"),
    ],
)
def test_authentic_but_corrupt_compressed_payloads_are_decode_errors(
    body: bytes, reason: str
) -> None:
    keyring, session, replay = ring(), start(), ReplayWindows()
    with pytest.raises(DecodeError, match=reason):
        unseal(keyring, _authentic(keyring, session, seq=0, flags=1, body=body), replay=replay)
    assert "n1" not in replay


@given(body=st.binary(max_size=300), max_payload=st.integers(min_value=300, max_value=2000))
def test_authentic_compressed_garbage_is_a_decode_error_or_bounded(
    body: bytes, max_payload: int
) -> None:
    keyring, session = ring(), start()
    data = _authentic(keyring, session, seq=0, flags=1, body=body)
    try:
        opened = unseal(keyring, data, replay=ReplayWindows(), max_payload=max_payload)
    except DecodeError:
        return
    assert len(opened.payload) <= max_payload
    assert opened.payload == bytes(cramjam.snappy.decompress_raw(body))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sender": "", "epoch": 1},
        {"sender": "é" * 128, "epoch": 1},
        {"sender": "n1", "epoch": -1},
        {"sender": "n1", "epoch": 2**64},
        {"sender": "n1", "epoch": True},
        {"sender": "\ud800", "epoch": 1},  # a lone surrogate has no UTF-8 form
        {"sender": b"n1", "epoch": 1},
    ],
)
def test_bad_sessions_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        SenderSession(randbytes=randbytes(1), **kwargs)  # type: ignore[arg-type]


def test_session_randomness_is_injected_and_checked() -> None:
    assert start(seed=1).session_id == start(seed=1).session_id != start(seed=2).session_id
    assert start(seed=1).session_id == random.Random(1).randbytes(16)
    with pytest.raises(ConfigError):
        SenderSession(sender="n1", epoch=1, randbytes=lambda n: b"short")


def test_a_session_identity_cannot_be_changed_after_the_fact() -> None:
    session = start()
    for name, value in (("sender", "n2"), ("epoch", 2), ("session_id", bytes(16))):
        with pytest.raises(AttributeError):
            setattr(session, name, value)
    assert (session.sender, session.epoch) == ("n1", 1)


def test_minimum_size_is_an_empty_payload_from_a_one_byte_sender() -> None:
    data = seal(ring(), start("x"), seq=0, payload=b"")
    assert len(data) == MIN_SIZE == overhead("x")
    assert unseal(ring(), data, replay=ReplayWindows()).payload == b""
