"""An emulation of the original Go Prototari node's behaviour on the network, for CI.

CI cannot fetch or build the original (Go), so the interop tests run this stand-in next
to ``gossamer discovery --wire original``. It is written from the observed behaviour of
the original (``docs/interop.md``), not from its code:

- ports: it listens on UDP 21451 (broadcasts) and 21450 (unicast) on every address;
- broadcasting: ``pelotari?`` to the subnet's broadcast address, port 21451, at start and
  then every ``--interval`` seconds (5 in the original) while it has fewer than 64 peers,
  from one socket with an ephemeral port kept for the process's life;
- answering: a ``pelotari?`` from an IP that is not a peer (and not its own) is answered
  with ``aupa!`` to that IP's port 21450; it keeps no pending state;
- handshake: an ``aupa!`` from anyone registers its IP and is answered with ``dale!``;
  a ``dale!`` registers its IP; every other datagram is ignored, so it never answers
  ``hor?`` and ignores ``agur!``;
- every unicast datagram leaves from a fresh socket with an ephemeral source port, never
  closed (the original leaks them); replies always go to ``IP:21450``;
- identity is the IP alone; peers are never removed, even when they die;
- output: the whole peer list on each registration, one line ``peers: ip1,ip2,...``.

Its own IP is given (``--ip``): the original takes the first private IPv4 address of the
first interface that is up; in a test host that is ``eth0``'s.
"""

from __future__ import annotations

import argparse
import select
import signal
import socket
import sys
import time

BROADCAST_PORT, UNICAST_PORT = 21451, 21450
MAX_PEERS = 64


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ip", required=True)
    p.add_argument("--broadcast", required=True)
    p.add_argument("--interval", type=float, default=5.0)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listen = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listen.bind(("0.0.0.0", BROADCAST_PORT))
    unicast = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    unicast.bind(("0.0.0.0", UNICAST_PORT))
    shout = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    shout.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    leaked: list[socket.socket] = []
    peers: dict[str, float] = {}

    def send(ip: str, text: bytes) -> None:
        fresh = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        fresh.sendto(text, (ip, UNICAST_PORT))
        leaked.append(fresh)

    def register(ip: str) -> None:
        if len(peers) >= MAX_PEERS:
            return
        peers[ip] = time.monotonic()
        print(f"{time.time():.3f} peers: {','.join(sorted(peers))}", flush=True)

    next_shout = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= next_shout:
            if len(peers) < MAX_PEERS:
                shout.sendto(b"pelotari?", (args.broadcast, BROADCAST_PORT))
            next_shout += args.interval
        ready, _, _ = select.select([listen, unicast], [], [], max(0.0, next_shout - now))
        for sock in ready:
            data, (ip, _port) = sock.recvfrom(1024)
            if sock is listen:
                if ip != args.ip and data == b"pelotari?" and ip not in peers:
                    send(ip, b"aupa!")
            elif data == b"aupa!":
                register(ip)
                send(ip, b"dale!")
            elif data == b"dale!":
                register(ip)


if __name__ == "__main__":
    main()
