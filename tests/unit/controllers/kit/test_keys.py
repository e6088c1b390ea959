"""One prefix rule for every controller's keys: the ESX and Kubernikus controllers, given the
same settings, put their keys under the same prefix and refuse the same bad ones."""

from __future__ import annotations

import pytest

from nodeops.controllers.esx.keys import keys_for as esx_keys
from nodeops.controllers.kit import PrefixedKeys
from nodeops.controllers.kubernikus.keys import keys_for as kubernikus_keys


@pytest.mark.parametrize(
    ("compat", "prefix", "expected"),
    [
        (None, None, "nodeops.dev/"),
        (None, "example.com/", "example.com/"),
        ("sapcc", None, "cloud.sap/"),
        ("sapcc", "example.com/", "cloud.sap/"),
    ],
)
def test_both_controllers_agree_on_the_prefix(
    compat: str | None, prefix: str | None, expected: str
) -> None:
    assert esx_keys(compat, prefix).prefix == expected  # type: ignore[arg-type]
    assert kubernikus_keys(compat, prefix).prefix == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "prefix", ["nodeops.dev", "Nodeops.dev/", "a/b/", "-a.dev/", "a" * 255 + "/"]
)
def test_a_bad_prefix_is_refused_naming_it(prefix: str) -> None:
    for make in (esx_keys, kubernikus_keys, PrefixedKeys.for_settings):
        with pytest.raises(ValueError, match="must be a DNS subdomain followed by '/'"):
            make(None, prefix)


def test_keys_are_values() -> None:
    assert esx_keys("sapcc") == esx_keys(None, "cloud.sap/")
    assert len({kubernikus_keys(), kubernikus_keys(None, "nodeops.dev/")}) == 1
