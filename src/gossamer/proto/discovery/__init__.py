"""Prototari discovery, heartbeats, delivery and leave (sans-I/O)."""
