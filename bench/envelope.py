"""Benchmark: sealing and opening gossamer envelopes against the bare AEAD primitive.

Baselines, measured in the same run: a reused ``AESGCM`` object (and, to justify the choice of
cipher, a reused ``ChaCha20Poly1305``) encrypting the same payload with a counter nonce, and
decrypting such messages. The envelope adds the header, the per-session key lookup, the
replay window and the result object. The goal is at least 0.5x the bare AES-GCM rate.

Figures are CPU time (``time.process_time``), best of several rounds that alternate between
the contenders, so that a noisy neighbour hurts them alike.

Run from the repository root: ``.venv/bin/python -m bench.envelope [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import random
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from bench._report import machine, table, update_section
from gossamer.wire import envelope
from gossamer.wire.envelope import ReplayWindows, SenderSession, overhead, seal, unseal
from gossamer.wire.keyring import Key, Keyring

SIZES = (200, 4096)
GOAL = 0.5
SENDER = "node-042"


def _cpu_seconds(run: Callable[[], None]) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        run()
        return time.process_time() - start
    finally:
        gc.enable()


def _contenders(size: int, count: int, rng: random.Random) -> dict[str, Callable[[], None]]:
    """Zero-argument loops, each handling ``count`` messages of ``size`` bytes."""
    payload = rng.randbytes(size)
    secret = rng.randbytes(32)
    prefix = rng.randbytes(4)
    nonces = [prefix + i.to_bytes(8, "big") for i in range(count)]
    aes, chacha = AESGCM(secret), ChaCha20Poly1305(secret)
    aes_sealed = [aes.encrypt(n, payload, None) for n in nonces]
    chacha_sealed = [chacha.encrypt(n, payload, None) for n in nonces]

    keyring = Keyring(cluster="bench", keys=Key.from_bytes(secret, key_id=1))
    epoch = iter(range(1, 1 << 30))

    def new_session() -> SenderSession:
        return SenderSession(sender=SENDER, epoch=next(epoch), randbytes=rng.randbytes)

    session = new_session()
    envelopes = [seal(keyring, session, seq=i, payload=payload) for i in range(count)]

    def bare_aes_seal() -> None:
        # The nonce is built inside the loop, as any real sender must.
        encrypt = aes.encrypt
        for i in range(count):
            encrypt(prefix + i.to_bytes(8, "big"), payload, None)

    def bare_aes_open() -> None:
        decrypt = aes.decrypt
        for i, data in enumerate(aes_sealed):
            decrypt(prefix + i.to_bytes(8, "big"), data, None)

    def bare_chacha_seal() -> None:
        encrypt = chacha.encrypt
        for i in range(count):
            encrypt(prefix + i.to_bytes(8, "big"), payload, None)

    def bare_chacha_open() -> None:
        decrypt = chacha.decrypt
        for i, data in enumerate(chacha_sealed):
            decrypt(prefix + i.to_bytes(8, "big"), data, None)

    def envelope_seal() -> None:
        fresh = new_session()  # a seq may be sealed only once per session
        for i in range(count):
            seal(keyring, fresh, seq=i, payload=payload)

    head_size = 39 + len(SENDER.encode())
    header = struct.Struct(f">BBIB{len(SENDER.encode())}sQ16sQ")
    found = keyring.session_cipher(1, envelopes[0][6 : head_size - 8], remember=False)
    assert found is not None
    session_aead = found[0]

    def floor_open() -> None:
        # What any format with an authenticated header must do: read the header, then
        # decrypt with it as associated data. No key lookup, replay window or result object.
        unpack, decrypt = header.unpack_from, session_aead.decrypt
        for data in envelopes:
            unpack(data)
            decrypt(data[head_size - 12 : head_size], data[head_size:], data[:head_size])

    def envelope_open() -> None:
        replay = ReplayWindows()  # fresh, or every message would be a replay
        for data in envelopes:
            unseal(keyring, data, replay=replay)

    def python_open() -> None:
        # unseal without its native fast path: what an install without a C compiler runs.
        replay, unseal_python = ReplayWindows(), envelope._unseal_python
        for data in envelopes:
            unseal_python(keyring, data, replay, envelope.DEFAULT_MAX_PAYLOAD)

    # Every contender must really work before it is timed.
    assert unseal(keyring, envelopes[0], replay=ReplayWindows()).payload == payload
    assert aes.decrypt(nonces[-1], aes_sealed[-1], None) == payload
    return {
        "aes-seal": bare_aes_seal,
        "aes-open": bare_aes_open,
        "chacha-seal": bare_chacha_seal,
        "chacha-open": bare_chacha_open,
        "floor-open": floor_open,
        "envelope-seal": envelope_seal,
        "envelope-open": envelope_open,
        "python-open": python_open,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """Messages per second of CPU time for one payload size and operation."""

    size: int
    op: str
    aes: float
    chacha: float
    envelope: float
    floor: float | None  # header parse + AEAD only (open)
    python: float | None  # unseal's Python code alone (open)

    @property
    def ratio(self) -> float:
        return self.envelope / self.aes

    @property
    def extra_us(self) -> float:
        return (1 / self.envelope - 1 / self.aes) * 1e6


def measure(*, quick: bool) -> list[Row]:
    """One row per (size, operation)."""
    count = 5_000 if quick else 50_000
    rounds = 3 if quick else 7
    rng = random.Random(2024)
    rows: list[Row] = []
    for size in SIZES:
        contenders = _contenders(size, count, rng)
        best = dict.fromkeys(contenders, float("inf"))
        for _ in range(rounds):
            for name, run in contenders.items():
                best[name] = min(best[name], _cpu_seconds(run))
        for op in ("seal", "open"):
            rows.append(
                Row(
                    size=size,
                    op=op,
                    aes=count / best[f"aes-{op}"],
                    chacha=count / best[f"chacha-{op}"],
                    envelope=count / best[f"envelope-{op}"],
                    floor=count / best["floor-open"] if op == "open" else None,
                    python=count / best["python-open"] if op == "open" else None,
                )
            )
    return rows


def render(rows: list[Row], *, quick: bool) -> str:
    def k(value: float) -> str:
        return f"{value / 1000:,.0f} k"

    body = table(
        [
            "payload",
            "operation",
            "bare AES-256-GCM",
            "bare ChaCha20-Poly1305",
            "envelope (AES-256-GCM)",
            "envelope / bare AES-GCM",
            "envelope's extra CPU per message",
            "floor / bare AES-GCM",
            "Python code only / bare AES-GCM",
        ],
        [
            [
                f"{row.size} B",
                row.op,
                k(row.aes),
                k(row.chacha),
                k(row.envelope),
                f"**{row.ratio:.2f}x**",
                f"{row.extra_us:.2f} us",
                "" if row.floor is None else f"{row.floor / row.aes:.2f}x",
                "" if row.python is None else f"{row.python / row.aes:.2f}x",
            ]
            for row in rows
        ],
    )
    met = [f"{row.size} B {row.op}" for row in rows if row.ratio >= GOAL]
    missed = [f"{row.size} B {row.op}" for row in rows if row.ratio < GOAL]
    verdict = f"Goal (at least {GOAL}x the bare AES-GCM rate): met for {', '.join(met) or 'none'}"
    if missed:
        verdict += f"; missed for {', '.join(missed)}"
    return "\n".join(
        [
            "## Envelope (`gossamer.wire.envelope`)",
            "",
            "Messages per second of CPU time, one core, best of several alternating rounds"
            + (" (`--quick`: few messages, rough)" if quick else "")
            + f". {machine()}.",
            f"The envelope adds {overhead(SENDER)} bytes to a payload from `{SENDER}` "
            "(a 39-byte header plus the sender id, and the 16-byte tag). Sealing and opening run "
            "through the public API (`seal`; `unseal` with a `ReplayWindows`); the bare rows call "
            "a reused AEAD object with a counter nonce and no associated data. *Floor* is the "
            "least any format with an authenticated header does to open: unpack the header and "
            "decrypt with it as associated data, with no key lookup, replay window or result "
            "object, in a Python loop. `unseal` opens a fresh message of a known session in "
            "its native fast path (`wire/_envelope_native.c`; in this run: "
            f"{'yes' if envelope.NATIVE_FAST_PATH else 'NO, not built'}); *Python code only* "
            "is `unseal` without it, as installed without a C compiler.",
            "",
            body,
            "",
            verdict + ".",
            "",
            "Re-run: `.venv/bin/python -m bench.envelope`.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a few seconds, for CI")
    args = parser.parse_args(argv)
    rows = measure(quick=args.quick)
    markdown = render(rows, quick=args.quick)
    print(markdown)
    update_section("envelope", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
