"""Every install in `manifests/` renders, runs the operator the way the docs promise, and grants
nothing by wildcard. Rendering is `kubectl kustomize`, exactly what `kubectl apply -k` does."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeops import __version__
from nodeops.cli import build_parser
from nodeops.providers import create_provider
from nodeops.run import RunSettings, settings_from_args
from tests.kustomize import (
    BASE,
    component_dirs,
    find,
    manager_container,
    name_of,
    needs_kubectl,
    overlay_dirs,
    render,
    render_text,
    unknown_fields,
    with_components,
)
from tests.repo import MANIFESTS

pytestmark = needs_kubectl

NAMESPACE = "nodeops-system"
SERVICE_ACCOUNT = {"kind": "ServiceAccount", "name": "nodeops", "namespace": NAMESPACE}
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
}
RBAC_KINDS = ("Role", "ClusterRole")


@pytest.fixture(scope="module", params=overlay_dirs(), ids=name_of)
def install(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An overlay rendered with every controller component there is: the largest install."""
    overlay: Path = request.param
    workdir = tmp_path_factory.mktemp("install")
    return render(with_components(workdir, overlay, component_dirs()))


def _run_options() -> set[str]:
    parser = build_parser()
    (run,) = [
        choice
        for action in parser._subparsers._group_actions  # type: ignore[union-attr]
        for name, choice in action.choices.items()
        if name == "run"
    ]
    return {opt for action in run._actions for opt in action.option_strings}


def parse_run(args: list[str]) -> RunSettings:
    assert args[0] == "run"
    return settings_from_args(build_parser().parse_args(args))


def test_every_namespaced_object_is_in_the_operator_namespace(
    install: list[dict[str, Any]],
) -> None:
    for obj in install:
        meta = obj["metadata"]
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, f"{obj['kind']}/{meta['name']}"
        else:
            assert meta.get("namespace") == NAMESPACE, f"{obj['kind']}/{meta['name']}"
    assert find(install, "Namespace")["metadata"]["name"] == NAMESPACE


def test_the_operator_runs_hardened_and_highly_available(install: list[dict[str, Any]]) -> None:
    deployment = find(install, "Deployment", "nodeops")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2
    assert pod["serviceAccountName"] == "nodeops"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = manager_container(install)
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["resources"]["requests"].keys() == {"cpu", "memory"}
    assert "memory" in container["resources"]["limits"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    # Every writable path is a volume: the root filesystem is read-only.
    volumes = {v["name"] for v in pod["volumes"]}
    assert {m["name"] for m in container["volumeMounts"]} <= volumes
    assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])

    settings = parse_run(container["args"])
    assert settings.leader_elect
    env = {e["name"]: e for e in container["env"]}
    assert env["NODEOPS_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["NODEOPS_LEADER_ELECTION_IDENTITY"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.name"
    )
    for name in env:
        assert name.removeprefix("NODEOPS_").lower() in RunSettings.model_fields, name
    # The probes and the scrape use the ports `nodeops run` listens on by default.
    assert f":{ports['metrics']}" == settings.metrics_addr
    assert f":{ports['health']}" == settings.health_addr

    selector = spec["selector"]["matchLabels"]
    pdb = find(install, "PodDisruptionBudget", "nodeops")
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert pdb["spec"]["maxUnavailable"] == 1  # never blocks the drain of the operator's node
    service = find(install, "Service", "nodeops-metrics")
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": ports["metrics"], "targetPort": "metrics", "protocol": "TCP"}
    ]
    policy = find(install, "NetworkPolicy", "nodeops")
    assert policy["spec"]["podSelector"]["matchLabels"] == selector
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]


def test_leader_election_permissions_name_the_lease_nodeops_uses(
    install: list[dict[str, Any]],
) -> None:
    role = find(install, "Role", "nodeops-leader-election")
    defaults = RunSettings()
    assert role["metadata"]["namespace"] == defaults.namespace == NAMESPACE
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert [r["resourceNames"] for r in named] == [[defaults.leader_election_id]]


def test_the_image_is_the_package_version(install: list[dict[str, Any]]) -> None:
    assert manager_container(install)["image"] == f"nodeops:{__version__}"


