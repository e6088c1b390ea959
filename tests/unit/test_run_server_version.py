"""`nodeops run` warns about an API server older than the oldest it supports."""

from __future__ import annotations

import pytest

from nodeops.run import older_than_supported


@pytest.mark.parametrize(
    ("version", "warned"),
    [
        ({"major": "1", "minor": "24", "gitVersion": "v1.24.0-alpha.1"}, True),
        ({"major": "1", "minor": "27+", "gitVersion": "v1.27.3-eks-1"}, True),
        ({"major": "1", "minor": "28", "gitVersion": "v1.28.0"}, False),
        ({"major": "1", "minor": "36", "gitVersion": "v1.36.2"}, False),
        ({"major": "", "minor": ""}, False),
        ("not a version document", False),
    ],
)
def test_servers_older_than_the_crds_need_are_named(version: object, warned: bool) -> None:
    message = older_than_supported(version)
    assert (message is not None) == warned
    if message is not None:
        assert str(version["gitVersion"]) in message  # type: ignore[index]
        assert "older than 1.28" in message
