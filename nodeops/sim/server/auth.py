"""Authentication and RBAC authorization with kube-apiserver's semantics, free of any HTTP.

The HTTP layer asks `Authenticator` who is calling and `RBACAuthorizer` whether they may, then
answers a refusal with `forbidden_error`. Everything observable by a client follows
kube-apiserver: who an unauthenticated caller is, when a bearer token is refused with 401 rather
than treated as anonymous, which rules grant what (down to `*/subresource` and `resourceNames`),
and the exact text of the 403 `Status`, which clients and humans match against.

Service account tokens are JWTs carrying the same claims as kube's projected tokens, signed and
verified by PyJWT. They are signed with HMAC-SHA256 rather than RS256 because nothing outside the
simulated server ever verifies them, so a per-server secret is all that is needed. The time
claims are checked here rather than by PyJWT, against the server's (simulated) clock and with
go-jose's boundaries, so a token expires at the instant kube-apiserver would refuse it.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import orjson

from nodeops.common.selectors import label_selector_from_object
from nodeops.sim.server.errors import ApiError, forbidden, unauthorized

__all__ = [
    "ADMIN_USER",
    "ANONYMOUS_USER",
    "DEFAULT_ISSUER",
    "GROUP_ALL_AUTHENTICATED",
    "GROUP_ALL_UNAUTHENTICATED",
    "GROUP_PRIVILEGED",
    "Authenticator",
    "RBACAuthorizer",
    "RequestAttributes",
    "UserInfo",
    "bootstrap_policy",
    "forbidden_error",
    "resolve_aggregated_rules",
    "service_account_groups",
    "service_account_username",
]

GROUP_PRIVILEGED = "system:masters"
GROUP_ALL_AUTHENTICATED = "system:authenticated"
GROUP_ALL_UNAUTHENTICATED = "system:unauthenticated"
GROUP_ALL_SERVICE_ACCOUNTS = "system:serviceaccounts"
SERVICE_ACCOUNT_USER_PREFIX = "system:serviceaccount:"
DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"

# go-jose, which kube uses to validate service account tokens, tolerates this much clock skew on
# exp/nbf/iat; matching it means a token is refused at the same instant a real server refuses it.
TOKEN_LEEWAY = timedelta(seconds=60)

RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class UserInfo:
    """Who a request runs as, after authentication."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""


ANONYMOUS_USER = UserInfo("system:anonymous", (GROUP_ALL_UNAUTHENTICATED,))
ADMIN_USER = UserInfo("kubernetes-admin", (GROUP_PRIVILEGED, GROUP_ALL_AUTHENTICATED))


@dataclass(frozen=True)
class RequestAttributes:
    """What a request wants to do, as kube's `authorizer.Attributes` describes it.

    For a non-resource request (`/version`, `/healthz`, `/api`) `is_resource_request` is false,
    `path` is the URL path and the resource fields stay empty; that emptiness is what makes the
    403 message read `forbidden: User ... cannot get path ...`.
    """

    user: UserInfo
    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    is_resource_request: bool = True
    path: str = ""


def service_account_username(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, ...]:
    """The groups kube gives every service account, including the one the group adder appends."""
    return (
        GROUP_ALL_SERVICE_ACCOUNTS,
        f"{GROUP_ALL_SERVICE_ACCOUNTS}:{namespace}",
        GROUP_ALL_AUTHENTICATED,
    )


# --------------------------------------------------------------------------------------------
# Authentication
# --------------------------------------------------------------------------------------------


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _as_aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_ALGORITHM = "HS256"
# What PyJWT checks: signature, algorithm, issuer, audience. The time claims are ours (see the
# module docstring).
_PYJWT_OPTIONS: jwt.types.Options = {
    "verify_signature": True,
    "verify_exp": False,
    "verify_nbf": False,
    "verify_iat": False,
    "verify_aud": True,
    "verify_iss": True,
    "require": ["iss", "aud", "sub"],
}


