"""gossamer.aio.group on real, sealed UDP sockets on 127.0.0.1: agreed views with ISIS
total order flushed through them.

Every member runs in one event loop (uvloop and the default loop); each member's reader
plays the application (its state: the messages it delivered, handed to joiners) and
records what it was told. Nothing leaves 127.0.0.1. Assertions are about what was
delivered, in which view and in which order, never about speed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from gossamer.aio.group import GroupService, open_group
from gossamer.errors import ClosedError, ConfigError, LocalProtocolError
from gossamer.proto.isis import Delivered
from gossamer.proto.snapshot import Bank, SnapshotDone, Workload, check_bank, check_cut
from gossamer.proto.snapshot_group import SnapshotAbandoned
from gossamer.proto.views import Member, StateNeeded, ViewInstalled, ViewsConfig
from gossamer.testing import free_ports, sealed_wire
from gossamer.testing.aio import Runner, until
from gossamer.wire.mode import Wire, WireMode

RETRY = 0.02
ISIS = {"retransmit_initial": 0.05}
LOCALHOST = "127.0.0.1"


class App:
    """One member and its application: what it delivered in each view."""

    def __init__(self, service: GroupService) -> None:
        self.service = service
        self.view = 0
        self.delivered: list[tuple[int, bytes]] = []  # (view, payload)
        self.given: bytes | None = None  # the state a joiner started from
        self.reader = asyncio.get_running_loop().create_task(self._read())

    def state(self) -> bytes:
        return b"|".join(data for _, data in self.delivered)

    async def _read(self) -> None:
        async for event in self.service.events():
            if isinstance(event, Delivered):
                self.delivered.append((self.view, event.data))
            elif isinstance(event, ViewInstalled):
                self.view = event.view.id
                if event.state is not None:
                    self.given = event.state
            elif isinstance(event, StateNeeded):
                self.service.provide_state(event.view_id, self.state())

    def in_view(self, view_id: int) -> list[bytes]:
        return [data for v, data in self.delivered if v == view_id]

    async def close(self) -> None:
        await self.service.close()
        await self.reader


async def open_app(config: ViewsConfig, wire: Wire) -> App:
    return App(await open_group(config, wire=wire, isis=ISIS))


def test_founders_a_joiner_with_state_and_a_crash_keep_virtual_synchrony(run: Runner) -> None:
    async def main() -> None:
        wire = sealed_wire()
        ports = free_ports(3, kind="udp")
        founders = tuple(
            Member(name=n, incarnation=1, address=(LOCALHOST, p))
            for n, p in zip("abc", ports, strict=True)
        )
        apps = {
            m.name: await open_app(ViewsConfig(me=m, initial=founders, retry=RETRY), wire)
            for m in founders
        }
        try:
            for i in range(5):
                for name in "abc":
                    await apps[name].service.send(f"{name}{i}".encode())
            await until(lambda: all(len(a.delivered) == 15 for a in apps.values()), timeout=10)
            # A fourth process joins through b (not the coordinator).
            me = Member(name="d", incarnation=1, address=(LOCALHOST, 0))
            joiner = ViewsConfig(me=me, seeds=(apps["b"].service.address,), retry=RETRY)
            apps["d"] = await open_app(joiner, wire)
            d = apps["d"].service
            for a in apps.values():
                if a.service is not d:
                    a.service.join_request(d.member)  # what discovery's peer_up says
            await until(lambda: all(a.view == 2 for a in apps.values()), timeout=10)
            # The joiner starts from the state at the cut: everything of view 1.
            assert apps["d"].given == apps["a"].state() and len(apps["a"].in_view(1)) == 15
            for i in range(5):
                for name in "abcd":
                    await apps[name].service.send(f"{name}{i + 5}".encode())
            await until(lambda: all(len(a.in_view(2)) == 20 for a in apps.values()), timeout=10)
            orders = {name: a.in_view(2) for name, a in apps.items()}
            assert len({tuple(o) for o in orders.values()}) == 1, orders
            assert sorted(orders["d"]) == sorted(
                f"{n}{i}".encode() for n in "abcd" for i in range(5, 10)
            )
            # c crashes; the survivors' membership layer suspects it; they move on.
            await apps.pop("c").close()
            for a in apps.values():
                a.service.suspect("c")
            await until(lambda: all(a.view == 3 for a in apps.values()), timeout=10)
            for a in apps.values():
                assert a.service.view is not None and a.service.view.names == ("a", "b", "d")
            assert len({tuple(a.in_view(2)) for a in apps.values()}) == 1
            for name in "abd":
                await apps[name].service.send(f"{name}-after".encode())
            await until(lambda: all(len(a.in_view(3)) == 3 for a in apps.values()), timeout=10)
            assert len({tuple(a.in_view(3)) for a in apps.values()}) == 1
            # Every payload delivered once everywhere, and every member in the same order.
            for a in apps.values():
                payloads = [data for _, data in a.delivered]
                assert len(payloads) == len(set(payloads))
        finally:
            for a in apps.values():
                await a.close()

    run(main())


def test_the_api_contract(run: Runner) -> None:
    async def main() -> None:
        wire = sealed_wire()
        with pytest.raises(ConfigError, match="sealed wire"):
            open_group(
                ViewsConfig(
                    me=Member(name="a", incarnation=1, address=(LOCALHOST, 0)),
                    seeds=(("127.0.0.1", 9),),
                ),
                wire=Wire(mode=WireMode.ORIGINAL),
            )
        me = Member(name="j", incarnation=1, address=(LOCALHOST, 0))
        config = ViewsConfig(me=me, seeds=((LOCALHOST, free_ports(1, kind="udp")[0]),), retry=RETRY)
        async with open_group(config, wire=wire) as joiner:
            with pytest.raises(LocalProtocolError, match="not a member"):
                await joiner.send(b"too early")
            with pytest.raises(LocalProtocolError):
                await joiner.send(b"x" * 513)
            assert joiner.view is None and not joiner.excluded and joiner.rejected == {}
        assert joiner.closed
        with pytest.raises(ClosedError):
            await joiner.send(b"late")
        await joiner.close()  # idempotent

    run(main())


class Account:
    """A member with snapshots and a bank account (opened when it first has a view): the
    snapshot parts it recorded, and its view's members for the bank."""

    def __init__(self, service: GroupService, banks: dict[str, Bank]) -> None:
        self.service = service
        self.banks = banks
        self.parts: dict[int, dict[str, Any]] = {}
        self.abandoned: list[int] = []
        #: Cleared: the application reads nothing, its deliveries wait in the events.
        self.reading = asyncio.Event()
        self.reading.set()
        self.reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def bank(self) -> Bank:
        return self.banks[self.service.member.name]

    async def _read(self) -> None:
        snapshots = self.service.snapshots
        assert snapshots is not None
        while True:
            await self.reading.wait()
            try:
                event = await self.service.next_event()
            except ClosedError:
                return
            if isinstance(event, Delivered):
                self.bank.delivered(event.data, event.sender_id)
            elif isinstance(event, ViewInstalled):
                self.bank.view_changed(snapshots.member_ids(event.view))
            elif isinstance(event, SnapshotDone):
                self.parts[event.snapshot_id] = event.to_json()
            elif isinstance(event, SnapshotAbandoned):
                self.abandoned.append(event.snapshot_id)

    async def transfer(self, count: int) -> None:
        for _ in range(count):
            data = self.bank.next_transfer()
            assert data is not None
            await self.service.send(data)  # waits while a snapshot holds it back

    async def close(self) -> None:
        await self.service.close()
        await self.reader


