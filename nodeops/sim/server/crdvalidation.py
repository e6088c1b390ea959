"""kube-apiserver's validation of a CustomResourceDefinition, with its field paths and messages.

A CRD the simulator accepts and kube-apiserver refuses hides the refusal until the first real
install (the int64 bounds that once kept node cycling off real clusters passed here unseen), so
the simulator refuses what apiextensions-apiserver's `ValidateCustomResourceDefinition`
refuses, in the same words, for the rules a hand-written or generated CRD meets in practice:

- names, group, scope and versions (one storage version, unique DNS-1035 names);
- a schema for every version, structural as kube requires it (a type on every specified field,
  `metadata` restricted to name and generateName, no `additionalProperties` at the root, no
  `uniqueItems`, `additionalProperties` and `properties` not together, list and map types);
- defaults: pruned (no unknown fields) and valid against their own node, including kube-openapi's
  check that a boundary fits the integer format, which it reads as a float64;
- printer columns' types and formats.

Like kube, the paths name `spec.validation.openAPIV3Schema` when every version carries the same
schema (the internal version keeps one copy then) and `spec.versions[i].schema...` otherwise,
and structural errors are sorted and reported before defaults are looked at.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from nodeops.sim.server.cel import rule_compile_errors
from nodeops.sim.server.jsonpath import go_json
from nodeops.sim.server.schema import prune, validate
from nodeops.sim.server.validation import forbidden, invalid, required

Cause = tuple[str, str, str]

_OPENAPI_TYPES: Final = ("array", "boolean", "integer", "number", "object", "string")
_COLUMN_TYPES: Final = ("boolean", "date", "integer", "number", "string")
_COLUMN_FORMATS: Final = (
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "name",
    "password",
)
_ENVELOPE: Final = ("apiVersion", "kind", "metadata")
_DNS1123_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_DNS1035_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_UNSUPPORTED_KEYWORDS: Final = (
    ("id", "id is not supported"),
    ("additionalItems", "additionalItems is not supported"),
    ("patternProperties", "patternProperties is not supported"),
    ("definitions", "definitions is not supported"),
    ("dependencies", "dependencies is not supported"),
    ("$ref", "$ref is not supported"),
)


def _not_supported(field: str, value: Any, allowed: tuple[str, ...]) -> Cause:
    listed = ", ".join(f'"{a}"' for a in allowed)
    return (
        "FieldValueNotSupported",
        field,
        f"Unsupported value: {go_json(value)}: supported values: {listed}",
    )


def apply_crd_defaults(crd: dict[str, Any]) -> None:
    """`SetDefaults_CustomResourceDefinitionSpec`: singular and listKind from the kind, the
    None conversion strategy."""
    spec = crd.setdefault("spec", {})
    names = spec.setdefault("names", {})
    kind = names.get("kind")
    if kind:
        names.setdefault("singular", str(kind).lower())
        names.setdefault("listKind", f"{kind}List")
    spec.setdefault("conversion", {"strategy": "None"})


def validate_crd(crd: Mapping[str, Any]) -> list[Cause]:
    """Every cause kube-apiserver lists for this CRD, in its order."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes = list(_metadata_causes(crd, spec, names))
    causes += _spec_causes(spec, names)
    return causes


def _metadata_causes(
    crd: Mapping[str, Any], spec: Mapping[str, Any], names: Mapping[str, Any]
) -> Iterator[Cause]:
    name = str((crd.get("metadata") or {}).get("name") or "")
    if name != f"{names.get('plural', '')}.{spec.get('group', '')}":
        yield invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group')


