"""CustomResourceDefinition manifests generated from the models.

The models are the single source of truth: the CRD's schema is the model's JSON schema turned
into a Kubernetes structural schema, so the API server refuses what `parse` refuses (as far as
OpenAPI can say it) and prunes what the model does not know.

pydantic emits JSON Schema 2020-12; a structural schema differs in ways the conversion handles:
no `$ref` (definitions are inlined), no `anyOf` with `null` (it becomes `nullable`), no
`additionalProperties: false` (pruning already drops unknown fields), boolean `exclusiveMinimum`,
and no `title`s, which kubectl explain would show as noise.
"""

from __future__ import annotations

import copy
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
    return {
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