async def open_accounts(names: str) -> tuple[dict[str, Account], dict[str, Bank]]:
    """Founders ``names`` with snapshots, each with an account of 1000 once it has a
    view: their ``Account``s and the banks by name."""
    wire = sealed_wire()
    ports = free_ports(len(names), kind="udp")
    founders = tuple(
        Member(name=n, incarnation=1, address=(LOCALHOST, p))
        for n, p in zip(names, ports, strict=True)
    )
    banks: dict[str, Bank] = {}

    def workload_of(name: str) -> Callable[[int], Workload]:
        def made(me: int) -> Workload:
            banks[name] = Bank(me=me, members=[me], initial=1000, rng=random.Random(me))
            return banks[name].workload()

        return made

    accounts = {}
    for m in founders:
        service = await open_group(
            ViewsConfig(me=m, initial=founders, retry=RETRY), wire=wire, isis=ISIS,
            snapshots=True, workload=workload_of(m.name),
        )  # fmt: skip
        accounts[m.name] = Account(service, banks)
    return accounts, banks


def test_snapshots_of_a_bank_on_the_group_hold_all_its_money_view_after_view(
    run: Runner,
) -> None:
    """Three founders with snapshots transfer money; a snapshot taken meanwhile is a
    consistent cut holding 3 x 1000. One crashes and the survivors go on in view 2, where
    a snapshot holds what their accounts hold once quiet (the crashed member's account
    left with it, and transfers to it that went out again were refunded)."""

    async def main() -> None:
        accounts, banks = await open_accounts("abc")
        try:
            await until(lambda: len(banks) == 3, timeout=10)

            async def snapshot_amid_transfers(names: str) -> dict[str, Any]:
                """A snapshot started by a, amid transfers: every member's part."""
                sending = [
                    asyncio.ensure_future(accounts[n].transfer(20)) for n in names
                ]  # fmt: skip
                await asyncio.sleep(0.01)
                sid = accounts["a"].service.initiate_snapshot()
                assert sid is not None
                await asyncio.gather(*sending)
                await until(lambda: all(sid in accounts[n].parts for n in names), timeout=10)
                return {p["node"]: p for p in (accounts[n].parts[sid] for n in names)}

            parts = await snapshot_amid_transfers("abc")
            assert check_cut(parts) == []
            assert check_bank(parts, total=3000) == (3000, [])
            await accounts.pop("c").close()
            for account in accounts.values():
                account.service.suspect("c")
            await until(lambda: all(a.service.view.id == 2 for a in accounts.values()),
                        timeout=10)  # fmt: skip
            parts = await snapshot_amid_transfers("ab")
            assert check_cut(parts) == []
            found, _ = check_bank(parts, total=0)
            # Once quiet, the survivors' accounts hold what the snapshot found.
            await until(
                lambda: all(
                    a.service.snapshots is not None
                    and a.service.snapshots.isis is not None
                    and a.service.snapshots.isis.quiescent
                    for a in accounts.values()
                ),
                timeout=10,
            )
            assert sum(a.bank.balance for a in accounts.values()) == found < 3000
        finally:
            for account in accounts.values():
                await account.close()

    run(main())