class _InvalidToken(Exception):
    """A bearer token that is not a valid credential; kube answers it with 401, not anonymity."""


class Authenticator:
    """Turns an `Authorization` header into a user, the way kube-apiserver's chain does.

    Static tokens are looked up first, then service account JWTs. A header that carries no
    bearer token at all is anonymous (when anonymous access is on), but a bearer token that
    nobody accepts is an error: kube deliberately refuses to downgrade a bad credential to
    anonymous, so a typo in a token shows up as 401 and not as a confusing 403.
    """

    def __init__(
        self,
        static_tokens: Mapping[str, UserInfo] | None = None,
        *,
        admin_token: str | None = None,
        issuer: str = DEFAULT_ISSUER,
        api_audiences: Sequence[str] | None = None,
        signing_key: bytes | None = None,
        anonymous: bool = True,
        clock: Callable[[], datetime] = _utcnow,
        service_account_uid: Callable[[str, str], str | None] | None = None,
    ) -> None:
        """`service_account_uid(namespace, name)` returns the live account's uid, or None when
        it does not exist; with it, tokens of deleted or recreated accounts stop working, as
        they do in kube. Without it, a correctly signed unexpired token is enough."""
        self._static: dict[str, UserInfo] = dict(static_tokens or {})
        if admin_token is not None:
            self._static[admin_token] = ADMIN_USER
        self.issuer = issuer
        self.api_audiences: tuple[str, ...] = tuple(api_audiences or (issuer,))
        self._key = signing_key if signing_key is not None else secrets.token_bytes(32)
        self._kid = _b64url(hashlib.sha256(self._key).digest())[:43]
        self.anonymous = anonymous
        self._clock = clock
        self._sa_uid = service_account_uid

    def add_static_token(self, token: str, user: UserInfo) -> None:
        self._static[token] = user

    def authenticate(self, authorization_header: str | None) -> UserInfo | None:
        """None means anonymous; the caller acts as `ANONYMOUS_USER`.

        Raises the 401 `ApiError` for a bearer token that is bad, expired or unknown, and for a
        request without credentials when anonymous access is off.
        """
        token = _bearer_token(authorization_header)
        if token is None:
            if self.anonymous:
                return None
            raise unauthorized()
        static = self._static.get(token)
        if static is not None:
            return _with_authenticated_group(static)
        try:
            return self._authenticate_service_account(token)
        except _InvalidToken:
            raise unauthorized() from None

    def user_for(self, authorization_header: str | None) -> UserInfo:
        """`authenticate` with anonymity spelled out as the anonymous user."""
        user = self.authenticate(authorization_header)
        return ANONYMOUS_USER if user is None else user

    def mint_service_account_token(
        self,
        namespace: str,
        name: str,
        uid: str,
        expiration_seconds: int,
        now: datetime,
        audiences: list[str],
    ) -> tuple[str, datetime]:
        """Issue a token like TokenRequest does; returns it with its expiry.

        Empty `audiences` means the API server's own audiences, as TokenRequest defaults them.
        Times are whole seconds because JWT NumericDates are, so the returned expiry is exactly
        the `exp` claim and a `status.expirationTimestamp` built from it round-trips.
        """
        issued = int(_as_aware(now).timestamp())
        expires = issued + int(expiration_seconds)
        claims: dict[str, Any] = {
            "aud": list(audiences) if audiences else list(self.api_audiences),
            "exp": expires,
            "iat": issued,
            "iss": self.issuer,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": name, "uid": uid},
            },
            "nbf": issued,
            "sub": service_account_username(namespace, name),
        }
        # kube's tokens carry no `typ` header; `kid` names the key, as kube's do.
        token = jwt.encode(
            claims, self._key, algorithm=_ALGORITHM, headers={"kid": self._kid, "typ": None}
        )
        return token, datetime.fromtimestamp(expires, UTC)

    def _authenticate_service_account(self, token: str) -> UserInfo:
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[_ALGORITHM],
                audience=list(self.api_audiences),
                issuer=self.issuer,
                options=_PYJWT_OPTIONS,
            )
        except jwt.PyJWTError as exc:
            raise _InvalidToken(str(exc)) from None
        self._check_times(claims)
        return self._service_account_user(claims)

    def _check_times(self, claims: Mapping[str, Any]) -> None:
        now = _as_aware(self._clock()).timestamp()
        leeway = TOKEN_LEEWAY.total_seconds()
        exp, nbf, iat = (_numeric_date(claims.get(k)) for k in ("exp", "nbf", "iat"))
        if exp is None:
            raise _InvalidToken("no expiry")
        if now - leeway > exp:
            raise _InvalidToken("expired")
        if nbf is not None and now + leeway < nbf:
            raise _InvalidToken("not valid yet")
        if iat is not None and now + leeway < iat:
            raise _InvalidToken("issued in the future")

    def _service_account_user(self, claims: Mapping[str, Any]) -> UserInfo:
        block = claims.get("kubernetes.io")
        if not isinstance(block, dict):
            raise _InvalidToken("claims")
        namespace = block.get("namespace")
        account = block.get("serviceaccount")
        if not isinstance(namespace, str) or not namespace or not isinstance(account, dict):
            raise _InvalidToken("claims")
        name, uid = account.get("name"), account.get("uid", "")
        if not isinstance(name, str) or not name or not isinstance(uid, str):
            raise _InvalidToken("claims")
        username = service_account_username(namespace, name)
        if claims.get("sub") != username:
            raise _InvalidToken("subject")
        if self._sa_uid is not None and self._sa_uid(namespace, name) != uid:
            raise _InvalidToken("service account gone")
        return UserInfo(username, service_account_groups(namespace), uid)


