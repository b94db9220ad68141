"""Three ``gossamer node`` daemons on 127.0.0.1 serve one 신경 gateway: clients connected
to different daemons reach each other as they would on one node, a SIGKILLed daemon's
clients leave routing on the survivors once the view changes, and a restarted daemon's
new clients are reachable from every node.

singyeong-py (unchanged, in its own Python 3.9 venv: ``tests/aio/test_gateway_singyeong_py.py``)
runs the exchange whose single-gateway outcome that module checks (``check_received``),
its two clients on two daemons and gossamer's client on the third."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from aio.test_gateway_singyeong_py import SCRIPT, check_received, singyeong_venv
from gossamer.aio.gateway_client import GatewayClient, open_gateway_client
from gossamer.aio.loop import run as run_loop
from gossamer.errors import NoRouteError
from gossamer.testing.daemons import HOST, PATIENCE, Daemon, gateway_port

from .cluster import mesh

NAMES = ["a", "b", "c"]
PASSWORD = "pw"
#: SCRIPT, its clients held after they identified until a line arrives on standard input,
#: so that they send only once every node knows them (metadata replicated).
GATED = SCRIPT.replace(
    "    emit(ready=True)\n",
    "    emit(ready=True)\n"
    "    await asyncio.get_event_loop().run_in_executor(None, sys.stdin.readline)\n",
)
assert GATED != SCRIPT


def dsn(config: Path, app: str) -> str:
    return f"singyeong://{app}:{PASSWORD}@{HOST}:{gateway_port(config)}"


@contextlib.contextmanager
def cluster(tmp_path: Path) -> Any:
    """Three daemons whose views hold all three and whose gateways are linked."""
    # No op 7 load balancing: the comparison with one node puts every client on one
    # node on purpose, and a client sent away would miss a BROADCAST while it reconnects.
    files = mesh(tmp_path, NAMES, gateway={"password": PASSWORD,
                                           "cluster": {"balance_interval": 3600.0}})
    daemons = {name: Daemon(path) for name, path in files.items()}
    try:
        for name, daemon in daemons.items():
            daemon.view_with(set(NAMES))
            daemon.gateway_peers(set(NAMES) - {name})
        yield files, daemons
    finally:
        codes = {name: daemon.stop() for name, daemon in daemons.items()}
        assert codes == dict.fromkeys(NAMES, 0), {n: d.errors() for n, d in daemons.items()}


async def listed(client: GatewayClient, target: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """QUERY_NODES through ``client``'s node: client id -> metadata."""
    return {n["client_id"]: n["metadata"] for n in await client.query_nodes(target)}


async def until_listed(
    probes: list[GatewayClient], target: dict[str, Any],
    test: Callable[[dict[str, dict[str, Any]]], bool],
) -> None:
    """Until QUERY_NODES through every probe (each on its own node) passes ``test``."""
    deadline = time.monotonic() + PATIENCE
    while True:
        answers = [await listed(probe, target) for probe in probes]
        if all(test(answer) for answer in answers):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"never listed as wanted: {answers}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def clients(*specs: tuple[str, str, dict[str, Any]]) -> AsyncIterator[list[GatewayClient]]:
    """Gateway clients ``(dsn, client_id, metadata)``, closed on the way out."""
    async with contextlib.AsyncExitStack() as stack:
        opened = []
        for url, client_id, metadata in specs:
            opened.append(await stack.enter_async_context(open_gateway_client(
                url, client_id=client_id, metadata=metadata, open_timeout=10)))
        yield opened


async def receive_until_ends(client: GatewayClient, ends: int) -> list[tuple[str, Any, Any]]:
    """Everything ``client`` receives until ``ends`` BROADCASTs ``end`` arrived, one from
    each sender, sent after all it sent: what one sender sends reaches a receiver in
    order (one link, FIFO), so each ``end`` comes after the rest of its sender's."""
    got = []
    while ends:
        message = await client.receive(timeout=PATIENCE)
        if message.data == "end":
            ends -= 1
        else:
            got.append((message.event, message.nonce, message.data))
    return got


