"""The decoder fuzzer (``bench/fuzz_decoders.py``) in quick mode.

Two things are checked: the wire decoders keep their contract under a few thousand random
and mutated inputs each (only ``DecodeError``, or ``CryptoError`` from ``unseal``; every
oracle holds; allocation stays in budget), and the fuzzer really exercises them: every
decoder accepts some mutated inputs and rejects others, every decoder module is a target,
and a deliberately broken decoder is caught with a working reproducer.
"""

from __future__ import annotations

import importlib.util
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import gossamer.wire
from gossamer.errors import DecodeError
from gossamer.wire import isis, ping

ROOT = Path(__file__).resolve().parents[2]
COUNT = 1500  # random and mutated inputs each: 3,000 per decoder


def _load_fuzzer() -> ModuleType:
    # The script is loaded from its path under a name of its own, so the test does not
    # depend on the repository root being importable.
    spec = importlib.util.spec_from_file_location(
        "gossamer_bench_fuzz_decoders", ROOT / "bench" / "fuzz_decoders.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzzer()


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return {
        s.name: s
        for s in fuzz.run(count=COUNT, seed=1, jobs=1, mem_sample=40, worst_bytes=32 << 10)
    }


def test_every_wire_decoder_module_is_fuzzed() -> None:
    fuzzed = {target.where for target in fuzz.TARGETS}
    decoders = set()
    for info in pkgutil.iter_modules(gossamer.wire.__path__):
        module = importlib.import_module(f"gossamer.wire.{info.name}")
        names = set(getattr(module, "__all__", ()))
        if names & {"decode", "unseal", "decompress", "FrameDecoder", "FrameReader"} or any(
            name.startswith("decode_") for name in names
        ):
            decoders.add(f"wire/{info.name}.py")
    assert decoders >= {"wire/chatter.py", "wire/envelope.py", "wire/varint.py"}
    assert decoders <= fuzzed, f"decoder modules without a fuzz target: {decoders - fuzzed}"
    assert "trace/jsonl.py" in fuzzed


def test_only_decode_errors_come_out(results: dict[str, Any]) -> None:
    stats = list(results.values())
    assert [s.name for s in stats] == [t.name for t in fuzz.TARGETS]
    assert sum(s.unexpected for s in stats) == 0, fuzz.findings_text(stats)
    for s in stats:
        assert s.tried == 2 * COUNT
        assert s.by_kind["random"] == COUNT
        assert s.accepted + s.decode_errors + s.expected_other == s.tried


def test_every_decoder_accepts_some_mutants_and_rejects_others(
    results: dict[str, Any],
) -> None:
    for name, s in results.items():
        assert s.decode_errors > 0, name
        if name == "envelope.unseal":
            # Without the key nothing may open (the oracle would have flagged it); what
            # opens are the crafted, authentic envelopes with a mutated compressed body.
            assert s.accepted_by_kind.get("mutated", 0) == 0
            assert s.accepted_by_kind.get("crafted", 0) > 0
            assert s.expected_other > 0  # forgeries and replays: CryptoError
        else:
            assert s.accepted_by_kind.get("mutated", 0) > 0, name
            assert s.expected_other == 0, name


def test_allocation_was_measured_and_stayed_in_budget(results: dict[str, Any]) -> None:
    for name, s in results.items():
        assert s.mem_sampled == 80, name
        assert 0 < s.peak_alloc <= fuzz.ALLOC_FIXED_BUDGET, name
        assert s.over_budget == 0, name
        if fuzz._BY_NAME[name].worst is not None:
            # Nested empty containers cost Python objects, but a bounded multiple of the
            # input: a decoder that allocated from a length field would blow through this.
            assert 1 < s.worst_per_byte < 256, (name, s.worst_per_byte)


def test_a_fixed_seed_gives_the_same_run() -> None:
    first, second = (
        fuzz.fuzz_target("ping.decode", count=300, seed=7, mem_sample=0) for _ in range(2)
    )
    assert (first.accepted, first.decode_errors) == (second.accepted, second.decode_errors)
    other = fuzz.fuzz_target("ping.decode", count=300, seed=8, mem_sample=0)
    assert (other.accepted, other.decode_errors) != (first.accepted, first.decode_errors)


def _broken_ping(data: bytes) -> object:
    """ping.decode with a planted bug: an unknown type byte escapes as IndexError."""
    if len(data) > 3 and data[:3] == b"GP\x01" and data[3] not in (1, 2):
        raise IndexError("planted bug")
    return ping.decode(data)


def _lenient_isis(data: bytes) -> object:
    """isis.decode with a planted bug: trailing bytes are ignored instead of refused."""
    size = isis.message_size(data)
    if size is None:
        raise DecodeError("short")
    return isis.decode(data[:size])


@pytest.mark.parametrize(
    ("base", "decode", "kind"),
    [("ping.decode", _broken_ping, "IndexError"), ("isis.decode", _lenient_isis, "oracle")],
)
def test_a_broken_decoder_is_caught_with_a_reproducer(
    monkeypatch: pytest.MonkeyPatch, base: str, decode: object, kind: str
) -> None:
    original = fuzz._BY_NAME[base]

    def build(rng: Any) -> Any:
        harness = original.build(rng)
        return fuzz.Harness(corpus=harness.corpus, decode=decode, check=harness.check)

    broken = fuzz.Target(name="broken", where=original.where, build=build)
    monkeypatch.setitem(fuzz._BY_NAME, "broken", broken)
    stats = fuzz.fuzz_target("broken", count=COUNT, seed=1, mem_sample=0)
    assert stats.unexpected > 0
    (finding,) = stats.findings.values()
    assert finding.kind == kind
    assert 1 <= len(finding.reproducers) <= fuzz.MAX_REPRODUCERS
    assert fuzz.replay("broken", finding.reproducers[0], 1) == 1
    assert fuzz.replay(base, finding.reproducers[0], 1) == 0  # the real decoder is fine
    assert "broken" in fuzz.findings_text([stats])