def _numeric_date(value: Any) -> float | None:
    """A JWT NumericDate: seconds since the epoch, integral or not."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _InvalidToken("time claim")
    return float(value)


def _bearer_token(header: str | None) -> str | None:
    """The token of a `Bearer` header, split exactly as kube's bearertoken authenticator does."""
    if header is None:
        return None
    auth = header.strip()
    if not auth:
        return None
    parts = auth.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def _with_authenticated_group(user: UserInfo) -> UserInfo:
    """kube appends system:authenticated to every authenticated user, unless the user already
    says whether it is authenticated; RBAC bindings to that group rely on it being there."""
    if GROUP_ALL_AUTHENTICATED in user.groups or GROUP_ALL_UNAUTHENTICATED in user.groups:
        return user
    return UserInfo(user.name, (*user.groups, GROUP_ALL_AUTHENTICATED), user.uid)


# --------------------------------------------------------------------------------------------
# Authorization
# --------------------------------------------------------------------------------------------

RbacLookup = Callable[[str, str | None], list[dict[str, Any]]]


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


class _Rule:
    """A PolicyRule in a shape that is cheap to test; matching is kube's `RuleAllows`."""

    __slots__ = (
        "any_group",
        "any_resource",
        "any_url",
        "any_verb",
        "groups",
        "names",
        "resources",
        "url_prefixes",
        "urls",
        "verbs",
    )

    def __init__(self, rule: Mapping[str, Any]) -> None:
        verbs = _strings(rule.get("verbs"))
        groups = _strings(rule.get("apiGroups"))
        resources = _strings(rule.get("resources"))
        urls = _strings(rule.get("nonResourceURLs"))
        self.any_verb = "*" in verbs
        self.verbs = frozenset(verbs)
        self.any_group = "*" in groups
        self.groups = frozenset(groups)
        self.any_resource = "*" in resources
        self.resources = frozenset(resources)
        self.names = frozenset(_strings(rule.get("resourceNames")))
        self.any_url = "*" in urls
        self.urls = frozenset(urls)
        # kube trims every trailing "*" of a wildcard URL, so "/apis/**" is the prefix "/apis/".
        self.url_prefixes = tuple(u.rstrip("*") for u in urls if u.endswith("*"))

    def allows(self, attrs: RequestAttributes) -> bool:
        if not (self.any_verb or attrs.verb in self.verbs):
            return False
        if not attrs.is_resource_request:
            return (
                self.any_url
                or attrs.path in self.urls
                or any(attrs.path.startswith(p) for p in self.url_prefixes)
            )
        if not (self.any_group or attrs.api_group in self.groups):
            return False
        if not self._resource_matches(attrs.resource, attrs.subresource):
            return False
        # A rule naming objects never matches a request without a name: that is what keeps
        # list, watch, create and deletecollection out of reach of a resourceNames rule.
        return not self.names or attrs.name in self.names

    def _resource_matches(self, resource: str, subresource: str) -> bool:
        if self.any_resource:
            return True
        if not subresource:
            return resource in self.resources
        return f"{resource}/{subresource}" in self.resources or f"*/{subresource}" in self.resources


