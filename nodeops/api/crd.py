"""CustomResourceDefinition manifests generated from the models.

The models are the single source of truth: the CRD's schema is the model's JSON schema turned
into a Kubernetes structural schema, so the API server refuses what `parse` refuses (as far as
OpenAPI can say it) and prunes what the model does not know.

pydantic emits JSON Schema 2020-12; a structural schema differs in ways the conversion handles:
no `$ref` (definitions are inlined), no `anyOf` with `null` (it becomes `nullable`), no
`additionalProperties: false` (pruning already drops unknown fields), boolean `exclusiveMinimum`,
and no `title`s, which kubectl explain would show as noise.

kube-apiserver also checks what a schema says against what it can hold: a boundary it cannot
represent in the field's integer format (it reads boundaries as float64, so 2**63 - 1 becomes
2**63) refuses the whole CRD, and so does a default that its own node refuses. The bounds a
model writes only to say "fits a Go int64" are therefore dropped, and `check_crd` refuses, at
generation, any other schema a real server would refuse.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from nodeops.api.meta import GROUP, VERSION
from nodeops.api.resource import Resource

__all__ = [
    "GENERATED_HEADER",
    "KUSTOMIZATION_FILE",
    "UnsupportedSchema",
    "all_crds",
    "check_crd",
    "crd_file_name",
    "crd_file_text",
    "crd_for",
    "crd_kustomization_text",
    "crds_for",
    "render_crds_yaml",
    "render_yaml",
    "structural_schema",
    "write_all_crd_files",
    "write_crd_files",
]

GENERATED_HEADER: Final = (
    "# Generated from the models in nodeops.api by `python -m nodeops.api`; do not edit.\n"
)
KUSTOMIZATION_FILE: Final = "kustomization.yaml"

# The standard texts Kubernetes uses for the envelope fields of every kind.
_API_VERSION_DOC: Final = (
    "APIVersion defines the versioned schema of this representation of an object. Servers "
    "should convert recognized schemas to the latest internal value, and may reject unrecognized "
    "values. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
_KIND_DOC: Final = (
    "Kind is a string value representing the REST resource this object represents. Servers may "
    "infer this from the endpoint the client submits requests to. Cannot be updated. In "
    "CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
_ENVELOPE: Final = ("apiVersion", "kind", "metadata")


class UnsupportedSchema(ValueError):
    """A model uses a construct a structural schema cannot express (a recursive type, a union)."""


def structural_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema converted to a Kubernetes structural schema."""
    defs: Mapping[str, Any] = schema.get("$defs") or {}
    return _convert(schema, defs, ())


_DROPPED: Final = frozenset({"title", "$defs", "$schema", "examples"})
_SCALARS: Final = frozenset({"string", "integer", "number", "boolean"})


def _convert(
    node: Mapping[str, Any], defs: Mapping[str, Any], seen: tuple[str, ...]
) -> dict[str, Any]:
    node = dict(node)
    # A reference or a single-branch allOf is the referenced schema, refined by its siblings
    # (pydantic puts a field's own description next to the `$ref` of its type).
    target: dict[str, Any] = {}
    ref = node.pop("$ref", None)
    all_of = node.pop("allOf", None)
    if all_of is not None:
        if len(all_of) != 1:
            raise UnsupportedSchema("allOf with more than one schema")
        target = _convert(all_of[0], defs, seen)
    if ref is not None:
        name = str(ref).removeprefix("#/$defs/")
        if name in seen:
            raise UnsupportedSchema(f"recursive type {name} has no structural schema")
        target = _convert(defs[name], defs, (*seen, name))
    for key in ("anyOf", "oneOf"):
        branches = node.pop(key, None)
        if branches is not None:
            target = _union(branches, defs, seen)
    out = {**target, **_keywords(node, defs, seen)}
    if out.get("default", 0) is None:
        del out["default"]
    _drop_type_range_bounds(out)
    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        # Any value: kept as it comes, since the schema cannot say more about it.
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _union(
    branches: list[Mapping[str, Any]], defs: Mapping[str, Any], seen: tuple[str, ...]
) -> dict[str, Any]:
    rest = [b for b in branches if b.get("type") != "null"]
    nullable = len(rest) != len(branches)
    if len(rest) == 1:
        out = _convert(rest[0], defs, seen)
    elif {b.get("type") for b in rest} == {"integer", "string"} and len(rest) == 2:
        out = {"x-kubernetes-int-or-string": True}
    else:
        raise UnsupportedSchema(f"union of {[b.get('type', b.get('$ref')) for b in rest]}")
    if nullable:
        out["nullable"] = True
    return out


