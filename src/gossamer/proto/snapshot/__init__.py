"""Chandy-Lamport snapshots (sans-I/O).

``SnapshotCore`` records local and channel states with markers that keep FIFO order
over lossy, reordering UDP; ``SnapshotNode`` composes it with an ISIS core on one
socket; ``Bank`` is the demonstration workload whose money every snapshot must hold.
``docs/snapshots.md`` describes the protocol and why the cut is consistent.
"""

from gossamer.proto.snapshot.bank import (
    Bank,
    decode_transfer,
    encode_transfer,
    local_value,
    transfer_amount,
)
from gossamer.proto.snapshot.checks import check_bank, check_cut
from gossamer.proto.snapshot.core import (
    ACK_BIT,
    SnapshotConfig,
    SnapshotCore,
    SnapshotDone,
    initiator_of,
    snapshot_id,
)
from gossamer.proto.snapshot.node import Sequencer, SnapshotNode, Workload

__all__ = [
    "ACK_BIT",
    "Bank",
    "Sequencer",
    "SnapshotConfig",
    "SnapshotCore",
    "SnapshotDone",
    "SnapshotNode",
    "Workload",
    "check_bank",
    "check_cut",
    "decode_transfer",
    "encode_transfer",
    "initiator_of",
    "local_value",
    "snapshot_id",
    "transfer_amount",
]
