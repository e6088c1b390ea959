"""`python -m bench.fit` on a small cluster: one JSON document, and every case checks the same
batch to the same answer."""

from __future__ import annotations

import json

import pytest

from bench import fit


def test_the_three_cases_check_the_same_batch(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        fit.main(["--nodes", "40", "--pods-per-node", "3", "--batch", "2", "--repeats", "1"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["nodes"] == 40 and out["batch_nodes"] == 2
    assert out["batch_pods"] == 2 * 3 + 2 + 1  # node-0: a spread and a solo replica; node-10: solo
    for case in ("without_rules", "rules_none_apply", "with_rules"):
        assert out[case]["fits"] is True, out[case]
        assert out[case]["message"] == f"{out['batch_pods']} pods fit on the ready nodes"
        assert out[case]["median_ms"] > 0


def test_the_rules_refuse_what_they_must() -> None:
    """The with-rules case really holds pods to them: with a one-a-node replica on every node
    that stays, the batch's own has nowhere to go, though there is room."""
    cluster = fit.Cluster(20, 1, rules=True)
    for i in range(1, 20):
        raw = json.dumps(fit._pod(f"solo-more-{i}", i, {"app": "solo"})).encode()
        cluster.on_node.setdefault(f"node-{i}", []).append(raw)
        cluster.by_label.setdefault("app=solo", []).append(raw)
    batch = {"node-0"}
    assert cluster.check(batch, with_rules=False).fits
    result = cluster.check(batch, with_rules=True)
    assert not result.fits
    assert "node(s) didn't match pod anti-affinity rules" in result.message
