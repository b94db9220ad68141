"""The third-party client singyeong-py (PyPI, unchanged) uses a cluster through a
``gossamer node`` daemon's gateway, beside gossamer's own client.

singyeong-py runs in its own Python 3.9 virtual environment, found or built as
``tests/aio/test_gateway_singyeong_py.py`` says (skipped with the reason where it cannot
be built, failed under ``CI=true``)."""

from __future__ import annotations

import asyncio
import json
import tomllib
from pathlib import Path

import pytest

from aio.test_gateway_singyeong_py import singyeong_venv  # tests/ is on the path
from gossamer.aio.gateway_client import open_gateway_client
from gossamer.aio.loop import run as run_loop
from gossamer.testing.daemons import Daemon

from .cluster import mesh

SCRIPT = r'''
import asyncio, json, sys
from singyeong import Client, Target, Equal

async def main():
    client = Client(f"singyeong://shop@localhost:{int(sys.argv[1])}")
    got = asyncio.get_event_loop().create_future()

    async def on_raw_packet(message):
        if not got.done():
            got.set_result(message)

    client.on_raw_packet = on_raw_packet
    task = asyncio.ensure_future(client.connect())
    await client.update_metadata({"lang": "py"})
    await asyncio.sleep(0.3)
    print(json.dumps({"ready": True}), flush=True)
    message = await asyncio.wait_for(got, 20)
    print(json.dumps({"event": message.event_name, "payload": message.payload}), flush=True)
    await client.send(Target(application="shop", operators=[Equal("/lang", "gossamer")]),
                      {"echo": message.payload}, nonce="reply")
    await asyncio.sleep(0.5)
    await client._close()
    task.cancel()

asyncio.get_event_loop().run_until_complete(main())
'''


async def converse(python: Path, script: Path, port: int) -> tuple[list[dict[str, object]], object]:
    dsn = f"singyeong://shop@127.0.0.1:{port}"
    async with open_gateway_client(dsn, metadata={"lang": "gossamer"}, open_timeout=10) as ours:
        proc = await asyncio.create_subprocess_exec(
            str(python), str(script), str(port),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        assert ready == {"ready": True}
        py = {"application": "shop", "ops": [{"path": "/lang", "op": "$eq", "to": {"value": "py"}}]}
        await ours.send({"n": 1}, to=py, nonce="hello")
        reply = await ours.receive(timeout=20)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()[-2000:]
        lines = [json.loads(line) for line in out.decode().splitlines() if line]
        return lines, (reply.nonce, reply.data)


@pytest.mark.slow
def test_singyeong_py_talks_to_a_gossamer_client_through_a_daemon(tmp_path: Path) -> None:
    python = singyeong_venv()
    script = tmp_path / "sy_client.py"
    script.write_text(SCRIPT)
    files = mesh(tmp_path, ["a"])
    daemon = Daemon(files["a"])
    try:
        daemon.view_with({"a"})
        port = tomllib.loads(files["a"].read_text())["ports"]["gateway"]
        lines, reply = run_loop(converse(python, script, port))
    finally:
        code = daemon.stop()
    assert code == 0, daemon.errors()
    assert lines == [{"event": "SEND", "payload": {"n": 1}}]
    assert reply == ("reply", {"echo": {"n": 1}})
