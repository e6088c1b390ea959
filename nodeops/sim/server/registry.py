"""The semantics of the API verbs, independent of HTTP.

This is the simulator's equivalent of kube-apiserver's generic registry plus the per-kind
strategies: create with generateName and defaults, optimistic concurrency on update, status
subresources, metadata.generation, graceful deletion of pods, finalizers, delete preconditions
and propagation policies, namespaces that terminate, and custom resources that appear when their
CRD is created. Everything here is synchronous so each verb is one atomic step on the store.
"""

from __future__ import annotations

import base64
import bisect
import random
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson

from nodeops.common.jsonbytes import json_copy
from nodeops.common.selectors import FieldSelector, LabelSelector
from nodeops.sim.clock import Clock, parse_time
from nodeops.sim.server import cel, errors, serviceips, validation
from nodeops.sim.server.conversion import from_storage, needs_conversion, to_storage
from nodeops.sim.server.crdvalidation import apply_crd_defaults, validate_crd
from nodeops.sim.server.defaults import (
    POD_MUTABLE_SPEC,
    STATUS_RESET_ON_CREATE,
    apply_create_defaults,
    merge_string_data,
)
from nodeops.sim.server.patch import (
    apply_json_patch,
    apply_merge_patch,
    patch_decode_error,
    patch_type_for_content_type,
)
from nodeops.sim.server.patch import apply_strategic_merge_patch as apply_smp
from nodeops.sim.server.priority import (
    admit_pod_priority,
    check_one_default,
    system_priority_classes,
)
from nodeops.sim.server.resources import BUILTIN, ResourceType, crd_resource_types
from nodeops.sim.server.schema import apply_defaults, prune, validate
from nodeops.sim.server.store import Entry, Filter, Store

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kinds whose names must be DNS labels rather than subdomains.
_LABEL_NAMED = frozenset({"Namespace", "Service"})
_SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_PRIORITY_CLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")
# Kinds whose DELETE answers with the deleted object rather than a Status (ReturnDeletedObject).
_RETURN_DELETED = frozenset({("", "Pod")})
PATCH_STRATEGIC = "application/strategic-merge-patch+json"
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


@dataclass(slots=True)
class ListResult:
    rv: int
    entries: list[Entry]
    continue_token: str
    remaining: int | None


def _copied(obj: Any) -> Any:
    """What every write pays: a copy of the decoded object it changes (`json_copy`)."""
    return json_copy(obj)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


