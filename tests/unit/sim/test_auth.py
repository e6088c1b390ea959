"""Authentication and RBAC authorization, checked against kube-apiserver's observable behaviour."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from nodeops.sim.server import auth
from nodeops.sim.server.auth import (
    ADMIN_USER,
    ANONYMOUS_USER,
    Authenticator,
    RBACAuthorizer,
    RequestAttributes,
    UserInfo,
    bootstrap_policy,
    forbidden_error,
    resolve_aggregated_rules,
)
from nodeops.sim.server.errors import ApiError

RBAC = "rbac.authorization.k8s.io"
NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)

Obj = dict[str, Any]


# ------------------------------------------------------------------------------------------
# Builders
# ------------------------------------------------------------------------------------------


def sa_user(ns: str, name: str) -> UserInfo:
    return UserInfo(
        f"system:serviceaccount:{ns}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"),
    )


ALICE = UserInfo("alice", ("devs", "system:authenticated"))
BOB = UserInfo("bob", ("ops", "system:authenticated"))
SA = sa_user("ns", "sa")


def rule(
    verbs: list[str],
    groups: list[str] | None = None,
    resources: list[str] | None = None,
    names: list[str] | None = None,
    urls: list[str] | None = None,
) -> Obj:
    r: Obj = {"verbs": verbs}
    if groups is not None:
        r["apiGroups"] = groups
    if resources is not None:
        r["resources"] = resources
    if names is not None:
        r["resourceNames"] = names
    if urls is not None:
        r["nonResourceURLs"] = urls
    return r


def cluster_role(
    name: str,
    rules: list[Obj] | None = None,
    labels: dict[str, str] | None = None,
    selectors: list[Obj] | None = None,
) -> Obj:
    obj: Obj = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels or {}},
        "rules": rules or [],
    }
    if selectors is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": selectors}
    return obj


def role(name: str, ns: str, rules: list[Obj]) -> Obj:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": ns},
        "rules": rules,
    }


def subject(kind: str, name: str, ns: str | None = None) -> Obj:
    s: Obj = {"kind": kind, "name": name}
    if kind != "ServiceAccount":
        s["apiGroup"] = RBAC
    if ns is not None:
        s["namespace"] = ns
    return s


def crb(name: str, role_name: str, subjects: list[Obj], role_kind: str = "ClusterRole") -> Obj:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role_name},
        "subjects": subjects,
    }


def rb(name: str, ns: str, role_kind: str, role_name: str, subjects: list[Obj]) -> Obj:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role_name},
        "subjects": subjects,
    }


class Policy:
    """A stand-in for the store: RBAC objects with resourceVersions bumped on every write."""

    def __init__(self, *objects: Obj, versioned: bool = True) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.versioned = versioned
        self.counter = itertools.count(1)
        self.calls: list[tuple[str, str | None]] = []
        for obj in objects:
            self.put(obj)

    def put(self, obj: Obj) -> None:
        obj = orjson.loads(orjson.dumps(obj))
        if self.versioned:
            obj["metadata"]["resourceVersion"] = str(next(self.counter))
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj

    def delete(self, kind: str, name: str, ns: str = "") -> None:
        del self.objects[(kind, ns, name)]

    def lookup(self, kind: str, namespace: str | None) -> list[Obj]:
        self.calls.append((kind, namespace))
        return [
            obj
            for (k, ns, _), obj in sorted(self.objects.items())
            if k == kind and ns == (namespace or "")
        ]


def attrs(
    user: UserInfo,
    verb: str,
    resource: str = "",
    *,
    group: str = "",
    sub: str = "",
    ns: str = "",
    name: str = "",
    path: str = "",
) -> RequestAttributes:
    if path:
        return RequestAttributes(user=user, verb=verb, is_resource_request=False, path=path)
    return RequestAttributes(
        user=user,
        verb=verb,
        api_group=group,
        resource=resource,
        subresource=sub,
        namespace=ns,
        name=name,
        is_resource_request=True,
        path="",
    )


def allowed(policy: Policy, request: RequestAttributes) -> bool:
    return RBACAuthorizer(policy.lookup).authorize(request)[0]


# ------------------------------------------------------------------------------------------
# RBAC decisions
# ------------------------------------------------------------------------------------------

POD_READER = cluster_role("pod-reader", [rule(["get", "list", "watch"], [""], ["pods"])])
POD_READER_ROLE = role("pod-reader", "ns", [rule(["get", "list", "watch"], [""], ["pods"])])

# (id, policy objects, request, expected decision)
BINDING_CASES: list[tuple[str, list[Obj], RequestAttributes, bool]] = [
    ("nothing bound denies", [POD_READER], attrs(ALICE, "get", "pods", ns="ns"), False),
    (
        "masters need no binding",
        [],
        attrs(UserInfo("root", ("system:masters",)), "delete", "nodes", name="n1"),
        True,
    ),
    (
        "crb to user grants in a namespace",
        [POD_READER, crb("b", "pod-reader", [subject("User", "alice")])],
        attrs(ALICE, "get", "pods", ns="any", name="p"),
        True,
    ),
    (
        "crb to user grants across namespaces",
        [POD_READER, crb("b", "pod-reader", [subject("User", "alice")])],
        attrs(ALICE, "list", "pods"),
        True,
    ),
    (
        "crb to another user denies",
        [POD_READER, crb("b", "pod-reader", [subject("User", "bob")])],
        attrs(ALICE, "list", "pods"),
        False,
    ),
    (
        "crb to group grants",
        [POD_READER, crb("b", "pod-reader", [subject("Group", "devs")])],
        attrs(ALICE, "watch", "pods", ns="x"),
        True,
    ),
    (
        "a User subject does not match a group of that name",
        [POD_READER, crb("b", "pod-reader", [subject("User", "devs")])],
        attrs(ALICE, "list", "pods"),
        False,
    ),
    (
        "a Group subject does not match a user of that name",
        [POD_READER, crb("b", "pod-reader", [subject("Group", "alice")])],
        attrs(ALICE, "list", "pods"),
        False,
    ),
    (
        "second subject of a binding applies",
        [POD_READER, crb("b", "pod-reader", [subject("User", "bob"), subject("Group", "devs")])],
        attrs(ALICE, "list", "pods"),
        True,
    ),
    (
        "crb to service account grants",
        [POD_READER, crb("b", "pod-reader", [subject("ServiceAccount", "sa", "ns")])],
        attrs(SA, "get", "pods", ns="other", name="p"),
        True,
    ),
    (
        "crb to same-named service account of another namespace denies",
        [POD_READER, crb("b", "pod-reader", [subject("ServiceAccount", "sa", "other")])],
        attrs(SA, "get", "pods", ns="ns", name="p"),
        False,
    ),
    (
        "crb service account subject without namespace never matches",
        [POD_READER, crb("b", "pod-reader", [subject("ServiceAccount", "sa")])],
        attrs(SA, "get", "pods", ns="ns", name="p"),
        False,
    ),
    (
        "crb to the service accounts group of the namespace grants",
        [POD_READER, crb("b", "pod-reader", [subject("Group", "system:serviceaccounts:ns")])],
        attrs(SA, "list", "pods", ns="ns"),
        True,
    ),
    (
        "crb to system:authenticated grants",
        [POD_READER, crb("b", "pod-reader", [subject("Group", "system:authenticated")])],
        attrs(BOB, "list", "pods", ns="ns"),
        True,
    ),
    (
        "crb to system:authenticated does not reach anonymous",
        [POD_READER, crb("b", "pod-reader", [subject("Group", "system:authenticated")])],
        attrs(ANONYMOUS_USER, "list", "pods", ns="ns"),
        False,
    ),
    (
        "rolebinding to role grants in its namespace",
        [POD_READER_ROLE, rb("b", "ns", "Role", "pod-reader", [subject("User", "alice")])],
        attrs(ALICE, "get", "pods", ns="ns", name="p"),
        True,
    ),
    (
        "rolebinding to role grants nothing in another namespace",
        [
            POD_READER_ROLE,
            role("pod-reader", "other", [rule(["get"], [""], ["pods"])]),
            rb("b", "ns", "Role", "pod-reader", [subject("User", "alice")]),
        ],
        attrs(ALICE, "get", "pods", ns="other", name="p"),
        False,
    ),
    (
        "rolebinding grants nothing at cluster scope",
        [POD_READER_ROLE, rb("b", "ns", "Role", "pod-reader", [subject("User", "alice")])],
        attrs(ALICE, "list", "pods"),
        False,
    ),
    (
        "rolebinding to clusterrole grants in its namespace",
        [POD_READER, rb("b", "ns", "ClusterRole", "pod-reader", [subject("User", "alice")])],
        attrs(ALICE, "list", "pods", ns="ns"),
        True,
    ),
    (
        "rolebinding to clusterrole grants nothing elsewhere",
        [POD_READER, rb("b", "ns", "ClusterRole", "pod-reader", [subject("User", "alice")])],
        attrs(ALICE, "list", "pods", ns="elsewhere"),
        False,
    ),
    (
        "rolebinding service account without namespace defaults to the binding's",
        [POD_READER, rb("b", "ns", "ClusterRole", "pod-reader", [subject("ServiceAccount", "sa")])],
        attrs(SA, "list", "pods", ns="ns"),
        True,
    ),
    (
        "rolebinding may name a service account of another namespace",
        [
            POD_READER,
            rb("b", "work", "ClusterRole", "pod-reader", [subject("ServiceAccount", "sa", "ns")]),
        ],
        attrs(SA, "list", "pods", ns="work"),
        True,
    ),
    (
        "rolebinding to a role of another namespace's name resolves locally",
        [
            role("r", "other", [rule(["*"], ["*"], ["*"])]),
            rb("b", "ns", "Role", "r", [subject("User", "alice")]),
        ],
        attrs(ALICE, "list", "pods", ns="ns"),
        False,
    ),
    (
        "binding to a missing role denies",
        [crb("b", "ghost", [subject("User", "alice")])],
        attrs(ALICE, "list", "pods"),
        False,
    ),
    (
        "clusterrolebinding to a Role kind resolves nothing",
        [POD_READER_ROLE, crb("b", "pod-reader", [subject("User", "alice")], role_kind="Role")],
        attrs(ALICE, "list", "pods", ns="ns"),
        False,
    ),
]


@pytest.mark.parametrize(
    ("objects", "request_attrs", "expected"),
    [pytest.param(o, a, e, id=i) for i, o, a, e in BINDING_CASES],
)
def test_bindings_and_subjects(
    objects: list[Obj], request_attrs: RequestAttributes, expected: bool
) -> None:
    assert allowed(Policy(*objects), request_attrs) is expected


# (id, rule, request, expected) with the rule granted to alice cluster-wide
RULE_CASES: list[tuple[str, Obj, RequestAttributes, bool]] = [
    ("exact verb", rule(["get"], [""], ["pods"]), attrs(ALICE, "get", "pods", ns="n"), True),
    ("other verb", rule(["get"], [""], ["pods"]), attrs(ALICE, "delete", "pods", ns="n"), False),
    ("verb wildcard", rule(["*"], [""], ["pods"]), attrs(ALICE, "escalate", "pods"), True),
    (
        "core group does not cover apps",
        rule(["get"], [""], ["deployments"]),
        attrs(ALICE, "get", "deployments", group="apps", ns="n"),
        False,
    ),
    (
        "apps group",
        rule(["get"], ["apps"], ["deployments"]),
        attrs(ALICE, "get", "deployments", group="apps", ns="n"),
        True,
    ),
    (
        "group wildcard",
        rule(["get"], ["*"], ["deployments"]),
        attrs(ALICE, "get", "deployments", group="apps", ns="n"),
        True,
    ),
    (
        "resource must match",
        rule(["get"], [""], ["pods"]),
        attrs(ALICE, "get", "services", ns="n"),
        False,
    ),
    (
        "resource wildcard covers subresources",
        rule(["get"], [""], ["*"]),
        attrs(ALICE, "get", "pods", sub="log", ns="n", name="p"),
        True,
    ),
    (
        "resource does not cover its subresources",
        rule(["get", "create"], [""], ["pods"]),
        attrs(ALICE, "create", "pods", sub="eviction", ns="n", name="p"),
        False,
    ),
    (
        "resource/subresource",
        rule(["create"], [""], ["pods/eviction"]),
        attrs(ALICE, "create", "pods", sub="eviction", ns="n", name="p"),
        True,
    ),
    (
        "resource/subresource does not cover the resource",
        rule(["get"], [""], ["pods/log"]),
        attrs(ALICE, "get", "pods", ns="n", name="p"),
        False,
    ),
    (
        "*/subresource covers any resource's subresource",
        rule(["update"], ["*"], ["*/status"]),
        attrs(ALICE, "update", "deployments", group="apps", sub="status", ns="n", name="d"),
        True,
    ),
    (
        "*/subresource does not cover another subresource",
        rule(["update"], ["*"], ["*/status"]),
        attrs(ALICE, "update", "deployments", group="apps", sub="scale", ns="n", name="d"),
        False,
    ),
    (
        "*/subresource does not cover the main resource",
        rule(["update"], ["*"], ["*/status"]),
        attrs(ALICE, "update", "deployments", group="apps", ns="n", name="d"),
        False,
    ),
    (
        "resourceNames allow the named object",
        rule(["get", "update", "delete"], [""], ["configmaps"], names=["cm1"]),
        attrs(ALICE, "update", "configmaps", ns="n", name="cm1"),
        True,
    ),
    (
        "resourceNames refuse other names",
        rule(["get"], [""], ["configmaps"], names=["cm1"]),
        attrs(ALICE, "get", "configmaps", ns="n", name="cm2"),
        False,
    ),
    (
        "resourceNames refuse list",
        rule(["list"], [""], ["configmaps"], names=["cm1"]),
        attrs(ALICE, "list", "configmaps", ns="n"),
        False,
    ),
    (
        "resourceNames refuse watch",
        rule(["watch"], [""], ["configmaps"], names=["cm1"]),
        attrs(ALICE, "watch", "configmaps", ns="n"),
        False,
    ),
    (
        "resourceNames refuse create",
        rule(["create"], [""], ["configmaps"], names=["cm1"]),
        attrs(ALICE, "create", "configmaps", ns="n"),
        False,
    ),
    (
        "resourceNames refuse deletecollection",
        rule(["deletecollection"], [""], ["configmaps"], names=["cm1"]),
        attrs(ALICE, "deletecollection", "configmaps", ns="n"),
        False,
    ),
    (
        "resourceNames allow a list narrowed to that name",
        rule(["list"], [""], ["configmaps"], names=["cm1"]),
        attrs(ALICE, "list", "configmaps", ns="n", name="cm1"),
        True,
    ),
    (
        "resourceNames apply to subresources",
        rule(["create"], [""], ["pods/eviction"], names=["p1"]),
        attrs(ALICE, "create", "pods", sub="eviction", ns="n", name="p1"),
        True,
    ),
    (
        "cluster-scoped resource",
        rule(["get"], [""], ["nodes"]),
        attrs(ALICE, "get", "nodes", name="n1"),
        True,
    ),
    ("exact url", rule(["get"], urls=["/version"]), attrs(ALICE, "get", path="/version"), True),
    (
        "exact url is not a prefix",
        rule(["get"], urls=["/version"]),
        attrs(ALICE, "get", path="/version/"),
        False,
    ),
    (
        "url prefix",
        rule(["get"], urls=["/apis/*"]),
        attrs(ALICE, "get", path="/apis/apps/v1"),
        True,
    ),
    (
        "url prefix needs its slash",
        rule(["get"], urls=["/apis/*"]),
        attrs(ALICE, "get", path="/apis"),
        False,
    ),
    (
        "url prefix without slash",
        rule(["get"], urls=["/health*"]),
        attrs(ALICE, "get", path="/healthz/etcd"),
        True,
    ),
    ("url wildcard", rule(["get"], urls=["*"]), attrs(ALICE, "get", path="/metrics"), True),
    (
        "url verb must match",
        rule(["get"], urls=["/metrics"]),
        attrs(ALICE, "post", path="/metrics"),
        False,
    ),
    (
        "resource rule grants no path",
        rule(["*"], ["*"], ["*"]),
        attrs(ALICE, "get", path="/version"),
        False,
    ),
    (
        "url rule grants no resource",
        rule(["*"], urls=["*"]),
        attrs(ALICE, "get", "pods", ns="n"),
        False,
    ),
]


@pytest.mark.parametrize(
    ("granted", "request_attrs", "expected"),
    [pytest.param(r, a, e, id=i) for i, r, a, e in RULE_CASES],
)
def test_rule_matching(granted: Obj, request_attrs: RequestAttributes, expected: bool) -> None:
    policy = Policy(
        cluster_role("r", [granted]),
        crb("b", "r", [subject("User", "alice")]),
    )
    assert allowed(policy, request_attrs) is expected


def test_masters_short_cut_skips_policy_lookups() -> None:
    policy = Policy()
    decision = RBACAuthorizer(policy.lookup).authorize(attrs(ADMIN_USER, "get", path="/x"))
    assert decision == (True, "")
    assert policy.calls == []


def test_cluster_scope_requests_never_read_namespaced_policy() -> None:
    policy = Policy(POD_READER_ROLE)
    assert not allowed(policy, attrs(ALICE, "list", "pods"))
    assert not allowed(policy, attrs(ALICE, "get", path="/version"))
    assert {kind for kind, _ in policy.calls} == {"ClusterRole", "ClusterRoleBinding"}


def test_namespace_policy_is_not_read_when_cluster_policy_allows() -> None:
    policy = Policy(POD_READER, crb("b", "pod-reader", [subject("User", "alice")]))
    assert allowed(policy, attrs(ALICE, "get", "pods", ns="ns", name="p"))
    assert ("RoleBinding", "ns") not in policy.calls


# ------------------------------------------------------------------------------------------
# Reasons
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("objects", "request_attrs", "expected"),
    [
        pytest.param(
            [POD_READER, crb("readers", "pod-reader", [subject("Group", "devs")])],
            attrs(ALICE, "list", "pods"),
            (
                True,
                'RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "pod-reader" '
                'to Group "devs"',
            ),
            id="cluster binding",
        ),
        pytest.param(
            [
                POD_READER_ROLE,
                rb(
                    "rb",
                    "ns",
                    "Role",
                    "pod-reader",
                    [subject("User", "x"), subject("ServiceAccount", "sa")],
                ),
            ],
            attrs(SA, "list", "pods", ns="ns"),
            (
                True,
                'RBAC: allowed by RoleBinding "rb/ns" of Role "pod-reader" '
                'to ServiceAccount "sa/ns"',
            ),
            id="role binding names the first matching subject",
        ),
        pytest.param(
            [
                POD_READER,
                crb("both", "pod-reader", [subject("User", "alice"), subject("Group", "devs")]),
            ],
            attrs(ALICE, "list", "pods"),
            (
                True,
                'RBAC: allowed by ClusterRoleBinding "both" of ClusterRole "pod-reader" '
                'to User "alice"',
            ),
            id="user and group both match, the first subject is named",
        ),
        pytest.param(
            [POD_READER],
            attrs(ALICE, "list", "pods", ns="ns"),
            (False, ""),
            id="plain denial has no reason",
        ),
        pytest.param(
            [crb("b", "ghost", [subject("User", "alice")])],
            attrs(ALICE, "list", "pods"),
            (False, 'RBAC: clusterrole.rbac.authorization.k8s.io "ghost" not found'),
            id="missing cluster role",
        ),
        pytest.param(
            [rb("b", "ns", "Role", "ghost", [subject("User", "alice")])],
            attrs(ALICE, "list", "pods", ns="ns"),
            (False, 'RBAC: role.rbac.authorization.k8s.io "ghost" not found'),
            id="missing role",
        ),
        pytest.param(
            [
                crb("b1", "ghost", [subject("User", "alice")]),
                rb("b2", "ns", "Role", "phantom", [subject("Group", "devs")]),
            ],
            attrs(ALICE, "list", "pods", ns="ns"),
            (
                False,
                'RBAC: [clusterrole.rbac.authorization.k8s.io "ghost" not found, '
                'role.rbac.authorization.k8s.io "phantom" not found]',
            ),
            id="several resolution errors",
        ),
        pytest.param(
            [
                crb("b1", "ghost", [subject("User", "alice")]),
                crb("b2", "ghost", [subject("Group", "devs")]),
            ],
            attrs(ALICE, "list", "pods"),
            (False, 'RBAC: clusterrole.rbac.authorization.k8s.io "ghost" not found'),
            id="identical errors collapse",
        ),
        pytest.param(
            [crb("b", "x", [subject("User", "alice")], role_kind="Bogus")],
            attrs(ALICE, "list", "pods"),
            (False, 'RBAC: unsupported role reference kind: "Bogus"'),
            id="unsupported role kind",
        ),
        pytest.param(
            [crb("b", "ghost", [subject("User", "bob")])],
            attrs(ALICE, "list", "pods"),
            (False, ""),
            id="broken bindings of other users are not reported",
        ),
    ],
)
def test_reasons(
    objects: list[Obj], request_attrs: RequestAttributes, expected: tuple[bool, str]
) -> None:
    assert RBACAuthorizer(Policy(*objects).lookup).authorize(request_attrs) == expected


# ------------------------------------------------------------------------------------------
# Aggregation
# ------------------------------------------------------------------------------------------

AGG = "example.com/aggregate-to-monitoring"


def test_aggregated_cluster_role_grants_rules_of_selected_roles() -> None:
    policy = Policy(
        cluster_role("monitoring", selectors=[{"matchLabels": {AGG: "true"}}]),
        cluster_role("pods-part", [rule(["get"], [""], ["pods"])], labels={AGG: "true"}),
        cluster_role("svc-part", [rule(["get"], [""], ["services"])], labels={AGG: "true"}),
        cluster_role("unlabelled", [rule(["get"], [""], ["secrets"])]),
        crb("b", "monitoring", [subject("User", "alice")]),
    )
    authz = RBACAuthorizer(policy.lookup)
    assert authz.authorize(attrs(ALICE, "get", "pods", ns="n", name="p"))[0]
    assert authz.authorize(attrs(ALICE, "get", "services", ns="n", name="s"))[0]
    assert not authz.authorize(attrs(ALICE, "get", "secrets", ns="n", name="s"))[0]


def test_aggregation_replaces_the_roles_own_rules() -> None:
    policy = Policy(
        cluster_role(
            "agg", [rule(["get"], [""], ["secrets"])], selectors=[{"matchLabels": {AGG: "true"}}]
        ),
        cluster_role("part", [rule(["get"], [""], ["pods"])], labels={AGG: "true"}),
        crb("b", "agg", [subject("User", "alice")]),
    )
    assert allowed(policy, attrs(ALICE, "get", "pods", ns="n", name="p"))
    assert not allowed(policy, attrs(ALICE, "get", "secrets", ns="n", name="s"))


def test_aggregation_with_match_expressions() -> None:
    policy = Policy(
        cluster_role(
            "agg",
            selectors=[{"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}],
        ),
        cluster_role("a", [rule(["list"], [""], ["pods"])], labels={"tier": "a"}),
        cluster_role("b", [rule(["list"], [""], ["nodes"])], labels={"tier": "b"}),
        crb("bind", "agg", [subject("User", "alice")]),
    )
    assert allowed(policy, attrs(ALICE, "list", "pods"))
    assert not allowed(policy, attrs(ALICE, "list", "nodes"))


def test_aggregation_is_transitive_and_survives_cycles() -> None:
    policy = Policy(
        cluster_role("top", labels={"ring": "y"}, selectors=[{"matchLabels": {"level": "mid"}}]),
        cluster_role(
            "mid",
            labels={"level": "mid"},
            selectors=[{"matchLabels": {"level": "leaf"}}, {"matchLabels": {"ring": "y"}}],
        ),
        cluster_role("leaf", [rule(["get"], [""], ["pods"])], labels={"level": "leaf"}),
        crb("b", "top", [subject("User", "alice")]),
    )
    assert allowed(policy, attrs(ALICE, "get", "pods", ns="n", name="p"))
    resolved = resolve_aggregated_rules(policy.lookup("ClusterRole", None))
    assert resolved == {
        "top": [rule(["get"], [""], ["pods"])],
        "mid": [rule(["get"], [""], ["pods"])],
    }


def test_aggregated_role_does_not_select_itself_and_deduplicates() -> None:
    roles = [
        cluster_role(
            "self",
            [rule(["*"], ["*"], ["*"])],
            labels={AGG: "true"},
            selectors=[{"matchLabels": {AGG: "true"}}, {"matchLabels": {"x": "1"}}],
        ),
        cluster_role("p", [rule(["get"], [""], ["pods"])], labels={AGG: "true", "x": "1"}),
    ]
    assert resolve_aggregated_rules(roles) == {"self": [rule(["get"], [""], ["pods"])]}


@pytest.mark.parametrize(
    ("selectors", "expected"),
    [
        pytest.param([], [], id="no selectors empties the role"),
        pytest.param([None], ["pods", "nodes"], id="null selector selects everything"),
        pytest.param([{}], ["pods", "nodes"], id="empty selector selects everything"),
        pytest.param(
            [{"matchExpressions": [{"key": "tier", "operator": "Bogus"}]}],
            ["secrets"],
            id="invalid selector keeps the stored rules",
        ),
        pytest.param(["tier=a"], ["secrets"], id="malformed selector keeps the stored rules"),
        pytest.param(
            [{"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["b"]}]}],
            ["pods"],
            id="NotIn",
        ),
    ],
)
def test_aggregation_selectors(selectors: list[Any], expected: list[str]) -> None:
    roles = [
        cluster_role("agg", [rule(["get"], [""], ["secrets"])], selectors=selectors),
        cluster_role("a", [rule(["get"], [""], ["pods"])], labels={"tier": "a"}),
        cluster_role("b", [rule(["get"], [""], ["nodes"])], labels={"tier": "b"}),
    ]
    policy = Policy(*roles, crb("bind", "agg", [subject("User", "alice")]))
    for resource in ("pods", "nodes", "secrets"):
        request = attrs(ALICE, "get", resource, name="x")
        assert allowed(policy, request) is (resource in expected), resource


def test_aggregation_follows_label_changes() -> None:
    policy = Policy(
        cluster_role("agg", selectors=[{"matchLabels": {AGG: "true"}}]),
        cluster_role("part", [rule(["get"], [""], ["pods"])]),
        crb("b", "agg", [subject("User", "alice")]),
    )
    authz = RBACAuthorizer(policy.lookup)
    request = attrs(ALICE, "get", "pods", ns="n", name="p")
    assert not authz.authorize(request)[0]
    policy.put(cluster_role("part", [rule(["get"], [""], ["pods"])], labels={AGG: "true"}))
    assert authz.authorize(request)[0]


def test_rolebinding_to_aggregated_cluster_role() -> None:
    policy = Policy(
        *bootstrap_policy(),
        rb("edit-ns", "ns", "ClusterRole", "edit", [subject("ServiceAccount", "sa")]),
    )
    authz = RBACAuthorizer(policy.lookup)
    assert authz.authorize(attrs(SA, "create", "pods", sub="eviction", ns="ns", name="p"))[0]
    assert authz.authorize(attrs(SA, "list", "pods", ns="ns"))[0]  # via view, aggregated into edit
    assert not authz.authorize(attrs(SA, "create", "roles", group=RBAC, ns="ns"))[0]  # admin only
    assert not authz.authorize(attrs(SA, "list", "pods", ns="other"))[0]


# ------------------------------------------------------------------------------------------
# Bootstrap policy
# ------------------------------------------------------------------------------------------

BOOTSTRAP_CASES: list[tuple[str, RequestAttributes, bool]] = [
    ("service account discovers /api", attrs(SA, "get", path="/api"), True),
    ("service account discovers /apis/apps/v1", attrs(SA, "get", path="/apis/apps/v1"), True),
    ("service account reads /version", attrs(SA, "get", path="/version"), True),
    ("service account reads /openapi/v3", attrs(SA, "get", path="/openapi/v3"), True),
    ("service account reads its issuer jwks", attrs(SA, "get", path="/openid/v1/jwks"), True),
    ("service account reads no pods", attrs(SA, "list", "pods", ns="ns"), False),
    ("service account reads no metrics", attrs(SA, "get", path="/metrics"), False),
    (
        "user may review itself",
        attrs(ALICE, "create", "selfsubjectaccessreviews", group="authorization.k8s.io"),
        True,
    ),
    (
        "user may ask who it is",
        attrs(ALICE, "create", "selfsubjectreviews", group="authentication.k8s.io"),
        True,
    ),
    ("anonymous reads /version", attrs(ANONYMOUS_USER, "get", path="/version"), True),
    ("anonymous reads /healthz", attrs(ANONYMOUS_USER, "get", path="/healthz"), True),
    ("anonymous reads /readyz", attrs(ANONYMOUS_USER, "get", path="/readyz"), True),
    ("anonymous does not discover /api", attrs(ANONYMOUS_USER, "get", path="/api"), False),
    (
        "anonymous may not review itself",
        attrs(ANONYMOUS_USER, "create", "selfsubjectaccessreviews", group="authorization.k8s.io"),
        False,
    ),
    (
        "masters via the cluster-admin binding",
        attrs(UserInfo("m", ("system:masters",)), "delete", "nodes", name="x"),
        True,
    ),
]


@pytest.mark.parametrize(
    ("request_attrs", "expected"),
    [pytest.param(a, e, id=i) for i, a, e in BOOTSTRAP_CASES],
)
def test_bootstrap_policy(request_attrs: RequestAttributes, expected: bool) -> None:
    assert allowed(Policy(*bootstrap_policy()), request_attrs) is expected


def test_cluster_admin_binding_grants_without_the_masters_short_cut() -> None:
    objects = bootstrap_policy()
    binding = next(
        o
        for o in objects
        if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"] == "cluster-admin"
    )
    assert binding["subjects"] == [{"apiGroup": RBAC, "kind": "Group", "name": "system:masters"}]
    policy = Policy(*objects, crb("me", "cluster-admin", [subject("User", "alice")]))
    assert allowed(policy, attrs(ALICE, "escalate", "clusterroles", group=RBAC, name="x"))
    assert allowed(policy, attrs(ALICE, "get", path="/metrics"))


def test_bootstrap_objects_are_well_formed() -> None:
    objects = bootstrap_policy()
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert len(names) == len(objects)
    for obj in objects:
        assert obj["apiVersion"] == f"{RBAC}/v1"
        assert obj["metadata"]["labels"]["kubernetes.io/bootstrapping"] == "rbac-defaults"
        if obj["kind"] == "ClusterRoleBinding":
            assert ("ClusterRole", obj["roleRef"]["name"]) in names
    assert bootstrap_policy() == objects  # a fresh copy every call, safe to mutate


# ------------------------------------------------------------------------------------------
# Caching
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("versioned", [True, False], ids=["resourceVersion", "content"])
def test_policy_changes_take_effect(versioned: bool) -> None:
    policy = Policy(POD_READER, versioned=versioned)
    authz = RBACAuthorizer(policy.lookup)
    request = attrs(ALICE, "list", "pods", ns="ns")
    assert not authz.authorize(request)[0]
    policy.put(rb("b", "ns", "ClusterRole", "pod-reader", [subject("User", "alice")]))
    assert authz.authorize(request)[0]
    policy.put(cluster_role("pod-reader", [rule(["get"], [""], ["pods"])]))
    assert not authz.authorize(request)[0]
    policy.put(POD_READER)
    assert authz.authorize(request)[0]
    policy.delete("RoleBinding", "b", "ns")
    assert not authz.authorize(request)[0]


def test_unchanged_policy_is_compiled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[str] = []

    class CountingCluster(auth._ClusterState):
        def __init__(self, *args: Any) -> None:
            builds.append("cluster")
            super().__init__(*args)

    class CountingNamespace(auth._NamespaceState):
        def __init__(self, *args: Any) -> None:
            builds.append("namespace")
            super().__init__(*args)

    monkeypatch.setattr(auth, "_ClusterState", CountingCluster)
    monkeypatch.setattr(auth, "_NamespaceState", CountingNamespace)
    others = [crb(f"b{i}", "pod-reader", [subject("User", f"user{i}")]) for i in range(300)]
    policy = Policy(POD_READER, POD_READER_ROLE, *others)
    authz = RBACAuthorizer(policy.lookup)
    for _ in range(50):
        assert not authz.authorize(attrs(ALICE, "list", "pods", ns="ns"))[0]
        assert authz.authorize(attrs(UserInfo("user7"), "list", "pods", ns="ns"))[0]
    assert builds == ["cluster", "namespace"]
    policy.put(crb("b1", "pod-reader", [subject("User", "alice")]))
    assert authz.authorize(attrs(ALICE, "list", "pods", ns="ns"))[0]
    assert builds == ["cluster", "namespace", "cluster"]


# ------------------------------------------------------------------------------------------
# The 403
# ------------------------------------------------------------------------------------------

FORBIDDEN_CASES: list[tuple[str, RequestAttributes, str, str, dict[str, str]]] = [
    (
        "named namespaced",
        attrs(SA, "get", "pods", ns="ns", name="p1"),
        "",
        'pods "p1" is forbidden: User "system:serviceaccount:ns:sa" cannot get resource '
        '"pods" in API group "" in the namespace "ns"',
        {"name": "p1", "kind": "pods"},
    ),
    (
        "collection in a namespace",
        attrs(SA, "list", "pods", ns="default"),
        "",
        'pods is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "pods" '
        'in API group "" in the namespace "default"',
        {"kind": "pods"},
    ),
    (
        "cluster scope",
        attrs(ALICE, "list", "nodes"),
        "",
        'nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" '
        "at the cluster scope",
        {"kind": "nodes"},
    ),
    (
        "subresource",
        attrs(ALICE, "create", "pods", sub="eviction", ns="ns", name="p1"),
        "",
        'pods "p1" is forbidden: User "alice" cannot create resource "pods/eviction" '
        'in API group "" in the namespace "ns"',
        {"name": "p1", "kind": "pods"},
    ),
    (
        "named group",
        attrs(ALICE, "patch", "deployments", group="apps", sub="scale", ns="ns", name="web"),
        "",
        'deployments.apps "web" is forbidden: User "alice" cannot patch resource '
        '"deployments/scale" in API group "apps" in the namespace "ns"',
        {"name": "web", "group": "apps", "kind": "deployments"},
    ),
    (
        "cluster-scoped named in a group",
        attrs(ALICE, "delete", "clusterroles", group=RBAC, name="admin"),
        "",
        'clusterroles.rbac.authorization.k8s.io "admin" is forbidden: User "alice" cannot '
        'delete resource "clusterroles" in API group "rbac.authorization.k8s.io" '
        "at the cluster scope",
        {"name": "admin", "group": RBAC, "kind": "clusterroles"},
    ),
    (
        "non-resource path",
        attrs(ANONYMOUS_USER, "get", path="/version"),
        "",
        'forbidden: User "system:anonymous" cannot get path "/version"',
        {},
    ),
    (
        "authorizer reason appended",
        attrs(ALICE, "get", "pods", ns="ns", name="p"),
        'RBAC: clusterrole.rbac.authorization.k8s.io "ghost" not found',
        'pods "p" is forbidden: User "alice" cannot get resource "pods" in API group "" in the '
        'namespace "ns": RBAC: clusterrole.rbac.authorization.k8s.io "ghost" not found',
        {"name": "p", "kind": "pods"},
    ),
    (
        "html-looking text is escaped",
        attrs(ALICE, "get", path="/x<script>&"),
        "",
        'forbidden: User "alice" cannot get path "/x&lt;script&gt;&amp;"',
        {},
    ),
    (
        "names are Go-quoted",
        attrs(UserInfo('we"ird\\\n'), "get", "pods", ns="ns", name='a"b'),
        "",
        'pods "a\\"b" is forbidden: User "we\\"ird\\\\\\n" cannot get resource "pods" '
        'in API group "" in the namespace "ns"',
        {"name": 'a"b', "kind": "pods"},
    ),
]


@pytest.mark.parametrize(
    ("request_attrs", "reason", "message", "details"),
    [pytest.param(a, r, m, d, id=i) for i, a, r, m, d in FORBIDDEN_CASES],
)
def test_forbidden_error(
    request_attrs: RequestAttributes, reason: str, message: str, details: dict[str, str]
) -> None:
    err = forbidden_error(request_attrs, reason)
    assert err.code == 403
    assert err.message == message
    assert err.details == details


def test_forbidden_status_body() -> None:
    body = forbidden_error(attrs(SA, "get", "pods", ns="ns", name="p1")).status()
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "p1" is forbidden: User "system:serviceaccount:ns:sa" cannot get '
        'resource "pods" in API group "" in the namespace "ns"',
        "reason": "Forbidden",
        "details": {"name": "p1", "kind": "pods"},
        "code": 403,
    }
    # kube sends an empty details object for paths, not none at all
    assert forbidden_error(attrs(SA, "get", path="/metrics")).status()["details"] == {}


def test_denial_end_to_end_message() -> None:
    policy = Policy(rb("b", "ns", "ClusterRole", "missing", [subject("ServiceAccount", "sa")]))
    request = attrs(SA, "list", "pods", ns="ns")
    ok, reason = RBACAuthorizer(policy.lookup).authorize(request)
    assert not ok
    assert forbidden_error(request, reason).message == (
        'pods is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "pods" in '
        'API group "" in the namespace "ns": RBAC: clusterrole.rbac.authorization.k8s.io '
        '"missing" not found'
    )


# ------------------------------------------------------------------------------------------
# Authentication
# ------------------------------------------------------------------------------------------


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def make_authn(clock: Clock | None = None, **kwargs: Any) -> Authenticator:
    return Authenticator(
        {"alice-token": UserInfo("alice", ("devs",), "u-1")},
        admin_token="admin-token",
        signing_key=b"k" * 32,
        clock=clock or Clock(NOW),
        **kwargs,
    )


def decode_segment(segment: str) -> Any:
    return orjson.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))


def encode_segment(value: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).rstrip(b"=").decode()


def expect_401(call: Callable[[], object]) -> None:
    with pytest.raises(ApiError) as info:
        call()
    assert (info.value.code, info.value.reason, info.value.message) == (
        401,
        "Unauthorized",
        "Unauthorized",
    )


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param(None, None, id="no header"),
        pytest.param("", None, id="empty"),
        pytest.param("   ", None, id="blank"),
        pytest.param("Basic YWxpY2U6cHc=", None, id="basic is not ours"),
        pytest.param("Bearer", None, id="bearer without token"),
        pytest.param("Bearer ", None, id="bearer with trailing space"),
        pytest.param("Bearer  alice-token", None, id="double space leaves an empty token"),
        pytest.param(
            "Bearer alice-token",
            UserInfo("alice", ("devs", "system:authenticated"), "u-1"),
            id="static token gains system:authenticated",
        ),
        pytest.param(
            "bearer alice-token",
            UserInfo("alice", ("devs", "system:authenticated"), "u-1"),
            id="scheme is case-insensitive",
        ),
        pytest.param(
            "  Bearer alice-token extra  ",
            UserInfo("alice", ("devs", "system:authenticated"), "u-1"),
            id="trailing words ignored",
        ),
        pytest.param("Bearer admin-token", ADMIN_USER, id="admin token"),
    ],
)
def test_header_parsing(header: str | None, expected: UserInfo | None) -> None:
    assert make_authn().authenticate(header) == expected


@pytest.mark.parametrize(
    "header",
    ["Bearer nope", "Bearer a.b.c", "Bearer alice-token-", "Bearer ÿ.ÿ.ÿ"],
    ids=["unknown", "fake jwt", "near miss", "non-ascii"],
)
def test_unknown_bearer_token_is_401_not_anonymous(header: str) -> None:
    expect_401(lambda: make_authn().authenticate(header))


def test_anonymous_can_be_switched_off() -> None:
    authn = make_authn(anonymous=False)
    expect_401(lambda: authn.authenticate(None))
    expect_401(lambda: authn.authenticate("Basic xyz"))
    assert authn.authenticate("Bearer admin-token") == ADMIN_USER


def test_user_for_names_the_anonymous_user() -> None:
    authn = make_authn()
    assert (
        authn.user_for(None)
        == ANONYMOUS_USER
        == UserInfo("system:anonymous", ("system:unauthenticated",))
    )
    assert authn.user_for("Bearer admin-token") == ADMIN_USER


def test_static_user_that_declares_itself_unauthenticated_is_left_alone() -> None:
    authn = make_authn()
    guest = UserInfo("guest", ("system:unauthenticated",))
    authn.add_static_token("guest-token", guest)
    assert authn.authenticate("Bearer guest-token") == guest


def test_added_static_token() -> None:
    authn = make_authn()
    authn.add_static_token("t2", UserInfo("carol", ("system:authenticated", "x")))
    assert authn.authenticate("Bearer t2") == UserInfo("carol", ("system:authenticated", "x"))


def test_minted_token_authenticates_as_the_service_account() -> None:
    authn = make_authn()
    token, expires = authn.mint_service_account_token("ns", "sa", "uid-1", 3600, NOW, [])
    assert expires == NOW + timedelta(hours=1)
    user = authn.authenticate(f"Bearer {token}")
    assert user == UserInfo(
        "system:serviceaccount:ns:sa",
        ("system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"),
        "uid-1",
    )


def test_minted_token_claims_look_like_kube_projected_tokens() -> None:
    authn = make_authn()
    later = NOW + timedelta(microseconds=700_000)
    token, expires = authn.mint_service_account_token("ns", "sa", "uid-1", 600, later, ["api"])
    header_seg, payload_seg, signature = token.split(".")
    assert decode_segment(header_seg)["alg"] == "HS256"
    claims = decode_segment(payload_seg)
    jti = claims.pop("jti")
    assert isinstance(jti, str) and len(jti) == 36
    issued = int(NOW.timestamp())
    assert claims == {
        "aud": ["api"],
        "exp": issued + 600,
        "iat": issued,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "sa", "uid": "uid-1"}},
        "nbf": issued,
        "sub": "system:serviceaccount:ns:sa",
    }
    assert expires == NOW + timedelta(seconds=600)  # whole seconds, equal to exp
    assert signature and "=" not in token
    other, _ = authn.mint_service_account_token("ns", "sa", "uid-1", 600, later, ["api"])
    assert other != token  # unique jti


def test_default_audience_is_the_api_audience() -> None:
    authn = make_authn(api_audiences=["https://sim", "extra"])
    token, _ = authn.mint_service_account_token("ns", "sa", "u", 600, NOW, [])
    assert decode_segment(token.split(".")[1])["aud"] == ["https://sim", "extra"]


@pytest.mark.parametrize(
    ("offset", "accepted"),
    [
        pytest.param(timedelta(0), True, id="fresh"),
        pytest.param(timedelta(seconds=3599), True, id="just before expiry"),
        pytest.param(timedelta(seconds=3600 + 60), True, id="within leeway"),
        pytest.param(timedelta(seconds=3600 + 61), False, id="expired"),
        pytest.param(timedelta(days=2), False, id="long expired"),
        pytest.param(timedelta(seconds=-60), True, id="slightly early within leeway"),
        pytest.param(timedelta(seconds=-61), False, id="not valid yet"),
    ],
)
def test_token_lifetime(offset: timedelta, accepted: bool) -> None:
    clock = Clock(NOW)
    authn = make_authn(clock)
    token, _ = authn.mint_service_account_token("ns", "sa", "u", 3600, NOW, [])
    clock.now = NOW + offset
    if accepted:
        assert authn.authenticate(f"Bearer {token}") is not None
    else:
        expect_401(lambda: authn.authenticate(f"Bearer {token}"))


def _tamper_payload(token: str, change: Callable[[dict[str, Any]], None]) -> str:
    header, payload, signature = token.split(".")
    claims = decode_segment(payload)
    change(claims)
    return f"{header}.{encode_segment(claims)}.{signature}"


def _set(path: list[str], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(claims: dict[str, Any]) -> None:
        target = claims
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(
            lambda t: _tamper_payload(t, _set(["kubernetes.io", "namespace"], "kube-system")),
            id="namespace",
        ),
        pytest.param(
            lambda t: _tamper_payload(t, _set(["sub"], "system:serviceaccount:ns:admin")),
            id="subject",
        ),
        pytest.param(lambda t: _tamper_payload(t, _set(["exp"], 4102444800)), id="expiry"),
        pytest.param(lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"), id="signature"),
        pytest.param(lambda t: t + "A", id="signature extended"),
        # base64 decoders that skip stray characters would read the same signature bytes.
        pytest.param(lambda t: f"{t[:-4]}!{t[-4:]}", id="stray character in signature"),
        pytest.param(lambda t: f"{t[:-4]}={t[-4:]}", id="padding inside signature"),
        pytest.param(lambda t: t.rsplit(".", 1)[0] + ".", id="signature stripped"),
        pytest.param(
            lambda t: f"{encode_segment({'alg': 'none'})}.{t.split('.')[1]}.",
            id="alg none",
        ),
        pytest.param(lambda t: t.replace(".", "..", 1), id="extra segment"),
    ],
)
def test_tampered_tokens_are_refused(tamper: Callable[[str], str]) -> None:
    authn = make_authn()
    token, _ = authn.mint_service_account_token("ns", "sa", "u", 3600, NOW, [])
    assert authn.authenticate(f"Bearer {token}") is not None
    forged = tamper(token)
    assert forged != token
    expect_401(lambda: authn.authenticate(f"Bearer {forged}"))


def resign(header: dict[str, Any], claims: dict[str, Any]) -> str:
    """A token signed with the test authenticator's key, for claims it would never issue."""
    signing_input = f"{encode_segment(header)}.{encode_segment(claims)}"
    digest = hmac.new(b"k" * 32, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(digest).rstrip(b'=').decode()}"


