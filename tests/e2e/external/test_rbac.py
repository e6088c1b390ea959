"""The operator's identity in the other scenarios is held to its roles by the cluster's own
authorizer: the ServiceAccount with a controller's roles from `manifests/` is refused what no
role of it grants. Together with those scenarios, which reach their goals as that account with
no request refused, this is the RBAC proof on a real control plane (`tests/e2e/test_rbac.py`
proves on the simulator that every rule is needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.external.conftest import kubectl
from tests.e2e.external.operator import operator_identity, rules_of

OUTSIDE_EVERY_ROLE = (("delete", "namespaces"), ("list", "secrets"), ("create", "clusterroles"))


@pytest.mark.parametrize("component", ["detacher", "maintenance", "kubernikus"])
def test_the_operator_is_refused_what_its_roles_do_not_grant(
    kubeconfig: Path, namespace: str, tmp_path: Path, component: str
) -> None:
    with operator_identity(kubeconfig, tmp_path, component, namespace) as identity:
        granted = {
            (v, r)
            for rule in rules_of(identity.objects)
            for v in rule["verbs"]
            for r in rule["resources"]
        }
        for verb, resource in OUTSIDE_EVERY_ROLE:
            assert (verb, resource) not in granted
            asked = kubectl(identity.kubeconfig, "auth", "can-i", verb, resource, "-A")
            if asked.stdout.strip() == "yes":
                pytest.skip(f"the cluster lets the account {verb} {resource}: it enforces no RBAC")
            assert asked.stdout.strip() == "no", asked
        # What its roles do grant, it is allowed (watching nodes: every controller's first need).
        asked = kubectl(identity.kubeconfig, "auth", "can-i", "watch", "nodes")
        assert asked.stdout.strip() == "yes", asked
