"""An emulation of the original ISIS lab program's behaviour on the network, for CI.

CI cannot fetch or build the original (C++, glog, gflags), so the interop tests run this
stand-in next to ``gossamer isis --wire original``. It is written from the observed
behaviour of the original (``docs/interop.md``), not from its code, and reproduces what
matters to a gossamer member sharing a group with it:

- the command line: ``--hostfile --senders --msgCount --dropRate --delay`` (gflags
  spellings); the hostfile lists host names, resolved through ``/etc/hosts``; a member's
  id is its 1-based line; the recipients of every multicast are all hosts, itself
  included (it sends its own messages to itself over UDP);
- sockets: it receives on UDP port 10001; it never binds its sending sockets, and keeps
  three of them per destination (Data resends, Seq resends, Acks and SeqAcks), so its
  datagrams come from ephemeral ports; replies go to port 10001 of the host named by the
  ids inside the message, never to a datagram's source;
- reliability: one resend loop for Data and one for Seq, each sending every queued
  message to every recipient that has not answered, then sleeping 200, 400, 800, 1600,
  3200, 200, ... ms (the back-off belongs to the loop, not to a message);
- the protocol steps and hold-back order of the original, including its cached Ack
  for a duplicate Data and its SeqAck for every Seq;
- faults: every datagram received is dropped with probability ``--dropRate``, drawn from
  a generator seeded with 11 (logged ``dropping <Type> from: <host>``); ``--delay`` makes
  the single receive thread sleep before half of the Acks and SeqAcks;
- its strictness: a datagram of an unknown type or of the wrong size aborts the process
  (exit status 134 and a glog ``F`` line), as do a snapshot marker over UDP and a
  duplicate Data that arrives after its Seq; so a test that sees every emulated member
  alive has shown that gossamer sent it nothing the original could not take;
- its output: each delivery as a glog INFO line on standard error
  (``I... multicast.cpp:460] delivering dataMsg: type: 1, sender: S, ...``).

- its snapshot (one per lifetime): it listens on TCP port 10002 from the start and takes
  exactly one connection per peer, each carrying one 8-byte marker (type 5, sender),
  aborting on anything else; the initiator (a sender with ``--initiateSnapshotCount K``)
  records its state right after queueing message K+1 and sends its marker to every peer
  from its main thread, one connection each, retrying every second until it connects
  (so its later messages wait until every peer accepted); a member's first marker makes
  it record and send its own; incoming datagrams are recorded per channel until that
  peer's marker; after the last marker it logs ``snapshot algorithm completed``.

The process runs until it is killed; SIGTERM, as for the original, does not stop it.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import struct
import sys
import threading
import time

PORT = 10001
SNAPSHOT_PORT = 10002
DATA, ACK, SEQ, SEQ_ACK, MARKER = 1, 2, 3, 4, 5
SIZES = {DATA: 16, ACK: 20, SEQ: 20, SEQ_ACK: 16, MARKER: 8}
NAMES = {DATA: "DataMsg", ACK: "AckMsg", SEQ: "SeqMsg", SEQ_ACK: "SeqAckMsg", MARKER: "MarkerMsg"}
FIRST_INTERVAL, MAX_INTERVAL = 0.2, 4.0


def log(level: str, text: str) -> None:
    now = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now))
    line = f"{level}{stamp}.{int(now % 1 * 1e6):06d} {threading.get_native_id()} isis.cpp:0] {text}"
    print(line, file=sys.stderr, flush=True)


def fatal(text: str) -> None:
    log("F", text)
    os._exit(134)  # what CHECK/LOG(FATAL) does: abort


class Resender(threading.Thread):
    """The original's ContinuousMsgSender: resend every queued message to every
    recipient still missing, then sleep the loop's current interval."""

    def __init__(self, send: object) -> None:
        super().__init__(daemon=True)
        self.send = send
        self.lock = threading.Condition()
        self.queue: dict[int, tuple[bytes, set[int]]] = {}  # msg_id -> (bytes, recipients)
        self.retry = 0

    def add(self, msg_id: int, data: bytes, recipients: set[int]) -> None:
        with self.lock:
            self.queue[msg_id] = (data, set(recipients))
            self.lock.notify()

    def remove_recipient(self, msg_id: int, member: int) -> bool:
        """True only on the first removal (the original's duplicate detector)."""
        with self.lock:
            entry = self.queue.get(msg_id)
            if entry is None or member not in entry[1]:
                return False
            entry[1].discard(member)
            if not entry[1]:
                del self.queue[msg_id]
            return True

    def run(self) -> None:
        while True:
            with self.lock:
                while not self.queue:
                    self.lock.wait()
                batch = [(data, sorted(rcpts)) for data, rcpts in self.queue.values()]
            for data, recipients in batch:
                for member in recipients:
                    self.send(member, data)  # type: ignore[operator]
            interval = FIRST_INTERVAL * 2**self.retry
            self.retry += 1
            if FIRST_INTERVAL * 2**self.retry > MAX_INTERVAL:
                self.retry = 0
            time.sleep(interval)


