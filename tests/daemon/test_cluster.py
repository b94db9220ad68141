"""Three ``gossamer node`` daemons on 127.0.0.1 form a cluster, serve gateway clients,
remove a killed member and take it back, restarted, as a new incarnation."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gossamer.aio.gateway_client import open_gateway_client
from gossamer.aio.loop import run as run_loop
from gossamer.testing.daemons import Daemon
from gossamer.trace import TraceReader

from .cluster import mesh


def incarnation(daemon: Daemon) -> int:
    ready = daemon.wait(lambda line: line["status"] == "ready", "ready")
    return int(ready["incarnation"])


async def gateway_round_trip(port: int) -> dict[str, object]:
    """Two applications on one node's gateway: one sends to the other by metadata."""
    dsn = f"singyeong://shop@127.0.0.1:{port}"
    async with open_gateway_client(dsn, metadata={"role": "worker"}, open_timeout=10) as worker, \
            open_gateway_client(dsn, open_timeout=10) as front:
        target = {"application": "shop", "ops": [
            {"path": "/role", "op": "$eq", "to": {"value": "worker"}}]}
        await front.send({"order": 1}, to=target, nonce="o1")
        message = await worker.receive(timeout=10)
        return {"data": message.data, "nonce": message.nonce}


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["b", "a"], ids=["joiner", "founder"])
def test_three_daemons_form_a_cluster_and_a_restarted_one_rejoins(
    tmp_path: Path, victim: str
) -> None:
    files = mesh(tmp_path, ["a", "b", "c"])
    daemons = {name: Daemon(path) for name, path in files.items()}
    try:
        everyone = {"a", "b", "c"}
        for daemon in daemons.values():
            daemon.view_with(everyone)

        # An application uses the cluster through a node's gateway.
        c_ports = tomllib.loads(files["c"].read_text())["ports"]
        got = run_loop(gateway_round_trip(c_ports["gateway"]))
        assert got == {"data": {"order": 1}, "nonce": "o1"}
        # Its progress lines count the gateway's clients (both gone by now).
        assert daemons["c"].wait(lambda line: line["status"] == "progress"
                                 and line["clients"] == 0, "progress")

        # A crash (of the founder: the coordinator): the survivors install a view
        # without it.
        old = incarnation(daemons[victim])
        daemons[victim].kill()
        survivors = everyone - {victim}
        for name in survivors:
            view = daemons[name].view_with(survivors)
            assert view["id"] >= 2

        # Restarted with the same file, it rejoins as a new incarnation (the founder
        # too: it hears of members through its seeds before it would found).
        daemons[victim] = Daemon(files[victim])
        new = incarnation(daemons[victim])
        assert new > old
        for daemon in daemons.values():
            daemon.view_with(everyone, including=f"{victim}#{new}")
    finally:
        codes = {name: daemon.stop() for name, daemon in daemons.items()}
    assert codes == {"a": 0, "b": 0, "c": 0}, {n: d.errors() for n, d in daemons.items()}
    for name, daemon in daemons.items():
        assert daemon.wait(lambda line: line["status"] == "done", "done")
        reader = TraceReader()
        events = list(reader.read(tmp_path / f"{name}.jsonl"))
        assert not reader.bad_lines, reader.bad_lines
        # Its trace has every view it installed, and its discovery's peers by name.
        assert any(e.layer == "views" and e.kind == "view_change" for e in events), name
        assert any(e.layer == "discovery" and e.kind == "peer_up" for e in events), name
        # Its clean stop, then what total order left in flight then (nothing, here) and
        # its last view (the nodes stopped before it may have left it already).
        stops = [e for e in events if e.kind == "stop" and e.layer in ("net", "isis")]
        assert [e.layer for e in stops] == ["net", "isis"], name
        assert (stops[1].attrs["held"], stops[1].attrs["outstanding"]) == ("", ""), name
        assert name in {m.split("#")[0] for m in stops[1].attrs["view"].split(",")}, name
