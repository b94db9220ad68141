"""Exon/A3M links: LINK/LINKACK handshakes, credit flow control, socket patterns (sans-I/O)."""
