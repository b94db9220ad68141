"""``--wire``, ``--key-file`` and ``--cluster``: one way to choose the wire everywhere."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gossamer.cli.main import main
from gossamer.cli.wire_args import add_wire_arguments, wire_from_args
from gossamer.errors import ConfigError
from gossamer.wire.mode import WireMode, parse_key, parse_wire


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_wire_arguments(parser)
    return parser.parse_args(list(argv))


def test_sealed_is_the_default_and_needs_a_key() -> None:
    with pytest.raises(ConfigError, match="no default key"):
        wire_from_args(parse(), environ={})
    wire = wire_from_args(parse(), environ={"GOSSAMER_KEY": "ab" * 32})
    assert wire.sealed and wire.key == bytes.fromhex("ab" * 32) and wire.cluster == "gossamer"


def test_a_key_file_holds_raw_bytes_hex_or_a_passphrase(tmp_path: Path) -> None:
    raw, hexed, phrase = tmp_path / "raw", tmp_path / "hex", tmp_path / "phrase"
    raw.write_bytes(bytes(range(32)))
    hexed.write_text("cd" * 32 + "\n")
    phrase.write_text("a generated passphrase of enough bytes\n")
    assert wire_from_args(parse("--key-file", str(raw)), environ={}).key == bytes(range(32))
    assert wire_from_args(parse("--key-file", str(hexed)), environ={}).key == b"\xcd" * 32
    assert wire_from_args(parse("--key-file", str(phrase)), environ={}).key == (
        b"a generated passphrase of enough bytes"
    )
    # The file wins over the environment; a short passphrase is refused.
    env = {"GOSSAMER_KEY": "ef" * 32}
    assert wire_from_args(parse("--key-file", str(raw)), environ=env).key == bytes(range(32))
    (tmp_path / "short").write_text("short")
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        wire_from_args(parse("--key-file", str(tmp_path / "short")), environ={})
    with pytest.raises(ConfigError, match="cannot read the key file"):
        wire_from_args(parse("--key-file", str(tmp_path / "absent")), environ={})


def test_the_original_wire_takes_no_key(tmp_path: Path) -> None:
    wire = wire_from_args(parse("--wire", "original"), environ={"GOSSAMER_KEY": "ab" * 32})
    assert wire.mode is WireMode.ORIGINAL and wire.key is None
    key = tmp_path / "k"
    key.write_bytes(bytes(32))
    with pytest.raises(ConfigError, match="no use with --wire original"):
        wire_from_args(parse("--wire", "original", "--key-file", str(key)), environ={})


def test_one_spelling_everywhere_and_the_old_gossip_ones() -> None:
    assert parse_wire("sealed") is parse_wire("envelope") is WireMode.SEALED
    assert parse_wire("original") is parse_wire("chatter-compat") is WireMode.ORIGINAL
    with pytest.raises(ConfigError, match="'sealed' or 'original'"):
        parse_wire("plain")
    assert parse_key(b"  " + b"ab" * 32 + b"\n") == b"\xab" * 32


def test_every_protocol_command_refuses_to_start_without_a_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("GOSSAMER_KEY", raising=False)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a 127.0.0.1:1\nb 127.0.0.1:2\nc 127.0.0.1:3\n")
    for argv in (
        ["isis", "--hostfile", str(hostfile), "--me", "a"],
        [
            "discovery",
            "--address",
            "127.0.0.1",
            "--broadcast-address",
            "127.0.0.1",
            "--duration",
            "0",
        ],
    ):
        assert main(argv) == 2
        assert "no default key" in capsys.readouterr().err
