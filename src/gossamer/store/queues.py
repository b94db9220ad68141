"""The gateway's durable queue store: SQLite in WAL mode.

The gateway core (``gossamer.proto.gateway``) keeps every queue in memory and emits
``StoreOp`` records for each change that must survive a crash: a new message
(``Enqueued``), a delivery attempt (``Delivered``), an ack (``Acked``: the row is
deleted), a move to the dead-letter queue (``DeadLettered``) and a replay
(``Replayed``); for the cluster's replicated queues also the position applied
(``Position``, in the ``meta`` table) and a wipe before a rejoiner's new state
(``Cleared``). The driver hands each batch to ``apply``, which writes it in one
transaction and commits *before* the driver sends the packets that depend on it
(QUEUE_CONFIRM above all). At start-up ``load`` returns every message that is not
acked, and the core rebuilds its queues from them: messages that were in flight when
the process died are simply ready again, with their attempt counts.

Durability: WAL mode with ``synchronous=NORMAL`` (the default here) makes a committed
transaction survive the death of the process (SIGKILL included), because the commit
has reached the operating system; ``synchronous=FULL`` also survives a power loss, at
the price of an fsync per commit. Either way, what was confirmed was committed.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from gossamer.errors import ConfigError, DecodeError
from gossamer.proto.gateway.queues import (
    Acked,
    Cleared,
    DeadLettered,
    Delivered,
    Enqueued,
    Position,
    QueueRecord,
    Replayed,
    StoreOp,
)

__all__ = ["DEFAULT_FILENAME", "SCHEMA_VERSION", "SqliteQueueStore"]

DEFAULT_FILENAME: Final = "queues.sqlite3"
SCHEMA_VERSION: Final = 1
_SYNC_MODES: Final = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
    id       TEXT PRIMARY KEY,
    queue    TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    nonce    TEXT NOT NULL,
    target   TEXT NOT NULL,
    payload  TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    dead     INTEGER NOT NULL DEFAULT 0,
    reason   TEXT,
    created  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_queue ON messages (queue, dead, seq);
"""


def _dump(value: Any) -> str:
    return orjson.dumps(value).decode()


def _load(text: str, column: str, message_id: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise DecodeError(f"stored {column} is not JSON", id=message_id) from None


class SqliteQueueStore:
    """Queue messages in one SQLite file (see the module docstring).

    ``path`` may be a file or a directory (then ``queues.sqlite3`` inside it, created
    if needed). Not thread-safe: one gateway process, one event loop.
    """

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        mode = synchronous.upper()
        if mode not in _SYNC_MODES:
            raise ConfigError(f"synchronous must be one of {sorted(_SYNC_MODES)}")
        target = Path(path)
        if target.is_dir() or not target.suffix:
            target.mkdir(parents=True, exist_ok=True)
            target = target / DEFAULT_FILENAME
        self.path = target
        # isolation_level=None: no implicit transactions; apply() opens its own.
        self._db = sqlite3.connect(str(target), isolation_level=None)
        mode_set = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode_set).lower() != "wal":
            raise ConfigError(f"SQLite refused WAL mode for {target}", mode=mode_set)
        self._db.execute(f"PRAGMA synchronous={mode}")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None:
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
            )
        elif row[0] != str(SCHEMA_VERSION):
            raise ConfigError(f"{target} has queue schema {row[0]}, expected {SCHEMA_VERSION}")
        self.commits = 0

    def load(self) -> list[QueueRecord]:
        """Every message not acked, in queue order (dead letters included)."""
        rows = self._db.execute(
            "SELECT id, queue, seq, nonce, target, payload, attempts, dead, reason "
            "FROM messages ORDER BY seq"
        ).fetchall()
        return [self._record(row) for row in rows]

    def dead_letters(self, queue: str | None = None) -> list[QueueRecord]:
        """The dead letters (of one queue, or of all), for offline inspection."""
        sql = (
            "SELECT id, queue, seq, nonce, target, payload, attempts, dead, reason "
            "FROM messages WHERE dead = 1"
        )
        params: tuple[str, ...] = ()
        if queue is not None:
            sql += " AND queue = ?"
            params = (queue,)
        return [self._record(row) for row in self._db.execute(sql + " ORDER BY seq", params)]

    def position(self) -> int:
        """The replicated queues' last applied position (``Position``), 0 if none."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'position'").fetchone()
        return 0 if row is None else int(row[0])

    def chain(self) -> str:
        """The history digest at ``position()`` (``Position.chain``), "" if none."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'chain'").fetchone()
        return "" if row is None else str(row[0])

    def count(self) -> int:
        """How many messages are stored (acked ones are deleted)."""
        return int(self._db.execute("SELECT count(*) FROM messages").fetchone()[0])

    def apply(self, ops: Sequence[StoreOp] | Iterable[StoreOp]) -> None:
        """Write ``ops`` in one transaction and commit (durable when this returns)."""
        ops = list(ops)
        if not ops:
            return
        db = self._db
        now = time.time()
        db.execute("BEGIN IMMEDIATE")
        try:
            for op in ops:
                if isinstance(op, Enqueued):
                    r = op.record
                    db.execute(
                        "INSERT OR REPLACE INTO messages "
                        "(id, queue, seq, nonce, target, payload, attempts, dead, reason, created) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            r.id,
                            r.queue,
                            r.seq,
                            _dump(r.nonce),
                            _dump(r.target),
                            _dump(r.payload),
                            r.attempts,
                            int(r.dead),
                            r.reason,
                            now,
                        ),
                    )
                elif isinstance(op, Delivered):
                    db.execute(
                        "UPDATE messages SET attempts = ? WHERE id = ?", (op.attempts, op.id)
                    )
                elif isinstance(op, Acked):
                    db.execute("DELETE FROM messages WHERE id = ?", (op.id,))
                elif isinstance(op, DeadLettered):
                    db.execute(
                        "UPDATE messages SET dead = 1, reason = ? WHERE id = ?", (op.reason, op.id)
                    )
                elif isinstance(op, Replayed):
                    db.execute(
                        "UPDATE messages SET dead = 0, reason = NULL, attempts = 0, seq = ? "
                        "WHERE id = ?",
                        (op.seq, op.id),
                    )
                elif isinstance(op, Cleared):
                    db.execute("DELETE FROM messages")
                    db.execute("DELETE FROM meta WHERE key IN ('position', 'chain')")
                elif isinstance(op, Position):
                    db.executemany(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                        (("position", str(op.position)), ("chain", op.chain)),
                    )
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        self.commits += 1

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SqliteQueueStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @staticmethod
    def _record(row: tuple[Any, ...]) -> QueueRecord:
        message_id, queue, seq, nonce, target, payload, attempts, dead, reason = row
        return QueueRecord(
            id=message_id,
            queue=queue,
            seq=seq,
            nonce=_load(nonce, "nonce", message_id),
            target=_load(target, "target", message_id),
            payload=_load(payload, "payload", message_id),
            attempts=attempts,
            dead=bool(dead),
            reason=reason,
        )
