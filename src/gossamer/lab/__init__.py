"""Runs real multi-process scenarios (network namespaces or loopback) and collects traces."""