def _rule_key(rule: Mapping[str, Any]) -> bytes:
    return orjson.dumps(rule, option=orjson.OPT_SORT_KEYS)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    name = _meta(obj).get("name")
    return name if isinstance(name, str) else ""


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = _meta(obj).get("labels")
    return dict(labels) if isinstance(labels, Mapping) else {}


def _rules(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    rules = obj.get("rules")
    return [r for r in rules if isinstance(r, dict)] if isinstance(rules, list) else []


def _aggregation_selectors(obj: Mapping[str, Any]) -> list[Any] | None:
    agg = obj.get("aggregationRule")
    if not isinstance(agg, Mapping):
        return None
    selectors = agg.get("clusterRoleSelectors")
    return list(selectors) if isinstance(selectors, list) else []


def resolve_aggregated_rules(
    cluster_roles: Iterable[Mapping[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """The rules each aggregating ClusterRole ends up with once kube's aggregation controller
    has settled, keyed by role name.

    The controller replaces an aggregating role's rules with the union of the rules of every
    other role its selectors match, and repeats as those roles change; the fixed point is the
    union over everything reachable through aggregation, which is computed here directly so no
    controller has to run before a binding to `admin`, `edit` or `view` takes effect. Roles
    whose selectors do not parse keep their stored rules, as the controller leaves them alone.
    """
    roles = [r for r in cluster_roles if _name(r)]
    by_name = {_name(r): r for r in roles}
    ordered = sorted(by_name)
    edges: dict[str, list[str]] = {}
    for role in roles:
        selectors = _aggregation_selectors(role)
        if selectors is None:
            continue
        # A null entry decodes in Go to an empty LabelSelector, which selects every role.
        selectors = [{} if s is None else s for s in selectors]
        if not all(isinstance(s, Mapping) for s in selectors):
            continue
        try:
            compiled = [label_selector_from_object(s) for s in selectors]
        except ValueError:
            continue
        name = _name(role)
        targets: list[str] = []
        for selector in compiled:
            targets.extend(
                other
                for other in ordered
                if other != name and selector.matches(_labels(by_name[other]))
            )
        edges[name] = targets

    resolved: dict[str, list[dict[str, Any]]] = {}
    for name in edges:
        rules: list[dict[str, Any]] = []
        seen_rules: set[bytes] = set()
        visited = {name}
        stack = list(reversed(edges[name]))
        while stack:
            current = stack.pop()
            if current in visited:
                continue
            visited.add(current)
            if current in edges:
                stack.extend(reversed(edges[current]))
                continue
            for rule in _rules(by_name[current]):
                key = _rule_key(rule)
                if key not in seen_rules:
                    seen_rules.add(key)
                    rules.append(rule)
        resolved[name] = rules
    return resolved


@dataclass(frozen=True)
class _Grant:
    """One binding as the resolver sees it: who it names and which role it points at."""

    kind: str  # ClusterRoleBinding or RoleBinding
    name: str
    namespace: str
    role_kind: str
    role_name: str
    subjects: tuple[tuple[str, str], ...]  # (kind, display) per subject, for the allow reason

    def describe(self, subject_index: int) -> str:
        kind, display = self.subjects[subject_index]
        binding = (
            self.name if self.kind == "ClusterRoleBinding" else f"{self.name}/{self.namespace}"
        )
        return (
            f"{self.kind} {_go_quote(binding)} of {self.role_kind} {_go_quote(self.role_name)} "
            f"to {kind} {_go_quote(display)}"
        )


class _BindingIndex:
    """Bindings in list order, indexed by the user names and groups their subjects match.

    Service account subjects are indexed under the username they authenticate as, so a request
    is resolved with a handful of dictionary lookups instead of a scan over every subject.
    """

    def __init__(self, bindings: list[dict[str, Any]], kind: str, namespace: str) -> None:
        self.grants: list[_Grant] = []
        self.by_user: dict[str, dict[int, int]] = {}
        self.by_group: dict[str, dict[int, int]] = {}
        for binding in bindings:
            ref = binding.get("roleRef")
            ref = ref if isinstance(ref, Mapping) else {}
            subjects = binding.get("subjects")
            subjects = subjects if isinstance(subjects, list) else []
            index = len(self.grants)
            shown: list[tuple[str, str]] = []
            for position, subject in enumerate(subjects):
                subject = subject if isinstance(subject, Mapping) else {}
                skind = str(subject.get("kind") or "")
                sname = str(subject.get("name") or "")
                sns = str(subject.get("namespace") or "")
                if skind == "ServiceAccount":
                    shown.append((skind, f"{sname}/{sns or namespace}"))
                    account_ns = sns or namespace
                    if account_ns:
                        key = service_account_username(account_ns, sname)
                        self.by_user.setdefault(key, {}).setdefault(index, position)
                else:
                    shown.append((skind, sname))
                    if skind == "User":
                        self.by_user.setdefault(sname, {}).setdefault(index, position)
                    elif skind == "Group":
                        self.by_group.setdefault(sname, {}).setdefault(index, position)
            self.grants.append(
                _Grant(
                    kind=kind,
                    name=_name(binding),
                    namespace=namespace,
                    role_kind=str(ref.get("kind") or ""),
                    role_name=str(ref.get("name") or ""),
                    subjects=tuple(shown),
                )
            )

    def matching(self, user: UserInfo) -> list[tuple[_Grant, int]]:
        """The bindings naming `user`, each with its first matching subject, in list order."""
        hits: dict[int, int] = {}
        for table, keys in ((self.by_user, (user.name,)), (self.by_group, user.groups)):
            for key in keys:
                for index, position in table.get(key, {}).items():
                    if index not in hits or position < hits[index]:
                        hits[index] = position
        return [(self.grants[i], hits[i]) for i in sorted(hits)]


def _fingerprint(objects: list[dict[str, Any]]) -> tuple[Any, ...]:
    """Identifies a set of RBAC objects cheaply: names and resourceVersions, which the store
    changes on every write. Objects without a resourceVersion (never stored) are identified by
    their content instead. This runs on every request, hence the plain indexing."""
    try:
        versions = tuple(
            [(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in objects]
        )
    except (KeyError, TypeError):
        versions = None
    if versions is not None and all(rv for _, rv in versions):
        return versions
    return tuple(_rule_key(o) for o in objects)


class _ClusterState:
    def __init__(self, roles: list[dict[str, Any]], bindings: list[dict[str, Any]]) -> None:
        aggregated = resolve_aggregated_rules(roles)
        self.roles: dict[str, tuple[_Rule, ...]] = {}
        for role in roles:
            name = _name(role)
            rules = aggregated.get(name)
            if rules is None:
                rules = _rules(role)
            self.roles[name] = tuple(_Rule(r) for r in rules)
        self.bindings = _BindingIndex(bindings, "ClusterRoleBinding", "")


class _NamespaceState:
    def __init__(
        self, namespace: str, roles: list[dict[str, Any]], bindings: list[dict[str, Any]]
    ) -> None:
        self.roles = {_name(r): tuple(_Rule(x) for x in _rules(r)) for r in roles}
        self.bindings = _BindingIndex(bindings, "RoleBinding", namespace)


class RBACAuthorizer:
    """kube's RBAC authorizer, preceded by the system:masters short cut kube-apiserver installs.

    Roles and bindings come from `lookup(kind, namespace)`; compiled forms are cached and
    rebuilt only when the names or resourceVersions returned change, so an unchanged policy
    costs one lookup per kind and a few dictionary probes per request.
    """

    def __init__(self, lookup: RbacLookup) -> None:
        self._lookup = lookup
        self._cluster: tuple[tuple[Any, ...], _ClusterState] | None = None
        self._namespaces: dict[str, tuple[tuple[Any, ...], _NamespaceState]] = {}

    def authorize(self, attrs: RequestAttributes) -> tuple[bool, str]:
        """(allowed, reason). A denial's reason is empty unless some binding of the user points
        at a role that cannot be resolved; kube then reports that, and it ends up in the 403."""
        if GROUP_PRIVILEGED in attrs.user.groups:
            return True, ""
        cluster = self._cluster_state()
        errors: list[str] = []
        for grant, position in cluster.bindings.matching(attrs.user):
            rules = self._role_rules(grant, cluster, None, errors)
            if any(rule.allows(attrs) for rule in rules):
                return True, f"RBAC: allowed by {grant.describe(position)}"
        if attrs.namespace:
            local = self._namespace_state(attrs.namespace)
            for grant, position in local.bindings.matching(attrs.user):
                rules = self._role_rules(grant, cluster, local, errors)
                if any(rule.allows(attrs) for rule in rules):
                    return True, f"RBAC: allowed by {grant.describe(position)}"
        return False, f"RBAC: {_aggregate_errors(errors)}" if errors else ""

    def _role_rules(
        self,
        grant: _Grant,
        cluster: _ClusterState,
        local: _NamespaceState | None,
        errors: list[str],
    ) -> tuple[_Rule, ...]:
        if grant.role_kind == "ClusterRole":
            rules = cluster.roles.get(grant.role_name)
            if rules is None:
                errors.append(f"clusterrole.{RBAC_GROUP} {_go_quote(grant.role_name)} not found")
                return ()
            return rules
        if grant.role_kind == "Role":
            found = local.roles.get(grant.role_name) if local is not None else None
            if found is None:
                errors.append(f"role.{RBAC_GROUP} {_go_quote(grant.role_name)} not found")
                return ()
            return found
        errors.append(f"unsupported role reference kind: {_go_quote(grant.role_kind)}")
        return ()

    def _cluster_state(self) -> _ClusterState:
        roles = self._lookup("ClusterRole", None)
        bindings = self._lookup("ClusterRoleBinding", None)
        key = (_fingerprint(roles), _fingerprint(bindings))
        if self._cluster is None or self._cluster[0] != key:
            self._cluster = (key, _ClusterState(roles, bindings))
        return self._cluster[1]

    def _namespace_state(self, namespace: str) -> _NamespaceState:
        roles = self._lookup("Role", namespace)
        bindings = self._lookup("RoleBinding", namespace)
        key = (_fingerprint(roles), _fingerprint(bindings))
        cached = self._namespaces.get(namespace)
        if cached is None or cached[0] != key:
            cached = (key, _NamespaceState(namespace, roles, bindings))
            self._namespaces[namespace] = cached
        return cached[1]


def _aggregate_errors(messages: list[str]) -> str:
    """Formats several errors the way apimachinery's `utilerrors.Aggregate` does."""
    if len(messages) == 1:
        return messages[0]
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"


# --------------------------------------------------------------------------------------------
# The 403
# --------------------------------------------------------------------------------------------

_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def _go_quote(text: str) -> str:
    """Go's `%q`, which kube uses for every name in its messages; names with quotes or control
    characters would otherwise produce a message that differs from the real one."""
    out = ['"']
    for ch in text:
        escaped = _GO_ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            if code < 0x20 or code == 0x7F:
                out.append(f"\\x{code:02x}")
            elif 0xD800 <= code <= 0xDFFF:
                out.append("\\ufffd")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _sanitize(text: str) -> str:
    """kube escapes these so an error body can never be mistaken for HTML."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _forbidden_message(attrs: RequestAttributes) -> str:
    user = _go_quote(attrs.user.name)
    if not attrs.is_resource_request:
        return f"User {user} cannot {attrs.verb} path {_go_quote(attrs.path)}"
    resource = attrs.resource
    if attrs.subresource:
        resource = f"{resource}/{attrs.subresource}"
    what = f"User {user} cannot {attrs.verb} resource {_go_quote(resource)} in API group"
    if attrs.namespace:
        return f"{what} {_go_quote(attrs.api_group)} in the namespace {_go_quote(attrs.namespace)}"
    return f"{what} {_go_quote(attrs.api_group)} at the cluster scope"


def forbidden_error(attrs: RequestAttributes, reason: str = "") -> ApiError:
    """The 403 kube-apiserver answers an unauthorized request with, message and details alike.

    `reason` is what the authorizer said (kube appends it after a colon, so RBAC's resolution
    errors reach the client as `...: RBAC: clusterrole... not found`).
    """
    message = _sanitize(_forbidden_message(attrs))
    if reason:
        message = f"{message}: {reason}"
    group, resource, name = attrs.api_group, attrs.resource, attrs.name
    qualified = f"{resource}.{group}" if group else resource
    if not group and not resource:
        text = f"forbidden: {message}"
    elif not name:
        text = f"{qualified} is forbidden: {message}"
    else:
        text = f"{qualified} {_go_quote(name)} is forbidden: {message}"
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if resource:
        details["kind"] = resource
    return forbidden(text, details)


# --------------------------------------------------------------------------------------------
# Bootstrap policy
# --------------------------------------------------------------------------------------------

_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_READ_WRITE = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _rule(
    verbs: list[str],
    groups: list[str] | None = None,
    resources: list[str] | None = None,
    urls: list[str] | None = None,
) -> dict[str, Any]:
    rule: dict[str, Any] = {}
    if groups is not None:
        rule["apiGroups"] = groups
    if resources is not None:
        rule["resources"] = resources
    if urls is not None:
        rule["nonResourceURLs"] = urls
    rule["verbs"] = verbs
    return rule


def _bootstrap_meta(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults", **(labels or {})},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    }


def _cluster_role(
    name: str,
    rules: list[dict[str, Any]] | None = None,
    *,
    labels: dict[str, str] | None = None,
    aggregate_from: str | None = None,
) -> dict[str, Any]:
    role: dict[str, Any] = {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": _bootstrap_meta(name, labels),
    }
    if aggregate_from is not None:
        role["aggregationRule"] = {
            "clusterRoleSelectors": [{"matchLabels": {aggregate_from: "true"}}]
        }
    role["rules"] = rules or []
    return role


def _cluster_binding(name: str, groups: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _bootstrap_meta(name),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups],
    }


_TO_ADMIN = "rbac.authorization.k8s.io/aggregate-to-admin"
_TO_EDIT = "rbac.authorization.k8s.io/aggregate-to-edit"
_TO_VIEW = "rbac.authorization.k8s.io/aggregate-to-view"


def bootstrap_policy() -> list[dict[str, Any]]:
    """The default ClusterRoles and ClusterRoleBindings a server with RBAC on starts with.

    Without these, turning RBAC on would lock every non-admin client out of discovery and
    health checks, which no real cluster does. The set follows kube's bootstrap policy for the
    roles that matter to clients (bindings included, down to which groups they name);
    `admin`/`edit`/`view` are aggregated from their `system:aggregate-to-*` parts exactly as
    in kube, with those parts trimmed to the common resources.
    """
    roles = [
        _cluster_role(
            "cluster-admin",
            [_rule(["*"], ["*"], ["*"]), _rule(["*"], urls=["*"])],
        ),
        _cluster_role(
            "system:discovery",
            [
                _rule(
                    ["get"],
                    urls=[
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                )
            ],
        ),
        _cluster_role(
            "system:basic-user",
            [
                _rule(
                    ["create"],
                    ["authorization.k8s.io"],
                    ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                _rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"]),
            ],
        ),
        _cluster_role(
            "system:public-info-viewer",
            [_rule(["get"], urls=["/healthz", "/livez", "/readyz", "/version", "/version/"])],
        ),
        _cluster_role(
            "system:service-account-issuer-discovery",
            [
                _rule(
                    ["get"],
                    urls=[
                        "/.well-known/openid-configuration",
                        "/.well-known/openid-configuration/",
                        "/openid/v1/jwks",
                        "/openid/v1/jwks/",
                    ],
                )
            ],
        ),
        _cluster_role(
            "system:auth-delegator",
            [
                _rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
                _rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
            ],
        ),
        _cluster_role("admin", aggregate_from=_TO_ADMIN),
        _cluster_role("edit", labels={_TO_ADMIN: "true"}, aggregate_from=_TO_EDIT),
        _cluster_role("view", labels={_TO_EDIT: "true"}, aggregate_from=_TO_VIEW),
        _cluster_role(
            "system:aggregate-to-admin",
            [
                _rule(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
                _rule(_READ_WRITE, [RBAC_GROUP], ["rolebindings", "roles"]),
            ],
            labels={_TO_ADMIN: "true"},
        ),
        _cluster_role(
            "system:aggregate-to-edit",
            [
                _rule(
                    _READ,
                    [""],
                    [
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "secrets",
                        "services/proxy",
                    ],
                ),
                _rule(["impersonate"], [""], ["serviceaccounts"]),
                _rule(
                    _WRITE,
                    [""],
                    ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"],
                ),
                _rule(["create"], [""], ["pods/eviction"]),
                _rule(
                    _WRITE,
                    [""],
                    [
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                ),
                _rule(["create"], [""], ["serviceaccounts/token"]),
                _rule(
                    _WRITE,
                    ["apps"],
                    [
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                ),
                _rule(_WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
                _rule(_WRITE, ["batch"], ["cronjobs", "jobs"]),
                _rule(_WRITE, ["policy"], ["poddisruptionbudgets"]),
                _rule(_WRITE, ["networking.k8s.io"], ["ingresses", "networkpolicies"]),
                _rule(_READ_WRITE, ["coordination.k8s.io"], ["leases"]),
            ],
            labels={_TO_EDIT: "true"},
        ),
        _cluster_role(
            "system:aggregate-to-view",
            [
                _rule(
                    _READ,
                    [""],
                    [
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                ),
                _rule(
                    _READ,
                    [""],
                    [
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                ),
                _rule(_READ, [""], ["namespaces"]),
                _rule(_READ, ["discovery.k8s.io"], ["endpointslices"]),
                _rule(
                    _READ,
                    ["apps"],
                    [
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                ),
                _rule(
                    _READ,
                    ["autoscaling"],
                    ["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
                ),
                _rule(_READ, ["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
                _rule(_READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
                _rule(
                    _READ,
                    ["networking.k8s.io"],
                    ["ingresses", "ingresses/status", "networkpolicies"],
                ),
            ],
            labels={_TO_VIEW: "true"},
        ),
    ]
    bindings = [
        _cluster_binding("cluster-admin", [GROUP_PRIVILEGED]),
        _cluster_binding("system:discovery", [GROUP_ALL_AUTHENTICATED]),
        _cluster_binding("system:basic-user", [GROUP_ALL_AUTHENTICATED]),
        _cluster_binding(
            "system:public-info-viewer", [GROUP_ALL_AUTHENTICATED, GROUP_ALL_UNAUTHENTICATED]
        ),
        _cluster_binding("system:service-account-issuer-discovery", [GROUP_ALL_SERVICE_ACCOUNTS]),
    ]
    return roles + bindings