async def shop_exchange(
    front_at: str, eu_at: str, us_at: str, probes: list[GatewayClient]
) -> dict[str, Any]:
    """Three clients of application ``shop`` (``*_at``: the DSN each connects to) route
    to each other: what each receives and what QUERY_NODES lists."""
    app = {"application": "shop"}
    async with clients(
        (front_at, "front", {"load": 9}),
        (eu_at, "eu", {"region": "eu", "load": 5}),
        (us_at, "us", {"region": "us", "load": 2}),
    ) as (front, eu, us):
        loads = {"front": 9, "eu": 5, "us": 2}
        await until_listed(probes, app, lambda nodes: {
            k: v.get("load") for k, v in nodes.items()} == loads)
        await front.send({"order": 1}, to={**app, "ops": [
            {"path": "/region", "op": "$eq", "to": {"value": "eu"}}]}, nonce="o1")
        await eu.send("least", to={**app, "selector": {"$min": "load"}}, nonce="min")
        await us.send("most", to={**app, "selector": {"$max": "load"}}, nonce="max")
        for i in range(6):  # rendezvous hashing over every match of the cluster
            await front.send(i, to={**app, "key": f"user-{i}"}, nonce=f"k{i}")
        await us.send("sale!", to=app, broadcast=True, nonce="b1")
        await front.send("opt", to={**app, "optional": True, "ops": [
            {"path": "/region", "op": "$eq", "to": {"value": "mars"}}]}, nonce="opt")
        queried = await front.query_nodes({**app, "ops": [
            {"path": "/load", "op": "$lt", "to": {"value": 6}}]})
        for client in (front, eu, us):
            await client.send("end", to=app, broadcast=True)
        received = {
            name: await receive_until_ends(client, 3)
            for name, client in (("front", front), ("eu", eu), ("us", us))
        }
    await until_listed(probes, app, lambda nodes: not nodes)  # all gone everywhere
    optional = [n for got in received.values() for (_e, n, _d) in got if n == "opt"]
    assert len(optional) == 1  # optional: a client picked among all, whichever
    return {
        name: sorted((e, n, d) for (e, n, d) in got if n != "opt")
        for name, got in received.items()
    } | {"query": sorted((n["client_id"], n["metadata"]["load"]) for n in queried)}


@pytest.mark.slow
def test_clients_on_different_daemons_route_as_on_one_node(tmp_path: Path) -> None:
    python = singyeong_venv()
    script = tmp_path / "sy_client.py"
    script.write_text(GATED)
    with cluster(tmp_path) as (files, _daemons):

        async def main() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
            probe_specs = [(dsn(files[n], "probe"), f"probe-{n}", {}) for n in NAMES]
            async with clients(*probe_specs) as probes:
                # gossamer's own clients: spread over the three daemons, then all on one.
                spread = await shop_exchange(
                    *(dsn(files[n], "shop") for n in NAMES), probes)
                one = await shop_exchange(*(dsn(files["a"], "shop") for _ in NAMES), probes)
                # singyeong-py: A on a, B on b; gossamer's g on c.
                lines = await singyeong_exchange(python, script, files, probes)
            return spread, one, lines

        spread, one, lines = run_loop(main())
    assert spread == one
    assert ("SEND", "o1", {"order": 1}) in spread["eu"]
    assert ("SEND", "min", "least") in spread["us"]
    assert ("SEND", "max", "most") in spread["front"]
    for name in ("front", "eu", "us"):  # the BROADCAST reached each exactly once
        assert [n for (_e, n, _d) in spread[name]].count("b1") == 1
    keyed = sorted(n for got in (spread["front"], spread["eu"], spread["us"])
                   for (_e, n, _d) in got if n.startswith("k"))
    assert keyed == [f"k{i}" for i in range(6)]
    assert spread["query"] == [("eu", 5), ("us", 2)]
    check_received(lines)
    pairs = Counter((m["client"], m["nonce"]) for m in lines)
    assert max(pairs.values()) == 1, pairs  # a BROADCAST exactly once, across nodes too


