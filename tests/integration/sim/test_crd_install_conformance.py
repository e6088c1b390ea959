"""CRD installation answered as kube-apiserver answers it.

The int64 sentinel bounds that once kept node cycling off real clusters were accepted here for
months: these tests hold the simulator to kube-apiserver's refusals, messages included (the
boundary message is the one kube-apiserver v1.36 gave for nodeops's own CRDs), and show that a
CRD written as controller-gen writes them (`required: [metadata, spec]`) holds objects.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeops.api import all_crds
from nodeops.sim.server.app import SimServer
from tests.integration.sim.conftest import Api
from tests.kubectl import kubectl

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGETS = "/apis/example.dev/v1/namespaces/default/widgets"


def crd(spec_schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"spec": spec_schema}, **extra}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.dev"},
        "spec": {
            "group": "example.dev",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def widget(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "example.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": spec,
    }


def int64_sentinels(default: bool) -> dict[str, Any]:
    """The schema pydantic's int bounds once produced: an int64 bounded by its own range."""
    concurrency: dict[str, Any] = {
        "type": "integer",
        "minimum": -(2**63),
        "maximum": 2**63 - 1,
    }
    total: dict[str, Any] = {
        "type": "integer",
        "format": "int64",
        "minimum": 0,
        "maximum": 2**63 - 1,
    }
    if default:
        concurrency["default"] = 0
        total["default"] = 0
    return {"type": "object", "properties": {"concurrency": concurrency, "total": total}}


async def test_every_generated_crd_installs_and_is_established(api: Api) -> None:
    for definition in all_crds():
        status, body = await api.post(CRDS, definition)
        assert status == 201, body
        name = definition["metadata"]["name"]
        status, body = await api.get(f"{CRDS}/{name}")
        conditions = {c["type"]: c["status"] for c in body["status"]["conditions"]}
        assert conditions["Established"] == "True"


async def test_int64_sentinel_bounds_with_defaults_are_refused_as_kube_refuses_them(
    api: Api,
) -> None:
    status, body = await api.post(CRDS, crd(int64_sentinels(default=True)))
    assert status == 422, body
    root = "spec.validation.openAPIV3Schema.properties[spec]"
    expected = [
        (
            f"{root}.properties[concurrency].default",
            'Invalid value: "": Minimum boundary value must be of type integer (default format) in ',
        ),
        (
            f"{root}.properties[concurrency].default",
            'Invalid value: "": Maximum boundary value must be of type integer (default format) in ',
        ),
        (
            f"{root}.properties[total].default",
            'Invalid value: "": Maximum boundary value must be of type integer with format int64 in ',
        ),
    ]
    assert [(c["field"], c["message"]) for c in body["details"]["causes"]] == expected
    assert body["message"].startswith(
        'CustomResourceDefinition.apiextensions.k8s.io "widgets.example.dev" is invalid: ['
        f'{root}.properties[concurrency].default: Invalid value: "": Minimum boundary value '
        "must be of type integer (default format) in , "
    )
    status, _ = await api.get(f"{CRDS}/widgets.example.dev")
    assert status == 404


async def test_a_bound_without_default_is_refused_on_every_write_of_the_field(api: Api) -> None:
    status, body = await api.post(CRDS, crd(int64_sentinels(default=False)))
    assert status == 201, body
    status, body = await api.post(WIDGETS, widget({"total": 3}))
    assert status == 422, body
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "<nil>",
            "message": 'Invalid value: "": Maximum boundary value must be of type integer with '
            "format int64 in spec.total",
        }
    ]
    status, body = await api.post(WIDGETS, widget({}))
    assert status == 201, body


async def test_a_value_outside_its_format_is_refused(api: Api) -> None:
    port = {"type": "object", "properties": {"port": {"type": "integer", "format": "int32"}}}
    status, body = await api.post(CRDS, crd(port))
    assert status == 201, body
    status, body = await api.post(WIDGETS, widget({"port": 2**31}))
    assert status == 422, body
    assert body["details"]["causes"][0]["message"] == (
        'Invalid value: "": Checked value must be of type integer with format int32 in spec.port'
    )


