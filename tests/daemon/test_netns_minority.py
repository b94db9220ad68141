"""A daemon cut off in a minority keeps serving its own gateway clients, the majority
takes its clients out of routing, and once the partition heals it rejoins and every
node's clients reach each other again (``docs/node.md``, "In a minority").

Three namespace hosts of one subnet; gateway clients run inside the hosts (a small
driver program taking one JSON command per line), since a host cut off from the switch
is reachable only from inside."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gossamer.daemon.config import DEFAULT_PORTS
from gossamer.lab.netns import Host
from gossamer.testing.daemons import PATIENCE, Daemon
from gossamer.testing.pytest_plugin import NetnsFactory

from .cluster import node_file, write_key

DRIVER = r'''
import asyncio, json, sys
from gossamer.aio.gateway_client import open_gateway_client
from gossamer.aio.loop import run

async def main():
    loop = asyncio.get_running_loop()
    clients = {}
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        cmd = json.loads(line)
        try:
            if cmd["op"] == "open":
                clients[cmd["id"]] = await open_gateway_client(
                    cmd["dsn"], client_id=cmd["id"], metadata=cmd["metadata"], open_timeout=30)
                out = {}
            elif cmd["op"] == "send":
                await clients[cmd["id"]].send(cmd["data"], to=cmd["to"], nonce=cmd["nonce"])
                out = {}
            elif cmd["op"] == "receive":
                message = await clients[cmd["id"]].receive(timeout=cmd["timeout"])
                out = {"nonce": message.nonce, "data": message.data}
            else:
                nodes = await clients[cmd["id"]].query_nodes(cmd["target"])
                out = {"ids": sorted(n["client_id"] for n in nodes)}
        except Exception as exc:
            out = {"error": repr(exc)}
        print(json.dumps(out), flush=True)
    for client in clients.values():
        await client.close()

run(main())
'''
SHOP = {"application": "shop"}


def to(name: str) -> dict[str, Any]:
    return {**SHOP, "ops": [{"path": "/name", "op": "$eq", "to": {"value": name}}]}


class Driver:
    """Gateway clients inside one host, driven one command at a time."""

    def __init__(self, host: Host, script: Path) -> None:
        self.host = host
        self.proc = host.popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        assert "error" not in answer, answer
        return answer

    def open(self, name: str) -> None:
        self.ask(op="open", id=name, dsn=f"singyeong://shop@{self.host.ip}:4567",
                 metadata={"name": name})

    def listed(self, client: str) -> list[str]:
        ids: list[str] = self.ask(op="query", id=client, target=SHOP)["ids"]
        return ids

    def until_listed(self, client: str, ids: list[str]) -> None:
        deadline = time.monotonic() + PATIENCE
        while (got := self.listed(client)) != ids:
            assert time.monotonic() < deadline, f"{self.host.name}: {got}, never {ids}"
            time.sleep(0.2)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.mark.netns
@pytest.mark.slow
def test_a_minority_keeps_serving_its_clients_and_rejoins_after_the_heal(
    netns: NetnsFactory, tmp_path: Path
) -> None:
    topo = netns(subnets=[3])
    hosts = dict(zip(["a", "b", "c"], topo.hosts, strict=True))
    write_key(tmp_path)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    files = {
        name: node_file(
            tmp_path, name, dict(DEFAULT_PORTS), seeds=[], bootstrap=name == "a",
            address=host.ip, discovery={"broadcast_address": host.broadcast},
        )
        for name, host in hosts.items()
    }
    everyone = {"a", "b", "c"}
    daemons = {name: Daemon(files[name], hosts[name].popen) for name in hosts}
    drivers: list[Driver] = []
    try:
        for name, daemon in daemons.items():
            full = daemon.view_with(everyone)
            daemon.gateway_peers(everyone - {name})
        at_a, at_c = Driver(hosts["a"], script), Driver(hosts["c"], script)
        drivers += [at_a, at_c]
        at_a.open("a1")
        at_c.open("c1")
        at_c.open("c2")
        at_a.until_listed("a1", ["a1", "c1", "c2"])

        # c alone is a minority: it is blocked, the others go on without it.
        topo.cut(hosts["c"])
        majority = daemons["a"].view_with({"a", "b"}, after=full["id"])
        daemons["b"].view_with({"a", "b"}, after=full["id"])
        daemons["c"].wait(lambda line: line["status"] == "progress" and line["blocked"],
                          "blocked")
        at_a.until_listed("a1", ["a1"])  # c's clients left routing on the majority
        # c's gateway serves its own clients still (and keeps the replicas it had).
        at_c.ask(op="send", id="c1", data="local", to=to("c2"), nonce="local")
        assert at_c.ask(op="receive", id="c2", timeout=PATIENCE) == {
            "nonce": "local", "data": "local"}
        assert at_c.listed("c1") == ["a1", "c1", "c2"]

        # Healed: c learns it was excluded, rejoins as its next incarnation, and the
        # replicas converge both ways.
        topo.heal(hosts["c"])
        old = daemons["c"].wait(lambda line: line["status"] == "ready", "ready")["incarnation"]
        for daemon in daemons.values():
            members = daemon.view_with(everyone, after=majority["id"])["members"]
            (c,) = [int(m.split("#")[1]) for m in members if m.startswith("c#")]
            assert c > old
        at_a.until_listed("a1", ["a1", "c1", "c2"])
        at_a.ask(op="send", id="a1", data="again", to=to("c2"), nonce="again")
        assert at_c.ask(op="receive", id="c2", timeout=PATIENCE) == {
            "nonce": "again", "data": "again"}
        at_c.ask(op="send", id="c1", data="back", to=to("a1"), nonce="back")
        assert at_a.ask(op="receive", id="a1", timeout=PATIENCE) == {
            "nonce": "back", "data": "back"}
    finally:
        for driver in drivers:
            driver.close()
        codes = {name: daemon.stop() for name, daemon in daemons.items()}
    assert codes == {"a": 0, "b": 0, "c": 0}, {n: d.errors() for n, d in daemons.items()}
