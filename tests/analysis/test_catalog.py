"""The check catalog: names, layers, parameters and what a run.json implies."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from gossamer.analysis import catalog
from gossamer.errors import ConfigError
from gossamer.trace import LAYERS


def test_every_check_is_named_after_a_known_layer_once() -> None:
    names = [c.name for c in catalog.CHECKS]
    assert len(names) == len(set(names))
    for check in catalog.CHECKS:
        assert check.layer in LAYERS and check.name.startswith(check.layer + ".")
        assert check.order and check.property
        for needed in check.needs:
            assert needed in {p.name for p in catalog.PARAMS}


def test_bounds_come_from_run_json() -> None:
    meta = {
        "scenario": "gossip",
        "nodes": 1024,
        "params": {"subnets": 8, "multicast": "on", "max_peers": 10},
        "summary": {"analysis": {"discovery.detect_within": 4.5, "not.a.param": 1}},
    }
    assert catalog.derive_params(meta) == {
        "discovery.max_peers": 10.0,
        "gossip.max_depth": 5,  # ceil(log2 8) + 2
        "discovery.detect_within": 4.5,
    }
    tcp = {"scenario": "gossip", "nodes": 1024, "params": {"multicast": "off"}}
    assert catalog.derive_params(tcp) == {"gossip.max_depth": 10}
    crashed = {"scenario": "gossip", "nodes": 100, "params": {"crashed": 0.05}}
    assert catalog.derive_params(crashed) == {}
    assert catalog.derive_params({"params": "junk"}) == {}


def test_command_line_parameters_override_and_are_validated() -> None:
    params = catalog.resolve_params({"discovery.max_peers": 10.0}, {"gossip.max_depth": "7"})
    assert params["discovery.max_peers"] == 10.0 and params["gossip.max_depth"] == 7.0
    assert params["gossip.min_coverage"] == 1.0 and "discovery.detect_within" not in params
    with pytest.raises(ConfigError, match=r"unknown check parameter 'gossip\.depth'"):
        catalog.resolve_params({}, {"gossip.depth": "3"})
    with pytest.raises(ConfigError, match="needs a number"):
        catalog.resolve_params({}, {"gossip.max_depth": "deep"})


def test_agreement_and_validity_do_not_judge_a_group_on_agreed_views() -> None:
    from gossamer.analysis import job

    inputs = catalog.CheckInputs(nodes=None, params=catalog.resolve_params({}, {}))
    present = {"isis", "isis/deliver", "views", "views/view_change"}
    for check in catalog.CHECKS:
        if check.name in ("isis.agreement", "isis.validity"):
            result = job.run_check(check, None, inputs, present=present)  # type: ignore[arg-type]
            assert result.status == "skipped" and "agreed views" in result.note, result


def test_the_checks_of_virtual_synchrony_judge_only_a_group_on_agreed_views() -> None:
    from gossamer.analysis import job

    inputs = catalog.CheckInputs(nodes=None, params=catalog.resolve_params({}, {}))
    static = {"isis", "isis/multicast", "isis/deliver"}
    for check in catalog.CHECKS:
        if check.name in ("isis.view_agreement", "isis.view_validity"):
            result = job.run_check(check, None, inputs, present=static)  # type: ignore[arg-type]
            assert result.status == "skipped", result
            assert result.note == "no views view_change events", result