def test_a_founders_snapshot_holds_the_deliveries_its_application_has_not_read(
    run: Runner,
) -> None:
    """View 1 is installed as a founder's member is made, before the service that
    queues its deliveries exists: a snapshot of it must still count the transfers
    delivered to b while b's application reads nothing (they are in neither its
    balance nor the hold-back queue)."""

    async def main() -> None:
        accounts, banks = await open_accounts("ab")
        a, b = accounts["a"], accounts["b"]
        try:
            await until(lambda: len(banks) == 2 and all(k.others for k in banks.values()))
            b.reading.clear()
            await a.transfer(5)
            b_isis = b.service.snapshots.isis if b.service.snapshots is not None else None
            assert b_isis is not None
            await until(lambda: b_isis.counters.delivered >= 5, timeout=10)
            sid = a.service.initiate_snapshot()
            assert sid is not None
            await until(lambda: sid in a.parts, timeout=10)
            b.reading.set()
            await until(lambda: sid in b.parts, timeout=10)
            parts = {p["node"]: p for p in (a.parts[sid], b.parts[sid])}
            # All but the first, which b's reader was already waiting for when it paused.
            assert len(b.parts[sid]["local_state"]["unread"]) >= 4
            assert check_cut(parts) == []
            assert check_bank(parts, total=2000) == (2000, [])
        finally:
            for account in accounts.values():
                await account.close()

    run(main())


def test_a_group_without_snapshots_refuses_to_take_one(run: Runner) -> None:
    async def main() -> None:
        me = Member(name="a", incarnation=1, address=(LOCALHOST, 0))
        async with open_group(ViewsConfig(me=me, initial=(me,)), wire=sealed_wire()) as a:
            assert a.snapshots is None
            with pytest.raises(LocalProtocolError, match="without snapshots"):
                a.initiate_snapshot()

    run(main())
