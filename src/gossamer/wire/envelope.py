"""gossamer's authenticated envelope (format version 1), the default on the wire.

Chatter's own format (AES-256-CTR with a fixed IV, an unkeyed XXH32) is a many-time pad with
no integrity (chatter-as-coded.md §12). This envelope replaces it unless a deployment asks for
the original wire (``--wire original``; DESIGN.md, "Wire security")::

    0     1     2           6     7          7+n         15+n            31+n        39+n
    +-----+-----+-----------+-----+----------+-----------+---------------+-----------+
    | ver |flags| key id    |  n  | sender   | epoch     | session id    | seq       |
    |  1  |     | u32 BE    |     | n bytes  | u64 BE    | 16 random B   | u64 BE    |
    +-----+-----+-----------+-----+----------+-----------+---------------+-----------+
    | ciphertext (same length as the payload, or its raw Snappy form)   | GCM tag 16 |
    +--------------------------------------------------------------------+------------+

- ``ver`` is 1 (Chatter datagrams start with 0xFF, so the two never mix up);
- ``flags`` bit 0: the payload was compressed (raw Snappy) before sealing; bits 1-7 are 0;
- ``key id`` names the keyring key (1 to 2**32 - 1);
- ``n``, ``sender``: the sender's node id, 1 to 255 bytes of UTF-8;
- ``epoch``, ``session id``: the sender session (:class:`SenderSession`). The epoch orders the
  sessions of one sender (it must grow across restarts); the session id is 128 random bits;
- ``seq``: the sender's message number in this session, strictly increasing.

Cipher: AES-256-GCM under a per-session subkey, derived with HKDF-SHA256 from the key, the
cluster name, the key id and the session (``keyring.derive_session``). The 12-byte nonce is
the last 12 header bytes: the session id's last 4 bytes, then ``seq`` (a fixed field and a
counter, RFC 5116 §3.2). The associated data is the whole header, bytes 0 to 39+n, so every
header field is authenticated. A (subkey, nonce) pair is therefore unique as long as ``seq``
grows within a session (``seal`` enforces it) and no two sessions of one sender under one key
share both epoch and 128-bit random session id (probability at most s**2 / 2**129 for s
sessions even with equal epochs). See ``docs/wire.md`` for the whole argument.

The codec is pure, as everything in ``wire``: the state it needs lives in objects the caller
owns and passes in: the :class:`~gossamer.wire.keyring.Keyring`, the :class:`SenderSession`
(sealing) and the :class:`ReplayWindows` (opening). Randomness (the session id) is injected.
``unseal`` raises only ``DecodeError`` (malformed) and ``CryptoError`` (unknown key, failed
authentication, replay, stale session).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import cramjam
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gossamer.errors import ConfigError, CryptoError, DecodeError, LocalProtocolError
from gossamer.wire.keyring import Key, Keyring

__all__ = [
    "DEFAULT_MAX_PAYLOAD",
    "DEFAULT_MAX_SENDERS",
    "DEFAULT_WINDOW",
    "FLAG_COMPRESSED",
    "MAX_SEQ",
    "MIN_SIZE",
    "NATIVE_FAST_PATH",
    "SESSION_ID_SIZE",
    "TAG_SIZE",
    "VERSION",
    "Opened",
    "ReplayWindows",
    "SenderSession",
    "overhead",
    "seal",
    "unseal",
]

VERSION = 1
FLAG_COMPRESSED = 0x01
TAG_SIZE = 16
SESSION_ID_SIZE = 16
MAX_SEQ = (1 << 64) - 1
MAX_EPOCH = (1 << 64) - 1
#: Largest payload (before compression) sealed or opened unless the caller says otherwise.
DEFAULT_MAX_PAYLOAD = 65_536
#: Replay window width in messages, as in IPsec/DTLS (RFC 4303 §3.4.3, RFC 6347 §4.1.2.6).
DEFAULT_WINDOW = 1024
#: Senders whose window is kept before new senders are refused (fail closed).
DEFAULT_MAX_SENDERS = 65_536

_PREFIX = struct.Struct(">BBI")  # version, flags, key id: the header before the session identity
_TAIL = struct.Struct(">Q16sQ")  # epoch, session id, seq
_FIXED = _PREFIX.size + 1 + _TAIL.size  # 39: header bytes besides the sender
#: The shortest valid envelope: one-byte sender, empty payload.
MIN_SIZE = _FIXED + 1 + TAG_SIZE
_IDENT_START = _PREFIX.size  # the session identity (n, sender, epoch, session id) starts here
_KEYED_START = 2  # the key id and the session identity: the keyring's cache key
_NONCE_FIXED = 4  # the nonce is the session id's last 4 bytes, then the 8-byte seq


def overhead(sender: str) -> int:
    """Bytes an envelope adds to a payload from ``sender`` (header and tag)."""
    return _FIXED + len(sender.encode()) + TAG_SIZE


def _utf8(text: object) -> bytes | None:
    """``text`` as UTF-8, or ``None`` if it is not a str that has one (lone surrogates)."""
    if not isinstance(text, str):
        return None
    try:
        return text.encode()
    except UnicodeEncodeError:
        return None


def _ident(sender: bytes, epoch: int, session_id: bytes) -> bytes:
    return bytes((len(sender),)) + sender + epoch.to_bytes(8, "big") + session_id


class SenderSession:
    """One run of a sender: its node id, epoch and random session id, and the last seq sealed.

    Start a new session every time the sending process starts (and whenever it loses track of
    its last seq). ``epoch`` must be larger than the epoch of every earlier session of the same
    sender: receivers treat a larger epoch as a restart and reject smaller ones as stale (see
    :class:`ReplayWindows`). Wall-clock microseconds at start (``time.time_ns() // 1000``) or a
    persisted boot counter are the intended sources; the epoch is never used for secrecy, so a
    wrong clock costs availability, never confidentiality. ``randbytes(n)`` must return ``n``
    bytes from a CSPRNG in production (``secrets.token_bytes``); tests and the simulator pass a
    seeded ``random.Random(...).randbytes``.

    The session is mutable state owned by the caller: ``seal`` records the last seq in it and
    refuses any seq that is not larger, so a nonce can never repeat within a session. It also
    memoizes the cipher and header of the keyring's primary key (a pure function of them).
    """

    __slots__ = ("_epoch", "_ident", "_last_seq", "_memo", "_sender", "_session_id")

    def __init__(self, *, sender: str, epoch: int, randbytes: Callable[[int], bytes]) -> None:
        raw = _utf8(sender)
        if raw is None or not 1 <= len(raw) <= 255:
            raise ConfigError("sender id must be 1 to 255 bytes of UTF-8", sender=sender)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
            raise ConfigError("epoch must be an int in [0, 2**64)", epoch=epoch)
        session_id = bytes(randbytes(SESSION_ID_SIZE))
        if len(session_id) != SESSION_ID_SIZE:
            raise ConfigError("randbytes returned the wrong number of bytes", got=len(session_id))
        self._sender = sender
        self._epoch = epoch
        self._session_id = session_id
        self._ident = _ident(raw, epoch, session_id)
        self._last_seq = -1
        self._memo: _SealMemo | None = None

    @property
    def sender(self) -> str:
        return self._sender

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def session_id(self) -> bytes:
        """The 16 random bytes drawn from ``randbytes`` when the session started."""
        return self._session_id

    @property
    def last_seq(self) -> int | None:
        """The last seq sealed in this session, or ``None`` before the first."""
        return None if self._last_seq < 0 else self._last_seq

    def __repr__(self) -> str:
        return (
            f"SenderSession(sender={self.sender!r}, epoch={self.epoch}, "
            f"session_id={self.session_id.hex()}, last_seq={self.last_seq})"
        )


class _SealMemo:
    """What ``seal`` derives from (keyring, primary key, session); valid while both are the
    same objects, since a keyring's cluster never changes and a Key is immutable."""

    __slots__ = ("aead", "headers", "key", "keyring", "nonce_prefix")

    def __init__(self, keyring: Keyring, key: Key, session: SenderSession) -> None:
        found = keyring.session_cipher(key.key_id, session._ident, remember=True)
        assert found is not None  # the primary key is always installed
        self.keyring = keyring
        self.key = key
        self.aead = found[0]
        self.nonce_prefix = session.session_id[-_NONCE_FIXED:]
        # The header up to the seq, indexed by flags.
        self.headers = tuple(
            _PREFIX.pack(VERSION, flags, key.key_id) + session._ident for flags in range(2)
        )


def seal(
    keyring: Keyring,
    session: SenderSession,
    *,
    seq: int,
    payload: bytes,
    compress: bool = False,
    max_payload: int = DEFAULT_MAX_PAYLOAD,
) -> bytes:
    """Seal ``payload`` as message ``seq`` of ``session`` under the keyring's primary key.

    ``seq`` must be larger than every seq sealed before in this session (a repeated seq would
    repeat an AES-GCM nonce); it is recorded in ``session`` before encrypting, so a seq is
    never used twice even if the caller drops the result. A payload longer than
    ``max_payload`` or a bad seq raises ``LocalProtocolError``.

    ``compress=True`` sends the raw Snappy form when it is shorter. It is off by default:
    compressing before encrypting makes the length depend on the content, which leaks secrets
    that share a message with attacker-chosen data (CRIME; chatter-as-coded.md §12 item 10).
    """
    size = len(payload)
    if size > max_payload:
        raise LocalProtocolError(
            "payload exceeds the maximum size", size=size, max_payload=max_payload
        )
    if type(seq) is not int or seq <= session._last_seq or seq > MAX_SEQ:
        raise LocalProtocolError(
            "seq must grow within a session (a repeated seq would repeat a nonce)",
            seq=seq,
            last_seq=session.last_seq,
        )
    session._last_seq = seq
    flags = 0
    if compress and size:
        packed = bytes(cramjam.snappy.compress_raw(payload))
        if len(packed) < size:
            payload = packed
            flags = FLAG_COMPRESSED
    key = keyring.primary
    memo = session._memo
    if memo is None or memo.key is not key or memo.keyring is not keyring:
        memo = session._memo = _SealMemo(keyring, key, session)
    seq_bytes = seq.to_bytes(8, "big")
    header = memo.headers[flags] + seq_bytes
    return header + memo.aead.encrypt(memo.nonce_prefix + seq_bytes, payload, header)


@dataclass(frozen=True, slots=True, kw_only=True)
class Opened:
    """An authenticated, fresh message.

    ``new_session`` is true when this message started a new session of ``sender`` in the
    replay windows: its first message ever seen, or its first after a restart (a larger
    epoch). Upper layers may reset what they know about that peer.
    """

    sender: str
    seq: int
    key_id: int
    payload: bytes
    new_session: bool


class _Window:
    """The current session of one sender and its sliding bitmap of seen seqs.

    Bit ``i`` of ``bits`` says that seq ``top - i`` was accepted (RFC 4303 §3.4.3). ``fast``
    lists this window's entries in ``ReplayWindows._fast`` (one per key id it was opened
    under), so that they go when the window does.
    """

    __slots__ = ("bits", "epoch", "fast", "sender", "session_id", "top")

    def __init__(self, sender: str, epoch: int, session_id: bytes, top: int) -> None:
        self.sender = sender  # decoded once per session, not once per message
        self.epoch = epoch
        self.session_id = session_id
        self.top = top
        self.bits = 1
        self.fast: list[bytes] = []


#: Keys of ``ReplayWindows._fast`` kept per window: the current key id and the previous one
#: (during a rotation a sender's messages arrive under both).
_FAST_PER_WINDOW = 2


class ReplayWindows:
    """Per-sender replay protection for ``unseal``: owned by the caller, one per receiver.

    For each sender it keeps the current session (epoch, session id) and a sliding window
    ``width`` messages wide below the highest seq accepted, as IPsec and DTLS do (RFC 4303
    §3.4.3, RFC 6347 §4.1.2.6). A message of the current session is accepted once; a seq
    ``width`` or more below the highest is too old; reordering within the window is fine.

    Restarts. A sender that restarts starts a new session with a larger epoch and counts its
    seq from scratch. A message whose epoch is larger than the current one (and that
    authenticates) replaces the sender's session: its window starts afresh, so the repeated
    seq numbers are not replays. A message from an older epoch, or from another session with
    the same epoch, is rejected as stale: that is how a replayed message from before the
    restart is caught, since the windows of old sessions are not kept. If a sender's clock
    went backwards, its new session is refused until :meth:`forget` is called for it (for
    example when discovery declares that peer dead).

    The windows are checked before decryption and updated only after the message
    authenticated, so forgeries change nothing. At most ``max_senders`` senders are tracked;
    past that, messages from new senders are refused (failing closed: forgetting a window
    would let its messages be replayed).
    """

    __slots__ = ("_fast", "_mask", "_windows", "max_senders", "width")

    def __init__(
        self, *, width: int = DEFAULT_WINDOW, max_senders: int = DEFAULT_MAX_SENDERS
    ) -> None:
        if not 1 <= width <= 1 << 16:
            raise ConfigError("replay window width must be 1 to 65536", width=width)
        if max_senders < 1:
            raise ConfigError("max_senders must be at least 1", max_senders=max_senders)
        self.width = width
        self.max_senders = max_senders
        self._mask = (1 << width) - 1
        # Keyed by the sender id's wire bytes, so that the common case decodes nothing.
        self._windows: dict[bytes, _Window] = {}
        # What unseal's native fast path (_envelope_native.c) reads. Keyed by envelope
        # header bytes 2 to 31+n (the key id and the session identity: length, sender,
        # epoch, session id), so one slice finds it. The value is the 4-tuple the C code
        # expects: the sender's current window, the session's cipher, the key id and the
        # keyring token the cipher was found under (Keyring._token: it changes when a key is
        # removed). Entries are added only once a message authenticated, at most
        # _FAST_PER_WINDOW per window, and dropped with their window: at most
        # max_senders * _FAST_PER_WINDOW entries.
        self._fast: dict[bytes, tuple[_Window, AESGCM, int, object]] = {}

    def __len__(self) -> int:
        return len(self._windows)

    def _window(self, sender: object) -> _Window | None:
        raw = _utf8(sender)
        return None if raw is None else self._windows.get(raw)

    def __contains__(self, sender: object) -> bool:
        return self._window(sender) is not None

    def highest_seq(self, sender: str) -> int | None:
        """The highest seq accepted in ``sender``'s current session, or ``None``."""
        window = self._window(sender)
        return None if window is None else window.top

    def epoch(self, sender: str) -> int | None:
        """The epoch of ``sender``'s current session, or ``None``."""
        window = self._window(sender)
        return None if window is None else window.epoch

    def forget(self, sender: str) -> None:
        """Drop ``sender``'s window, so that its next authentic message starts a session
        whatever its epoch (the remedy for a sender whose clock went backwards).

        The price: until that sender's current session is seen again, messages recorded from
        any of its sessions can be replayed, each once. Call it when the sender is known to be
        gone (for example when discovery declares that peer dead), not routinely."""
        raw = _utf8(sender)
        if raw is not None:
            self._drop(self._windows.pop(raw, None))

    def _drop(self, window: _Window | None) -> None:
        """Forget the fast-path entries of a window that is no longer current."""
        if window is not None:
            for entry in window.fast:
                self._fast.pop(entry, None)

    def _remember(
        self, keyed: bytes, window: _Window, cipher: AESGCM, key_id: int, token: object
    ) -> None:
        """Record an authenticated session's cipher under its header bytes (see _fast)."""
        if keyed not in self._fast:
            fast = window.fast
            if len(fast) >= _FAST_PER_WINDOW:
                self._fast.pop(fast.pop(0), None)
            fast.append(keyed)
        self._fast[keyed] = (window, cipher, key_id, token)

    def _admit(self, sender: str, current: _Window | None, epoch: int) -> None:
        """Raise unless a message of epoch ``epoch`` may start a new session of ``sender``."""
        if current is None:
            if len(self._windows) >= self.max_senders:
                raise CryptoError(
                    "too many senders tracked by the replay windows",
                    kind="too-many-senders",
                    sender=sender,
                    max_senders=self.max_senders,
                )
        elif epoch <= current.epoch:
            raise CryptoError(
                "message from a stale session of this sender",
                kind="stale-session",
                sender=sender,
                epoch=epoch,
                current_epoch=current.epoch,
            )


def _decompress(body: bytes, max_payload: int) -> bytes:
    # Only authenticated bytes get here, and the size preamble is checked before anything is
    # allocated (Chatter allocated up to 4 GiB first: chatter-as-coded.md §5, §12 item 7).
    try:
        size = int(cramjam.snappy.decompress_raw_len(body))
    except cramjam.DecompressionError:
        raise DecodeError("compressed payload has a bad Snappy preamble") from None
    if size > max_payload:
        raise DecodeError(
            "compressed payload would exceed the maximum size", size=size, max_payload=max_payload
        )
    try:
        payload = bytes(cramjam.snappy.decompress_raw(body, output_len=size))
    except cramjam.DecompressionError:
        raise DecodeError("corrupt Snappy payload") from None
    if len(payload) != size:
        raise DecodeError("Snappy payload shorter than its preamble", size=size, got=len(payload))
    return payload


# One Struct per sender length, so that the whole header is read in one call.
_HEADERS = tuple(struct.Struct(f">BBIB{n}sQ16sQ") for n in range(256))
_SEQ = struct.Struct(">Q")


def _forged(key_id: int, sender: str) -> CryptoError:
    return CryptoError(
        "authentication failed (wrong key or cluster, or altered bytes)",
        kind="forged",
        key_id=key_id,
        sender=sender,
    )


def unseal(
    keyring: Keyring,
    data: bytes,
    *,
    replay: ReplayWindows,
    max_payload: int = DEFAULT_MAX_PAYLOAD,
) -> Opened:
    """Authenticate and decrypt one envelope, and record it in ``replay``.

    Raises ``DecodeError`` for malformed bytes (bad version, reserved flags, truncation, a size
    over ``max_payload``, a bad sender id or compressed form) and ``CryptoError`` with a
    ``kind`` field for the rest: ``unknown-key``, ``forged`` (authentication failed: wrong key,
    wrong cluster or altered bytes), ``duplicate``, ``too-old``, ``stale-session`` and
    ``too-many-senders``. Nothing else: a failed call leaves ``replay`` unchanged.
    """
    if _open_fast is not None:
        opened = _open_fast(keyring, data, replay, max_payload)
        if opened is not None:
            return opened
    return _unseal_python(keyring, data, replay, max_payload)


def _unseal_python(
    keyring: Keyring, data: bytes, replay: ReplayWindows, max_payload: int
) -> Opened:
    """The whole of ``unseal`` in Python: it validates everything in order and raises the
    errors that ``unseal`` documents. The native fast path is tested against it."""
    if type(data) is not bytes:
        data = bytes(data)
    size = len(data)
    if size < MIN_SIZE:
        raise DecodeError(f"envelope of {size} bytes is shorter than the minimum {MIN_SIZE}")
    if data[0] != VERSION:
        raise DecodeError(f"unsupported envelope version {data[0]}", offset=0)
    n = data[6]
    if n == 0:
        raise DecodeError("empty sender id", offset=6)
    head_size = _FIXED + n
    body_size = size - head_size - TAG_SIZE
    if body_size < 0:
        raise DecodeError("envelope truncated", offset=size, needs=head_size + TAG_SIZE)
    if body_size > max_payload:
        raise DecodeError(
            "envelope payload exceeds the maximum size", size=body_size, max_payload=max_payload
        )
    _, flags, key_id, _, sender_raw, epoch, session_id, seq = _HEADERS[n].unpack_from(data)
    if flags & ~FLAG_COMPRESSED:
        raise DecodeError("reserved flag bits are set", offset=1, flags=flags)

    found_window = replay._windows.get(sender_raw)
    if (
        found_window is not None
        and found_window.session_id == session_id
        and found_window.epoch == epoch
    ):
        window: _Window | None = found_window
        sender = found_window.sender
    else:
        try:
            sender = sender_raw.decode()
        except UnicodeDecodeError:
            raise DecodeError("sender id is not UTF-8", offset=7) from None
        replay._admit(sender, found_window, epoch)
        window = None  # a new session of this sender starts if the message authenticates

    # The replay check comes before decryption: it is cheap and changes nothing (RFC 4303
    # §3.4.3); the window is updated only once the message has authenticated.
    if window is not None:
        behind = window.top - seq
        if behind >= 0:
            if behind >= replay.width:
                raise CryptoError(
                    "message too old for the replay window",
                    kind="too-old",
                    sender=sender,
                    seq=seq,
                    highest=window.top,
                )
            if (window.bits >> behind) & 1:
                raise CryptoError("replayed message", kind="duplicate", sender=sender, seq=seq)

    # The keyring's cache is read directly, as a method call costs more than the lookup.
    # Misses go through the keyring's API.
    keyed = data[_KEYED_START : head_size - 8]
    cipher = keyring._ciphers.get(keyed)
    fresh = cipher is None
    if cipher is None:
        found = keyring.session_cipher(key_id, data[_IDENT_START : head_size - 8], remember=False)
        if found is None:
            raise CryptoError(
                "no key installed with this id", kind="unknown-key", key_id=key_id, sender=sender
            )
        cipher = found[0]
    try:
        payload = cipher.decrypt(
            data[head_size - 12 : head_size], data[head_size:], data[:head_size]
        )
    except InvalidTag:
        raise _forged(key_id, sender) from None
    if flags:
        payload = _decompress(payload, max_payload)

    # Authentic and well formed: record the seq and the session's fast-path entry.
    if window is None:
        replay._drop(found_window)
        window = replay._windows[sender_raw] = _Window(sender, epoch, session_id, seq)
        new_session = True
    else:
        ahead = seq - window.top
        if ahead > 0:
            window.bits = ((window.bits << ahead) | 1) & replay._mask if ahead < replay.width else 1
            window.top = seq
        else:
            window.bits |= 1 << -ahead
        new_session = False
    if fresh:
        keyring.remember(key_id, data[_IDENT_START : head_size - 8], cipher)
    replay._remember(keyed, window, cipher, key_id, keyring._token)

    return Opened(sender=sender, seq=seq, key_id=key_id, payload=payload, new_session=new_session)


# The hot path in C (_envelope_native.c), built when the package was installed with a C
# compiler: a fresh message of a known session, opened for about a fifth of the Python
# code's overhead. Without it every message takes _unseal_python, with the same results.
_open_fast: Callable[[Keyring, bytes, ReplayWindows, int], Opened | None] | None
try:
    from gossamer.wire import _envelope_native
except ImportError:  # installed without a C compiler
    _open_fast = None
else:
    _envelope_native.configure(Opened, _Window, ReplayWindows, Keyring, _forged, InvalidTag)
    _open_fast = _envelope_native.open_fast

#: Whether ``unseal`` runs its native fast path (see above).
NATIVE_FAST_PATH = _open_fast is not None
