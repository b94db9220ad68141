"""The 신경 (singyeong) compatible gateway: ``gossamer.gateway.client`` is its Python client.

The server runs as ``gossamer gateway``; its code lives in ``gossamer.aio.gateway_server``
(the driver) and ``gossamer.proto.gateway`` (the sans-I/O protocol).
"""
