"""Garbage collector decisions, independent of any server."""

from __future__ import annotations

from nodeops.sim.cluster.gc import (
    OwnerState,
    blocking_dependents,
    decide_dependent,
    without_owner,
)

RS = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "rs",
    "uid": "u-rs",
    "controller": True,
    "blockOwnerDeletion": True,
}
OTHER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs2", "uid": "u-rs2"}


def test_no_owner_references_means_nothing_to_do() -> None:
    assert decide_dependent([], [], False).action == "none"


def test_live_owner_keeps_the_dependent() -> None:
    d = decide_dependent([RS], [OwnerState(RS, exists=True)], False)
    assert d.action == "none"


def test_vanished_owner_means_background_delete() -> None:
    d = decide_dependent([RS], [OwnerState(RS, exists=False)], False)
    assert (d.action, d.propagation) == ("delete", "Background")


def test_owner_deleting_in_foreground_deletes_dependent() -> None:
    d = decide_dependent([RS], [OwnerState(RS, exists=True, waiting=True)], False)
    assert (d.action, d.propagation) == ("delete", "Background")
    # A dependent with dependents of its own goes in the foreground, so the wait covers them.
    d = decide_dependent([RS], [OwnerState(RS, exists=True, waiting=True)], True)
    assert (d.action, d.propagation) == ("delete", "Foreground")


def test_dangling_reference_is_dropped_while_another_owner_lives() -> None:
    d = decide_dependent(
        [RS, OTHER], [OwnerState(RS, exists=False), OwnerState(OTHER, exists=True)], False
    )
    assert d.action == "patch"
    assert d.owner_references == [OTHER]


def test_waiting_owner_is_unblocked_when_another_owner_lives() -> None:
    d = decide_dependent(
        [RS, OTHER],
        [OwnerState(RS, exists=True, waiting=True), OwnerState(OTHER, exists=True)],
        False,
    )
    assert d.action == "patch"
    assert d.owner_references == [{**RS, "blockOwnerDeletion": False}, OTHER]


def test_blocking_dependents_and_orphaning() -> None:
    blocking = {"metadata": {"name": "a", "ownerReferences": [RS]}}
    loose = {"metadata": {"name": "b", "ownerReferences": [{**RS, "blockOwnerDeletion": False}]}}
    unrelated = {"metadata": {"name": "c", "ownerReferences": [OTHER]}}
    assert blocking_dependents([blocking, loose, unrelated], "u-rs") == [blocking]
    assert without_owner([RS, OTHER], "u-rs") == [OTHER]
