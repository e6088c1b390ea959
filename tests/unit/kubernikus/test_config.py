"""kubernikus.yaml: the reference's file loads unchanged; mistakes stop startup with FILE:LINE."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeops.api.configfile import ConfigFileError
from nodeops.controllers.kubernikus.config import load_kubernikus_config

REFERENCE = """\
intervals:
  requeue: 30s # Minimum frequency to check for node replacements
  # Defines how long and frequent to check for pod deletions while draining
  podDeletion:
    period: 20s
    timeout: 5m
  # Defines how long and frequent to try to evict pods
  podEviction:
    period: 20s
    timeout: 5m
    force: false # If true and evictions do not succeed do normal DELETE calls
cloudProviderSecret: # Optional reference to a secret containing a cloudprovider.conf key
  name: cloud-config
  namespace: kube-system
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kubernikus.yaml"
    path.write_text(text)
    return path


def test_the_reference_file_loads(tmp_path: Path) -> None:
    cfg = load_kubernikus_config(write(tmp_path, REFERENCE))
    assert cfg.intervals.requeue == 30
    assert (cfg.intervals.pod_deletion.period, cfg.intervals.pod_deletion.timeout) == (20, 300)
    assert cfg.intervals.pod_eviction.force is False
    assert cfg.cloud_provider_secret.configured
    assert (cfg.cloud_provider_secret.name, cfg.cloud_provider_secret.namespace) == (
        "cloud-config",
        "kube-system",
    )
    assert cfg.remove_node is True


def test_the_reference_test_suite_file_loads(tmp_path: Path) -> None:
    text = "intervals:\n  requeue: 250ms\n  podDeletion:\n    period: 2s\n    timeout: 30s\n"
    text += "  podEviction:\n    period: 2s\n    timeout: 30s\n"
    cfg = load_kubernikus_config(write(tmp_path, text))
    assert cfg.intervals.requeue == 0.25
    assert not cfg.cloud_provider_secret.configured


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("requeue: 30s", "requeue: 0s"), ":2: intervals.requeue: must be a positive duration"),
        (("requeue: 30s", "requeue: soon"), ':2: intervals.requeue: invalid duration "soon"'),
        (
            ("    timeout: 5m\n  # Defines how long and frequent to try", "  # Defines how long"),
            ":4: intervals.podDeletion.timeout: required, but not set",
        ),
        (("force: false", "force: perhaps"), ":11: intervals.podEviction.force: Input should be"),
        (("  namespace: kube-system\n", ""), ":12: cloudProviderSecret: set both name and names"),
        (("  requeue:", "  requeu:"), ":2: intervals.requeu: unknown key; did you mean 'requeue'"),
    ],
)
def test_mistakes_are_reported_with_file_and_line(
    tmp_path: Path, edit: tuple[str, str], expected: str
) -> None:
    path = write(tmp_path, REFERENCE.replace(*edit))
    with pytest.raises(ConfigFileError) as err:
        load_kubernikus_config(path)
    lines = str(err.value).splitlines()
    assert any(line.startswith(f"{path}{expected}") for line in lines), lines


def test_unknown_keys_are_mistakes(tmp_path: Path) -> None:
    path = write(tmp_path, REFERENCE + "removeNodes: false\n")
    with pytest.raises(
        ConfigFileError, match=r":15: removeNodes: unknown key; did you mean 'removeNode'"
    ):
        load_kubernikus_config(path)