def test_no_rbac_rule_uses_a_wildcard(install: list[dict[str, Any]]) -> None:
    roles = [o for o in install if o["kind"] in RBAC_KINDS]
    assert roles
    for role in roles:
        assert "aggregationRule" not in role, role["metadata"]["name"]
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                for value in rule.get(key, ()):
                    assert "*" not in value, f"{role['kind']}/{role['metadata']['name']}: {rule}"
            assert rule["verbs"], rule


def test_every_role_is_bound_to_the_operator_and_only_to_it(install: list[dict[str, Any]]) -> None:
    roles = {(o["kind"], o["metadata"]["name"]) for o in install if o["kind"] in RBAC_KINDS}
    bound: set[tuple[str, str]] = set()
    for binding in (o for o in install if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        assert (ref["kind"], ref["name"]) in roles, f"{binding['metadata']['name']}: {ref}"
        assert binding["subjects"] == [SERVICE_ACCOUNT], binding["metadata"]["name"]
        if binding["kind"] == "ClusterRoleBinding":
            assert ref["kind"] == "ClusterRole"
        bound.add((ref["kind"], ref["name"]))
    assert bound == roles


@pytest.mark.parametrize("overlay", overlay_dirs(), ids=name_of)
def test_every_argument_is_a_flag_of_nodeops_run(overlay: Path) -> None:
    args = manager_container(render(overlay))["args"]
    flags = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    assert flags <= _run_options()
    settings = parse_run(args)
    provider = overlay.name if overlay.parent.name == "overlays" else None
    assert settings.provider == provider


def component(root: Path, name: str, rules: list[dict[str, Any]]) -> Path:
    """A component written by the convention in manifests/components/README.md."""
    where = root / name
    where.mkdir(parents=True)
    rbac = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"nodeops-{name}"},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"nodeops-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"nodeops-{name}",
            },
            "subjects": [SERVICE_ACCOUNT],
        },
    ]
    (where / "rbac.yaml").write_text(yaml.safe_dump_all(rbac))
    patch = [
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/args/-",
            "value": f"--controllers={name}",
        }
    ]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "resources": ["rbac.yaml"],
        "patches": [
            {"target": {"kind": "Deployment", "name": "nodeops"}, "patch": yaml.safe_dump(patch)}
        ],
    }
    (where / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return where


def test_components_add_their_controller_and_their_rules(tmp_path: Path) -> None:
    nodes = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    pods = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    parts = [component(tmp_path / "c", "alpha", nodes), component(tmp_path / "c", "beta", pods)]
    objects = render(with_components(tmp_path / "install", BASE, parts))
    assert parse_run(manager_container(objects)["args"]).controllers == ["alpha", "beta"]
    assert find(objects, "ClusterRole", "nodeops-alpha")["rules"] == nodes
    assert find(objects, "ClusterRole", "nodeops-beta")["rules"] == pods
    assert find(objects, "ClusterRoleBinding", "nodeops-beta")["subjects"] == [SERVICE_ACCOUNT]
    # The base's own rules are all still there.
    assert {o["metadata"]["name"] for o in render(BASE) if o["kind"] in RBAC_KINDS} < {
        o["metadata"]["name"] for o in objects if o["kind"] in RBAC_KINDS
    }


def test_the_readme_install_renders_what_it_says() -> None:
    readme = (MANIFESTS.parent / "README.md").read_text()
    (line,) = [ln for ln in readme.splitlines() if ln.startswith("kubectl kustomize manifests/")]
    overlay = MANIFESTS.parent / line.split()[2]
    replaced = re.search(r'sed "s#(image: [^#]+)#', line)
    assert replaced, line
    assert replaced.group(1) == f"image: nodeops:{__version__}"
    assert f"image: nodeops:{__version__}" in render_text(overlay)


def test_every_field_is_one_kubernetes_knows(install: list[dict[str, Any]]) -> None:
    # The simulator stores fields it does not know; a real API server refuses them (kubectl
    # asks for strict field validation), so a typo must be caught here.
    for obj in install:
        assert unknown_fields(obj) == [], f"{obj['kind']}/{obj['metadata']['name']}"


def test_the_field_check_catches_a_typo() -> None:
    deployment = find(render(BASE), "Deployment", "nodeops")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFileSystem"] = True
    container["ports"][0]["containerport"] = 1
    assert unknown_fields(deployment) == [
        "spec.template.spec.containers[0].ports[0].containerport",
        "spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem",
    ]


@pytest.mark.parametrize("overlay", overlay_dirs()[1:], ids=name_of)
def test_the_provider_configuration_is_valid(overlay: Path) -> None:
    objects = render(overlay)
    settings = parse_run(manager_container(objects)["args"])
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    mounted = Path(settings.provider_config or "")
    (text,) = config_map["data"].values()
    assert list(config_map["data"]) == [mounted.name]
    container = manager_container(objects)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(mounted.parent)]
    pod = find(objects, "Deployment", "nodeops")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    config = yaml.safe_load(text)
    assert settings.provider is not None and list(config["providers"]) == [settings.provider]
    # Validated by the provider's own settings model, as `nodeops run` does at startup.
    create_provider(settings.provider, config["providers"][settings.provider])