def valid_claims() -> dict[str, Any]:
    issued = int(NOW.timestamp())
    return {
        "aud": ["https://kubernetes.default.svc.cluster.local"],
        "exp": issued + 600,
        "iat": issued,
        "nbf": issued,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "sa", "uid": "u"}},
        "sub": "system:serviceaccount:ns:sa",
    }


def _without(key: str) -> Callable[[dict[str, Any]], None]:
    def change(claims: dict[str, Any]) -> None:
        del claims[key]

    return change


HS256 = {"alg": "HS256"}


@pytest.mark.parametrize(
    ("header", "change", "accepted"),
    [
        pytest.param(HS256, lambda c: None, True, id="well-formed"),
        pytest.param({"alg": "RS256"}, lambda c: None, False, id="other algorithm"),
        pytest.param(
            HS256,
            _set(["aud"], "https://kubernetes.default.svc.cluster.local"),
            True,
            id="audience as a string",
        ),
        pytest.param(HS256, _set(["aud"], None), False, id="no audience"),
        pytest.param(HS256, _set(["exp"], int(NOW.timestamp()) + 0.5), True, id="float expiry"),
        pytest.param(HS256, _without("exp"), False, id="no expiry"),
        pytest.param(HS256, _set(["exp"], True), False, id="boolean expiry"),
        pytest.param(HS256, _set(["nbf"], True), False, id="boolean nbf"),
        pytest.param(HS256, _set(["exp"], "soon"), False, id="string expiry"),
        pytest.param(HS256, _without("nbf"), True, id="nbf optional"),
        pytest.param(
            HS256, _set(["nbf"], int(NOW.timestamp()) + 120), False, id="nbf in the future"
        ),
        pytest.param(
            HS256, _set(["iat"], int(NOW.timestamp()) + 120), False, id="iat in the future"
        ),
        pytest.param(
            HS256, _set(["sub"], "system:serviceaccount:ns:other"), False, id="subject mismatch"
        ),
        pytest.param(HS256, _without("kubernetes.io"), False, id="no kubernetes.io claims"),
        pytest.param(HS256, _set(["kubernetes.io", "namespace"], ""), False, id="empty namespace"),
        pytest.param(
            HS256, _set(["kubernetes.io", "serviceaccount"], {"uid": "u"}), False, id="no name"
        ),
    ],
)
def test_signed_claims_are_validated(
    header: dict[str, Any], change: Callable[[dict[str, Any]], None], accepted: bool
) -> None:
    claims = valid_claims()
    change(claims)
    token = resign(header, claims)
    authn = make_authn()
    if accepted:
        expected = sa_user("ns", "sa")
        assert authn.authenticate(f"Bearer {token}") == UserInfo(
            expected.name, expected.groups, "u"
        )
    else:
        expect_401(lambda: authn.authenticate(f"Bearer {token}"))


