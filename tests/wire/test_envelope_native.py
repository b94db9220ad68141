"""The native fast path of ``envelope.unseal`` (``_envelope_native.c``) is built and used.

That it accepts and rejects exactly what the Python code does is
``test_envelope.test_the_fast_path_agrees_with_the_full_checks``; the fuzz script
(``bench/fuzz_decoders.py``) drives it with random and mutated envelopes.
"""

from __future__ import annotations

import random
import threading

import pytest

from gossamer.errors import CryptoError
from gossamer.wire import envelope
from gossamer.wire.envelope import Opened, ReplayWindows, SenderSession, seal, unseal
from gossamer.wire.keyring import Key, Keyring


def _ring() -> Keyring:
    return Keyring(cluster="test", keys=Key.from_bytes(bytes(range(32)), key_id=1))


def _session(sender: str = "n1") -> SenderSession:
    return SenderSession(sender=sender, epoch=1, randbytes=random.Random(7).randbytes)


def test_the_native_fast_path_is_built() -> None:
    # ./run installs a C compiler; an install without one works, but slower.
    assert envelope.NATIVE_FAST_PATH, (
        "gossamer.wire._envelope_native was not built: install a C compiler (gcc) and "
        "reinstall (./run test does both)"
    )


def test_fresh_messages_of_a_known_session_skip_the_python_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keyring, replay, session = _ring(), ReplayWindows(width=64), _session()
    sealed = [seal(keyring, session, seq=seq, payload=b"m%d" % seq) for seq in range(200)]
    python_calls: list[int] = []
    full = envelope._unseal_python

    def counting(*args: object) -> Opened:
        python_calls.append(1)
        return full(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(envelope, "_unseal_python", counting)
    order = [0, *range(2, 200)]  # seq 1 is held back
    got = [unseal(keyring, sealed[seq], replay=replay) for seq in order]
    assert [o.seq for o in got] == order
    assert [o.payload for o in got] == [b"m%d" % seq for seq in order]
    assert got[0].new_session and not any(o.new_session for o in got[1:])
    assert all(type(o) is Opened and o.sender == "n1" and o.key_id == 1 for o in got)
    assert len(python_calls) == 1  # the session's first message only
    # Seq 1 is now 198 behind the top, outside a 64-message window: the Python code says so.
    with pytest.raises(CryptoError) as excinfo:
        unseal(keyring, sealed[1], replay=replay)
    assert excinfo.value.fields["kind"] == "too-old"
    assert len(python_calls) == 2


def test_late_messages_inside_the_window_and_replays() -> None:
    keyring, replay, session = _ring(), ReplayWindows(width=8), _session()
    sealed = [seal(keyring, session, seq=seq, payload=b"%d" % seq) for seq in range(10)]
    for seq in (0, 5, 3, 9, 2):
        assert unseal(keyring, sealed[seq], replay=replay).seq == seq
    for seq in (0, 5, 3, 9, 2, 1):  # replays, and seq 1: 8 behind 9, out of the window
        with pytest.raises(CryptoError) as excinfo:
            unseal(keyring, sealed[seq], replay=replay)
        assert excinfo.value.fields["kind"] == ("too-old" if seq in (0, 1) else "duplicate")
    assert unseal(keyring, sealed[4], replay=replay).seq == 4
    assert replay.highest_seq("n1") == 9


def test_a_forgery_of_a_known_session_is_rejected_and_changes_nothing() -> None:
    keyring, replay, session = _ring(), ReplayWindows(), _session()
    first, second = (seal(keyring, session, seq=seq, payload=b"x" * 100) for seq in (1, 2))
    unseal(keyring, first, replay=replay)
    for position in (len(second) - 1, len(second) - 40, 60):
        forged = bytearray(second)
        forged[position] ^= 0x20
        with pytest.raises(CryptoError) as excinfo:
            unseal(keyring, bytes(forged), replay=replay)
        assert excinfo.value.fields["kind"] == "forged"
        assert excinfo.value.fields["sender"] == "n1"
    assert replay.highest_seq("n1") == 1
    assert unseal(keyring, second, replay=replay).payload == b"x" * 100


def test_a_removed_key_stops_the_fast_path_at_once() -> None:
    keyring, replay = _ring(), ReplayWindows()
    keyring.install(Key.from_bytes(bytes(range(100, 132)), key_id=2))
    session = _session()
    unseal(keyring, seal(keyring, session, seq=0, payload=b""), replay=replay)
    late = seal(keyring, session, seq=1, payload=b"")  # under key 1, the primary
    keyring.make_primary(2)
    keyring.remove(1)
    with pytest.raises(CryptoError) as excinfo:
        unseal(keyring, late, replay=replay)
    assert excinfo.value.fields["kind"] == "unknown-key"


def test_threads_sharing_a_receiver_accept_each_message_once() -> None:
    # The decryption may let other threads run: the window must stay consistent.
    keyring, replay, session = _ring(), ReplayWindows(width=4096), _session()
    sealed = [seal(keyring, session, seq=seq, payload=bytes(512)) for seq in range(3000)]
    unseal(keyring, sealed[0], replay=replay)
    accepted: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for data in sealed[1:]:
            try:
                opened = unseal(keyring, data, replay=replay)
            except CryptoError:
                continue
            with lock:
                accepted.append(opened.seq)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(accepted) == list(range(1, 3000))
