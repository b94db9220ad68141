"""gossamer.store.queues: the SQLite (WAL) queue store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.gateway.queues import (
    Acked,
    DeadLettered,
    Delivered,
    Enqueued,
    QueueRecord,
    Replayed,
)
from gossamer.store.queues import DEFAULT_FILENAME, SqliteQueueStore


def record(i: int, queue: str = "q") -> QueueRecord:
    return QueueRecord(id=f"m{i}", queue=queue, seq=i, nonce={"n": i}, target={"ops": []},
                       payload=[i, "x"])


def test_ops_round_trip_through_a_reopen(tmp_path: Path) -> None:
    store = SqliteQueueStore(tmp_path)
    assert store.path == tmp_path / DEFAULT_FILENAME
    store.apply([Enqueued(record=record(i)) for i in range(1, 6)])
    store.apply([Delivered(id="m1", attempts=2), Acked(id="m2"),
                 DeadLettered(id="m3", reason="ack timeout after 5 deliveries")])
    store.apply([Enqueued(record=record(6, "other")), DeadLettered(id="m4", reason="r"),
                 Replayed(id="m4", seq=7)])
    store.apply([])
    assert store.commits == 3
    store.close()
    reopened = SqliteQueueStore(tmp_path)
    loaded = {r.id: r for r in reopened.load()}
    assert sorted(loaded) == ["m1", "m3", "m4", "m5", "m6"]
    assert loaded["m1"].attempts == 2 and loaded["m1"].nonce == {"n": 1}
    assert loaded["m1"].payload == [1, "x"] and loaded["m1"].target == {"ops": []}
    assert loaded["m3"].dead and loaded["m3"].reason == "ack timeout after 5 deliveries"
    assert not loaded["m4"].dead and loaded["m4"].seq == 7 and loaded["m4"].attempts == 0
    assert [r.id for r in reopened.dead_letters()] == ["m3"]
    assert reopened.dead_letters("other") == []
    assert reopened.count() == 5
    reopened.close()


def test_wal_mode_and_failed_batches_roll_back(tmp_path: Path) -> None:
    with SqliteQueueStore(tmp_path / "store.db", synchronous="full") as store:
        store.apply([Enqueued(record=record(1))])
        with pytest.raises(AttributeError):
            store.apply([Enqueued(record=record(2)), Enqueued(record=None)])  # type: ignore[arg-type]
        assert [r.id for r in store.load()] == ["m1"]
    db = sqlite3.connect(tmp_path / "store.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_bad_settings_and_foreign_schema(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        SqliteQueueStore(tmp_path, synchronous="sometimes")
    SqliteQueueStore(tmp_path).close()
    db = sqlite3.connect(tmp_path / DEFAULT_FILENAME)
    db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match="schema 99"):
        SqliteQueueStore(tmp_path)