def _keywords(
    node: Mapping[str, Any], defs: Mapping[str, Any], seen: tuple[str, ...]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: _convert(sub, defs, seen) for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs, seen)
        elif key == "additionalProperties":
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, Mapping):
                out[key] = _convert(value, defs, seen)
            # False: unknown fields are pruned by the API server and refused by the model.
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "uniqueItems":
            if value:
                # The API server refuses uniqueItems (its check is quadratic); a set list type
                # says the same for scalars and is checked in linear time.
                items = node.get("items") or {}
                if items.get("type") not in _SCALARS:
                    raise UnsupportedSchema("a set of non-scalar items")
                out["x-kubernetes-list-type"] = "set"
        elif key == "description":
            out[key] = _reflow(str(value))
        else:
            # A copy: a definition used at several places must not share lists between them.
            out[key] = copy.deepcopy(value)
    return out


_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
# What kube-apiserver converts a boundary to, per integer format (no format: int64).
_INTEGER_RANGES: Final = {
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "int64": (_INT64_MIN, _INT64_MAX),
}


def _drop_type_range_bounds(node: dict[str, Any]) -> None:
    """A model bounds an int64 by its own range to keep Python's unbounded ints out; the CRD
    need not say it (the type says it) and cannot (kube-apiserver reads 2**63 - 1 as 2**63)."""
    if node.get("type") != "integer" or node.get("format", "int64") != "int64":
        return
    if node.get("minimum") == _INT64_MIN and not node.get("exclusiveMinimum"):
        del node["minimum"]
    if node.get("maximum") == _INT64_MAX and not node.get("exclusiveMaximum"):
        del node["maximum"]


def _go_float_text(value: float) -> str:
    """Go's strconv.FormatFloat(v, 'f', -1, 64): the shortest digits that read back as the same
    float64, written without an exponent (2**63 - 1 reads back as 9223372036854775808, and is
    written 9223372036854775808 with its last digits as zeros, 9223372036854776000)."""
    digits = repr(float(value))
    if "e" not in digits and "E" not in digits:
        return digits.removesuffix(".0")
    mantissa, exponent = digits.lower().split("e")
    sign = "-" if mantissa.startswith("-") else ""
    whole, _, fraction = mantissa.lstrip("-").partition(".")
    shift = int(exponent)
    all_digits = whole + fraction
    point = len(whole) + shift
    if point <= 0:
        return f"{sign}0.{'0' * -point}{all_digits}".rstrip("0").rstrip(".")
    if point >= len(all_digits):
        return sign + all_digits + "0" * (point - len(all_digits))
    return f"{sign}{all_digits[:point]}.{all_digits[point:]}"


def _bound_fits(value: float, node: Mapping[str, Any]) -> bool:
    """Whether kube-apiserver can hold this boundary in the node's type and format."""
    if node.get("type") != "integer":
        return True
    low, high = _INTEGER_RANGES.get(str(node.get("format", "int64")), _INTEGER_RANGES["int64"])
    text = _go_float_text(value)
    if not re.fullmatch(r"-?[0-9]+", text):
        return False
    return low <= int(text) <= high


