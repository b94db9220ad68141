"""Durable storage (SQLite by default) for what must survive a crash."""
