"""The `fieldValidation` query parameter: unknown and duplicate fields on writes, as kube judges them.

kube-apiserver decodes every create, update and patch body strictly unless told `Ignore`, and
clients read the outcome closely: kubectl (>= 1.27) sends `Strict` and shows the refusal, and
`Warn` (the server default when the parameter is absent) answers one `Warning` header per problem.
Each write path words its refusal differently, because a different piece of kube finds it:

* create and update: the handler's decoder, a 400 ``<Kind> in version "<v>" cannot be handled as a
  <Kind>: strict decoding error: unknown field "spec.foo", duplicate field "spec.bar"``;
* merge, JSON and strategic merge patches: the patcher, a 422 on the field ``patch`` whose value is
  the patched object (merge and JSON patch) or the patch as Go prints a map (strategic merge);
* server-side apply: the field manager refuses fields its schema does not declare whatever the
  directive, as a 500 without a reason (kube does not map that error to a status), and duplicate
  keys are YAML errors with line numbers.

Problems are listed the way kube finds them: a built-in kind's body in document order (Go's
decoder reports duplicates of known fields and unknown fields as it meets them, each once), a
custom resource's duplicates first, then unknown metadata fields, then the fields pruning drops,
sorted. Unknown fields of built-in kinds are dropped under Warn and Ignore, as decoding into the Go
types drops them; custom resources are pruned by the registry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import yaml
from aiohttp import web

from nodeops.common.gomessages import go_quote
from nodeops.sim.server import errors, knownfields, validation
from nodeops.sim.server.patch import _go_format, go_json_sorted
from nodeops.sim.server.resources import ResourceType

STRICT = "Strict"
WARN = "Warn"
IGNORE = "Ignore"
_ALLOWED = ("", IGNORE, STRICT, WARN)  # kube's sorted set, "" included
_META_FIELDS = ("apiVersion", "kind", "metadata")
_JSON_PATCH_OP_FIELDS = frozenset({"op", "path", "from", "value"})
_MAX_STRICT_ERRORS = 100


class _Pairs(list[tuple[str, Any]]):
    """A JSON object with its keys in body order, duplicates kept."""


class _ReasonlessError(errors.ApiError):
    """An error kube answers without a reason: a plain Go error turned into a 500 Status."""

    def status(self) -> dict[str, Any]:
        body = super().status()
        body.pop("reason", None)
        return body


def directive(query: Mapping[str, str], options_kind: str) -> str:
    """The request's directive (Warn when absent), or kube's 422 for a value it does not know.

    `options_kind` is CreateOptions, UpdateOptions or PatchOptions, which kube names in the error.
    """
    value = query.get("fieldValidation", "")
    if value not in _ALLOWED:
        supported = ", ".join(f'"{v}"' for v in _ALLOWED)
        raise errors.invalid(
            options_kind,
            "meta.k8s.io",
            "",
            [
                (
                    "FieldValueNotSupported",
                    "fieldValidation",
                    f"Unsupported value: {go_quote(value)}: supported values: {supported}",
                )
            ],
        )
    return value or WARN


class FieldValidation:
    """One write's directive and the warnings it collects for the response."""

    def __init__(self, query: Mapping[str, str], options_kind: str) -> None:
        self.directive = directive(query, options_kind)
        self.warnings: list[str] = []
        self._patch_errors: list[str] = []

    # ------------------------------------------------------------- create / update

    def check_body(self, rt: ResourceType, raw: bytes, content_type: str, body: Any) -> None:
        """Judge a create or update body before the registry sees it; drop unknown fields."""
        if not isinstance(body, dict) or validation.decode_error(rt, body) is not None:
            return  # the registry refuses it with kube's decode error, which comes first
        if self.directive == IGNORE:
            _unknown(rt, body, prune=True)
            return
        pairs = _pairs(raw) if "json" in content_type else None
        model = _model(rt)
        problems: list[str]
        if rt.custom or model is None:
            problems = [f'duplicate field "{p}"' for p in _duplicates(pairs)]
            problems += [f'unknown field "{p}"' for p in _unknown(rt, body, prune=False)]
        elif pairs is not None:
            problems = _typed_problems(pairs, model)
        else:
            problems = [f'unknown field "{p}"' for p in _unknown(rt, body, prune=False)]
        if problems and self.directive == STRICT:
            kind, version = _body_kind(rt, body)
            raise errors.bad_request(
                f'{kind} in version "{version}" cannot be handled as a {kind}: '
                + _strict_message(problems)
            )
        self._warn(problems)
        _unknown(rt, body, prune=True)

    # ------------------------------------------------------------- patches

    def for_patch(
        self, rt: ResourceType, ptype: str, patch: Any, raw: bytes
    ) -> Callable[[dict[str, Any]], None] | None:
        """Judge a patch document now; the returned check judges the object it produces."""
        if ptype == "apply":
            self.check_apply(rt, raw, patch)
            return None
        self.check_patch_body(ptype, raw)

        def check(new: dict[str, Any]) -> None:
            self.check_patched(rt, ptype, patch, new)

        return check

    def check_patch_body(self, ptype: str, raw: bytes) -> None:
        """Note what the patch document itself breaks: duplicate keys, unknown op fields."""
        if self.directive == IGNORE or ptype == "apply":
            return
        pairs = _pairs(raw)
        if pairs is None:
            return
        if ptype == "json":
            self._patch_errors = [f"json patch {p}" for p in _json_patch_problems(pairs)]
        else:
            self._patch_errors = [f'duplicate field "{p}"' for p in _duplicates(pairs)]

    def check_patched(self, rt: ResourceType, ptype: str, patch: Any, new: dict[str, Any]) -> None:
        """Judge the object a merge, JSON or strategic merge patch produced; drop unknown fields."""
        if self.directive == IGNORE:
            _unknown(rt, new, prune=True)
            return
        unknown = _unknown(rt, new, prune=False, sort_keys=True)
        problems = self._patch_errors + [f'unknown field "{p}"' for p in unknown]
        if problems and self.directive == STRICT:
            shown = _go_format(patch) if ptype == "strategic" else go_json_sorted(new)
            raise errors.invalid(
                "",
                "",
                "",
                [
                    (
                        "FieldValueInvalid",
                        "patch",
                        f"Invalid value: {go_quote(shown)}: {_strict_message(problems)}",
                    )
                ],
            )
        self._warn(problems)
        _unknown(rt, new, prune=True)

    def check_apply(self, rt: ResourceType, raw: bytes, body: Any) -> None:
        """Server-side apply: undeclared fields always fail; duplicate YAML keys follow the directive."""
        if not isinstance(body, dict):
            return
        unknown = _unknown(rt, body, prune=False, sort_keys=True)
        if unknown:
            problems = [f"{_smd_path(p)}: field not declared in schema" for p in unknown]
            text = problems[0] if len(problems) == 1 else "errors:\n  " + "\n  ".join(problems)
            meta = body.get("metadata")
            if not isinstance(meta, dict):
                meta = {}
            api_version = str(body.get("apiVersion") or rt.group_version)
            group, _, version = api_version.rpartition("/")
            kind = body.get("kind") or rt.kind
            raise _ReasonlessError(
                500,
                "",
                f"failed to create typed patch object ({meta.get('namespace') or ''}/"
                f"{meta.get('name') or ''}; {group}/{version}, Kind={kind}): {text}",
            )
        if self.directive == IGNORE:
            return
        duplicates = _yaml_duplicates(raw)
        if not duplicates:
            return
        if self.directive == STRICT:
            raise errors.bad_request(
                "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal "
                "errors:\n  " + "\n  ".join(duplicates)
            )
        self._warn(duplicates)

    # ------------------------------------------------------------- response

    def add_headers(self, response: web.StreamResponse) -> web.StreamResponse:
        """One `Warning: 299 - "..."` header per problem, as kube's warning recorder writes them."""
        for text in self.warnings:
            escaped = text.replace("\\", "\\\\").replace('"', '\\"')
            response.headers.add("Warning", f'299 - "{escaped}"')
        return response

    def _warn(self, problems: list[str]) -> None:
        for text in problems:
            if text not in self.warnings:
                self.warnings.append(text)