def _reflow(text: str) -> str:
    """Docstring line breaks removed, paragraphs kept: kubectl explain wraps text itself."""
    paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def _resource_schema(kind: type[Resource]) -> dict[str, Any]:
    schema = structural_schema(kind.model_json_schema(by_alias=True, mode="validation"))
    props: dict[str, Any] = schema["properties"]
    props["apiVersion"] = {"description": _API_VERSION_DOC, "type": "string"}
    props["kind"] = {"description": _KIND_DOC, "type": "string"}
    # The API server owns metadata and validates it itself; a CRD may not say more about it.
    props["metadata"] = {"type": "object"}
    if kind.KIND_INFO.has_status and "status" not in props:
        props["status"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    required = [r for r in schema.get("required", ()) if r not in _ENVELOPE]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)
    schema.pop("nullable", None)
    return schema


_JSON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def check_crd(crd: Mapping[str, Any]) -> None:
    """Refuse, with the schema path, what kube-apiserver would refuse in a generated CRD: a
    boundary its format cannot hold, and a default that its own schema node refuses or that
    carries fields the node would prune. Raises `UnsupportedSchema`."""
    for version in crd["spec"]["versions"]:
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        path = f"spec.versions[{version['name']}].schema.openAPIV3Schema"
        problems = list(_schema_problems(schema, path))
        if problems:
            raise UnsupportedSchema(f"{crd['metadata']['name']}: " + "; ".join(problems))


def _schema_problems(node: Mapping[str, Any], path: str) -> Iterable[str]:
    for key in ("minimum", "maximum"):
        if key in node and not _bound_fits(node[key], node):
            yield (
                f"{path}.{key}: {node[key]} cannot be held by an integer of format "
                f"{node.get('format', 'int64')} as kube-apiserver reads it"
            )
    if "default" in node:
        yield from (f"{path}.default: {p}" for p in _value_problems(node["default"], node, ""))
    for name, sub in (node.get("properties") or {}).items():
        yield from _schema_problems(sub, f"{path}.properties[{name}]")
    for key in ("items", "additionalProperties"):
        sub = node.get(key)
        if isinstance(sub, Mapping):
            yield from _schema_problems(sub, f"{path}.{key}")


def _value_problems(value: Any, node: Mapping[str, Any], at: str) -> Iterable[str]:
    """Why `value` does not pass `node`, as far as a default can fail: type, enum, bounds,
    lengths, pattern, required and unknown fields."""
    where = at or "the value"
    if value is None:
        if not node.get("nullable"):
            yield f"{where} is null"
        return
    typ = node.get("type")
    if node.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            yield f"{where} is neither an integer nor a string"
        return
    expected = _JSON_TYPES.get(str(typ))
    if expected is not None and (
        not isinstance(value, expected) or (typ != "boolean" and isinstance(value, bool))
    ):
        yield f"{where} is not of type {typ}"
        return
    if "enum" in node and value not in node["enum"]:
        yield f"{where} is not one of {node['enum']}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in node and value < node["minimum"]:
            yield f"{where} is below the minimum {node['minimum']}"
        if "maximum" in node and value > node["maximum"]:
            yield f"{where} is above the maximum {node['maximum']}"
    if isinstance(value, str):
        if len(value) < node.get("minLength", 0) or len(value) > node.get("maxLength", len(value)):
            yield f"{where} has a length outside its bounds"
        if "pattern" in node and not re.search(node["pattern"], value):
            yield f"{where} does not match {node['pattern']}"
    if isinstance(value, list):
        if len(value) < node.get("minItems", 0) or len(value) > node.get("maxItems", len(value)):
            yield f"{where} has a number of items outside its bounds"
        items = node.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                yield from _value_problems(item, items, f"{at}[{i}]")
    if isinstance(value, dict):
        props = node.get("properties") or {}
        extra = node.get("additionalProperties")
        for name in node.get("required") or ():
            if name not in value:
                yield f"{at}.{name} is required" if at else f"{name} is required"
        for name, item in value.items():
            sub = props.get(name, extra if isinstance(extra, Mapping) else None)
            if sub is not None:
                yield from _value_problems(item, sub, f"{at}.{name}" if at else name)
            elif not node.get("x-kubernetes-preserve-unknown-fields") and extra is not True:
                field = f"{at}.{name}" if at else name
                yield f"{field} is not a field the schema declares (it would be pruned)"


