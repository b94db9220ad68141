"""pytest plugin: multi-host networks of Linux network namespaces as a fixture.

Enable with ``pytest_plugins = ["gossamer.testing.pytest_plugin"]`` in a conftest. Then::

    @pytest.mark.netns
    def test_broadcast(netns: NetnsFactory) -> None:
        topo = netns(subnets=[3])          # built and entered; torn down after the test
        sender, *receivers = topo.hosts

Contract of the ``netns`` fixture:

- the test must carry ``@pytest.mark.netns`` (so ``-m "not netns"`` deselects exactly
  the tests that need root); a test without it fails;
- where namespaces cannot be built (:func:`~gossamer.lab.netns.netns_unavailable_reason`)
  the test is skipped with that reason, except when the environment variable ``CI`` is
  ``"true"``: CI runs as root, so there the test fails instead of silently skipping;
- at teardown every topology the factory built is torn down, and the fixture fails the
  test if anything is left: a namespace or root-namespace link carrying this process's
  prefix (``gs<pid>x``, see :func:`~gossamer.lab.netns.process_prefix`), a topology
  opened during the test and still open, or a process started with ``Host.popen`` that
  is still running. Topologies already open when the test started (an outer-scoped
  fixture's) are left alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Protocol

import pytest

from gossamer.lab.netns import (
    NetnsError,
    Topology,
    leftovers,
    netns_unavailable_reason,
    open_topologies,
    process_prefix,
)

__all__ = ["NetnsFactory", "netns", "require_netns"]

_MARKER = "netns: needs root to build Linux network namespaces (skips with a reason elsewhere)"


class NetnsFactory(Protocol):
    """What the ``netns`` fixture returns: builds and enters a :class:`Topology`."""

    def __call__(self, subnets: Sequence[int]) -> Topology: ...


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``netns`` marker unless the project's configuration already does."""
    registered = config.getini("markers")
    if not any(str(line).split(":", 1)[0].strip() == "netns" for line in registered):
        config.addinivalue_line("markers", _MARKER)


def require_netns() -> None:
    """Skip the current test when namespaces cannot be built; fail instead when CI=true."""
    reason = netns_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true, but network namespaces are unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def netns(request: pytest.FixtureRequest) -> Iterator[NetnsFactory]:
    """Factory of entered topologies, torn down and checked at the end of the test."""
    if request.node.get_closest_marker("netns") is None:
        pytest.fail("tests using the netns fixture must carry @pytest.mark.netns", pytrace=False)
    require_netns()
    # Topologies opened before this test (e.g. by a module-scoped fixture) may stay up.
    outer = {topology.prefix for topology in open_topologies()}
    built: list[Topology] = []

    def factory(subnets: Sequence[int]) -> Topology:
        topology = Topology(subnets=subnets)
        built.append(topology)  # before building: a failed build is checked too
        return topology.__enter__()

    yield factory

    problems: list[str] = []
    for topology in reversed(built):
        try:
            topology.close()
        except NetnsError as exc:
            problems.append(str(exc))
    for topology in built:
        problems += [
            f"{topology.prefix}: pid {proc.pid} ({proc.args!r}) is still running"
            for proc in topology.processes
            if proc.poll() is None
        ]
    # The whole process prefix: also catches topologies the test built without the factory.
    for topology in open_topologies():
        if topology.prefix not in outer:
            problems.append(f"{topology!r} was built during the test and is still open")
            try:  # report it, but do not let it leak into later tests
                topology.close()
            except NetnsError as exc:
                problems.append(str(exc))
    problems += [
        f"left behind: {item}"
        for item in leftovers(process_prefix())
        if not any(f"{prefix}-" in item for prefix in outer)
    ]
    if problems:
        pytest.fail("netns teardown invariant violated:\n  " + "\n  ".join(problems), pytrace=False)
