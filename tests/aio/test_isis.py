"""gossamer.aio.isis and ``gossamer isis`` on real UDP sockets on 127.0.0.1.

Members run in one event loop (uvloop and the default loop) or, for the command, as
separate processes. Nothing leaves 127.0.0.1. Assertions are about order and
completeness, never about speed.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from gossamer.aio.faults import FaultInjector
from gossamer.aio.isis import Delivered, IsisService, find_me, open_isis, resolve_members
from gossamer.aio.sockets import udp_socket
from gossamer.errors import (
    ClosedError,
    ConfigError,
    LocalProtocolError,
    NetworkError,
    TimedOutError,
)
from gossamer.faults import FaultPlan
from gossamer.proto.isis import (
    IsisConfig,
    Member,
    members_from,
    parse_hostfile,
    payload_digest,
)
from gossamer.proto.isis.checks import Delivery, IsisRecord, check_all
from gossamer.proto.snapshot import (
    Bank,
    SnapshotDone,
    check_bank,
    check_cut,
)
from gossamer.testing import free_ports, sealed_wire
from gossamer.testing.aio import Runner, until
from gossamer.trace import MemorySink, Tracer
from gossamer.wire.isis import MAX_DATA_SIZE

#: Retransmission ten times faster than the spec's: loopback round trips are short.
FAST = {"retransmit_initial": 0.01, "retransmit_max": 0.16}


class Group:
    """``n`` members on 127.0.0.1, their events, and a shared trace sink."""

    def __init__(self, n: int) -> None:
        self.socks = [udp_socket("127.0.0.1", 0) for _ in range(n)]
        self.members = members_from(
            [(f"m{i}", s.getsockname()) for i, s in enumerate(self.socks, 1)]
        )
        self.sink = MemorySink()
        self.services: dict[int, IsisService] = {}
        self.events: dict[int, list[object]] = {m.id: [] for m in self.members}
        self.injectors: list[FaultInjector] = []
        self.banks: dict[int, Bank] = {}
        self.wire = sealed_wire()
        self.readers: list[asyncio.Task[None]] = []

    async def start(
        self,
        *,
        plan: FaultPlan | None = None,
        bank: bool = False,
        read: bool = True,
        **tunables: Any,
    ) -> None:
        """Open every member, and read its deliveries (unless ``read`` is false: they wait
        in the service's queue) and events as an application does."""
        for member, sock in zip(self.members, self.socks, strict=True):
            tracer = Tracer(self.sink, run="aio", node=member.name)
            injector = None
            if plan is not None:
                injector = FaultInjector(plan, rng=random.Random(member.id), tracer=tracer)
                self.injectors.append(injector)
            workload = None
            if bank:
                self.banks[member.id] = Bank(
                    me=member.id,
                    members=[m.id for m in self.members],
                    initial=100,
                    rng=random.Random(member.id),
                )
                workload = self.banks[member.id].workload(total=100 * len(self.members))
            service = await open_isis(
                IsisConfig(me=member.id, members=self.members, **{**FAST, **tunables}),
                tracer=tracer,
                faults=injector,
                workload=workload,
                sock=sock,
                wire=self.wire,
            )
            self.services[member.id] = service
            loop = asyncio.get_running_loop()
            self.readers.append(loop.create_task(self._events(member.id, service)))
            if read:
                self.readers.append(loop.create_task(self._deliveries(member.id, service)))

    async def _deliveries(self, member: int, service: IsisService) -> None:
        async for delivered in service:
            self.events[member].append(delivered)
            if member in self.banks:
                self.banks[member].delivered(delivered.data)

    async def _events(self, member: int, service: IsisService) -> None:
        async for event in service.events():
            self.events[member].append(event)

    def delivered(self, member: int) -> list[Delivered]:
        return [e for e in self.events[member] if isinstance(e, Delivered)]

    def snapshots(self) -> dict[int, dict[str, dict[str, Any]]]:
        parts: dict[int, dict[str, dict[str, Any]]] = {}
        for events in self.events.values():
            for e in events:
                if isinstance(e, SnapshotDone):
                    parts.setdefault(e.snapshot_id, {})[e.node] = e.to_json()
        return parts

    def record(self, live: list[int]) -> IsisRecord:
        multicasts: dict[str, dict[str, str]] = {}
        for e in self.sink.select(layer="isis", kind="multicast"):
            assert e.msg is not None
            multicasts.setdefault(e.node, {})[e.msg] = e.attrs["digest"]
        name = {m.id: m.name for m in self.members}
        deliveries = {
            name[i]: [
                Delivery(
                    msg=f"{d.sender}/{d.msg_id}",
                    seq=d.final_seq,
                    proposer=d.proposer,
                    data=payload_digest(d.data),
                )
                for d in self.delivered(i)
            ]
            for i in live
        }
        return IsisRecord(multicasts=multicasts, deliveries=deliveries)

    async def __aenter__(self) -> Group:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()  # a failed assertion must not leave sockets open

    async def close(self) -> None:
        for service in self.services.values():
            await service.close()
        await asyncio.gather(*self.readers)  # iteration ends once a service is closed


def test_four_members_agree_on_one_order_under_loss_duplication_and_reordering(
    run: Runner,
) -> None:
    async def main() -> None:
        async with Group(4) as g:
            plan = FaultPlan(drop=0.15, duplicate=0.1, reorder=0.2, reorder_by=0.01)
            await g.start(plan=plan, drop_rate=0.1, ack_delay=0.03)
            for i in range(6):
                for member in (1, 2, 3):
                    # Payloads of every size up to the maximum, bytes and the original's ints.
                    data = f"{member}/{i}".encode().ljust(i * MAX_DATA_SIZE // 5, b".")
                    await g.services[member].send(data if i % 2 else 100 * member + i)
                await asyncio.sleep(0.002)
            await until(lambda: all(len(g.delivered(m)) == 18 for m in (1, 2, 3, 4)))
            await until(lambda: all(s.idle for s in g.services.values()))
            await asyncio.sleep(0.2)  # a quiet period: nothing more may be delivered
            assert all(len(g.delivered(m)) == 18 for m in (1, 2, 3, 4))
            names = [m.name for m in g.members]
            assert check_all(g.record([1, 2, 3, 4]), names) == []
            counts = [sum(inj.counts.values()) for inj in g.injectors]
            assert all(c > 0 for c in counts)
            kinds = {k for inj in g.injectors for k in inj.counts}
            assert {"drop", "duplicate", "reorder"} <= kinds
            assert sum(s.isis.counters.injected_drops for s in g.services.values()) > 0
            assert sum(s.isis.counters.delayed for s in g.services.values()) > 0

    run(main())


def test_snapshots_on_real_sockets_are_consistent_and_hold_the_money(run: Runner) -> None:
    async def main() -> None:
        async with Group(4) as g:
            await g.start(plan=FaultPlan(drop=0.1, reorder=0.3, reorder_by=0.005), bank=True)
            started = []
            for step in range(40):
                for member, bank in g.banks.items():
                    data = bank.next_transfer()
                    if data is not None:
                        await g.services[member].send(data)  # waits while a snapshot holds it
                if step in (10, 25):
                    started.append(g.services[1 + step % 4].initiate_snapshot())
                await asyncio.sleep(0.002)
            await until(lambda: all(len(g.snapshots().get(s, {})) == 4 for s in started))
            await until(lambda: all(s.idle for s in g.services.values()))
            parts = g.snapshots()
            for sid in started:
                assert check_cut(parts[sid]) == []
                assert check_bank(parts[sid], total=400) == (400, [])
            assert sum(bank.balance for bank in g.banks.values()) == 400

    run(main())


def test_a_snapshot_holds_the_deliveries_the_application_has_not_read_yet(run: Runner) -> None:
    # Deliveries wait in the service's queue until the application reads them: in between
    # their money is neither in the hold-back queue nor in the balance. Here nobody reads
    # them before the snapshot, so without "unread" the snapshot would miss every transfer.
    async def main() -> None:
        async with Group(3) as g:
            await g.start(bank=True, read=False)
            sent = []
            for member, bank in g.banks.items():
                data = bank.next_transfer()
                assert data is not None
                await g.services[member].send(data)
                sent.append(data)
            await until(lambda: all(s.isis.counters.delivered == 3 for s in g.services.values()))
            sid = g.services[1].initiate_snapshot()
            await until(lambda: len(g.snapshots().get(sid, {})) == 3)
            parts = g.snapshots()[sid]
            for part in parts.values():
                unread = part["local_state"]["unread"]
                assert sorted(entry["data"] for entry in unread) == sorted(d.hex() for d in sent)
                assert part["local_state"]["isis"]["holdback"] == []
            assert check_cut(parts) == []
            assert check_bank(parts, total=300) == (300, [])
            for member, service in g.services.items():  # the application reads them now
                for _ in sent:
                    g.banks[member].delivered((await service.receive(timeout=5)).data)
            assert sum(bank.balance for bank in g.banks.values()) == 300

    run(main())


def test_survivors_remove_a_crashed_member_and_go_on(run: Runner) -> None:
    async def main() -> None:
        async with Group(4) as g:
            await g.start()
            await g.services[4].close()  # member 4 crashes
            await g.services[1].send(b"one")
            await g.services[2].send(b"two")
            await asyncio.sleep(0.3)
            assert g.delivered(1) == []  # every multicast waits for member 4's Ack
            for member in (1, 2, 3):
                g.services[member].remove_member(4)
            await until(lambda: all(len(g.delivered(m)) == 2 for m in (1, 2, 3)))
            assert check_all(g.record([1, 2, 3]), ["m1", "m2", "m3"]) == []
            assert {d.data for d in g.delivered(3)} == {b"one", b"two"}

    run(main())


def test_find_me_and_resolve_members(run: Runner) -> None:
    async def main() -> None:
        entries = parse_hostfile("a localhost:7001\nb 127.0.0.1:7002\nc 10.255.255.1:7003\n")
        members = await resolve_members(entries)
        assert members[0].addr == ("127.0.0.1", 7001)
        assert find_me(members, "b").id == 2 and find_me(members, "3").name == "c"
        with pytest.raises(ConfigError):
            find_me(members, "zz")
        with pytest.raises(ConfigError):  # a and b are both local: ambiguous
            find_me(members)
        with pytest.raises(NetworkError) as caught:
            await resolve_members(parse_hostfile("x.invalid\ny.invalid\nz.invalid\n"))
        assert isinstance(caught.value.__cause__, OSError)

    run(main())
    local = (
        Member(id=1, name="a", addr=("127.0.0.1", 1)),
        Member(id=2, name="b", addr=("10.255.255.2", 2)),
    )
    assert find_me(local).name == "a"


def test_the_command_on_four_local_processes(tmp_path: Path) -> None:
    """``gossamer isis`` as the original program ran it, four processes on 127.0.0.1 (two
    of them batching per turn)."""
    ports = free_ports(4)
    names = ["alpha", "beta", "gamma", "delta"]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{n} 127.0.0.1:{p}\n" for n, p in zip(names, ports, strict=True)))
    key_file = tmp_path / "group.key"
    key_file.write_bytes(secrets.token_bytes(32))
    procs = []
    for name in names:
        argv = [
            sys.executable,
            "-m",
            "gossamer.cli.isis_cmd",
            "--key-file",
            str(key_file),
            "--hostfile",
            str(hostfile),
            "--me",
            name,
            "--senders",
            "alpha,beta",
            "--msg-count",
            "5",
            "--drop-rate",
            "0.2",
            "--delay",  # the original's spelling, milliseconds
            "100",
            "--retransmit-initial",
            "0.01",
            "--retransmit-max",
            "0.16",
            "--out",
            str(tmp_path / "out"),
            "--exit-after-idle",
            "0.5",
        ]
        if name == "beta":
            argv += ["--initiate-snapshot-count", "2"]
        if name in ("alpha", "gamma"):  # members accept batches whatever their own setting
            argv += ["--batch-turn", "on"]
        procs.append(
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            outputs.append((out, err))
    finally:
        for proc in procs:  # reap and close the pipes of any left (a timeout, a failure)
            if proc.returncode is None:
                proc.kill()
                proc.communicate()
    lines = [[ln for ln in out.splitlines() if ln.startswith("delivering")] for out, _ in outputs]
    assert all(len(ls) == 10 for ls in lines)
    assert lines[0] == lines[1] == lines[2] == lines[3]
    assert lines[0][0].startswith("delivering dataMsg: type: 1, sender: ")
    datas = sorted(int(ln.split("data: ")[1].split(",")[0]) for ln in lines[0])
    assert datas == [11, 11, 12, 12, 13, 13, 14, 14, 15, 15]
    errs = "".join(err for _, err in outputs)
    assert "dropping " in errs and "delaying messageType: " in errs
    snaps = sorted((tmp_path / "out" / "snapshots").glob("*.json"))
    assert len(snaps) == 4
    parts = {p["node"]: p for p in (orjson.loads(s.read_bytes()) for s in snaps)}
    assert check_cut(parts) == []
    assert all("snapshot done: id=" in out for out, _ in outputs)
    traces = sorted(p.name for p in (tmp_path / "out").glob("*.jsonl"))
    assert traces == sorted(f"{n}.jsonl" for n in names)


# -- the API contract (docs/api.md) -------------------------------------------------------


def localhost_group(n: int) -> tuple[list[socket.socket], tuple[Member, ...]]:
    """``n`` members written as an application would: ``localhost`` and a port."""
    socks = [udp_socket("127.0.0.1", 0) for _ in range(n)]
    members = members_from(
        [(f"m{i}", ("localhost", s.getsockname()[1])) for i, s in enumerate(socks, 1)]
    )
    return socks, members


def test_the_service_opens_sends_receives_and_closes_as_the_contract_says(run: Runner) -> None:
    async def main() -> None:
        socks, members = localhost_group(3)
        wire = sealed_wire()
        opened = [
            open_isis(IsisConfig(me=m.id, members=members, **FAST), wire=wire, sock=sock)
            for m, sock in zip(members, socks, strict=True)
        ]
        async with opened[0] as a, opened[1] as b, opened[2] as c:
            assert a.address == socks[0].getsockname() and not a.closed
            sizes = [0, 1, 4, 100, MAX_DATA_SIZE]
            ids = [await a.send(bytes([n % 251]) * n) for n in sizes]
            assert ids == [1, 2, 3, 4, 5]
            assert await b.send(b"from b") == 1
            orders = []
            for service in (a, b, c):
                got = [await service.receive(timeout=10) for _ in range(6)]
                orders.append([(d.sender, d.msg_id, d.data) for d in got])
            assert orders[0] == orders[1] == orders[2]
            assert sorted(len(data) for _, _, data in orders[0]) == sorted([*sizes, 6])
            assert ("m2", 1, b"from b") in orders[0]
            with pytest.raises(LocalProtocolError, match="at most 512 bytes"):
                await a.send(b"x" * (MAX_DATA_SIZE + 1))
            with pytest.raises(LocalProtocolError):
                await a.send("text")  # type: ignore[arg-type]
            with pytest.raises(TimedOutError) as waited:
                await a.receive(timeout=0.05)
            assert isinstance(waited.value, TimeoutError)
            assert isinstance(waited.value.__cause__, TimeoutError)
            await c.send(b"last")
            await until(lambda: len(a._deliveries) > 0)
            await a.close()
            await a.close()  # idempotent
            assert a.closed
            # What had arrived is still received, then the service says it is closed.
            assert (await a.receive()).data == b"last"
            with pytest.raises(ClosedError):
                await a.receive()
            with pytest.raises(ClosedError):
                await a.send(b"late")
            with pytest.raises(ClosedError):
                a.initiate_snapshot()
            assert [d async for d in a] == []  # iteration ends
            assert [e async for e in a.events()] == []
        assert b.closed and c.closed  # closed on the way out of ``async with``

    run(main())


def test_turn_batching_sends_what_one_turn_multicast_in_one_datagram_per_member(
    run: Runner,
) -> None:
    async def main() -> None:
        async with Group(3) as g:
            await g.start(batch_turn=True)
            a = g.services[1]
            loop = asyncio.get_running_loop()
            sends = [loop.create_task(a.send(bytes([i]) * 8)) for i in range(10)]
            await asyncio.sleep(0)  # the sends ran, one after the other, in one loop turn
            out = a.isis.counters
            assert (out.messages_out, out.datagrams_out) == (20, 0)  # held for the turn's end
            await asyncio.sleep(0)  # the next turn: the batches left first
            assert (out.messages_out, out.datagrams_out) == (20, 2)
            assert await asyncio.gather(*sends) == list(range(1, 11))
            await until(lambda: all(len(g.delivered(m)) == 10 for m in (1, 2, 3)))
            orders = [[(d.sender, d.msg_id) for d in g.delivered(m)] for m in (1, 2, 3)]
            assert orders[0] == orders[1] == orders[2]
            assert sorted(d.data for d in g.delivered(2)) == [bytes([i]) * 8 for i in range(10)]

    run(main())


def test_a_send_held_back_by_a_snapshot_waits_for_its_msg_id(run: Runner) -> None:
    async def main() -> None:
        async with Group(3) as g:
            await g.start()
            a = g.services[1]
            sid = a.initiate_snapshot()
            assert a.node is not None and a.node.snapshot.active
            # The snapshot holds new multicasts back: send waits, then has its id.
            assert await asyncio.wait_for(a.send(b"held"), 10) == 1
            await until(lambda: len(g.snapshots().get(sid, {})) == 3)
            await until(lambda: all(len(g.delivered(m)) == 1 for m in (1, 2, 3)))
            assert all(g.delivered(m)[0].data == b"held" for m in (1, 2, 3))
            dones = [e for e in g.events[2] if isinstance(e, SnapshotDone)]
            assert [d.snapshot_id for d in dones] == [sid]  # from events(), not receive()

    run(main())


def test_opening_failures_are_network_errors_with_their_cause(run: Runner) -> None:
    async def main() -> None:
        taken = udp_socket("127.0.0.1", 0)
        port = taken.getsockname()[1]
        members = members_from([("a", ("127.0.0.1", port)), ("b", ("127.0.0.1", port + 1))])
        with pytest.raises(NetworkError) as caught:
            await open_isis(IsisConfig(me=1, members=members), wire=sealed_wire())
        assert isinstance(caught.value.__cause__, OSError) and isinstance(caught.value, OSError)
        taken.close()
        nowhere = members_from([("a", ("no-such-host.invalid", 7001)), ("b", ("127.0.0.1", 1))])
        with pytest.raises(NetworkError):
            await open_isis(IsisConfig(me=1, members=nowhere), wire=sealed_wire())

    run(main())