# ----------------------------------------------------------------- decoding


def _pairs(raw: bytes) -> Any:
    """The body with every object as `_Pairs`, or None when it is not JSON this parser takes."""
    try:
        return json.loads(raw, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError):
        return None


def _strict_message(problems: list[str]) -> str:
    return "strict decoding error: " + ", ".join(problems[:_MAX_STRICT_ERRORS])


def _body_kind(rt: ResourceType, body: dict[str, Any]) -> tuple[str, str]:
    kind = body.get("kind") or rt.kind
    api_version = body.get("apiVersion") or rt.group_version
    return str(kind), str(api_version).rpartition("/")[2]


def _model(rt: ResourceType) -> str | None:
    if rt.custom:
        return None
    return knownfields.model_for(rt.group, rt.version, rt.kind)


def _duplicates(node: Any, path: str = "") -> Iterator[str]:
    """Paths of repeated keys anywhere in a `_pairs` tree, in body order, each once."""
    seen_errors: set[str] = set()
    for found in _duplicates_in(node, path):
        if found not in seen_errors:
            seen_errors.add(found)
            yield found


def _duplicates_in(node: Any, path: str) -> Iterator[str]:
    if isinstance(node, _Pairs):
        seen: set[str] = set()
        for key, value in node:
            if key in seen:
                yield knownfields.join(path, key)
            seen.add(key)
            yield from _duplicates_in(value, knownfields.join(path, key))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _duplicates_in(item, f"{path}[{i}]")


def _typed_problems(pairs: Any, model: str) -> list[str]:
    """Go's strict decode of a body into a typed object: problems in body order, each once."""
    out: list[str] = []
    _typed_walk(pairs, model, "", out)
    return list(dict.fromkeys(out))


