"""The base of our kinds: the object envelope, parsing, and what the CRD needs to know of a kind.

Everything a CustomResourceDefinition says beyond the schema (names, scope, printer columns,
whether there is a status) is declared next to the model in a `KindInfo`, so the manifest is
generated from one place and cannot disagree with the code that reads the objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self

from pydantic import ValidationError

from nodeops.api.errors import invalid_resource
from nodeops.api.meta import API_VERSION, ApiModel, ObjectMeta

__all__ = ["KindInfo", "PrinterColumn", "Resource"]


@dataclass(frozen=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry: what `kubectl get` shows for the kind."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str = ""
    priority: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


AGE_COLUMN = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


@dataclass(frozen=True)
class KindInfo:
    """The names and serving options of a kind, as its CustomResourceDefinition declares them."""

    kind: str
    plural: str
    scope: Literal["Cluster", "Namespaced"]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ("nodeops",)
    printer_columns: tuple[PrinterColumn, ...] = ()
    has_status: bool = False
    """Whether objects have a status, served through the `/status` subresource."""

    @property
    def singular(self) -> str:
        return self.kind.lower()


class Resource(ApiModel):
    """An object of one of our kinds. Subclasses set `KIND_INFO`, `kind` and `spec`."""

    KIND_INFO: ClassVar[KindInfo]

    api_version: Literal["nodeops.dev/v1alpha1"] = API_VERSION
    """APIVersion defines the versioned schema of this representation of an object."""
    metadata: ObjectMeta
    """Standard object's metadata."""

    @classmethod
    def parse(cls, obj: Mapping[str, Any]) -> Self:
        """Validate an object as read from the API server or a manifest.

        Raises InvalidResource naming the first offending field, with every problem in `causes`.
        """
        try:
            return cls.model_validate(obj if isinstance(obj, dict) else dict(obj))
        except ValidationError as e:
            raise invalid_resource(e, cls) from None

    @property
    def name(self) -> str:
        return self.metadata.name
