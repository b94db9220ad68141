"""Runs real multi-process scenarios (network namespaces or loopback) and collects traces.

A run goes through small modules, one concern each: :mod:`~gossamer.lab.plan` (validate
the request), :mod:`~gossamer.lab.hosts` (place the nodes), :mod:`~gossamer.lab.rundir`
(the run directory: key, configurations), :mod:`~gossamer.lab.processes` (start, read,
stop the node processes), :mod:`~gossamer.lab.inject` (crashes and partitions on
schedule), :mod:`~gossamer.lab.record` (``run.json``), :mod:`~gossamer.lab.verdict`
(``gossamer analyze`` and the verdict), tied together by :mod:`~gossamer.lab.runner`.
"""

from gossamer.errors import GossamerError

__all__ = ["LabError"]


class LabError(GossamerError):
    """The lab could not run the scenario (a node failed to start, a command failed)."""
