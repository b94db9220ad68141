"""The third-party client singyeong-py 1.0.1 (PyPI) works unchanged against gossamer.

singyeong-py needs Python 3.8 or 3.9 and its pinned websockets 8.1, so the test builds
a virtual environment for it once (``.venv/singyeong-py39`` in the repository, or
``$GOSSAMER_SINGYEONG_VENV``) with a Python 3.9 interpreter (``$PYTHON39``,
``python3.9`` on the PATH, or pyenv's). When that interpreter or PyPI cannot be
reached the test is skipped with the reason, except under ``CI=true``, where it fails.

Everything singyeong-py supports is exercised, in JSON and msgpack: identify with a
password, heartbeats, metadata of every type it can send (string, integer, float,
list, version), SEND and BROADCAST with flat op lists (the only ones its Target
class can build), operators that crash the reference server (``$ne``, ``$ncontains``)
or never match there (``$in``), semver comparison, a selector and ``key``, plus
traffic to and from a gossamer client. Its DSN regex refuses dotted hosts, so it
connects to ``localhost`` (the gateway listens on 127.0.0.1 only).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gossamer.aio import loop as aio_loop
from gossamer.aio.gateway_client import open_gateway_client
from gossamer.aio.gateway_server import open_gateway_server
from gossamer.proto.gateway.core import GatewayConfig

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ["singyeong-py==1.0.1", "msgpack==1.0.8"]

SCRIPT = r'''
import asyncio, json, sys
from singyeong import Client, Target, Equal, NotEqual, GreaterThan, LessThan, In, \
    Contains, NotContains, VersionType, Minimum

port = int(sys.argv[1])
# B may connect to another node of a gateway cluster (tests/aio/test_gateway_cluster.py).
port_b = int(sys.argv[3]) if len(sys.argv) > 3 else port
out = []

def emit(**kv):
    print(json.dumps(kv), flush=True)

def make(name, dsn):
    client = Client(dsn)
    async def on_raw_packet(message):
        emit(client=name, event=message.event_name, nonce=message.nonce,
             payload=message.payload, ts=message.timestamp is not None)
    client.on_raw_packet = on_raw_packet
    return client

async def main():
    a = make("A", f"singyeong://pyapp:pw@localhost:{port}")
    b = make("B", f"singyeong://pyapp:pw@localhost:{port_b}?encoding=msgpack")
    tasks = [asyncio.ensure_future(a.connect()), asyncio.ensure_future(b.connect())]
    await a.update_metadata({"shard": 1, "ver": VersionType("1.10.0"), "tags": ["x", "y"],
                             "name": "alpha"})
    await b.update_metadata({"shard": 2, "lat": 3.5, "ver": VersionType("1.2.0")})
    await asyncio.sleep(0.3)
    emit(ready=True)
    app = "pyapp"
    await a.send(Target(application=app, operators=[Equal("/shard", 2), GreaterThan("/lat", 1.0),
                                                    In("/shard", [2, 3])]),
                 {"n": 1}, nonce="a-to-b")
    await b.send(Target(application=app, operators=[NotEqual("/shard", 2),
                                                    NotContains("/tags", "zzz")]),
                 {"n": 2}, nonce="b-to-a")
    await a.broadcast(Target(application=app), {"n": 3}, nonce="bcast")
    await a.send(Target(application=app, selector=Minimum("lat"), key="user-1",
                        optional=True), {"n": 4}, nonce="min")
    await a.send(Target(application="gossamer", operators=[Contains("/langs", "py")]),
                 {"n": 5}, nonce="to-gossamer")
    await b.send(Target(application=app, operators=[GreaterThan("/ver", VersionType("1.9.0")),
                                                    LessThan("/shard", 2)]),
                 {"n": 6}, nonce="semver")
    await a.send(Target(application="nobody", droppable=True), {"n": 7}, nonce="dropped")
    await asyncio.sleep(float(sys.argv[2]))
    for client in (a, b):
        await client._close()
    for task in tasks:
        task.cancel()

asyncio.get_event_loop().run_until_complete(main())
'''


def _python39() -> str | None:
    """A working Python 3.9 (a pyenv shim without 3.9 behind it does not count)."""
    pyenv = sorted(Path.home().glob(".pyenv/versions/3.9.*/bin/python"))
    for candidate in (
        os.environ.get("PYTHON39"),
        *(str(p) for p in pyenv),
        shutil.which("python3.9"),
    ):
        if not candidate or not Path(candidate).exists():
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 9))"],
            capture_output=True, text=True, timeout=30, check=False,
        )
        if probe.stdout.strip() == "True":
            return candidate
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"singyeong-py cannot run here: {reason}")
    pytest.skip(reason)


def singyeong_venv() -> Path:
    """The Python of a venv with singyeong-py, built once."""
    venv = Path(os.environ.get("GOSSAMER_SINGYEONG_VENV", ROOT / ".venv" / "singyeong-py39"))
    python = venv / "bin" / "python"
    marker = venv / ".gossamer-ready"
    if marker.exists() and python.exists():
        return python
    base = _python39()
    if base is None:
        _unavailable("no Python 3.9 interpreter (set $PYTHON39)")
    assert base is not None
    shutil.rmtree(venv, ignore_errors=True)
    made = subprocess.run([base, "-m", "venv", str(venv)], capture_output=True, text=True,
                          timeout=120, check=False)
    if made.returncode != 0:
        _unavailable(f"cannot create a Python 3.9 venv: {made.stderr.strip()[-300:]}")
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", *REQUIREMENTS],
        capture_output=True, text=True, timeout=600, check=False,
    )
    if installed.returncode != 0:
        _unavailable(f"PyPI unreachable or install failed: {installed.stderr.strip()[-300:]}")
    marker.write_text("\n".join(REQUIREMENTS) + "\n")
    return python


@pytest.mark.slow
def test_singyeong_py_works_unchanged(tmp_path: Path) -> None:
    python = singyeong_venv()
    script = tmp_path / "sy_client.py"
    script.write_text(SCRIPT)

    async def main() -> list[dict[str, object]]:
        config = GatewayConfig(password="pw")
        async with open_gateway_server(config, host="127.0.0.1", port=0,
                                       rng=random.Random(3)) as server:
            dsn = f"singyeong://gossamer:pw@127.0.0.1:{server.port}"
            async with open_gateway_client(dsn, client_id="g",
                                           metadata={"langs": ["py", "ex"]}) as ours:
                proc = await asyncio.create_subprocess_exec(
                    str(python), str(script), str(server.port), "1.5",
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                )
                assert proc.stdout is not None
                lines: list[dict[str, object]] = []
                ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 20))
                assert ready == {"ready": True}
                assert server.core is not None
                apps = sorted(c.app_id for c in server.core.directory.clients.values())
                assert apps == ["gossamer", "pyapp", "pyapp"]
                await ours.send({"n": 8}, to={"application": "pyapp", "ops": [
                    {"path": "/ver", "op": "$gte", "to": {"value": "1.10.0"}}]},
                    nonce="from-gossamer")
                from_them = await ours.receive(5)
                assert (from_them.nonce, from_them.data) == ("to-gossamer", {"n": 5})
                out, err = await asyncio.wait_for(proc.communicate(), 30)
                assert proc.returncode == 0, err.decode()[-2000:]
                lines += [json.loads(line) for line in out.decode().splitlines() if line]
                return lines

    check_received(aio_loop.run(main()))


def check_received(received: list[dict[str, object]]) -> None:
    """What SCRIPT's clients A and B must have received (with a gossamer client ``g``
    of application ``gossamer`` sending ``from-gossamer``)."""
    by_client: dict[object, set[object]] = {}
    for message in received:
        by_client.setdefault(message["client"], set()).add(message["nonce"])
        assert message["ts"] is True
    assert by_client == {
        "A": {"b-to-a", "bcast", "from-gossamer", "semver"},
        "B": {"a-to-b", "bcast", "min"},
    }
    payloads = {(m["client"], m["nonce"]): m["payload"] for m in received}
    assert payloads[("B", "a-to-b")] == {"n": 1}
    assert payloads[("A", "semver")] == {"n": 6}
    assert all(m["event"] in ("SEND", "BROADCAST") for m in received)


def test_python39_lookup_does_not_use_this_interpreter() -> None:
    found = _python39()
    assert found is None or Path(found).resolve() != Path(sys.executable).resolve()
