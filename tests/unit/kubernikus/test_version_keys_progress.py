"""Version comparison, key prefixes and the delete-node flow's decisions, without a cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeops.controllers.kubernikus.keys import Keys, keys_for
from nodeops.controllers.kubernikus.progress import (
    Action,
    Progress,
    ProgressError,
    Step,
    next_action,
    read_progress,
)
from nodeops.controllers.kubernikus.version import VersionError, differs, parse_version

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("kubelet", "server", "needs_update"),
    [
        ("v1.31.4", "v1.31.4", False),
        ("v1.30.9", "v1.31.4", True),  # upgrade
        ("v1.156.2", "v1.31.4", True),  # downgrade, as the reference's test has it
        ("v1.31.4+k3s1", "v1.31.4", False),  # build metadata is not part of the release
        ("v1.31.4-gke.100", "v1.31.4", True),  # a pre-release is
        ("1.31.4", "v1.31.4", False),
    ],
)
def test_drift(kubelet: str, server: str, needs_update: bool) -> None:
    assert differs(parse_version(kubelet), parse_version(server)) is needs_update


@pytest.mark.parametrize("text", ["", "v", "v1.31", "latest", "v1.31.4.5", "v01.2.3"])
def test_unparsable_versions(text: str) -> None:
    with pytest.raises(VersionError):
        parse_version(text)


@given(st.integers(0, 99), st.integers(0, 99), st.integers(0, 99))
def test_versions_round_trip(major: int, minor: int, patch: int) -> None:
    version = parse_version(f"v{major}.{minor}.{patch}")
    assert str(version) == f"v{major}.{minor}.{patch}"
    assert not differs(version, parse_version(str(version)))


def test_keys_and_compat() -> None:
    assert keys_for().needs_update == "nodeops.dev/kubelet-needs-update"
    sapcc = keys_for("sapcc")
    assert (sapcc.needs_update, sapcc.delete_node) == (
        "cloud.sap/kubelet-needs-update",
        "cloud.sap/delete-node",
    )
    assert keys_for(None, "example.com/").delete_node == "example.com/delete-node"
    assert keys_for("sapcc", "example.com/").delete_node == "cloud.sap/delete-node"
    with pytest.raises(ValueError, match="DNS subdomain"):
        Keys("Not A Prefix")


def test_progress_round_trips_through_the_annotation() -> None:
    progress = Progress.begin(T0, cordoned=True).to(Step.WAITING_FOR_SERVER, T0 + timedelta(1))
    again = Progress.from_annotation(progress.to_annotation())
    assert again == progress
    keys = keys_for()
    node = {"metadata": {"annotations": {keys.delete_progress: progress.to_annotation()}}}
    assert read_progress(node, keys) == progress
    assert read_progress({"metadata": {}}, keys) is None


@pytest.mark.parametrize(
    "text", ["", "{}", "[]", '{"step":"Flying","started":"2026-01-01T00:00:00Z"}', "x" * 500]
)
def test_garbage_progress_is_refused(text: str) -> None:
    with pytest.raises(ProgressError):
        Progress.from_annotation(text)


def at(step: Step) -> Progress:
    return Progress.begin(T0, cordoned=True).to(step, T0)


@pytest.mark.parametrize(
    ("requested", "step", "remove_node", "action"),
    [
        (False, None, True, Action.NONE),
        (True, None, True, Action.START),
        (True, Step.DRAINING, True, Action.DRAIN),
        (False, Step.DRAINING, True, Action.CANCEL),
        # From the server deletion on, withdrawing the request no longer stops the flow.
        (False, Step.DELETING_SERVER, True, Action.DELETE_SERVER),
        (True, Step.WAITING_FOR_SERVER, True, Action.WAIT_FOR_SERVER),
        (False, Step.WAITING_FOR_SERVER, False, Action.WAIT_FOR_SERVER),
        (True, Step.REMOVING_NODE, True, Action.REMOVE_NODE),
        (True, Step.SERVER_DELETED, False, Action.WAIT_FOR_NODE_REMOVAL),
        (True, Step.SERVER_DELETED, True, Action.REMOVE_NODE),
    ],
)
def test_next_action(requested: bool, step: Step | None, remove_node: bool, action: Action) -> None:
    progress = at(step) if step is not None else None
    assert next_action(requested, progress, remove_node=remove_node) is action