def test_tokens_of_another_server_are_refused() -> None:
    token, _ = make_authn().mint_service_account_token("ns", "sa", "u", 3600, NOW, [])
    other = Authenticator(clock=Clock(NOW))  # its own random key
    expect_401(lambda: other.authenticate(f"Bearer {token}"))


def test_signing_keys_are_random_per_server() -> None:
    a, b = Authenticator(clock=Clock(NOW)), Authenticator(clock=Clock(NOW))
    token, _ = a.mint_service_account_token("ns", "sa", "u", 3600, NOW, [])
    assert a.authenticate(f"Bearer {token}") is not None
    expect_401(lambda: b.authenticate(f"Bearer {token}"))


def test_issuer_must_match() -> None:
    token, _ = make_authn(issuer="https://elsewhere").mint_service_account_token(
        "ns", "sa", "u", 3600, NOW, ["https://kubernetes.default.svc.cluster.local"]
    )
    expect_401(lambda: make_authn().authenticate(f"Bearer {token}"))


@pytest.mark.parametrize(
    ("token_audiences", "accepted"),
    [
        pytest.param([], True, id="defaulted"),
        pytest.param(["https://kubernetes.default.svc.cluster.local"], True, id="api"),
        pytest.param(["vault", "https://kubernetes.default.svc.cluster.local"], True, id="any"),
        pytest.param(["vault"], False, id="foreign"),
    ],
)
def test_token_audience(token_audiences: list[str], accepted: bool) -> None:
    authn = make_authn()
    token, _ = authn.mint_service_account_token("ns", "sa", "u", 3600, NOW, token_audiences)
    if accepted:
        assert authn.authenticate(f"Bearer {token}") is not None
    else:
        expect_401(lambda: authn.authenticate(f"Bearer {token}"))


