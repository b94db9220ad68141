"""``gossamer ping`` over real UDP on 127.0.0.1, with faults injected on the socket."""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gossamer.cli.ping_cmd import host_port
from gossamer.trace import read_run

GOSSAMER = [sys.executable, "-m", "gossamer.cli.main"]


def test_send_to_serve_with_loss_completes_and_traces(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [
            *GOSSAMER,
            "ping",
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--trace",
            str(tmp_path),
            "--duration",
            "60",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        banner = server.stderr.readline()
        match = re.search(r"answering pings on (127\.0\.0\.1:\d+)", banner)
        assert match, banner
        client = subprocess.run(
            [
                *GOSSAMER,
                "ping",
                "send",
                "--to",
                match[1],
                "--count",
                "30",
                "--drop",
                "0.3",
                "--seed",
                "4",
                "--trace",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.terminate()
        server.communicate(timeout=30)
    assert client.returncode == 0, client.stdout + client.stderr
    summary = client.stdout.strip().splitlines()[-1]
    assert summary.startswith("30 answered, 0 lost")
    drops = int(re.search(r"drop (\d+)", summary)[1])  # type: ignore[index]
    assert drops > 0
    events, bad = read_run(tmp_path)
    assert bad == []
    kinds = [(e.node, e.layer, e.kind) for e in events]
    assert kinds.count(("client", "demo", "deliver")) == 30
    assert kinds.count(("client", "net", "fault")) == drops
    assert kinds.count(("client", "demo", "retransmit")) >= drops
    assert ("server", "demo", "recv") in kinds


def test_unanswered_pings_are_lost_with_exit_code_1(tmp_path: Path) -> None:
    # A port nobody listens on: every ping is retransmitted, then reported lost.
    proc = subprocess.run(
        [
            *GOSSAMER,
            "ping",
            "send",
            "--to",
            "127.0.0.1:9",
            "--count",
            "2",
            "--timeout",
            "0.01",
            "--retries",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout.strip().splitlines()[-1].startswith("0 answered, 2 lost")
    # Nothing listens there: the refusal ends it at once, with a clear error.
    assert "127.0.0.1:9 refused (nothing listens there)" in proc.stderr


def test_a_name_resolves_and_a_silent_server_ends_with_an_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))  # receives, never answers: no ICMP refusal either
        port = silent.getsockname()[1]
        proc = subprocess.run(
            [*GOSSAMER, "ping", "send", "--to", f"localhost:{port}", "--count", "3",
             "--timeout", "0.01", "--retries", "1"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert silent.recv(64)  # the name resolved: the pings reached 127.0.0.1
    assert proc.returncode == 1
    assert f"pinging localhost:{port} (127.0.0.1:{port})" in proc.stderr
    assert f"error: no answer from localhost:{port} (127.0.0.1:{port}) within 0.03 s" in (
        proc.stderr
    )


def test_a_name_that_does_not_resolve_is_a_one_line_error() -> None:
    proc = subprocess.run(
        [*GOSSAMER, "ping", "send", "--to", "no-such-host.invalid:7001", "--count", "1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("gossamer: error: cannot resolve 'no-such-host.invalid'")


@pytest.mark.parametrize("text", ["127.0.0.1", ":80", "host:port", "127.0.0.1:70000"])
def test_bad_addresses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="HOST:PORT"):
        host_port(text)