class Member:
    def __init__(self, args: argparse.Namespace) -> None:
        names: list[str] = []
        with open(args.hostfile) as hostfile:
            text = hostfile.read()
        for line in text.splitlines():
            if line.strip() and line.strip() not in names:
                names.append(line.strip())
        if len(names) < 3:
            fatal("Check failed: hosts.size() >= 3 (need more than 3 hosts)")
        self.names = names
        self.ip = {i: socket.gethostbyname(n) for i, n in enumerate(names, 1)}
        self.id_of_ip = {ip: i for i, ip in self.ip.items()}
        self.me = next(i for i, ip in self.ip.items() if _local(ip))
        self.drop_rate = args.dropRate
        self.delay = args.delay / 1000
        self.rng = random.Random(11)  # the original seeds every process with 11
        self.delay_rng = random.Random(11)
        # Three unbound sockets per destination: Data resends, Seq resends, Acks/SeqAcks.
        self.socks = {
            kind: {i: socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for i in self.ip}
            for kind in ("data", "seq", "ack")
        }
        self.recv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.recv.bind(("0.0.0.0", PORT))
        self.data_tx = Resender(lambda m, d: self._send("data", m, d))
        self.seq_tx = Resender(lambda m, d: self._send("seq", m, d))
        self.counter = 0
        self.latest = 0
        self.pending: set[tuple[int, int]] = set()
        self.ack_cache: dict[tuple[int, int], bytes] = {}
        self.proposals: dict[int, dict[int, int]] = {}
        # hold-back queue entries: key -> [seq, proposer, deliverable, data]
        self.queue: dict[tuple[int, int], list[int]] = {}
        self.snap_lock = threading.Lock()
        self.recorded = False
        self.channels: dict[int, list[bytes] | None] = {}  # None: closed by its marker
        self.markers = 0
        self.marker_server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.marker_server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.marker_server.bind(("0.0.0.0", SNAPSHOT_PORT))
        self.marker_server.listen(8)

    def _send(self, kind: str, member: int, data: bytes) -> None:
        self.socks[kind][member].sendto(data, (self.ip[member], PORT))

    def multicast(self, value: int) -> None:
        self.counter += 1
        data = struct.pack(">IIII", DATA, self.me, self.counter, value)
        self.data_tx.add(self.counter, data, set(self.ip))

    # -- the snapshot ------------------------------------------------------------------

    def take_snapshot(self, closed: int | None) -> None:
        """Record the local state and the channels (all but ``closed``), send markers."""
        with self.snap_lock:
            if self.recorded:
                return
            self.recorded = True
            log("I", f"recording local state: latestSeqId {self.latest}, counter {self.counter}")
            for member in self.ip:
                if member != self.me:
                    self.channels[member] = None if member == closed else []
        marker = struct.pack(">II", MARKER, self.me)
        for member in sorted(self.ip):
            if member == self.me:
                continue
            while True:  # one connection per marker, retried every second
                try:
                    with socket.create_connection((self.ip[member], SNAPSHOT_PORT)) as conn:
                        conn.sendall(marker)
                    break
                except OSError:
                    time.sleep(1.0)

    def serve_markers(self) -> None:
        for _ in range(len(self.ip) - 1):  # exactly N-1 connections
            conn, (ip, _port) = self.marker_server.accept()
            data = conn.recv(1024)
            conn.close()
            if len(data) != SIZES[MARKER] or struct.unpack(">I", data[:4])[0] != MARKER:
                fatal(f"Check failed: marker of {len(data)} bytes from {ip}")
            sender = self.id_of_ip.get(ip)
            if sender is None:
                fatal(f"marker from {ip}, not a hostfile host")
            assert sender is not None
            if not self.recorded:
                threading.Thread(target=self.take_snapshot, args=(sender,), daemon=True).start()
                while not self.recorded:
                    time.sleep(0.001)
            with self.snap_lock:
                recorded = self.channels.get(sender) or []
                self.channels[sender] = None
                self.markers += 1
            log("I", f"marker from {self.names[sender - 1]}: channel had {len(recorded)} messages")
        self.marker_server.close()
        log("I", "snapshot algorithm completed")

    # -- the protocol --------------------------------------------------------------------

    def serve(self) -> None:
        while True:
            data, (ip, _port) = self.recv.recvfrom(1024)
            host = _host_name(self.names, self.id_of_ip, ip)
            source = self.id_of_ip.get(ip)
            with self.snap_lock:  # recorded before the drop decision, as the original
                channel = self.channels.get(source) if source is not None else None
                if channel is not None:
                    channel.append(data)
            if len(data) < 4:
                fatal(f"Check failed: message size {len(data)} from {host}")
            (kind,) = struct.unpack_from(">I", data)
            if kind not in SIZES:
                fatal(f"unknown message type {kind} from {host}")
            if self.drop_rate and self.rng.random() < self.drop_rate:
                log("W", f"dropping {NAMES[kind]} from: {host}")
                continue
            if len(data) != SIZES[kind]:
                fatal(f"Check failed: {NAMES[kind]} of {len(data)} bytes from {host}")
            if kind == MARKER:
                fatal(f"marker over UDP from {host}")
            fields = struct.unpack(f">{SIZES[kind] // 4}I", data)[1:]
            for member in _ids(kind, fields):
                if member not in self.ip:
                    fatal(f"map::at: unknown member id {member}")
            getattr(self, f"_on_{NAMES[kind][:-3].lower()}")(*fields)

    def _reply(self, member: int, data: bytes, name: str) -> None:
        if self.delay and self.delay_rng.random() < 0.5:
            log("I", f"delaying messageType: {name} by {int(self.delay * 1000)}ms")
            time.sleep(self.delay)  # in the only receive thread, as the original
        self._send("ack", member, data)

    def _on_data(self, sender: int, msg_id: int, value: int) -> None:
        key = (sender, msg_id)
        if key in self.pending:
            ack = self.ack_cache.get(key)
            if ack is None:
                fatal("std::out_of_range: ackMessageCache.at() (Data after its Seq)")
            assert ack is not None
        else:
            self.pending.add(key)
            self.latest += 1
            self.queue[key] = [self.latest, self.me, 0, value]
            ack = struct.pack(">IIIII", ACK, sender, msg_id, self.latest, self.me)
            self.ack_cache[key] = ack
        self._reply(sender, ack, "AckMsg")

    def _on_ack(self, sender: int, msg_id: int, proposed: int, proposer: int) -> None:
        if not self.data_tx.remove_recipient(msg_id, proposer):
            return  # a duplicate Ack, only logged by the original
        got = self.proposals.setdefault(msg_id, {})
        got[proposer] = proposed
        if len(got) == len(self.ip):
            final = max(got.values())
            by = min(p for p, s in got.items() if s == final)
            seq = struct.pack(">IIIII", SEQ, self.me, msg_id, final, by)
            self.seq_tx.add(msg_id, seq, set(self.ip))

    def _on_seq(self, sender: int, msg_id: int, final: int, proposer: int) -> None:
        key = (sender, msg_id)
        if key in self.pending and key in self.queue:
            entry = self.queue[key]
            entry[0], entry[1], entry[2] = final, proposer, 1
            self.latest = max(self.latest, final)
            self.ack_cache.pop(key, None)
            order = sorted(self.queue.items(), key=lambda kv: (kv[1][0], kv[1][2], kv[1][1]))
            for head, (seq, by, deliverable, value) in order:
                if not deliverable:
                    break
                del self.queue[head]
                log(
                    "I",
                    f"delivering dataMsg: type: 1, sender: {head[0]}, msg_id: {head[1]}, "
                    f"data: {value}, finalSeqId: {seq}, finalSeqProposer: {by}",
                )
                # The original's bug: it erases the id of the Seq that triggered the
                # delivery, not of the message delivered.
                self.pending.discard(key)
        self._reply(sender, struct.pack(">IIII", SEQ_ACK, sender, msg_id, self.me), "SeqAckMsg")

    def _on_seqack(self, sender: int, msg_id: int, ack_sender: int) -> None:
        self.seq_tx.remove_recipient(msg_id, ack_sender)


