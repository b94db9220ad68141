"""Chandy-Lamport snapshots (sans-I/O)."""
