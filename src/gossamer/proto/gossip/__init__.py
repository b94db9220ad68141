"""Chatter broadcast: the log-depth distribution tree with the multicast shortcut (sans-I/O)."""
