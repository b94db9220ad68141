"""The singyeong-compatible gateway: identify, metadata, routing queries, queues (sans-I/O)."""
