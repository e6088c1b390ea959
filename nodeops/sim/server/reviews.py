"""Self reviews: what `kubectl auth can-i` and `kubectl auth whoami` ask the API server.

They are created, never stored: the answer comes back in the created object's status.
SelfSubjectAccessReview runs the request's own user through the authorizer (everything is
allowed when the server runs without RBAC, as with kube's AlwaysAllow); SelfSubjectReview
returns the authenticated user.
"""

from __future__ import annotations

from typing import Any

from nodeops.sim.server import errors
from nodeops.sim.server.auth import RBACAuthorizer, RequestAttributes, UserInfo

ACCESS = ("authorization.k8s.io", "selfsubjectaccessreviews")
WHOAMI = ("authentication.k8s.io", "selfsubjectreviews")
KINDS = frozenset({ACCESS, WHOAMI})


def _echo(body: Any, kind: str, api_version: str) -> dict[str, Any]:
    obj = dict(body) if isinstance(body, dict) else {}
    obj["kind"], obj["apiVersion"] = kind, api_version
    obj["metadata"] = {"creationTimestamp": None}
    return obj


def access_review(authz: RBACAuthorizer | None, user: UserInfo, body: Any) -> dict[str, Any]:
    obj = _echo(body, "SelfSubjectAccessReview", "authorization.k8s.io/v1")
    spec = obj.get("spec") or {}
    resource: dict[str, Any] = spec.get("resourceAttributes") or {}
    non_resource: dict[str, Any] = spec.get("nonResourceAttributes") or {}
    if bool(resource) == bool(non_resource):
        raise errors.invalid(
            "SelfSubjectAccessReview",
            "authorization.k8s.io",
            "",
            [
                (
                    "FieldValueInvalid",
                    "spec.resourceAttributes",
                    'Invalid value: "null": exactly one of nonResourceAttributes or '
                    "resourceAttributes must be specified",
                )
            ],
        )
    if resource:
        attrs = RequestAttributes(
            user=user,
            verb=str(resource.get("verb") or ""),
            api_group=str(resource.get("group") or ""),
            resource=str(resource.get("resource") or ""),
            subresource=str(resource.get("subresource") or ""),
            namespace=str(resource.get("namespace") or ""),
            name=str(resource.get("name") or ""),
        )
    else:
        attrs = RequestAttributes(
            user=user,
            verb=str(non_resource.get("verb") or ""),
            is_resource_request=False,
            path=str(non_resource.get("path") or ""),
        )
    allowed, reason = (True, "") if authz is None else authz.authorize(attrs)
    status: dict[str, Any] = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    obj["status"] = status
    return obj


def whoami(user: UserInfo, body: Any) -> dict[str, Any]:
    obj = _echo(body, "SelfSubjectReview", "authentication.k8s.io/v1")
    info: dict[str, Any] = {"username": user.name, "groups": list(user.groups)}
    if user.uid:
        info["uid"] = user.uid
    obj["status"] = {"userInfo": info}
    return obj