def crd_for(kind: type[Resource]) -> dict[str, Any]:
    """The CustomResourceDefinition (apiextensions.k8s.io/v1) of one of our kinds."""
    info = kind.KIND_INFO
    names: dict[str, Any] = {
        "kind": info.kind,
        "listKind": f"{info.kind}List",
        "plural": info.plural,
        "singular": info.singular,
    }
    if info.short_names:
        names["shortNames"] = list(info.short_names)
    if info.categories:
        names["categories"] = list(info.categories)
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": _resource_schema(kind)},
    }
    if info.printer_columns:
        version["additionalPrinterColumns"] = [c.to_dict() for c in info.printer_columns]
    if info.has_status:
        version["subresources"] = {"status": {}}
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{info.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": names,
            "scope": info.scope,
            "versions": [version],
        },
    }
    check_crd(crd)
    return crd


def crds_for(kinds: Iterable[type[Resource]]) -> list[dict[str, Any]]:
    """The CRDs of `kinds`, ordered by name so that output does not depend on registration."""
    return sorted((crd_for(k) for k in kinds), key=lambda crd: str(crd["metadata"]["name"]))


def _registered() -> tuple[type[Resource], ...]:
    # The registry is the package itself, which imports this module: read it at call time.
    from nodeops.api import KINDS

    return KINDS


def all_crds() -> list[dict[str, Any]]:
    """The CRDs of every kind in `nodeops.api.KINDS`, ordered by name."""
    return crds_for(_registered())


def render_crds_yaml() -> str:
    """Every CRD as one multi-document YAML stream, ready for `kubectl apply -f -`."""
    return render_yaml(all_crds())


def write_all_crd_files(directory: str | Path) -> list[Path]:
    """Regenerate the per-kind manifests (`manifests/crds/` in the repository) in `directory`."""
    return write_crd_files(all_crds(), directory)


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line descriptions, and no anchors: a manifest is read by people."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def render_yaml(crds: Iterable[Mapping[str, Any]]) -> str:
    """Multi-document YAML; keys sorted as controller-gen sorts them, so output is stable."""
    docs = [
        yaml.dump(dict(crd), Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=100)
        for crd in crds
    ]
    return "".join(f"---\n{doc}" for doc in docs)


def crd_file_name(crd: Mapping[str, Any]) -> str:
    """controller-gen's naming, `<group>_<plural>.yaml`."""
    spec = crd["spec"]
    return f"{spec['group']}_{spec['names']['plural']}.yaml"


def crd_file_text(crd: Mapping[str, Any]) -> str:
    return GENERATED_HEADER + render_yaml([crd])


def crd_kustomization_text(file_names: Iterable[str]) -> str:
    """A kustomization listing the CRD files, so the directory is a kustomize base of its own
    and a new kind is installed by every overlay as soon as its file is regenerated."""
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(file_names),
    }
    return GENERATED_HEADER + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)


def write_crd_files(crds: Iterable[Mapping[str, Any]], directory: str | Path) -> list[Path]:
    """Write one file per CRD and a kustomization listing them into `directory`; the paths
    written, in order (the kustomization last)."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for crd in crds:
        path = target / crd_file_name(crd)
        path.write_text(crd_file_text(crd), encoding="utf-8")
        written.append(path)
    kustomization = target / KUSTOMIZATION_FILE
    kustomization.write_text(crd_kustomization_text(p.name for p in written), encoding="utf-8")
    written.append(kustomization)
    return written
