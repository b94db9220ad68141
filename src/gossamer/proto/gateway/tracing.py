"""How gateway trace events name clients and messages, on both ends of a gateway.

The server (``GatewayCore``) and the client (``ClientCore``) trace the same messages
from two sides; the analysis joins them, so both name things with these functions:

- a client is ``app/client`` (``client_label``), as in the server's ``peer`` and
  ``attrs.targets`` and in the client's ``attrs.client``;
- a routed message is its **nonce** (``nonce_label``), the one id the 신경 protocol
  carries from the sender through the gateway to every receiver (the gateway echoes
  it in the dispatch it delivers). The client's ``client_send`` and ``client_recv``
  carry it as ``msg``, the server's ``route`` and ``enqueue`` as ``attrs.nonce``. A
  message without a nonce has no label and joins nothing; so does a receipt of a
  message a third-party client sent, whose nonce no traced send carries.

Client kinds (``layer=gateway``): ``client_ready`` (identified: ``attrs.client``,
``attrs.reconnect``), which also tells the analysis which clients trace at all;
``client_send`` (``attrs.type`` SEND, BROADCAST or
QUEUE, ``attrs.client``, ``attrs.buffered`` when held while not identified) when the
application hands the dispatch to the client, and ``client_recv`` (``attrs.type``,
``attrs.client``; for QUEUE ``attrs.id``, the queue message id, and ``attrs.attempt``)
when a delivered dispatch arrives.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from gossamer.trace.schema import GATEWAY_CLIENT_KINDS

__all__ = [
    "CLIENT_READY",
    "CLIENT_RECV",
    "CLIENT_SEND",
    "LAYER",
    "TRACED_DISPATCHES",
    "client_label",
    "nonce_label",
]

#: The trace layer of the gateway, server and clients alike.
LAYER: Final = "gateway"

#: The client kinds, as the trace schema names them (``trace.schema.GATEWAY_CLIENT_KINDS``).
CLIENT_READY, CLIENT_SEND, CLIENT_RECV = GATEWAY_CLIENT_KINDS
#: The dispatches a client traces, sent and received: those that carry a payload from
#: one client to others.
TRACED_DISPATCHES: Final = frozenset({"SEND", "BROADCAST", "QUEUE"})


def client_label(app_id: str, client_id: str) -> str:
    """A client as trace events name it: ``app/client`` (``%`` and commas escaped, since
    ``attrs.targets`` is a comma-separated list of them)."""
    return f"{app_id}/{client_id}".replace("%", "%25").replace(",", "%2C")


def nonce_label(nonce: Any) -> str | None:
    """A nonce as trace events name its message: a string as it is, another JSON value
    as its compact JSON text, ``None`` (no nonce) as ``None``."""
    if nonce is None:
        return None
    if isinstance(nonce, str):
        return nonce
    try:
        return orjson.dumps(nonce).decode()
    except (TypeError, orjson.JSONEncodeError):
        return repr(nonce)