@pytest.mark.parametrize(
    ("spec_schema", "field", "message"),
    [
        (
            {"type": "object", "properties": {"size": {"type": "integer", "default": "big"}}},
            "spec.validation.openAPIV3Schema.properties[spec].properties[size].default",
            "must be of type integer",
        ),
        (
            {
                "type": "object",
                "properties": {"size": {"type": "integer", "minimum": 1, "default": 0}},
            },
            "spec.validation.openAPIV3Schema.properties[spec].properties[size].default",
            "should be greater than or equal to 1",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "opts": {
                        "type": "object",
                        "properties": {"a": {"type": "string"}},
                        "default": {"a": "x", "b": "y"},
                    }
                },
            },
            "spec.validation.openAPIV3Schema.properties[spec].properties[opts].default",
            'Invalid value: {"a":"x","b":"y"}: must not have unknown fields',
        ),
        (
            {"type": "object", "properties": {"size": {"description": "no type"}}},
            "spec.validation.openAPIV3Schema.properties[spec].properties[size].type",
            "Required value: must not be empty for specified object fields",
        ),
        (
            {"type": "object", "properties": {"tags": {"type": "array"}}},
            "spec.validation.openAPIV3Schema.properties[spec].properties[tags].items",
            "Required value: must be specified",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
                },
            },
            "spec.validation.openAPIV3Schema.properties[spec].properties[tags].uniqueItems",
            "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "additionalProperties": {"type": "string"},
            },
            "spec.validation.openAPIV3Schema.properties[spec].additionalProperties",
            "Forbidden: additionalProperties and properties are mutual exclusive",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                    }
                },
            },
            "spec.validation.openAPIV3Schema.properties[spec].properties[ports].items.properties[name].default",
            "Required value: this property is in x-kubernetes-list-map-keys, so it must have a "
            "default or be a required property",
        ),
    ],
)
async def test_schemas_kube_refuses(
    api: Api, spec_schema: dict[str, Any], field: str, message: str
) -> None:
    status, body = await api.post(CRDS, crd(spec_schema))
    assert status == 422, body
    causes = {c["field"]: c["message"] for c in body["details"]["causes"]}
    assert field in causes, causes
    assert message in causes[field]


async def test_metadata_may_only_constrain_name_and_generate_name(api: Api) -> None:
    definition = crd({"type": "object"})
    props = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    props["metadata"] = {"type": "object", "properties": {"labels": {"type": "object"}}}
    status, body = await api.post(CRDS, definition)
    assert status == 422, body
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "field": "spec.validation.openAPIV3Schema.properties[metadata]",
            "message": "Forbidden: must not specify anything other than name and generateName, "
            "but metadata is implicitly specified",
        }
    ]
    props["metadata"] = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}},
    }
    status, body = await api.post(CRDS, definition)
    assert status == 201, body


async def test_versions_with_different_schemas_are_named_by_version(api: Api) -> None:
    definition = crd({"type": "object"})
    v2 = copy.deepcopy(definition["spec"]["versions"][0])
    v2.update(name="v2", storage=False)
    v2["schema"]["openAPIV3Schema"]["properties"]["spec"] = {"properties": {}}
    definition["spec"]["versions"].append(v2)
    status, body = await api.post(CRDS, definition)
    assert status == 422, body
    assert [c["field"] for c in body["details"]["causes"]] == [
        "spec.versions[1].schema.openAPIV3Schema.properties[spec].type"
    ]


async def test_required_metadata_at_the_top_as_controller_gen_writes_it(api: Api) -> None:
    definition = crd(
        {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]},
        required=["metadata", "spec"],
    )
    definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] = {
        "type": "object"
    }
    status, body = await api.post(CRDS, definition)
    assert status == 201, body
    status, body = await api.post(WIDGETS, widget({"size": 1}))
    assert status == 201, body
    status, body = await api.post(
        WIDGETS, {**widget({}), "spec": None} | {"metadata": {"name": "x"}}
    )
    assert status == 422, body
    status, body = await api.post(
        WIDGETS, {"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "y"}}
    )
    assert status == 422, body
    assert [(c["field"], c["message"]) for c in body["details"]["causes"]] == [
        ("spec", "Required value")
    ]


async def test_a_refused_update_leaves_the_stored_crd_alone(api: Api) -> None:
    status, created = await api.post(CRDS, crd({"type": "object"}))
    assert status == 201, created
    broken = copy.deepcopy(created)
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = {
        "type": "object",
        "properties": {"n": {"type": "integer", "maximum": 2**63 - 1, "default": 1}},
    }
    status, body = await api.put(f"{CRDS}/widgets.example.dev", broken)
    assert status == 422, body
    status, stored = await api.get(f"{CRDS}/widgets.example.dev")
    assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert stored["spec"]["versions"] == created["spec"]["versions"]


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_apply_of_a_refused_crd_prints_kube_apiservers_message(
    server: SimServer, tmp_path: Path
) -> None:
    config = server.write_kubeconfig(tmp_path / "kubeconfig")
    manifest = yaml.safe_dump(crd(int64_sentinels(default=True)))
    code, _, err = await kubectl(config, "apply", "--server-side", "-f", "-", stdin=manifest)
    assert code != 0
    # One object refused: kubectl lists the causes itself, one per line.
    assert 'The CustomResourceDefinition "widgets.example.dev" is invalid: \n' in err
    assert (
        "* spec.validation.openAPIV3Schema.properties[spec].properties[concurrency].default: "
        'Invalid value: "": Minimum boundary value must be of type integer (default format) in \n'
    ) in err
    generated = yaml.safe_dump_all(all_crds())
    code, out, err = await kubectl(config, "apply", "--server-side", "-f", "-", stdin=generated)
    assert code == 0, err
    assert out.count("serverside-applied") == len(all_crds())