def _spec_causes(spec: Mapping[str, Any], names: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    group = str(spec.get("group") or "")
    if not group:
        causes.append(required("spec.group"))
    elif not _DNS1123_SUBDOMAIN.fullmatch(group) or len(group) > 253:
        causes.append(
            invalid(
                "spec.group",
                group,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        )
    elif "." not in group:
        causes.append(invalid("spec.group", group, "should be a domain with at least one dot"))
    scope = spec.get("scope")
    if not scope:
        causes.append(required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        causes.append(_not_supported("spec.scope", scope, ("Cluster", "Namespaced")))

    versions: list[Mapping[str, Any]] = list(spec.get("versions") or [])
    shared = _shared_schema(versions)
    status_enabled = any(
        "status" in ((v.get("subresources") or {}) if isinstance(v, Mapping) else {})
        for v in versions
    )
    for i, version in enumerate(versions):
        if not ((version.get("schema") or {}).get("openAPIV3Schema")):
            causes.append(required(f"spec.versions[{i}].schema.openAPIV3Schema"))
    seen: set[str] = set()
    unique = True
    for i, version in enumerate(versions):
        vname = str(version.get("name") or "")
        unique = unique and vname not in seen
        seen.add(vname)
        if not _DNS1035_LABEL.fullmatch(vname) or len(vname) > 63:
            causes.append(
                invalid(
                    f"spec.versions[{i}].name",
                    vname,
                    "a DNS-1035 label must consist of lower case alphanumeric characters or "
                    "'-', start with an alphabetic character, and end with an alphanumeric "
                    "character",
                )
            )
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if shared is None and isinstance(schema, Mapping):
            causes += schema_causes(
                schema,
                f"spec.versions[{i}].schema.openAPIV3Schema",
                "status" in (version.get("subresources") or {}),
            )
        for j, column in enumerate(version.get("additionalPrinterColumns") or []):
            causes += _column_causes(column, f"spec.versions[{i}].additionalPrinterColumns[{j}]")
    if not unique:
        causes.append(invalid("spec.versions", "...", "must contain unique version names"))
    if sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            (
                "FieldValueInvalid",
                "spec.versions",
                "Invalid value: ...: must have exactly one version marked as storage version",
            )
        )
    for key in ("plural", "singular", "kind", "listKind"):
        if not names.get(key):
            causes.append(required(f"spec.names.{key}"))
    if shared is not None:
        causes += schema_causes(shared, "spec.validation.openAPIV3Schema", status_enabled)
    return causes


def _shared_schema(versions: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The schema every version carries, which kube's internal CRD keeps once at
    spec.validation (and names in its errors), or None when the versions differ."""
    schemas = [(v.get("schema") or {}).get("openAPIV3Schema") for v in versions]
    if not schemas or any(not isinstance(s, Mapping) for s in schemas):
        return None
    first = schemas[0]
    return first if all(s == first for s in schemas[1:]) else None


def _column_causes(column: Mapping[str, Any], path: str) -> Iterator[Cause]:
    if not column.get("name"):
        yield required(f"{path}.name")
    typ = column.get("type")
    allowed = ",".join(_COLUMN_TYPES)
    if not typ:
        yield required(f"{path}.type", f"must be one of {allowed}")
    elif typ not in _COLUMN_TYPES:
        yield invalid(f"{path}.type", typ, f"must be one of {allowed}")
    fmt = column.get("format")
    if fmt and fmt not in _COLUMN_FORMATS:
        yield invalid(f"{path}.format", fmt, f"must be one of {','.join(_COLUMN_FORMATS)}")
    if not column.get("jsonPath"):
        yield required(f"{path}.JSONPath")


# ------------------------------------------------------------------ the schema


def schema_causes(schema: Mapping[str, Any], path: str, status_enabled: bool) -> list[Cause]:
    """`validateCustomResourceDefinitionValidation` for one openAPIV3Schema at `path`."""
    causes: list[Cause] = []
    if status_enabled and schema.get("type") not in (None, "object"):
        causes.append(
            invalid(
                f"{path}.type",
                schema.get("type"),
                'only "object" is allowed as the type at the root of the schema if the status '
                "subresource is enabled",
            )
        )
    if schema.get("nullable"):
        causes.append(forbidden(f"{path}.nullable", "nullable cannot be true at the root"))
    structural = sorted(_structural_causes(schema, path, "root"), key=lambda c: f"{c[1]}: {c[2]}")
    if structural:
        causes += structural
    else:
        causes += _default_causes(schema, path)
    causes += _openapi_causes(schema, path, root=True)
    causes += [] if causes else rule_compile_errors(dict(schema), path)
    return causes


def _structural_causes(node: Mapping[str, Any], path: str, level: str) -> Iterator[Cause]:
    """`validateStructuralInvariants`: what makes a schema structural."""
    typ = node.get("type")
    if typ == "array" and "items" not in node:
        yield required(f"{path}.items", "must be specified")
    items = node.get("items")
    if isinstance(items, Mapping):
        yield from _structural_causes(items, f"{path}.items", "item")
    props = node.get("properties") or {}
    for key, sub in props.items():
        if isinstance(sub, Mapping):
            yield from _structural_causes(sub, f"{path}.properties[{key}]", "field")
    extra = node.get("additionalProperties")
    if extra is not None:
        if level == "root":
            yield forbidden(f"{path}.additionalProperties", "must not be used at the root")
        if isinstance(extra, Mapping):
            yield from _structural_causes(extra, f"{path}.additionalProperties", "field")
    if node.get("x-kubernetes-int-or-string") and node.get("x-kubernetes-preserve-unknown-fields"):
        yield invalid(
            f"{path}.x-kubernetes-preserve-unknown-fields",
            True,
            "must be false if x-kubernetes-int-or-string is true",
        )
    embedded = bool(node.get("x-kubernetes-embedded-resource"))
    if embedded and typ != "object":
        if not typ:
            yield required(
                f"{path}.type", "must be object if x-kubernetes-embedded-resource is true"
            )
        else:
            yield invalid(
                f"{path}.type", typ, "must be object if x-kubernetes-embedded-resource is true"
            )
    elif (
        not typ
        and not node.get("x-kubernetes-int-or-string")
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        where = {
            "root": "at the root",
            "item": "for specified array items",
            "field": "for specified object fields",
        }
        yield required(f"{path}.type", f"must not be empty {where[level]}")
    if level == "root" and typ and typ != "object":
        yield invalid(f"{path}.type", typ, "must be object at the root")
    check_metadata = level == "root" or embedded
    for key in ("kind", "apiVersion"):
        sub = props.get(key)
        if check_metadata and isinstance(sub, Mapping) and sub.get("type") != "string":
            yield invalid(f"{path}.properties[{key}].type", sub.get("type") or "", "must be string")
    metadata = props.get("metadata")
    if isinstance(metadata, Mapping):
        mpath = f"{path}.properties[metadata]"
        if check_metadata and metadata.get("type") != "object":
            yield invalid(f"{mpath}.type", metadata.get("type") or "", "must be object")
        if level == "root" and not _only_names(metadata):
            yield forbidden(
                mpath,
                "must not specify anything other than name and generateName, but metadata is "
                "implicitly specified",
            )


def _only_names(metadata: Mapping[str, Any]) -> bool:
    """The root's metadata schema may say no more than `type: object` and constraints on
    name and generateName."""
    rest = {k: v for k, v in metadata.items() if k not in ("type", "default")}
    props = rest.pop("properties", None)
    if props is not None and not set(props) <= {"name", "generateName"}:
        return False
    return not rest


def _default_causes(node: Mapping[str, Any], path: str, inside_meta: bool = False) -> list[Cause]:
    """`ValidateDefaults`: each default pruned and valid against its own node."""
    causes: list[Cause] = []
    if "default" in node and not inside_meta:
        default = node["default"]
        dpath = f"{path}.default"
        pruned = prune(copy.deepcopy(default), dict(node))
        if pruned != default:
            causes.append(invalid(dpath, default, "must not have unknown fields"))
        for reason, field, message in validate(default, dict(node)):
            where = f"{dpath}.{field}" if field else dpath
            causes.append((reason, where, message))
    items = node.get("items")
    if isinstance(items, Mapping):
        causes += _default_causes(items, f"{path}.items", inside_meta)
    for key, sub in (node.get("properties") or {}).items():
        if isinstance(sub, Mapping):
            causes += _default_causes(
                sub, f"{path}.properties[{key}]", inside_meta or key in _ENVELOPE
            )
    return causes


def _openapi_causes(node: Mapping[str, Any], path: str, root: bool = False) -> list[Cause]:
    """`ValidateCustomResourceDefinitionOpenAPISchema`: keywords kube does not allow and the
    extensions' own rules."""
    causes: list[Cause] = []
    typ = node.get("type")
    if typ and typ not in _OPENAPI_TYPES:
        causes.append(_not_supported(f"{path}.type", typ, _OPENAPI_TYPES))
    if typ == "null":
        causes.append(
            forbidden(f"{path}.type", "type cannot be set to null, use nullable as an alternative")
        )
    for key, detail in _UNSUPPORTED_KEYWORDS:
        if key in node:
            causes.append(forbidden(f"{path}.{key}", detail))
    if isinstance(node.get("items"), list):
        causes.append(forbidden(f"{path}.items", "items must be a schema object and not an array"))
    if node.get("uniqueItems"):
        causes.append(
            forbidden(
                f"{path}.uniqueItems",
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            )
        )
    extra = node.get("additionalProperties")
    props = node.get("properties") or {}
    if extra is not None and props and (extra is False or isinstance(extra, Mapping)):
        causes.append(
            forbidden(
                f"{path}.additionalProperties",
                "additionalProperties and properties are mutual exclusive",
            )
        )
    if isinstance(extra, Mapping):
        causes += _openapi_causes(extra, f"{path}.additionalProperties")
    for key, sub in props.items():
        if isinstance(sub, Mapping):
            spath = f"{path}.properties[{key}]"
            if root and key in _ENVELOPE and "default" in sub:
                causes.append(forbidden(f"{spath}.default", f"must not be set in top-level {key}"))
            causes += _openapi_causes(sub, spath)
    items = node.get("items")
    if isinstance(items, Mapping):
        causes += _openapi_causes(items, f"{path}.items")
    if node.get("x-kubernetes-preserve-unknown-fields") is False:
        causes.append(
            invalid(
                f"{path}.x-kubernetes-preserve-unknown-fields", False, "must be true or undefined"
            )
        )
    causes += _list_and_map_causes(node, path)
    return causes


def _list_and_map_causes(node: Mapping[str, Any], path: str) -> Iterator[Cause]:
    typ = node.get("type")
    map_type = node.get("x-kubernetes-map-type")
    if map_type is not None:
        if typ != "object":
            detail = "must be object if x-kubernetes-map-type is specified"
            yield (
                required(f"{path}.type", detail)
                if not typ
                else invalid(f"{path}.type", typ, detail)
            )
        if map_type not in ("atomic", "granular"):
            yield _not_supported(f"{path}.x-kubernetes-map-type", map_type, ("atomic", "granular"))
    list_type = node.get("x-kubernetes-list-type")
    keys = node.get("x-kubernetes-list-map-keys")
    items = node.get("items") if isinstance(node.get("items"), Mapping) else None
    if list_type is not None:
        if typ != "array":
            detail = "must be array if x-kubernetes-list-type is specified"
            yield (
                required(f"{path}.type", detail)
                if not typ
                else invalid(f"{path}.type", typ, detail)
            )
        if list_type not in ("atomic", "map", "set"):
            yield _not_supported(
                f"{path}.x-kubernetes-list-type", list_type, ("atomic", "map", "set")
            )
        if list_type == "set" and items is not None and items.get("type") == "object":
            if items.get("x-kubernetes-map-type") != "atomic":
                yield invalid(
                    f"{path}.items.x-kubernetes-map-type",
                    items.get("x-kubernetes-map-type") or "",
                    "must be atomic as item of a list with x-kubernetes-list-type=set",
                )
    if keys and list_type != "map":
        detail = "must be map if x-kubernetes-list-map-keys is non-empty"
        yield (
            required(f"{path}.x-kubernetes-list-type", detail)
            if list_type is None
            else invalid(f"{path}.x-kubernetes-list-type", list_type, detail)
        )
    if list_type == "map":
        if not keys:
            yield required(
                f"{path}.x-kubernetes-list-map-keys",
                "must not be empty if x-kubernetes-list-type is map",
            )
        if items is None:
            yield required(f"{path}.items", "must have a schema if x-kubernetes-list-type is map")
        elif items.get("type") != "object":
            yield invalid(
                f"{path}.items.type",
                items.get("type") or "",
                "must be object if parent array's x-kubernetes-list-type is map",
            )
        elif keys:
            item_props = items.get("properties") or {}
            required_keys = set(items.get("required") or ())
            for key in keys:
                sub = item_props.get(key)
                if not isinstance(sub, Mapping):
                    yield invalid(
                        f"{path}.x-kubernetes-list-map-keys",
                        keys,
                        "entries must all be names of item properties",
                    )
                    continue
                if sub.get("type") not in ("string", "integer", "number", "boolean"):
                    yield invalid(
                        f"{path}.items.properties[{key}].type",
                        sub.get("type") or "",
                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                    )
                if key not in required_keys and "default" not in sub:
                    yield required(
                        f"{path}.items.properties[{key}].default",
                        "this property is in x-kubernetes-list-map-keys, so it must have a "
                        "default or be a required property",
                    )