async def singyeong_exchange(
    python: Path, script: Path, files: dict[str, Path], probes: list[GatewayClient]
) -> list[dict[str, Any]]:
    """SCRIPT's exchange: its A on daemon a, its B on daemon b, gossamer's g on c."""
    async with clients((dsn(files["c"], "gossamer"), "g", {"langs": ["py", "ex"]})) as (ours,):
        proc = await asyncio.create_subprocess_exec(
            str(python), str(script), str(gateway_port(files["a"])), "1.5",
            str(gateway_port(files["b"])),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), PATIENCE))
        assert ready == {"ready": True}
        # Every node holds both of its clients with their metadata, and g.
        await until_listed(probes, {"application": "pyapp"}, lambda nodes: sorted(
            (m.get("shard"), m.get("lat")) for m in nodes.values()) == [(1, None), (2, 3.5)])
        await until_listed(probes, {"application": "gossamer"}, lambda nodes: set(nodes) == {
            "g"})
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        await ours.send({"n": 8}, to={"application": "pyapp", "ops": [
            {"path": "/ver", "op": "$gte", "to": {"value": "1.10.0"}}]}, nonce="from-gossamer")
        from_them = await ours.receive(PATIENCE)
        assert (from_them.nonce, from_them.data) == ("to-gossamer", {"n": 5})
        out, err = await asyncio.wait_for(proc.communicate(), PATIENCE)
        assert proc.returncode == 0, err.decode()[-2000:]
        return [json.loads(line) for line in out.decode().splitlines() if line]


@pytest.mark.slow
def test_a_killed_daemons_clients_leave_routing_and_its_restart_is_reachable(
    tmp_path: Path,
) -> None:
    with cluster(tmp_path) as (files, daemons):
        worker = {"application": "shop", "ops": [
            {"path": "/at", "op": "$eq", "to": {"value": "b"}}]}
        everyone = {"application": "shop"}

        async def before_the_kill() -> None:
            async with clients(*((dsn(files[n], "shop"), f"w{n}", {"at": n})
                                 for n in NAMES)) as (wa, wb, wc):
                await until_listed([wa, wb, wc], everyone,
                                   lambda nodes: set(nodes) == {"wa", "wb", "wc"})
                await wc.send("to b", to=worker, nonce="x")
                got = await wb.receive(timeout=PATIENCE)
                assert (got.nonce, got.data) == ("x", "to b")
                # b's client stays connected while b is killed.
                full = daemons["a"].view_with(set(NAMES))
                daemons["b"].kill()
                for name in ("a", "c"):
                    daemons[name].view_with({"a", "c"}, after=full["id"])
                await until_listed([wa, wc], everyone,
                                   lambda nodes: set(nodes) == {"wa", "wc"})
                # A SEND that only b's client matched finds no client any more.
                await wa.send("lost", to=worker, nonce="lost")
                await wa.query_nodes(everyone)  # the refusal has arrived by then
                with pytest.raises(NoRouteError) as refused:
                    await wa.send("next", to=everyone)
                assert refused.value.fields["nonce"] == "lost"

        run_loop(before_the_kill())
        old = daemons["b"].wait(lambda line: line["status"] == "ready", "ready")
        daemons["b"] = Daemon(files["b"])
        new = daemons["b"].wait(lambda line: line["status"] == "ready", "ready")
        assert new["incarnation"] > old["incarnation"]
        for daemon in daemons.values():
            daemon.view_with(set(NAMES), including=f"b#{new['incarnation']}")

        async def after_the_restart() -> None:
            async with clients(*((dsn(files[n], "shop"), f"v{n}", {"at": n})
                                 for n in NAMES)) as (va, vb, vc):
                await until_listed([va, vb, vc], everyone,
                                   lambda nodes: set(nodes) == {"va", "vb", "vc"})
                for sender, nonce in ((va, "from a"), (vc, "from c")):
                    await sender.send(nonce, to=worker, nonce=nonce)
                    got = await vb.receive(timeout=PATIENCE)
                    assert (got.nonce, got.data) == (nonce, nonce)
                await vb.send("back", to={"application": "shop", "ops": [
                    {"path": "/at", "op": "$in", "to": {"value": ["a", "c"]}}]},
                    broadcast=True, nonce="back")
                for client in (va, vc):
                    got = await client.receive(timeout=PATIENCE)
                    assert (got.event, got.nonce) == ("BROADCAST", "back")

        run_loop(after_the_restart())