@pytest.mark.parametrize(
    ("live_uid", "accepted"),
    [
        pytest.param("uid-1", True, id="same account"),
        pytest.param("uid-2", False, id="recreated account"),
        pytest.param(None, False, id="deleted account"),
    ],
)
def test_service_account_liveness(live_uid: str | None, accepted: bool) -> None:
    seen: list[tuple[str, str]] = []

    def lookup(ns: str, name: str) -> str | None:
        seen.append((ns, name))
        return live_uid

    authn = make_authn(service_account_uid=lookup)
    token, _ = authn.mint_service_account_token("ns", "sa", "uid-1", 3600, NOW, [])
    if accepted:
        assert authn.authenticate(f"Bearer {token}") is not None
    else:
        expect_401(lambda: authn.authenticate(f"Bearer {token}"))
    assert seen == [("ns", "sa")]


def test_naive_times_are_utc() -> None:
    authn = make_authn()
    naive = NOW.replace(tzinfo=None)
    token, expires = authn.mint_service_account_token("ns", "sa", "u", 600, naive, [])
    assert expires == NOW + timedelta(seconds=600)
    assert authn.authenticate(f"Bearer {token}") is not None


def test_minted_token_is_authorized_by_rbac() -> None:
    authn = make_authn()
    token, _ = authn.mint_service_account_token("ns", "sa", "u", 600, NOW, [])
    user = authn.user_for(f"Bearer {token}")
    policy = Policy(
        *bootstrap_policy(),
        POD_READER_ROLE,
        rb("b", "ns", "Role", "pod-reader", [subject("ServiceAccount", "sa")]),
    )
    authz = RBACAuthorizer(policy.lookup)
    assert authz.authorize(attrs(user, "get", path="/apis"))[0]
    assert authz.authorize(attrs(user, "list", "pods", ns="ns"))[0]
    denied = attrs(user, "delete", "pods", ns="ns", name="p1")
    ok, reason = authz.authorize(denied)
    assert not ok
    assert forbidden_error(denied, reason).message == (
        'pods "p1" is forbidden: User "system:serviceaccount:ns:sa" cannot delete resource '
        '"pods" in API group "" in the namespace "ns"'
    )
