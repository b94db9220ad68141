"""A joiner takes the queues' state at its view cut from a member, over sealed TCP.

What a view's INSTALL carries to a joiner is bounded (32 KiB, ``docs/cluster.md``);
the queues' state is not. So the state a member gives the views (``snapshot()``) is a
small token, and the state itself, taken by every member at the cut of a view that
admits joiners, is kept by each member (:meth:`SnapshotServer.keep`, for the last
``KEPT`` such views) and served on request:

- the joiner connects to a member's ``queues_state`` address (its card names it) and
  sends one record, ``SNAP`` + the view id (``uint64``);
- the member answers the snapshot it kept for that view, as ``uint64`` length + bytes,
  or the length ``2^64 - 1`` when it keeps none for that view, and closes.

Every record is sealed with the cluster key (``gossamer.proto.sealing.SealedStream``,
sender ``<joiner>><member>``: the joiner must name the member it dials, by its
``name#incarnation``); a record that does not open ends the connection. One fetch is
one connection; ``fetch_snapshot`` raises ``NetworkError`` (the connection failed, the
member holds nothing for that view, or the stream ended early) or ``TimedOutError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Sequence
from typing import Final

from gossamer._types import Address
from gossamer.aio._pump import now
from gossamer.aio.sealing import stream_seals
from gossamer.errors import ConfigError, NetworkError, TimedOutError
from gossamer.proto.sealing import SealedStream, StreamSeals
from gossamer.trace.sink import Tracer
from gossamer.wire.mode import Wire

__all__ = ["SnapshotServer", "fetch_snapshot"]

_ASK: Final = b"SNAP"
_U64: Final = struct.Struct(">Q")
_NONE: Final = (1 << 64) - 1
_READ: Final = 1 << 16
#: Snapshots a member keeps, of the latest views that admitted joiners.
KEPT: Final = 4
LAYER: Final = "queue"


class _Bytes:
    """The plain stream inside a ``SealedStream``: what was opened, what to send."""

    def __init__(self) -> None:
        self.got = bytearray()
        self.out = bytearray()
        self.error: str | None = None
        self.ended = False
        self.closing = False

    def receive_data(self, data: bytes, now: float) -> None:
        if data:
            self.got += data
        else:
            self.ended = True

    def data_to_send(self) -> bytes:
        out, self.out = bytes(self.out), bytearray()
        return out

    def abort(self, reason: str, now: float) -> None:
        self.error = reason
        self.closing = True

    def events_received(self) -> Sequence[object]:
        return ()

    def handle_timer(self, now: float) -> None:
        return None

    def next_deadline(self) -> float | None:
        return None


def _seals(wire: Wire, me: str, tracer: Tracer) -> StreamSeals:
    seals = stream_seals(wire, me=me, tracer=tracer, layer=LAYER)
    if seals is None:
        raise ConfigError("the queues' state travels on the sealed wire only")
    return seals


class SnapshotServer:
    """Serves the snapshot this member kept at the last view cut (module docstring).
    ``me`` is this member's ``name#incarnation``."""

    def __init__(self, wire: Wire, me: str, tracer: Tracer, *, timeout: float = 30.0) -> None:
        self.me = me
        self.timeout = timeout
        self._wire = wire
        self._tracer = tracer
        self._seals = _seals(wire, me, tracer)
        self._kept: dict[int, bytes] = {}
        self._server: asyncio.Server | None = None
        #: Snapshots served, and requests refused by reason.
        self.served = 0
        self.refused: dict[str, int] = {}

    def rename(self, me: str) -> None:
        """This member rejoined as ``me`` (its next incarnation): joiners dial that name."""
        self.me = me
        self._seals = _seals(self._wire, me, self._tracer)

    def keep(self, view_id: int, snapshot: bytes) -> None:
        """The state at the cut of ``view_id``, served while it is one of the last
        ``KEPT`` kept (a joiner may still be fetching when the next view admits another)."""
        self._kept[view_id] = snapshot
        while len(self._kept) > KEPT:
            del self._kept[min(self._kept)]

    async def start(self, host: str, port: int) -> Address:
        try:
            self._server = await asyncio.start_server(self._serve, host, port)
        except OSError as exc:
            raise NetworkError(f"cannot bind the queues' state port {host}:{port}: "
                               f"{exc.strerror}", host=host, port=port) from exc
        name = self._server.sockets[0].getsockname()
        return (str(name[0]), int(name[1]))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        inner = _Bytes()
        stream = SealedStream(inner, self._seals, None)
        try:
            async with asyncio.timeout(self.timeout):
                while len(inner.got) < len(_ASK) + _U64.size and not stream.closing:
                    data = await reader.read(_READ)
                    stream.receive_data(data, now())
                    if not data:
                        break
                if stream.closing or not inner.got.startswith(_ASK) or len(inner.got) < 12:
                    self._refuse(inner.error or "bad request")
                    return
                (view_id,) = _U64.unpack_from(inner.got, len(_ASK))
                kept = self._kept.get(view_id)
                if kept is None:
                    self._refuse("no snapshot for that view")
                    inner.out += _U64.pack(_NONE)
                else:
                    inner.out += _U64.pack(len(kept)) + kept
                    self.served += 1
                writer.write(stream.data_to_send())
                await writer.drain()
        except (OSError, TimeoutError):
            self._refuse("connection")
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _refuse(self, why: str) -> None:
        self.refused[why] = self.refused.get(why, 0) + 1


async def fetch_snapshot(
    wire: Wire, *, me: str, member: str, address: Address, view_id: int, tracer: Tracer,
    timeout: float = 30.0,
) -> bytes:
    """The snapshot ``member`` (``name#incarnation``, at ``address``) kept for the cut
    of ``view_id`` (module docstring for the errors)."""
    inner = _Bytes()
    stream = SealedStream(inner, _seals(wire, me, tracer), member)
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(*address)
            try:
                inner.out += _ASK + _U64.pack(view_id)
                writer.write(stream.data_to_send())
                await writer.drain()
                while not stream.closing:
                    data = await reader.read(_READ)
                    stream.receive_data(data, now())
                    if len(inner.got) >= _U64.size:
                        (size,) = _U64.unpack_from(inner.got)
                        if size == _NONE:
                            raise NetworkError("the member keeps no snapshot for that view",
                                               member=member, view=view_id)
                        if len(inner.got) >= _U64.size + size:
                            return bytes(inner.got[_U64.size:_U64.size + size])
                    if not data:
                        break
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except TimeoutError as exc:
        raise TimedOutError("fetching the queues' state timed out", member=member) from exc
    except OSError as exc:
        if isinstance(exc, NetworkError):
            raise
        raise NetworkError(f"fetching the queues' state failed: {exc}", member=member) from exc
    raise NetworkError("the queues' state stream ended early", member=member,
                       detail=inner.error or "eof")