def _ids(kind: int, fields: tuple[int, ...]) -> list[int]:
    """The member ids a message of ``kind`` makes the original look up."""
    if kind == DATA:
        return [fields[0]]
    if kind in (ACK, SEQ):
        return [fields[0], fields[3]]
    return [fields[0], fields[2]]


def _host_name(names: list[str], id_of_ip: dict[str, int], ip: str) -> str:
    member = id_of_ip.get(ip)
    return ip if member is None else names[member - 1]


def _local(ip: str) -> bool:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.bind((ip, 0))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hostfile", required=True)
    p.add_argument("--senders", default="")
    p.add_argument("--msgCount", type=int, default=0)
    p.add_argument("--dropRate", type=float, default=0.0)
    p.add_argument("--delay", type=int, default=0)
    p.add_argument("--initiateSnapshotCount", type=int, default=0)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: None)  # the original keeps running
    member = Member(args)
    member.data_tx.start()
    member.seq_tx.start()
    threading.Thread(target=member.serve_markers, daemon=True).start()
    threading.Thread(target=member.serve, daemon=True).start()
    if member.names[member.me - 1] in args.senders.split(","):
        for i in range(1, args.msgCount + 1):
            member.multicast(i + 10)
            if args.initiateSnapshotCount and i == args.initiateSnapshotCount + 1:
                member.take_snapshot(closed=None)  # in the main thread, as the original
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