def test_aws_credentials_come_from_irsa() -> None:
    objects = render(MANIFESTS / "overlays" / "aws")
    account = find(objects, "ServiceAccount", "nodeops")
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith(
        "arn:aws:iam::"
    )
    assert not [o for o in objects if o["kind"] == "Secret"]  # no key stored anywhere


def test_openstack_credentials_come_from_the_mounted_cloud_config_secret() -> None:
    objects = render(MANIFESTS / "overlays" / "openstack")
    settings = parse_run(manager_container(objects)["args"])
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    (text,) = config_map["data"].values()
    conf = Path(yaml.safe_load(text)["providers"]["openstack"]["cloudprovider_conf"])
    assert settings.provider == "openstack"
    (mount,) = [
        m for m in manager_container(objects)["volumeMounts"] if m["mountPath"] == str(conf.parent)
    ]
    assert mount["readOnly"] is True
    pod = find(objects, "Deployment", "nodeops")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "nodeops-cloud-config"
    assert volume["secret"]["defaultMode"] & 0o007 == 0  # not readable by others
    assert not [o for o in objects if o["kind"] == "Secret"]  # created by the user, not shipped


def test_the_overlay_of_the_install_page_renders_what_it_says(tmp_path: Path) -> None:
    """docs/install.md's own kustomization, placed where it says, with the checkout's manifests:
    the image, the IRSA role and the provider configuration it sets end up in the install."""
    page = (MANIFESTS.parent / "docs" / "install.md").read_text()
    (block,) = re.findall(
        r"```yaml\n(# clusters/production/kustomization.yaml\n.*?)```", page, re.S
    )
    cluster = tmp_path / "clusters" / "production"
    cluster.mkdir(parents=True)
    (tmp_path / "manifests").symlink_to(MANIFESTS, target_is_directory=True)
    (cluster / "kustomization.yaml").write_text(block)
    (cluster / "provider-config.yaml").write_text(
        "providers: {aws: {region: eu-west-1, cluster_name: production}}\n"
    )
    objects = render(cluster)
    account = find(objects, "ServiceAccount", "nodeops")
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == (
        "arn:aws:iam::123456789012:role/nodeops-production"
    )
    container = manager_container(objects)
    assert container["image"] == "registry.example.com/nodeops:0.1.0"
    settings = parse_run(container["args"])
    assert settings.provider == "aws" and settings.controllers == ["cycling"]
    (config_map,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and "provider-config" in o["metadata"]["name"]
    ]
    assert "cluster_name: production" in next(iter(config_map["data"].values()))
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"]
    assert any(n.startswith("nodeops-alerts") for n in names), names  # the monitoring component


def test_the_rollout_replaces_one_pod_at_a_time(install: list[dict[str, Any]]) -> None:
    """docs/upgrade.md: a new pod is Ready before an old one stops."""
    strategy = find(install, "Deployment", "nodeops")["spec"]["strategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


def test_the_security_page_names_every_role_and_every_secret_rule(
    install: list[dict[str, Any]],
) -> None:
    """docs/security.md's tables cover the roles an install grants and the controllers that may
    read Secrets."""
    page = (MANIFESTS.parent / "docs" / "security.md").read_text()
    components = {p.name for p in (MANIFESTS / "components").iterdir() if p.is_dir()}
    for role in (o for o in install if o["kind"] in RBAC_KINDS):
        name = role["metadata"]["name"]
        controller = name.removeprefix("nodeops-")
        assert f"`{name}`" in page or controller in components, name
        if any("secrets" in rule.get("resources", ()) for rule in role["rules"]):
            assert f"| `{controller}` |" in page.split("## Secrets the controllers read")[1], name
