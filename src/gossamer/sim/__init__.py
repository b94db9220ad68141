"""Deterministic discrete-event simulator that runs the protocol cores on a virtual clock."""
