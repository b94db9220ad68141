"""The hostfile: who is in the static group, and in which order (pure parsing, no I/O).

The original (reference (a), "Processes, identity, configuration") reads one host name
per line, drops duplicate lines, requires at least 3 hosts, and numbers the hosts by
their 1-based line index; every host listens on UDP port 10001. gossamer reads the same
files and also accepts, for several members on one machine, a port and a name::

    # comments and blank lines are ignored
    alpha                 name "alpha", host "alpha", port 10001
    beta:10005            name "beta:10005"
    n3 127.0.0.1:7003     name "n3", host 127.0.0.1, port 7003

Resolving host names to addresses is I/O and is left to the caller (``gossamer.aio.isis``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gossamer.errors import ConfigError
from gossamer.wire.isis import MULTICAST_PORT

__all__ = ["MIN_HOSTS", "HostEntry", "parse_hostfile"]

#: The original ``CHECK``s for at least 3 hosts (its message says "more than 3").
MIN_HOSTS = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class HostEntry:
    """One member as the hostfile names it; ``id`` is its 1-based position."""

    id: int
    name: str
    host: str
    port: int


def _split_port(text: str, default_port: int, line: int) -> tuple[str, int, bool]:
    host, sep, port_text = text.rpartition(":")
    if not sep:
        return text, default_port, False
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"hostfile line {line}: bad port {port_text!r}") from None
    if not 1 <= port <= 65535 or not host:
        raise ConfigError(f"hostfile line {line}: {text!r} is not HOST:PORT")
    return host, port, True


def parse_hostfile(
    text: str, *, default_port: int = MULTICAST_PORT, min_hosts: int = MIN_HOSTS
) -> list[HostEntry]:
    """The members listed in ``text``, numbered from 1; ``ConfigError`` when unusable."""
    entries: list[HostEntry] = []
    seen_lines: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line in seen_lines:
            continue  # the original drops duplicate lines
        seen_lines.add(line)
        words = line.split()
        if len(words) == 1:
            host, port, explicit = _split_port(words[0], default_port, number)
            name = words[0] if explicit else host
        elif len(words) == 2:
            name = words[0]
            host, port, _ = _split_port(words[1], default_port, number)
        else:
            raise ConfigError(f"hostfile line {number}: expected HOST[:PORT] or NAME HOST[:PORT]")
        entries.append(HostEntry(id=len(entries) + 1, name=name, host=host, port=port))
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConfigError("hostfile names a member twice", names=names)
    if len(entries) < min_hosts:
        raise ConfigError(f"the hostfile must list at least {min_hosts} hosts", hosts=len(entries))
    return entries
