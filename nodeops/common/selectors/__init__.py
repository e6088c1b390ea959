"""Kubernetes label and field selectors with apimachinery's grammar, semantics and error texts.

The simulated API server answers `?labelSelector=` and `?fieldSelector=` the way kube-apiserver
does: the same inputs parse, the same ones fail with the same message (returned as 400 BadRequest),
and the canonical string form is identical, so clients that echo selectors back see no difference.
The runtime's informers and the drain engine parse their selectors with the same code.

The package is split by concern: label syntax, requirements, compiled label selectors, the label
grammar, and field selectors. Everything a caller needs is importable from here.
"""

from __future__ import annotations

from nodeops.common.gomessages import go_json, go_quote
from nodeops.common.selectors.errors import SelectorError
from nodeops.common.selectors.fields import (
    FIELDS_EVERYTHING,
    FieldRequirement,
    FieldSelector,
    escape_field_value,
    parse_field_selector,
)
from nodeops.common.selectors.labelparser import parse_label_selector
from nodeops.common.selectors.labels import (
    EVERYTHING,
    NOTHING,
    LabelSelector,
    format_labels,
    label_selector_from_object,
)
from nodeops.common.selectors.labelsyntax import label_key_errors
from nodeops.common.selectors.requirements import LabelRequirement

__all__ = [
    "EVERYTHING",
    "FIELDS_EVERYTHING",
    "NOTHING",
    "FieldRequirement",
    "FieldSelector",
    "LabelRequirement",
    "LabelSelector",
    "SelectorError",
    "escape_field_value",
    "format_labels",
    "go_json",
    "go_quote",
    "label_key_errors",
    "label_selector_from_object",
    "parse_field_selector",
    "parse_label_selector",
]