def _typed_walk(node: Any, type_name: str, path: str, out: list[str]) -> None:
    if knownfields.is_scalar(type_name):
        return
    if type_name == knownfields.ANY:
        # Free-form fields of built-in kinds (FieldsV1, RawExtension) keep their bytes as they
        # came: Go's strict decoder never looks inside them, so neither is a duplicate there.
        return
    container = knownfields.element(type_name)
    if container is not None:
        shape, inner = container
        leaf = knownfields.is_scalar(inner)
        if shape == "list" and isinstance(node, list):
            if not leaf:
                for i, item in enumerate(node):
                    _typed_walk(item, inner, f"{path}[{i}]", out)
        elif shape == "dict" and isinstance(node, _Pairs):
            seen_keys: set[str] = set()
            for key, value in node:
                if key in seen_keys:
                    out.append(f'duplicate field "{knownfields.join(path, key)}"')
                seen_keys.add(key)
                if not leaf:
                    _typed_walk(value, inner, knownfields.join(path, key), out)
        return
    fields = knownfields.fields_of(type_name)
    if fields is None or not isinstance(node, _Pairs):
        return
    seen: set[str] = set()
    for key, value in node:
        field_type = fields.get(key)
        if field_type is None:
            out.append(f'unknown field "{knownfields.join(path, key)}"')
            continue
        if key in seen:
            out.append(f'duplicate field "{knownfields.join(path, key)}"')
        seen.add(key)
        # Paths are built only below fields that can hold more fields: every write walks here.
        if not knownfields.is_scalar(field_type):
            _typed_walk(value, field_type, knownfields.join(path, key), out)


def _json_patch_problems(pairs: Any) -> list[str]:
    """Strict decoding of JSON patch operations into kube's op struct (op, path, from, value)."""
    if not isinstance(pairs, list):
        return []
    out: list[str] = []
    for i, op in enumerate(pairs):
        if not isinstance(op, _Pairs):
            continue
        seen: set[str] = set()
        for key, value in op:
            path = f"[{i}].{key}"
            if key not in _JSON_PATCH_OP_FIELDS:
                out.append(f'unknown field "{path}"')
                continue
            if key in seen:
                out.append(f'duplicate field "{path}"')
            seen.add(key)
            if key == "value":
                out.extend(f'duplicate field "{p}"' for p in _duplicates_in(value, path))
    return list(dict.fromkeys(out))


def _yaml_duplicates(raw: bytes) -> list[str]:
    """go-yaml's "already set in map" errors for an apply body, with its 1-based line numbers."""
    try:
        root = yaml.compose(raw.decode("utf-8", "replace"), Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return []
    out: list[str] = []
    stack: list[yaml.Node] = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        out.append(
                            f"line {key.start_mark.line + 1}: key {go_quote(key.value)} "
                            "already set in map"
                        )
                    seen.add(key.value)
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return sorted(out, key=lambda line: int(line.split(":", 1)[0][5:]))


# ----------------------------------------------------------------- unknown fields


def _unknown(
    rt: ResourceType, obj: dict[str, Any], *, prune: bool, sort_keys: bool = False
) -> list[str]:
    """Paths of fields the kind does not declare. With `prune`, built-ins and metadata lose them."""
    out: list[str] = []
    model = _model(rt)
    if model is not None:
        knownfields.walk_typed(obj, model, "", out, prune, sort_keys)
        return out
    if not rt.custom:
        return out
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        knownfields.walk_typed(meta, "V1ObjectMeta", "metadata", out, prune, sort_keys=True)
    schema = ((rt.crd_version or {}).get("schema") or {}).get("openAPIV3Schema")
    if schema:
        found: list[str] = []
        _schema_walk(obj, schema, "", found, root=True)
        out.extend(sorted(found))
    return out


def _schema_walk(
    value: Any, schema: Mapping[str, Any], path: str, out: list[str], root: bool = False
) -> None:
    """Fields kube's structural pruning would drop, as kube names them (`spec.ports[0].x`)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        _schema_walk_preserved(value, schema, path, out)
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        embedded = root or schema.get("x-kubernetes-embedded-resource")
        if props is None and extra is None and schema.get("type") != "object":
            return
        for key, item in value.items():
            if embedded and key in _META_FIELDS:
                continue
            sub = knownfields.join(path, key)
            if props is not None and key in props:
                _schema_walk(item, props[key], sub, out)
            elif isinstance(extra, dict):
                _schema_walk(item, extra, sub, out)
            elif extra is True:
                continue
            else:
                out.append(sub)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _schema_walk(item, items, f"{path}[{i}]", out)


def _schema_walk_preserved(
    value: Any, schema: Mapping[str, Any], path: str, out: list[str]
) -> None:
    """Under x-kubernetes-preserve-unknown-fields only declared subtrees are pruned."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = knownfields.join(path, key)
            if key in props:
                _schema_walk(item, props[key], sub, out)
            elif isinstance(extra, dict):
                _schema_walk(item, extra, sub, out)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _schema_walk_preserved(item, items, f"{path}[{i}]", out)


def _smd_path(path: str) -> str:
    """A field path as structured-merge-diff prints it: a leading dot, list items by index."""
    return "." + path