def _without(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


class Registry:
    def __init__(self, store: Store, clock: Clock, rng: random.Random | None = None) -> None:
        self.store = store
        self.clock = clock
        self.rng = rng or random.Random()
        self.types: dict[tuple[str, str, str], ResourceType] = {}
        self.storage_types: dict[tuple[str, str], ResourceType] = {}
        for rt in BUILTIN:
            self.register(rt)
        for ns in _SYSTEM_NAMESPACES:
            self.create(self.lookup("", "v1", "namespaces"), "", {"metadata": {"name": ns}})
        for pc in system_priority_classes():
            self.create(self.lookup(*_PRIORITY_CLASSES), "", pc)

    def _priority_classes(self) -> list[dict[str, Any]]:
        rt = self.lookup(*_PRIORITY_CLASSES)
        return [self.decode(rt, e) for e in self.store.bucket(rt.storage_key).entries(None)]

    def _priority_class(self, name: str) -> dict[str, Any] | None:
        rt = self.lookup(*_PRIORITY_CLASSES)
        entry = self.store.bucket(rt.storage_key).get("", name)
        return None if entry is None else self.decode(rt, entry)

    # ---------------------------------------------------------------- catalogue

    def register(self, rt: ResourceType) -> None:
        self.types[(rt.group, rt.version, rt.plural)] = rt
        self.storage_types.setdefault(rt.storage_key, rt)

    def unregister_group_resource(self, group: str, plural: str) -> None:
        for key in [k for k in self.types if k[0] == group and k[2] == plural]:
            del self.types[key]
        self.storage_types.pop((group, plural), None)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.types.get((group, version, plural))
        if rt is None:
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        return rt

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.types.get((group, version, plural))

    def storage_type(self, rt: ResourceType) -> ResourceType:
        return self.storage_types[rt.storage_key]

    # ---------------------------------------------------------------- reads

    def _entry(self, rt: ResourceType, ns: str, name: str) -> Entry:
        entry = self.store.bucket(rt.storage_key).get(ns if rt.namespaced else "", name)
        if entry is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return entry

    def decode(self, rt: ResourceType, entry: Entry) -> dict[str, Any]:
        obj = entry.decode()
        storage = self.storage_type(rt)
        return from_storage(rt, storage, obj) if needs_conversion(rt, storage) else obj

    def encoder(self, rt: ResourceType) -> Any:
        """A bytes->bytes converter for lists and watches of a non-storage version, or None."""
        storage = self.storage_type(rt)
        if not needs_conversion(rt, storage):
            return None

        def convert(raw: bytes) -> bytes:
            return orjson.dumps(from_storage(rt, storage, orjson.loads(raw)))

        return convert

    def get(self, rt: ResourceType, ns: str, name: str) -> dict[str, Any]:
        return self.decode(rt, self._entry(rt, ns, name))

    def make_filter(
        self,
        rt: ResourceType,
        ns: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
    ) -> Filter:
        if fields is not None:
            supported = rt.supported_fields()
            for fname, _op, _value in fields.requirements:
                if fname not in supported:
                    raise errors.bad_request(f"field label not supported: {fname}")
        return Filter(ns if rt.namespaced else None, labels, fields)

    def list_entries(
        self,
        rt: ResourceType,
        flt: Filter,
        limit: int = 0,
        continue_token: str = "",
    ) -> ListResult:
        bucket = self.store.bucket(rt.storage_key)
        rv = self.store.rv
        if not limit and not continue_token:
            entries = [e for e in bucket.entries(flt.namespace) if flt.matches(e)]
            entries.sort(key=lambda e: (e.namespace, e.name))
            return ListResult(rv, entries, "", None)
        start: tuple[str, str] | None = None
        if continue_token:
            start, rv = self._decode_continue(continue_token)
        keys = bucket.sorted_keys()
        i = 0 if start is None else bisect.bisect_right(keys, start)
        if flt.namespace is not None:
            # Keys sort by namespace first: jump straight to this namespace's run.
            i = max(i, bisect.bisect_left(keys, (flt.namespace, "")))
        out: list[Entry] = []
        unfiltered = flt.labels is None and flt.fields is None
        n = len(keys)
        while i < n:
            key = keys[i]
            i += 1
            if flt.namespace is not None and key[0] != flt.namespace:
                break
            entry = bucket.get(*key)
            if entry is None or not flt.matches(entry):
                continue
            out.append(entry)
            if limit and len(out) >= limit:
                more = i < n and (flt.namespace is None or keys[i][0] == flt.namespace)
                if not more:
                    break
                token = self._encode_continue(key, rv)
                remaining: int | None = None
                if unfiltered:
                    # kube reports remainingItemCount only for unfiltered lists.
                    end = n
                    if flt.namespace is not None:
                        end = bisect.bisect_left(keys, (flt.namespace + "\0", ""))
                    remaining = end - i
                return ListResult(rv, out, token, remaining)
        return ListResult(rv, out, "", None)

    @staticmethod
    def _encode_continue(key: tuple[str, str], rv: int) -> str:
        raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{key[0]}/{key[1]}"})
        return base64.urlsafe_b64encode(raw).decode()

    @staticmethod
    def _decode_continue(token: str) -> tuple[tuple[str, str], int]:
        try:
            data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
            ns, _, name = str(data["start"]).partition("/")
            return (ns, name), int(data["rv"])
        except Exception as exc:
            raise errors.bad_request(f"continue key is not valid: {exc}") from None

    # ---------------------------------------------------------------- helpers

    def _fields(self, rt: ResourceType) -> Any:
        return self.storage_type(rt).field_set

    def _write(self, rt: ResourceType, obj: dict[str, Any]) -> Entry:
        storage = self.storage_type(rt)
        stored = to_storage(rt, storage, obj)
        entry = self.store.write(rt.storage_key, stored, storage.field_set)
        obj["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        return entry

    def _remove(self, rt: ResourceType, obj: dict[str, Any]) -> Entry:
        storage = self.storage_type(rt)
        stored = to_storage(rt, storage, obj)
        entry = self.store.delete(rt.storage_key, stored, storage.field_set)
        obj["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        if rt.namespaced:
            self._maybe_finish_namespace(entry.namespace)
        return entry

    def _generate_name(self, prefix: str) -> str:
        return prefix + "".join(self.rng.choice(_NAME_CHARS) for _ in range(5))

    def _check_name(self, rt: ResourceType, name: str) -> None:
        pattern = _DNS_LABEL if rt.kind in _LABEL_NAMED else _DNS_SUBDOMAIN
        limit = 63 if rt.kind in _LABEL_NAMED else 253
        if rt.kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding") or rt.custom:
            # RBAC names are path segments; custom resources allow any subdomain.
            if "/" in name or name in (".", ".."):
                raise errors.invalid(
                    rt.kind,
                    rt.group,
                    name,
                    [
                        (
                            "FieldValueInvalid",
                            "metadata.name",
                            f"Invalid value: \"{name}\": may not contain '/'",
                        )
                    ],
                )
            return
        if len(name) > limit or not pattern.match(name):
            what = "RFC 1123 label" if rt.kind in _LABEL_NAMED else "RFC 1123 subdomain"
            raise errors.invalid(
                rt.kind,
                rt.group,
                name,
                [
                    (
                        "FieldValueInvalid",
                        "metadata.name",
                        f'Invalid value: "{name}": a lowercase {what} must consist of lower '
                        "case alphanumeric characters, '-' or '.', and must start and end "
                        "with an alphanumeric character",
                    )
                ],
            )

    def _check_namespace(self, rt: ResourceType, ns: str, obj: dict[str, Any]) -> None:
        if not rt.namespaced:
            return
        meta = _meta(obj)
        body_ns = meta.get("namespace")
        if body_ns and body_ns != ns:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        meta["namespace"] = ns
        nsobj = self.store.bucket(("", "namespaces")).get("", ns)
        if nsobj is None:
            raise errors.not_found("", "namespaces", ns)
        if nsobj.fields.get("status.phase") == "Terminating":
            raise errors.forbidden(
                f'{rt.plural} "{meta.get("name") or meta.get("generateName", "")}" is '
                f"forbidden: unable to create new content in namespace {ns} because it is "
                "being terminated",
                {
                    "name": meta.get("name", ""),
                    "kind": rt.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {ns} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def _check_type_meta(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if api_version and api_version != rt.group_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({rt.group_version})"
            )
        if kind and kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"] = rt.group_version
        obj["kind"] = rt.kind

    def _custom_schema(
        self, rt: ResourceType, obj: dict[str, Any], name: str, old: dict[str, Any] | None = None
    ) -> None:
        if rt.crd_version is None:
            return
        schema = (rt.crd_version.get("schema") or {}).get("openAPIV3Schema")
        if not schema:
            return
        prune(obj, schema, top=True)
        apply_defaults(obj, schema)
        # The envelope is the API server's to validate, but it is there: a schema that lists
        # `metadata` as required (as controller-gen writes them) is satisfied by every object.
        sub_schema = dict(schema)
        props = dict(sub_schema.get("properties") or {})
        for k in ("apiVersion", "kind", "metadata"):
            props.pop(k, None)
        sub_schema["properties"] = props
        problems = [
            # An error kube-openapi reports without a field (a value or boundary out of its
            # format's range) lands on apiextensions' nil root path, which prints as "<nil>".
            (reason, field or "<nil>", message)
            for reason, field, message in validate(obj, sub_schema)
        ]
        problems += cel.write_causes(rt.crd_version, obj, old, problems)
        if problems:
            raise errors.invalid(rt.kind, rt.group, name, problems)

    def _validate(self, rt: ResourceType, obj: dict[str, Any], name: str) -> None:
        spec = obj.get("spec") or {}
        problems: list[tuple[str, str, str]] = []
        if rt.kind == "Pod" and rt.group == "":
            if not spec.get("containers"):
                problems.append(("FieldValueRequired", "spec.containers", "Required value"))
        if rt.kind == "PodDisruptionBudget":
            if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
                problems.append(
                    (
                        "FieldValueInvalid",
                        "spec",
                        "Invalid value: policy.PodDisruptionBudgetSpec{...}: minAvailable and "
                        "maxUnavailable cannot be both set",
                    )
                )
        if rt.kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
            selector = spec.get("selector")
            if not selector:
                problems.append(("FieldValueRequired", "spec.selector", "Required value"))
        if problems:
            raise errors.invalid(rt.kind, rt.group, name, problems)

    # ---------------------------------------------------------------- create

    def create(self, rt: ResourceType, ns: str, body: Any, dry_run: bool = False) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        _check_decodes(rt, body)
        obj = _copied(body)
        self._check_type_meta(rt, obj)
        meta = _meta(obj)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(
                    rt.kind,
                    rt.group,
                    "",
                    [
                        (
                            "FieldValueRequired",
                            "metadata.name",
                            "Required value: name or generateName is required",
                        )
                    ],
                )
            bucket = self.store.bucket(rt.storage_key)
            for _ in range(8):
                candidate = self._generate_name(prefix)
                if bucket.get(ns if rt.namespaced else "", candidate) is None:
                    break
            meta["name"] = candidate
        name = meta["name"]
        self._check_name(rt, name)
        self._check_namespace(rt, ns, obj)
        if not rt.namespaced:
            meta.pop("namespace", None)
        if self.store.bucket(rt.storage_key).get(ns if rt.namespaced else "", name) is not None:
            raise errors.already_exists(rt.group, rt.plural, name)
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = self.clock.timestamp()
        if _has_generation(rt):
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if (rt.group, rt.kind) in STATUS_RESET_ON_CREATE or (rt.custom and rt.has_status):
            obj.pop("status", None)
        apply_create_defaults(rt.group, rt.kind, obj)
        if rt.kind == "Pod" and rt.group == "":
            admit_pod_priority(obj, self._priority_class, self._priority_classes)
        if rt.kind == "Service" and rt.group == "":
            existing = (self.decode(rt, e) for e in self.store.bucket(rt.storage_key).entries(None))
            serviceips.allocate(obj.setdefault("spec", {}), existing, self.rng)
        self._custom_schema(rt, obj, name)
        self._validate(rt, obj, name)
        _raise_invalid(rt, name, validation.validate_create(rt, obj))
        self._validating_admission(rt, obj)
        if rt.kind == "CustomResourceDefinition":
            self._crd_accept(obj)
        if dry_run:
            return obj
        self._write(rt, obj)
        if rt.kind == "Namespace" and rt.group == "":
            self._namespace_created(name)
        elif rt.kind == "CustomResourceDefinition":
            self._crd_established(obj)
        return obj

    # ---------------------------------------------------------------- update / patch

    def update(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        body: Any,
        subresource: str = "",
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        _check_decodes(rt, body)
        entry = self._entry(rt, ns, name)
        old = self.decode(rt, entry)
        return self._apply_update(rt, entry, old, _copied(body), subresource, dry_run)

    def patch(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        patch_type: str,
        patch: Any,
        subresource: str = "",
        dry_run: bool = False,
        check: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """`check` judges the patched object's fields (the request's fieldValidation)."""
        bucket = self.store.bucket(rt.storage_key)
        entry = bucket.get(ns if rt.namespaced else "", name)
        if entry is None:
            if patch_type == "apply":
                if not isinstance(patch, dict):
                    raise errors.bad_request("the body of the request must be an object")
                patch.setdefault("metadata", {})["name"] = name
                return self.create(rt, ns, patch, dry_run)
            raise errors.not_found(rt.group, rt.plural, name)
        old = self.decode(rt, entry)
        if patch_type == "json":
            new = apply_json_patch(old, patch)
        elif patch_type in ("merge", "apply"):
            new = apply_merge_patch(old, patch)
        elif patch_type == "strategic":
            if rt.custom:
                # Raises kube's 415 for strategic merge patches of custom resources.
                patch_type_for_content_type(PATCH_STRATEGIC, custom_resource=True)
            # A second decode is the merge's to change: cheaper than its copying `old`.
            new = apply_smp(self.decode(rt, entry), patch, rt.kind, copy_original=False)
        else:
            raise errors.ApiError(415, "UnsupportedMediaType", f"unknown patch type {patch_type}")
        if not isinstance(new, dict):
            raise errors.bad_request("the patch produced a value that is not an object")
        problem = validation.decode_error(rt, new)
        if problem is not None:
            raise patch_decode_error(patch_type, patch, new, problem)
        if check is not None:
            check(new)
        # A patch only conflicts when it names a resourceVersion itself.
        patched_rv = (new.get("metadata") or {}).get("resourceVersion")
        if patched_rv == old["metadata"].get("resourceVersion"):
            new["metadata"].pop("resourceVersion", None)
        return self._apply_update(rt, entry, old, new, subresource, dry_run)

    def _apply_update(
        self,
        rt: ResourceType,
        entry: Entry,
        old: dict[str, Any],
        new: dict[str, Any],
        subresource: str,
        dry_run: bool,
    ) -> dict[str, Any]:
        name = old["metadata"]["name"]
        self._check_type_meta(rt, new)
        if (rt.group, rt.kind) == ("", "Secret") and subresource == "":
            merge_string_data(new)
        meta = _meta(new)
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})"
            )
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != entry.namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        want_rv = meta.get("resourceVersion")
        if want_rv and want_rv != old["metadata"].get("resourceVersion"):
            raise errors.stale_conflict(rt.group, rt.plural, name)
        if meta.get("uid") and meta["uid"] != old["metadata"].get("uid"):
            raise errors.conflict(
                rt.group,
                rt.plural,
                name,
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: "
                f"{old['metadata'].get('uid')}",
            )
        old_meta = old["metadata"]
        if subresource == "status":
            # Status writes change status only (ResetObjectMetaForStatus + spec kept). `old` is
            # this request's own decode and is only read from here on, so the result shares
            # its members; only the metadata, which the write stamps, is its own.
            merged = {**old, "metadata": dict(old["metadata"])}
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            new = merged
            _raise_invalid(rt, name, cel.write_causes(rt.crd_version, new, old))
            meta = new["metadata"]
        else:
            for key in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            meta["name"] = name
            if rt.namespaced:
                meta["namespace"] = entry.namespace
            else:
                meta.pop("namespace", None)
            if rt.has_status or (rt.group, rt.kind) == ("", "Namespace"):
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            if rt.kind == "Service" and rt.group == "":
                serviceips.keep_allocated(old.get("spec") or {}, new.setdefault("spec", {}))
            causes = validation.validate_update(rt, old, new)
            if rt.kind == "Pod" and rt.group == "":
                causes += self._pod_update_causes(old, new)
            _raise_invalid(rt, name, causes)
            if rt.kind == "Namespace" and rt.group == "":
                new["spec"] = old.get("spec", {})
            self._custom_schema(rt, new, name, old)
            self._validate(rt, new, name)
            self._validating_admission(rt, new)
            if rt.kind == "CustomResourceDefinition":
                self._crd_accept(new)
            if _has_generation(rt) and _without(new, "metadata", "status") != _without(
                old, "metadata", "status"
            ):
                meta["generation"] = int(old_meta.get("generation") or 1) + 1
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        if new == old:
            return old  # a no-op write stores nothing and sends no event, as in kube
        if dry_run:
            return new
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not (rt.kind == "Pod" and rt.group == "" and meta.get("deletionGracePeriodSeconds"))
        ):
            self._remove(rt, new)
            return new
        self._write(rt, new)
        if rt.kind == "CustomResourceDefinition":
            self._crd_established(new)
        return new

    def _validating_admission(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        """The validating admission plugins, which kube-apiserver runs after the object's own
        validation, on a create or an update alike."""
        if rt.plural == "priorityclasses" and rt.group == "scheduling.k8s.io":
            check_one_default(obj, self._priority_classes())

    def _pod_update_causes(
        self, old: dict[str, Any], new: dict[str, Any]
    ) -> list[tuple[str, str, str]]:
        old_spec = dict(old.get("spec") or {})
        new_spec = dict(new.get("spec") or {})
        for key in POD_MUTABLE_SPEC:
            old_spec.pop(key, None)
            new_spec.pop(key, None)
        for spec in (old_spec, new_spec):
            for key in ("containers", "initContainers"):
                if key in spec:
                    spec[key] = [_without(c, "image") for c in spec[key]]
        if old_spec == new_spec:
            return []
        return [
            (
                "FieldValueForbidden",
                "spec",
                "Forbidden: pod updates may not change fields other than "
                "`spec.containers[*].image`,`spec.initContainers[*].image`,"
                "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
                "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it "
                "to be set to 1 if it was previously negative)",
            )
        ]

    def replace_unchecked(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` as it is: for subresources (binding) that may change immutable fields."""
        self._write(rt, obj)
        return obj

    # ---------------------------------------------------------------- delete

    def delete(
        self, rt: ResourceType, ns: str, name: str, options: dict[str, Any], dry_run: bool = False
    ) -> tuple[dict[str, Any], bool]:
        """Delete per DeleteOptions; returns (object or Status, removed now)."""
        dry_run = dry_run or "All" in (options.get("dryRun") or ())
        entry = self._entry(rt, ns, name)
        obj = self.decode(rt, entry)
        meta = obj["metadata"]
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise errors.conflict(
                rt.group,
                rt.plural,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                f"{meta.get('uid')}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise errors.conflict(
                rt.group,
                rt.plural,
                name,
                f"Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                f"{meta.get('resourceVersion')}",
            )
        if rt.kind == "Namespace" and rt.group == "":
            return self._delete_namespace(rt, obj, dry_run), False
        if rt.kind == "CustomResourceDefinition" and not dry_run:
            self._crd_removed(obj)
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        finalizers = list(meta.get("finalizers") or [])
        changed = False
        if policy == "Foreground" and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
            changed = True
        elif policy == "Orphan" and ORPHAN not in finalizers:
            finalizers.append(ORPHAN)
            changed = True
        grace = self._grace_period(rt, obj, options)
        if grace > 0 or finalizers:
            now = self.clock.now()
            if meta.get("deletionTimestamp"):
                current = meta.get("deletionGracePeriodSeconds")
                # Only a shorter grace period may be given; 0 for a pod kept by finalizers
                # records that nothing is left to wait for (kubelet's final delete).
                if current is not None and grace < int(current) and (grace > 0 or finalizers):
                    # The deadline moves by the difference, from when the deletion started.
                    started = parse_time(meta["deletionTimestamp"]) - timedelta(
                        seconds=int(current)
                    )
                    meta["deletionTimestamp"] = _rfc3339(started + timedelta(seconds=grace))
                    meta["deletionGracePeriodSeconds"] = grace
                    changed = True
                elif grace == 0 and not finalizers and rt.kind == "Pod" and rt.group == "":
                    return self._remove_now(rt, obj, dry_run), True
            else:
                meta["deletionTimestamp"] = _rfc3339(now + timedelta(seconds=grace))
                meta["deletionGracePeriodSeconds"] = grace
                changed = True
            meta["finalizers"] = finalizers
            if not finalizers:
                meta.pop("finalizers", None)
            if changed and not dry_run:
                self._write(rt, obj)
            return obj, False
        return self._remove_now(rt, obj, dry_run), True

    def _remove_now(self, rt: ResourceType, obj: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        if not dry_run:
            self._remove(rt, obj)
        if (rt.group, rt.kind) in _RETURN_DELETED or rt.custom:
            return obj
        details: dict[str, Any] = {"name": obj["metadata"]["name"], "kind": rt.plural}
        if rt.group:
            details["group"] = rt.group
        details["uid"] = obj["metadata"].get("uid", "")
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    @staticmethod
    def _grace_period(rt: ResourceType, obj: dict[str, Any], options: dict[str, Any]) -> int:
        if rt.kind != "Pod" or rt.group != "":
            return 0
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        grace = int(grace)
        # Negative means "use the default"; kube turns 0 into a forced, immediate delete.
        return max(grace, 0) if grace >= 0 else int(spec.get("terminationGracePeriodSeconds", 30))

    def delete_collection(
        self,
        rt: ResourceType,
        flt: Filter,
        options: dict[str, Any],
        dry_run: bool = False,
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for entry in list(self.store.bucket(rt.storage_key).entries(flt.namespace)):
            if not flt.matches(entry):
                continue
            try:
                obj, _ = self.delete(rt, entry.namespace, entry.name, options, dry_run)
            except errors.ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            out.append(obj)
        return out

    # ---------------------------------------------------------------- namespaces

    def _namespace_created(self, name: str) -> None:
        sa = self.find("", "v1", "serviceaccounts")
        if sa is not None:
            self.create(sa, name, {"metadata": {"name": "default"}})

    def _delete_namespace(
        self, rt: ResourceType, obj: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in _SYSTEM_NAMESPACES[:3]:
            raise errors.forbidden(
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                {"name": name, "kind": "namespaces"},
            )
        if dry_run:
            return obj
        if not obj["metadata"].get("deletionTimestamp"):
            obj["metadata"]["deletionTimestamp"] = self.clock.timestamp()
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
            obj["status"] = {"phase": "Terminating"}
            self._write(rt, obj)
        # The namespace controller's job: delete all content, then finalize.
        for other in list(self.storage_types.values()):
            if not other.namespaced:
                continue
            bucket = self.store.bucket(other.storage_key)
            for entry in list(bucket.entries(name)):
                try:
                    self.delete(other, name, entry.name, {"propagationPolicy": "Background"})
                except errors.ApiError:
                    continue
        self._maybe_finish_namespace(name)
        return obj

    def _namespace_is_empty(self, name: str) -> bool:
        for rt in self.storage_types.values():
            if rt.namespaced and self.store.bucket(rt.storage_key).by_ns.get(name):
                return False
        return True

    def _maybe_finish_namespace(self, name: str) -> None:
        ns_rt = self.types[("", "v1", "namespaces")]
        entry = self.store.bucket(ns_rt.storage_key).get("", name)
        if entry is None or entry.fields.get("status.phase") != "Terminating":
            return
        if self._namespace_is_empty(name):
            self._remove(ns_rt, entry.decode())

    # ---------------------------------------------------------------- CRDs

    def _crd_accept(self, crd: dict[str, Any]) -> None:
        """Refuse a CRD as kube-apiserver refuses it (crdvalidation), before it is stored."""
        apply_crd_defaults(crd)
        problems = validate_crd(crd)
        if problems:
            name = str((crd.get("metadata") or {}).get("name") or "")
            raise errors.invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, problems)

    def _crd_established(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        group = spec["group"]
        plural = spec["names"]["plural"]
        storage_version = next(v["name"] for v in spec["versions"] if v.get("storage"))
        types = crd_resource_types(crd)
        # The storage version is registered first so it becomes the bucket's storage type.
        types.sort(key=lambda t: t.version != storage_version)
        self.unregister_group_resource(group, plural)
        for rt in types:
            self.register(rt)
        now = self.clock.timestamp()
        status = {
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": now,
                },
            ],
            "acceptedNames": spec["names"],
            "storedVersions": [storage_version],
        }
        if crd.get("status", {}).get("conditions"):
            return
        crd_rt = self.types[("apiextensions.k8s.io", "v1", "customresourcedefinitions")]
        crd["status"] = status
        self._write(crd_rt, crd)

    def _crd_removed(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        group = spec.get("group", "")
        plural = (spec.get("names") or {}).get("plural", "")
        storage = self.storage_types.get((group, plural))
        if storage is not None:
            bucket = self.store.bucket(storage.storage_key)
            for entry in list(bucket.entries()):
                self._remove(storage, entry.decode())
        self.unregister_group_resource(group, plural)

    # ---------------------------------------------------------------- iteration

    def all_types(self) -> Iterator[ResourceType]:
        return iter(tuple(self.types.values()))


# Kinds whose strategies maintain metadata.generation (spec changes bump it); others, like
# ConfigMaps, Nodes and Leases, have none.
_GENERATION_KINDS = frozenset(
    {
        ("", "Pod"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("policy", "PodDisruptionBudget"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
    }
)


def _check_decodes(rt: ResourceType, body: dict[str, Any]) -> None:
    """A body kube's decoder would refuse is a 400 naming the kind, before anything else."""
    problem = validation.decode_error(rt, body)
    if problem is not None:
        raise errors.bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {problem}'
        )


def _raise_invalid(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> None:
    if causes:
        kind, group = validation.event_kind(rt)
        raise errors.invalid(kind, group, name, causes)


def _has_generation(rt: ResourceType) -> bool:
    return rt.custom or (rt.group, rt.kind) in _GENERATION_KINDS


def _rfc3339(value: Any) -> str:
    return str(value.strftime("%Y-%m-%dT%H:%M:%SZ"))
