"""Shared foundations of our API: group and version, the model base class, integer widths, metadata.

Kubernetes has no schema for a field beyond its CRD, so the models are what keeps a controller
from acting on a manifest the API server would have stored but we cannot honour. They are
therefore as strict as the API server: no type coercion (`"5"` is not an integer), no unknown
fields, and camelCase on the wire.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "API_VERSION",
    "GROUP",
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "VERSION",
    "ApiModel",
    "Int32",
    "NonNegativeInt64",
    "ObjectMeta",
]

GROUP: Final = "nodeops.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "nodeops.dev/v1alpha1"
"""`GROUP/VERSION`, spelled out so that type checkers see the literal."""

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1

Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX, json_schema_extra={"format": "int32"})]
"""A Go `int32`: the bounds keep a value the Go side of the ecosystem could not hold out."""

NonNegativeInt64 = Annotated[int, Field(ge=0, le=INT64_MAX, json_schema_extra={"format": "int64"})]
"""A Go `int64` that may not be negative, such as a generation."""


class ApiModel(BaseModel):
    """Base of every model of our API: Kubernetes' JSON shape, checked as the API server checks it.

    Models are frozen because they are read from shared informer caches; a reconciler that
    wants another value builds a new object instead of changing one others also see.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        strict=True,
        frozen=True,
        use_attribute_docstrings=True,
    )

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, and unset optional fields left out as `omitempty` does."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ObjectMeta(ApiModel):
    """The part of `metadata` our code reads; the API server owns and validates the rest."""

    model_config = ConfigDict(extra="allow")

    name: str
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: NonNegativeInt64 | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
