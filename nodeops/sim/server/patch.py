"""PATCH bodies applied the way kube-apiserver applies them.

Three pieces of kube decide what a PATCH does, and each part of this module follows one of them:

* the patch handler (``k8s.io/apiserver/pkg/endpoints/handlers/patch.go``) picks the mechanism from
  the Content-Type and turns every failure into an HTTP status;
* ``gopkg.in/evanphx/json-patch.v4`` applies RFC 6902 JSON patches and RFC 7386 merge patches;
* ``k8s.io/apimachinery/pkg/util/strategicpatch`` applies strategic merge patches, steered by the
  ``patchStrategy``/``patchMergeKey`` tags of the Go API types.

Clients (kubectl, client-go, the operator) are written against the observable results, quirks
included, so the quirks are kept: JSON patch ``replace`` of a missing object member adds it,
``copy`` from a missing member writes ``null``, strategic merge puts list items that only the patch
names *before* the server's items, ``$patch: merge`` is rejected, and so on.

Failures, with the code that produces them in kube:

==========================================================  =====  ========================
failure                                                     code   reason
==========================================================  =====  ========================
Content-Type no route consumes (go-restful)                 415    UnsupportedMediaType
Content-Type the patch handler does not accept              415    UnsupportedMediaType
strategic merge patch of a custom resource                  415    UnsupportedMediaType
body that does not decode (not a JSON patch list / object)  400    BadRequest
merge patch ``null``                                        400    BadRequest
more than 10000 JSON patch operations                       413    RequestEntityTooLarge
JSON patch operation that fails (test, missing path, ...)   422    Invalid
strategic ``$retainKeys`` / ``$setElementOrder`` /
``$deleteFromPrimitiveList`` in the wrong shape             400    BadRequest
strategic merge of a list of lists                          422    Invalid
any other strategic merge error                             500    "" (StatusReasonUnknown)
a patch that makes kube's Go code panic                     500    "" (plain-text answer)
==========================================================  =====  ========================

The 422 answers carry kube's generic text (``NewGenericServerResponse`` with no causes), so the
underlying error is not sent to clients; it is kept on ``PatchError.cause`` for logs and tests.

The handler decodes bodies with the default ``fieldValidation=Warn``: unknown fields only warn, so
bodies of the wrong JSON type fail while they are decoded, before any patching starts.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeAlias

from nodeops.common.gomessages import go_quote
from nodeops.sim.server.errors import ApiError

__all__ = [
    "PatchError",
    "apply_json_patch",
    "apply_merge_patch",
    "apply_strategic_merge_patch",
    "go_json_sorted",
    "patch_decode_error",
    "patch_type_for_content_type",
    "strategic_merge_kinds",
]


class PatchError(ApiError):
    """A patch kube would refuse, with the status code, reason and message kube answers with.

    ``cause`` is the error text of the Go code underneath when kube does not send it to the client
    (the generic 422 of a failed JSON patch, for instance), so logs and tests can still see why.
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        cause: str | None = None,
    ) -> None:
        super().__init__(code, reason, message, details)
        self.cause = cause


# --------------------------------------------------------------------------------------------
# Content types
# --------------------------------------------------------------------------------------------

_PATCH_TYPES: Mapping[str, str] = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}
# The order kube lists them in its 415 message (installer.go, customresource_handler.go); the
# CBOR apply type is behind an alpha feature gate that is off by default, so it is not offered.
_BUILTIN_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
_CUSTOM_RESOURCE_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)


def _unsupported_media_type(accepted: tuple[str, ...]) -> PatchError:
    return PatchError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def patch_type_for_content_type(content_type: str, *, custom_resource: bool = False) -> str:
    """Map a PATCH Content-Type to "json", "merge", "strategic" or "apply", or raise 415.

    Built-in resources are routed by go-restful first, which splits the header on commas, drops
    parameters, trims spaces and answers a bare "415: Unsupported Media Type" when no type
    matches. The patch handler then looks again, more strictly: it only cuts at the first ``;``
    and compares the rest verbatim, answering with the list of accepted types. Custom resources
    skip go-restful and never accept strategic merge patches.
    """
    if not custom_resource and not _go_restful_consumes(content_type):
        raise PatchError(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})
    accepted = _CUSTOM_RESOURCE_PATCH_TYPES if custom_resource else _BUILTIN_PATCH_TYPES
    cut = content_type.find(";")
    media_type = content_type[:cut] if cut > 0 else content_type
    if media_type not in accepted:
        raise _unsupported_media_type(accepted)
    return _PATCH_TYPES[media_type]


def _go_restful_consumes(content_type: str) -> bool:
    for candidate in content_type.split(","):
        media_type = candidate.split(";", 1)[0].strip(" ")
        if media_type in _BUILTIN_PATCH_TYPES:
            return True
    return False


# --------------------------------------------------------------------------------------------
# Shared helpers: JSON values seen through Go's eyes
# --------------------------------------------------------------------------------------------

_MAP = "map[string]interface {}"
_SLICE = "[]interface {}"
_UNPROCESSABLE = "the server rejected our request due to an error in our request"
_PANIC = "This request caused apiserver to panic. Look in the logs for details."


class _GoPanic(Exception):
    """Kube's Go code would panic here; the apiserver recovers and answers a plain-text 500."""


def _panic_error() -> PatchError:
    return PatchError(500, "", _PANIC)


def _unprocessable(cause: str) -> PatchError:
    """The 422 of ``NewGenericServerResponse``: generic text, empty details, cause dropped."""
    return PatchError(422, "Invalid", _UNPROCESSABLE, {}, cause=cause)


def _copy(value: Any) -> Any:
    """Deep copy of a JSON value; the public functions never touch their arguments."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _go_type(value: Any) -> str:
    """The Go type a decoded JSON value has in apimachinery (ints are preserved as int64)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return _MAP
    if isinstance(value, list):
        return _SLICE
    return type(value).__name__


def _go_eq(left: Any, right: Any) -> bool:
    """Go's ``==`` on two ``interface{}`` values: types must match, and maps/slices panic."""
    kind = _go_type(left)
    if kind != _go_type(right):
        return False
    if kind in (_MAP, _SLICE):
        raise _GoPanic(f"comparing uncomparable type {kind}")
    return bool(left == right)


def _go_key(value: Any) -> tuple[str, Any]:
    """A value used as a Go ``map[interface{}]`` key; maps and slices panic as unhashable."""
    kind = _go_type(value)
    if kind in (_MAP, _SLICE):
        raise _GoPanic(f"hash of unhashable type {kind}")
    return kind, value


def _json_kind(value: Any) -> str:
    """How encoding/json names a JSON value in its UnmarshalTypeError messages."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number"


def _go_float(value: float) -> str:
    """Go's ``%v`` of a float64: shortest digits, exponent form outside [1e-4, 1e6)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    parts = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(str(d) for d in parts.digits)
    assert isinstance(parts.exponent, int)
    point = len(digits) + parts.exponent
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _go_format(value: Any, verb: str = "v") -> str:
    """Go's ``%v``/``%s`` of a decoded JSON value, for error messages that embed one."""
    kind = _go_type(value)
    if kind == "nil":
        return "<nil>" if verb == "v" else "%!s(<nil>)"
    if kind == "string":
        return str(value)
    if kind == _MAP:
        inner = " ".join(f"{k}:{_go_format(value[k], verb)}" for k in sorted(value))
        return f"map[{inner}]"
    if kind == _SLICE:
        return "[" + " ".join(_go_format(v, verb) for v in value) + "]"
    if kind == "bool":
        text = "true" if value else "false"
    elif kind == "float64":
        text = _go_float(value)
    else:
        text = str(value)
    return text if verb == "v" else f"%!s({kind}={text})"


def _go_type_name(value: Any) -> str:
    """``reflect.TypeOf(v)`` printed with ``%s``, as mergepatch.ErrBadArgType does."""
    return "%!s(<nil>)" if value is None else _go_type(value)


# --------------------------------------------------------------------------------------------
# JSON merge patch (RFC 7386, evanphx/json-patch MergePatch)
# --------------------------------------------------------------------------------------------


def apply_merge_patch(original: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Apply an RFC 7386 merge patch as kube does for ``application/merge-patch+json``.

    The handler first decodes the body into a ``map[string]interface{}``, so anything but an
    object fails there with 400; ``null`` decodes to a nil map and is then refused by
    json-patch's MergePatch as "Invalid JSON Patch", also 400. Objects replace non-objects
    outright, ``null`` members delete, and nulls inside values that land where nothing was are
    dropped - but not inside an array that replaces an object, as json-patch does.
    """
    if patch is None:
        raise PatchError(400, "BadRequest", "Invalid JSON Patch")
    if not isinstance(patch, dict):
        raise PatchError(
            400,
            "BadRequest",
            f"error decoding patch: json: cannot unmarshal {_json_kind(patch)} "
            "into Go value of type map[string]interface {}",
        )
    document: dict[str, Any] = _copy(original)
    _merge_documents(document, _copy(patch))
    return document


def _merge_documents(document: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            document.pop(key, None)
        elif document.get(key) is None:
            _prune_nulls(value)
            document[key] = value
        else:
            document[key] = _merge_value(document[key], value)


def _merge_value(current: Any, patch: Any) -> Any:
    if not isinstance(current, dict):
        _prune_nulls(patch)
        return patch
    if not isinstance(patch, dict):
        return patch
    _merge_documents(current, patch)
    return current


def _prune_nulls(value: Any) -> None:
    """Drop null members at any depth; null array elements stay, as in json-patch."""
    if isinstance(value, dict):
        for key in [k for k, v in value.items() if v is None]:
            del value[key]
        for member in value.values():
            _prune_nulls(member)
    elif isinstance(value, list):
        for element in value:
            if element is not None:
                _prune_nulls(element)


# --------------------------------------------------------------------------------------------
# JSON patch (RFC 6902, evanphx/json-patch v4 Patch.Apply)
# --------------------------------------------------------------------------------------------

_MAX_JSON_PATCH_OPERATIONS = 10000
# kube-apiserver's default --json-patch-max-copy-bytes (server/config.go), which it installs as
# json-patch's AccumulatedCopySizeLimit.
_JSON_PATCH_MAX_COPY_BYTES = 3 * 1024 * 1024
_POINTER_ESCAPE = re.compile("~[01]")
_GO_INT = re.compile("[+-]?[0-9]+")
_JSON_PATCH_STRING_FIELDS = ("op", "path", "from")
_FIND_KIND_TYPE = (
    'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
    'Kind string "json:\\"kind,omitempty\\"" }'
)


class _JsonPatchFailure(Exception):
    """An error returned by json-patch's Apply; kube answers it with the generic 422."""


def apply_json_patch(original: dict[str, Any], ops: Any) -> dict[str, Any]:
    """Apply an RFC 6902 JSON patch as kube does for ``application/json-patch+json``.

    Status codes follow ``jsonPatcher.applyJSPatch`` in the patch handler:

    * a body that does not decode as a list of operations (``op``, ``path`` and ``from`` must be
      strings) is a 400 BadRequest whose message starts with "error decoding patch: ";
    * more than 10000 operations is a 413 RequestEntityTooLarge;
    * every error from applying the operations - a failed ``test``, a path that does not
      resolve, an array index out of bounds, an unknown ``op`` - is wrapped by
      ``NewGenericServerResponse(422, ...)``: reason ``Invalid``, message "the server rejected our
      request due to an error in our request" and no causes. That is why kubectl prints "The
      request is invalid: the server rejected our request due to an error in our request" for a
      failed test. The json-patch text is on ``PatchError.cause``.

    A ``null`` body is an empty patch. Paths are RFC 6901 pointers (``~1`` is ``/``, ``~0`` is
    ``~``); ``-`` appends to an array and negative indices count from its end, which v4 allows.
    Scalars compare by value in ``test``.
    """
    _check_json_patch_body(ops)
    operations: list[Any] = _copy(ops) if ops is not None else []
    if len(operations) > _MAX_JSON_PATCH_OPERATIONS:
        raise PatchError(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: The allowed maximum operations in a JSON patch is "
            f"{_MAX_JSON_PATCH_OPERATIONS}, got {len(operations)}",
        )
    patcher = _JsonPatcher(_copy(original))
    try:
        for operation in operations:
            patcher.apply(operation if isinstance(operation, dict) else {})
    except _JsonPatchFailure as failure:
        raise _unprocessable(str(failure)) from None
    except _GoPanic:
        raise _panic_error() from None
    if not isinstance(patcher.root, dict):
        raise _undecodable_object(patcher.root)
    return patcher.root


def _check_json_patch_body(ops: Any) -> None:
    """The strict decode into ``[]jsonPatchOp`` the handler does before json-patch sees it."""

    def fail(detail: str) -> PatchError:
        return PatchError(
            400, "BadRequest", f"error decoding patch: json: cannot unmarshal {detail}"
        )

    if ops is None:
        return
    if not isinstance(ops, list):
        raise fail(f"{_json_kind(ops)} into Go value of type []handlers.jsonPatchOp")
    for operation in ops:
        if operation is None:
            continue
        if not isinstance(operation, dict):
            raise fail(f"{_json_kind(operation)} into Go value of type handlers.jsonPatchOp")
        for name, value in operation.items():
            if (
                name in _JSON_PATCH_STRING_FIELDS
                and value is not None
                and not isinstance(value, str)
            ):
                raise fail(
                    f"{_json_kind(value)} into Go struct field jsonPatchOp.{name} of type string"
                )


def _undecodable_object(root: Any) -> PatchError:
    """What the handler answers when the patched document no longer decodes into an object."""
    text = json.dumps(root, separators=(",", ":"), ensure_ascii=False)
    detail = (
        "couldn't get version/kind; json parse error: json: cannot unmarshal "
        f"{_json_kind(root)} into Go value of type {_FIND_KIND_TYPE}"
    )
    body = f"Invalid value: {json.dumps(text, ensure_ascii=False)}: {detail}"
    return PatchError(
        422,
        "Invalid",
        f' "" is invalid: patch: {body}',
        {"causes": [{"reason": "FieldValueInvalid", "message": body, "field": "patch"}]},
    )


def patch_decode_error(
    patch_type: str, patch: Any, patched: dict[str, Any], problem: str
) -> PatchError:
    """The 422 when the patched object does not decode into its type (a time that does not parse).

    JSON and merge patches name the patched document's JSON (as encoding/json writes a map:
    sorted keys, compact, HTML characters escaped); strategic merge patches name the patch itself
    printed with ``%+v``.
    """
    if patch_type == "strategic":
        shown = _go_format(patch)
    else:
        shown = go_json_sorted(patched)
    body = f"Invalid value: {go_quote(shown)}: {problem}"
    return PatchError(
        422,
        "Invalid",
        f' "" is invalid: patch: {body}',
        {"causes": [{"reason": "FieldValueInvalid", "message": body, "field": "patch"}]},
    )


def go_json_sorted(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _decode_token(token: str) -> str:
    return _POINTER_ESCAPE.sub(lambda m: "/" if m.group() == "~1" else "~", token)


def _go_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _atoi(text: str) -> int:
    """``strconv.Atoi``: optional sign and ASCII digits only, within int64."""
    if not _GO_INT.fullmatch(text):
        raise _JsonPatchFailure(f"strconv.Atoi: parsing {_go_quote(text)}: invalid syntax")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise _JsonPatchFailure(f"strconv.Atoi: parsing {_go_quote(text)}: value out of range")
    return value


def _invalid_index(index: int) -> _JsonPatchFailure:
    return _JsonPatchFailure(f"Unable to access invalid index: {index}: invalid index referenced")


def _container_get(container: dict[str, Any] | list[Any], key: str) -> Any:
    """A member or element; a missing member reads as null, a bad index is an error."""
    if isinstance(container, dict):
        return container.get(key)
    index = _atoi(key)
    if index < 0:
        if index < -len(container):
            raise _invalid_index(index)
        index += len(container)
    if index >= len(container):
        raise _invalid_index(index)
    return container[index]


def _container_set(container: dict[str, Any] | list[Any], key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
        return
    index = _atoi(key)
    if index < 0:
        if index < -len(container):
            raise _invalid_index(index)
        index += len(container)
    container[index] = value


def _container_add(container: dict[str, Any] | list[Any], key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
        return
    if key == "-":
        container.append(value)
        return
    try:
        index = _atoi(key)
    except _JsonPatchFailure as failure:
        raise _JsonPatchFailure(f"value was not a proper array index: '{key}': {failure}") from None
    size = len(container) + 1
    if index >= size:
        raise _invalid_index(index)
    if index < 0:
        if index < -size:
            raise _invalid_index(index)
        index += size
    container.insert(index, value)


def _container_remove(container: dict[str, Any] | list[Any], key: str) -> None:
    if isinstance(container, dict):
        if key not in container:
            raise _JsonPatchFailure(f"Unable to remove nonexistent key: {key}: missing value")
        del container[key]
        return
    index = _atoi(key)
    if index >= len(container):
        raise _invalid_index(index)
    if index < 0:
        if index < -len(container):
            raise _invalid_index(index)
        index += len(container)
    del container[index]


def _json_patch_equal(current: Any, wanted: Any) -> bool:
    """json-patch's ``lazyNode.equal``: null members compare, null array elements panic."""
    if isinstance(current, dict):
        if not isinstance(wanted, dict) or len(current) != len(wanted):
            return False
        for key, value in current.items():
            if key not in wanted:
                return False
            other = wanted[key]
            if (value is None) != (other is None):
                return False
            if value is not None and not _json_patch_equal(value, other):
                return False
        return True
    if isinstance(current, list):
        if not isinstance(wanted, list) or len(current) != len(wanted):
            return False
        for value, other in zip(current, wanted, strict=True):
            if value is None or other is None:
                raise _GoPanic("nil pointer dereference")
            if not _json_patch_equal(value, other):
                return False
        return True
    if wanted is None or isinstance(wanted, dict | list):
        return False
    if isinstance(current, bool) or isinstance(wanted, bool):
        return type(current) is type(wanted) and current == wanted
    if isinstance(current, str) or isinstance(wanted, str):
        return isinstance(current, str) and isinstance(wanted, str) and current == wanted
    return bool(current == wanted)


def _json_size(value: Any) -> int:
    """Bytes ``json.Marshal`` writes for a copied value (it escapes <, > and & as \\u003c...)."""
    if value is None:
        return 0
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    escaped = sum(text.count(c) for c in "<>&")
    separators = text.count("\u2028") + text.count("\u2029")
    return len(text.encode()) + 5 * escaped + 3 * separators


class _JsonPatcher:
    """The document being patched and the copy budget, one method per operation."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.copied = 0

    def apply(self, operation: dict[str, Any]) -> None:
        kind = operation.get("op")
        kind = kind if isinstance(kind, str) else "unknown"
        handler = {
            "add": self._add,
            "remove": self._remove,
            "replace": self._replace,
            "move": self._move,
            "test": self._test,
            "copy": self._copy,
        }.get(kind)
        if handler is None:
            raise _JsonPatchFailure(f"Unexpected kind: {kind}")
        handler(operation)

    def _find(self, path: str) -> tuple[dict[str, Any] | list[Any], str] | None:
        """json-patch's findObject: every step but the last must be an existing container."""
        tokens = path.split("/")
        if len(tokens) < 2:
            return None
        node = self.root
        for token in tokens[1:-1]:
            try:
                node = _container_get(node, _decode_token(token))
            except _JsonPatchFailure:
                return None
            if not isinstance(node, dict | list):
                return None
        return node, _decode_token(tokens[-1])

    @staticmethod
    def _path(operation: dict[str, Any]) -> str | None:
        path = operation.get("path")
        return path if isinstance(path, str) else None

    @staticmethod
    def _from(operation: dict[str, Any]) -> str | None:
        source = operation.get("from")
        return source if isinstance(source, str) else None

    def _add(self, operation: dict[str, Any]) -> None:
        path = self._path(operation)
        if path is None:
            raise _JsonPatchFailure("add operation failed to decode path: missing value")
        found = self._find(path)
        if found is None:
            raise _JsonPatchFailure(
                f'add operation does not apply: doc is missing path: "{path}": missing value'
            )
        try:
            _container_add(*found, operation.get("value"))
        except _JsonPatchFailure as failure:
            raise _JsonPatchFailure(f"error in add for path: '{path}': {failure}") from None

    def _remove(self, operation: dict[str, Any]) -> None:
        path = self._path(operation)
        if path is None:
            raise _JsonPatchFailure("remove operation failed to decode path: missing value")
        found = self._find(path)
        if found is None:
            raise _JsonPatchFailure(
                f'remove operation does not apply: doc is missing path: "{path}": missing value'
            )
        try:
            _container_remove(*found)
        except _JsonPatchFailure as failure:
            raise _JsonPatchFailure(f"error in remove for path: '{path}': {failure}") from None

    def _replace(self, operation: dict[str, Any]) -> None:
        path = self._path(operation)
        if path is None:
            raise _JsonPatchFailure(
                "replace operation failed to decode path: "
                "operation missing path field: missing value"
            )
        if path == "":
            if "value" not in operation:
                raise _GoPanic("nil pointer dereference")
            value = operation["value"]
            if not isinstance(value, dict | list):
                raise _JsonPatchFailure(
                    "replace operation value must be object or array: %!w(<nil>)"
                )
            self.root = value
            return
        found = self._find(path)
        if found is None:
            raise _JsonPatchFailure(
                f"replace operation does not apply: doc is missing path: {path}: missing value"
            )
        try:
            _container_get(*found)
        except _JsonPatchFailure:
            raise _JsonPatchFailure(
                f"replace operation does not apply: doc is missing key: {path}: missing value"
            ) from None
        try:
            _container_set(*found, operation.get("value"))
        except _JsonPatchFailure as failure:
            raise _JsonPatchFailure(f"error in remove for path: '{path}': {failure}") from None

    def _move(self, operation: dict[str, Any]) -> None:
        source = self._from(operation)
        if source is None:
            raise _JsonPatchFailure(
                "move operation failed to decode from: operation, missing from field: missing value"
            )
        found = self._find(source)
        if found is None:
            raise _JsonPatchFailure(
                f"move operation does not apply: doc is missing from path: {source}: missing value"
            )
        container, key = found
        try:
            value = _container_get(container, key)
            _container_remove(container, key)
        except _JsonPatchFailure as failure:
            raise _JsonPatchFailure(f"error in move for path: '{key}': {failure}") from None
        path = self._path(operation)
        if path is None:
            raise _JsonPatchFailure(
                "move operation failed to decode path: operation missing path field: missing value"
            )
        target = self._find(path)
        if target is None:
            raise _JsonPatchFailure(
                "move operation does not apply: doc is missing destination path: "
                f"{path}: missing value"
            )
        try:
            _container_add(*target, value)
        except _JsonPatchFailure as failure:
            raise _JsonPatchFailure(f"error in move for path: '{path}': {failure}") from None

    def _test(self, operation: dict[str, Any]) -> None:
        path = self._path(operation)
        if path is None:
            raise _JsonPatchFailure(
                "test operation failed to decode path: operation missing path field: missing value"
            )
        if path == "":
            if "value" not in operation:
                raise _GoPanic("nil pointer dereference")
            if _json_patch_equal(self.root, operation["value"]):
                return
            raise _JsonPatchFailure(f"testing value {path} failed: test failed")
        found = self._find(path)
        if found is None:
            raise _JsonPatchFailure(
                f"test operation does not apply: is missing path: {path}: missing value"
            )
        try:
            current = _container_get(*found)
        except _JsonPatchFailure as failure:
            raise _JsonPatchFailure(f"error in test for path: '{path}': {failure}") from None
        if current is None:
            if operation.get("value") is None:
                return
        elif "value" in operation and _json_patch_equal(current, operation["value"]):
            return
        raise _JsonPatchFailure(f"testing value {path} failed: test failed")

    def _copy(self, operation: dict[str, Any]) -> None:
        source = self._from(operation)
        if source is None:
            raise _JsonPatchFailure(
                "copy operation failed to decode from: operation, missing from field: missing value"
            )
        found = self._find(source)
        if found is None:
            raise _JsonPatchFailure(
                f"copy operation does not apply: doc is missing from path: {source}: missing value"
            )
        try:
            value = _container_get(*found)
        except _JsonPatchFailure as failure:
            raise _JsonPatchFailure(f"error in copy for from: '{source}': {failure}") from None
        path = self._path(operation)
        if path is None:
            raise _JsonPatchFailure("copy operation failed to decode path: missing value")
        target = self._find(path)
        if target is None:
            raise _JsonPatchFailure(
                "copy operation does not apply: doc is missing destination path: "
                f"{path}: missing value"
            )
        self.copied += _json_size(value)
        if self.copied > _JSON_PATCH_MAX_COPY_BYTES:
            raise _JsonPatchFailure(
                "Unable to complete the copy, the accumulated size increase of copy is "
                f"{self.copied}, exceeding the limit {_JSON_PATCH_MAX_COPY_BYTES}"
            )
        try:
            _container_add(*target, _copy(value))
        except _JsonPatchFailure as failure:
            raise _JsonPatchFailure(f"error while adding value during copy: {failure}") from None


# --------------------------------------------------------------------------------------------
# Strategic merge patch: the schema
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    """The patch metadata of one field and the fields of its value (or of its list elements).

    ``strategy`` is the tag with ``retainKeys`` dropped: that part only tells patch *producers*
    to send ``$retainKeys``; applying a patch follows the directive, whatever the tag says.
    ``elem`` is the Go kind of list elements, which one error message names.
    """

    merge_key: str = ""
    strategy: str = ""
    fields: Mapping[str, _Field] = field(default_factory=dict)
    elem: str = "struct"

    def child(self, name: str) -> _Field:
        """Fields the table does not list have no tags: maps merge, lists are replaced."""
        return self.fields.get(name, _PLAIN)


_PLAIN = _Field()
# A table maps dotted field paths to a field's metadata, or to the table of a nested struct, so
# the Pod spec is written once and hung under every template.
_Table: TypeAlias = "Mapping[str, _Field | _Table]"


def _keyed(merge_key: str, table: _Table | None = None) -> _Field:
    """``patchStrategy:"merge" patchMergeKey:"<merge_key>"`` on a list of structs."""
    return _Field(merge_key=merge_key, strategy="merge", fields=_tree(table or {}))


# ``patchStrategy:"merge"`` on a list of strings: merged as an ordered set.
_STRING_SET = _Field(strategy="merge", elem="string")
# ``patchStrategy:"replace"`` on a struct: the patch's value replaces the whole struct.
_REPLACED = _Field(strategy="replace")


def _tree(table: _Table) -> Mapping[str, _Field]:
    out: dict[str, _Field] = {}
    for path, spec in table.items():
        head, _, rest = path.partition(".")
        node = _tree_node({rest: spec} if rest else spec)
        out[head] = _combine(out[head], node) if head in out else node
    return out


def _tree_node(spec: _Field | _Table) -> _Field:
    return spec if isinstance(spec, _Field) else _Field(fields=_tree(spec))


def _combine(left: _Field, right: _Field) -> _Field:
    fields = dict(left.fields)
    for name, node in right.fields.items():
        fields[name] = _combine(fields[name], node) if name in fields else node
    return _Field(
        merge_key=left.merge_key or right.merge_key,
        strategy=left.strategy or right.strategy,
        fields=fields,
        elem=left.elem if left.elem != "struct" else right.elem,
    )


# metav1.ObjectMeta
_OBJECT_META: _Table = {"finalizers": _STRING_SET, "ownerReferences": _keyed("uid")}

# core/v1 Container and EphemeralContainerCommon. resizePolicy, envFrom and the rest are atomic.
_CONTAINER: _Table = {
    "ports": _keyed("containerPort"),
    "env": _keyed("name"),
    "volumeMounts": _keyed("mountPath"),
    "volumeDevices": _keyed("devicePath"),
}

# core/v1 PodSpec. tolerations, readinessGates and the rest have no tags and are replaced whole.
_POD_SPEC: _Table = {
    "volumes": _keyed("name"),  # merge,retainKeys
    "initContainers": _keyed("name", _CONTAINER),
    "containers": _keyed("name", _CONTAINER),
    "ephemeralContainers": _keyed("name", _CONTAINER),
    "imagePullSecrets": _keyed("name"),
    "hostAliases": _keyed("ip"),
    "topologySpreadConstraints": _keyed("topologyKey"),
    "schedulingGates": _keyed("name"),
    "resourceClaims": _keyed("name"),  # merge,retainKeys
}

# core/v1 PodStatus. containerStatuses, initContainerStatuses and ephemeralContainerStatuses
# have no tags: a patch replaces the whole list.
_POD_STATUS: _Table = {
    "conditions": _keyed("type"),
    "hostIPs": _keyed("ip"),
    "podIPs": _keyed("ip"),
    "resourceClaimStatuses": _keyed("name"),  # merge,retainKeys
}

_POD_TEMPLATE: _Table = {"metadata": _OBJECT_META, "spec": _POD_SPEC}
_STATUS_CONDITIONS: _Table = {"status.conditions": _keyed("type")}
_WORKLOAD: _Table = {"spec.template": _POD_TEMPLATE, **_STATUS_CONDITIONS}
_WEBHOOKS: _Table = {"webhooks": _keyed("name", {"matchConditions": _keyed("name")})}

# Every built-in kind the API server serves with strategic merge patch. Each also gets
# ``metadata`` (ObjectMeta). Kinds with an empty table still merge maps and replace lists.
_KIND_TABLES: Mapping[str, _Table] = {
    # core/v1
    "Binding": {},
    "ComponentStatus": {"conditions": _keyed("type")},
    "ConfigMap": {},
    "Endpoints": {},
    "Event": {},  # core/v1 and events.k8s.io/v1 alike: no tags
    "LimitRange": {},
    "Namespace": _STATUS_CONDITIONS,  # spec.finalizers has no tag, unlike metadata.finalizers
    # NodeSpec.taints has no tags (a patch replaces them all); nor have status.images,
    # status.volumesInUse and status.volumesAttached.
    "Node": {
        "spec.podCIDRs": _STRING_SET,
        "status.conditions": _keyed("type"),
        "status.addresses": _keyed("type"),
    },
    "PersistentVolume": {},
    "PersistentVolumeClaim": _STATUS_CONDITIONS,
    "Pod": {"spec": _POD_SPEC, "status": _POD_STATUS},
    "PodTemplate": {"template": _POD_TEMPLATE},
    "ReplicationController": _WORKLOAD,
    "ResourceQuota": {},
    "Secret": {},
    "Service": {"spec.ports": _keyed("port"), **_STATUS_CONDITIONS},
    "ServiceAccount": {"secrets": _keyed("name")},
    # apps/v1; Deployment's spec.strategy is tagged retainKeys only, so it merges as a map.
    "ControllerRevision": {},
    "DaemonSet": _WORKLOAD,
    "Deployment": _WORKLOAD,
    "ReplicaSet": _WORKLOAD,
    "StatefulSet": _WORKLOAD,  # volumeClaimTemplates has no tags
    # autoscaling
    "HorizontalPodAutoscaler": _STATUS_CONDITIONS,
    "Scale": {},
    # batch/v1
    "CronJob": {
        "spec.jobTemplate.metadata": _OBJECT_META,
        "spec.jobTemplate.spec.template": _POD_TEMPLATE,
    },
    "Job": _WORKLOAD,
    # policy/v1; the PDB selector is tagged patchStrategy=replace.
    "Eviction": {},
    "PodDisruptionBudget": {"spec.selector": _REPLACED, **_STATUS_CONDITIONS},
    # coordination, discovery, networking, node, scheduling
    "EndpointSlice": {},
    "Ingress": {},
    "IngressClass": {},
    "Lease": {},
    "NetworkPolicy": {},
    "PriorityClass": {},
    "RuntimeClass": {},
    # rbac
    "ClusterRole": {},
    "ClusterRoleBinding": {},
    "Role": {},
    "RoleBinding": {},
    # storage
    "CSIDriver": {},
    "CSINode": {"spec.drivers": _keyed("name")},
    "StorageClass": {},
    "VolumeAttachment": {},
    # admission, API registration, certificates, flow control
    "APIService": _STATUS_CONDITIONS,
    "CertificateSigningRequest": {},
    "CustomResourceDefinition": {},
    "FlowSchema": _STATUS_CONDITIONS,
    "MutatingWebhookConfiguration": _WEBHOOKS,
    "PriorityLevelConfiguration": _STATUS_CONDITIONS,
    "ValidatingWebhookConfiguration": _WEBHOOKS,
}

_SCHEMAS: Mapping[str, _Field] = {
    kind: _Field(fields=_tree({"metadata": _OBJECT_META, **table}))
    for kind, table in _KIND_TABLES.items()
}


def strategic_merge_kinds() -> frozenset[str]:
    """The kinds that accept strategic merge patches; every other kind is a custom resource."""
    return frozenset(_SCHEMAS)


# --------------------------------------------------------------------------------------------
# Strategic merge patch: applying it (strategicpatch.StrategicMergeMapPatch, server side:
# MergeParallelList and IgnoreUnmatchedNulls both on)
# --------------------------------------------------------------------------------------------

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList"
_SET_ELEMENT_ORDER = "$setElementOrder"

_ERR_PRIMITIVE_LIST = "invalid patch format of primitive list"
_ERR_RETAIN_KEYS = "invalid patch format of retainKeys"
_ERR_SET_ELEMENT_ORDER = "invalid patch format of setElementOrder list"
_ERR_LIST_OF_LISTS = "lists of lists are not supported"


class _MergeError(Exception):
    """An error strategicpatch returns, and the status ``interpretStrategicMergePatchError``
    gives it: its sentinel errors are 400 or 422, anything else reaches the client as a 500."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def to_patch_error(self) -> PatchError:
        if self.status == 400:
            return PatchError(400, "BadRequest", self.message)
        if self.status == 422:
            return _unprocessable(self.message)
        return PatchError(500, "", self.message)


def _bad_arg_type(expected: str, actual: Any) -> _MergeError:
    return _MergeError(f"expected a {expected}, but received a {_go_type_name(actual)}")


def _no_merge_key(item: Any, merge_key: str) -> _MergeError:
    return _MergeError(f"map: {_go_format(item)} does not contain declared merge key: {merge_key}")


def _bad_patch_type(directive: Any, item: Any) -> _MergeError:
    return _MergeError(
        f"unknown patch type: {_go_format(directive, 's')} in map: {_go_format(item)}"
    )


def apply_strategic_merge_patch(
    original: dict[str, Any], patch: Any, kind: str, *, copy_original: bool = True
) -> dict[str, Any]:
    """Apply a strategic merge patch to an object of a built-in ``kind``.

    Custom resources are served without strategic merge patch, so their handler refuses the
    Content-Type with 415 before reading the body; any kind not in the built-in table is
    treated as one. A body that is not an object is a 400 and ``null`` changes nothing, as
    the handler's decode into a map gives.

    Lists merge by their ``patchMergeKey``, lists of strings tagged ``merge`` merge as ordered
    sets, untagged lists are replaced and ``null`` deletes a member. The directives are
    ``$patch: replace|delete`` in maps and list items, ``$retainKeys``,
    ``$setElementOrder/<list>`` and ``$deleteFromPrimitiveList/<list>``; ``$patch: merge`` is
    refused, as apimachinery does. Without ``$setElementOrder``, list items only the patch
    names come first, then the server's items in their old order.

    The result has no directive keys left: kube decodes the merged map into the Go type, which
    drops fields it does not know (fieldValidation defaults to Warn), and those are always
    unknown fields.

    `copy_original=False` lets the merge build on `original` itself, for a caller that
    decoded it for this merge alone.
    """
    schema = _SCHEMAS.get(kind)
    if schema is None:
        raise _unsupported_media_type(_CUSTOM_RESOURCE_PATCH_TYPES)
    if patch is None:
        return _copy(original)
    if not isinstance(patch, dict):
        raise PatchError(
            400,
            "BadRequest",
            f"json: cannot unmarshal {_json_kind(patch)} "
            "into Go value of type map[string]interface {}",
        )
    try:
        base = _copy(original) if copy_original else original
        merged = _merge_map(base, _copy(patch), schema)
    except _MergeError as error:
        raise error.to_patch_error() from None
    except _GoPanic:
        raise _panic_error() from None
    _drop_directive_keys_along(merged, patch)
    return merged


def _drop_directive_keys_along(merged: Any, patch: Any) -> None:
    """`_drop_directive_keys` where the patch reaches, which is where its directives can be.

    A stored object of a built-in kind has none (its writes were decoded into the Go type),
    so the merge can only have brought them, to the paths the patch names or into the lists
    it merged; the rest of the object, most of it for a status patch of a large node or pod,
    is not walked.
    """
    if not isinstance(merged, dict) or not isinstance(patch, dict):
        _drop_directive_keys(merged)
        return
    for key, value in patch.items():
        if _is_directive_key(key):
            merged.pop(key, None)
        elif key in merged and value is not None:
            _drop_directive_keys_along(merged[key], value)


def _drop_directive_keys(value: Any) -> None:
    if isinstance(value, dict):
        for key in [k for k in value if _is_directive_key(k)]:
            del value[key]
        for member in value.values():
            _drop_directive_keys(member)
    elif isinstance(value, list):
        for element in value:
            _drop_directive_keys(element)


def _is_directive_key(key: str) -> bool:
    return key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(
        (_SET_ELEMENT_ORDER, _DELETE_FROM_PRIMITIVE_LIST)
    )


def _merge_map(original: dict[str, Any], patch: dict[str, Any], schema: _Field) -> dict[str, Any]:
    if _DIRECTIVE in patch:
        return _map_directive(patch[_DIRECTIVE], patch)
    _apply_retain_keys(original, patch)
    _apply_element_orders(original, patch, schema)
    for patch_key, patch_value in list(patch.items()):
        key = patch_key
        is_delete_list = False
        if patch_key.startswith(_DELETE_FROM_PRIMITIVE_LIST):
            key = _list_key(patch_key, _DELETE_FROM_PRIMITIVE_LIST, _ERR_PRIMITIVE_LIST) or key
            is_delete_list = True
        if patch_value is None:
            original.pop(key, None)
            continue
        if key not in original or _go_type(original[key]) != _go_type(patch_value):
            if not is_delete_list:
                _discard_nulls(patch_value)
                _store_without_directives(original, key, patch_value)
            continue
        current = original[key]
        child = schema.child(key)
        if isinstance(current, dict):
            if child.strategy == "replace":
                original[key] = patch_value
            else:
                original[key] = _merge_map(current, patch_value, child)
        elif isinstance(current, list):
            original[key] = _merge_list_field(current, patch_value, child, is_delete_list)
        else:
            _store_without_directives(original, key, patch_value)
    return original


def _map_directive(directive: Any, patch: dict[str, Any]) -> dict[str, Any]:
    """``$patch`` in a map: replace keeps the patch as it is, delete empties the map."""
    if directive == "replace":
        del patch[_DIRECTIVE]
        return patch
    if directive == "delete":
        return {}
    raise _bad_patch_type(directive, patch)


def _list_key(key: str, prefix: str, malformed: str) -> str:
    """The list a ``<prefix>/<list>`` directive key is about."""
    head, slash, rest = key.partition("/")
    if not slash or head != prefix:
        raise _MergeError(malformed, 400)
    return rest


def _store_without_directives(target: dict[str, Any], key: str, value: Any) -> None:
    cleaned, keep = _remove_directives(value)
    if keep:
        target[key] = cleaned
    else:
        target.pop(key, None)


def _remove_directives(value: Any) -> tuple[Any, bool]:
    """Drop maps carrying ``$patch`` from a value that lands where the original had nothing."""
    if isinstance(value, dict):
        if _DIRECTIVE in value:
            return None, False
        for key in list(value):
            cleaned, keep = _remove_directives(value[key])
            if keep:
                value[key] = cleaned
            else:
                del value[key]
        return value, True
    if isinstance(value, list):
        kept = []
        for element in value:
            cleaned, keep = _remove_directives(element)
            if keep:
                kept.append(cleaned)
        return kept, True
    return value, True


def _discard_nulls(value: Any) -> None:
    if isinstance(value, dict):
        for key in list(value):
            if value[key] is None:
                del value[key]
            else:
                _discard_nulls(value[key])
    elif isinstance(value, list):
        for element in value:
            _discard_nulls(element)


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    """``$retainKeys``: clear every member of the original that the list does not name."""
    if _RETAIN_KEYS not in patch:
        return
    retained = patch.pop(_RETAIN_KEYS)
    if not isinstance(retained, list):
        raise _MergeError(_ERR_RETAIN_KEYS, 400)
    names = {_go_key(name) for name in retained}
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_FROM_PRIMITIVE_LIST, _SET_ELEMENT_ORDER)):
            continue
        if ("string", key) not in names:
            raise _MergeError(_ERR_RETAIN_KEYS, 400)
    for key in list(original):
        if ("string", key) not in names:
            del original[key]


def _apply_element_orders(original: dict[str, Any], patch: dict[str, Any], schema: _Field) -> None:
    """``$setElementOrder/<list>``: merge the list now and put it in the order given.

    The order list outranks the order of the patch list, which outranks the server's order for
    items the order list does not name.
    """
    for directive_key in list(patch):
        if not directive_key.startswith(_SET_ELEMENT_ORDER):
            continue
        order = patch.pop(directive_key)
        if not isinstance(order, list):
            raise _bad_arg_type(_SLICE, order)
        key = _list_key(directive_key, _SET_ELEMENT_ORDER, _ERR_SET_ELEMENT_ORDER)
        in_original, in_patch = key in original, key in patch
        original_list: list[Any] = []
        patch_list: list[Any] = []
        if in_original:
            if not isinstance(original[key], list):
                raise _bad_arg_type(_SLICE, original[key])
            original_list = original[key]
        if in_patch:
            if not isinstance(patch[key], list):
                raise _bad_arg_type(_SLICE, patch[key])
            patch_list = patch[key]
        child = schema.child(key)
        _check_order_covers_patch(patch_list, order, child.merge_key)
        # apimachinery hands the live list itself down to the merge, whose deletions shift it
        # and whose additions fill the freed cells in place; the server order used below is
        # read from that array afterwards, and kube's results depend on it.
        server_order = original_list
        if in_original and in_patch:
            cells = list(original_list)
            merged = _merge_list_field(original_list, patch_list, child, False, cells)
            server_order = cells[: len(original_list)]
        elif in_original:
            merged = original_list
        elif in_patch:
            merged = _remove_directives(patch_list)[0]
        else:
            continue
        if child.merge_key:
            named, server_only = _partition_maps(merged, order, child.merge_key)
        else:
            named, server_only = _partition_scalars(merged, order)
        item_kind = _element_type(original_list, patch_list)
        original[key] = _order_items(
            named, server_only, order, server_order, child.merge_key, item_kind
        )
        patch.pop(key, None)


def _check_order_covers_patch(patch_list: list[Any], order: list[Any], merge_key: str) -> None:
    """The patch's items (deletions aside) must appear in the order list, in the same order."""
    if not order or not patch_list:
        return
    items = _split_deletions(patch_list)[0] if merge_key else patch_list
    at_item = at_order = 0
    while at_item < len(items) and at_order < len(order):
        if isinstance(items[at_item], dict) and _DIRECTIVE in items[at_item]:
            at_item += 1
            continue
        if _merge_key_equal(items[at_item], order[at_order], merge_key):
            at_item += 1
        at_order += 1
    if at_item < len(items) and at_order >= len(order):
        raise _MergeError(
            f"The order in patch list:\n{_go_format(patch_list)}\n doesn't match "
            f"{_SET_ELEMENT_ORDER} list:\n{_go_format(order)}\n"
        )


def _merge_key_equal(left: Any, right: Any, merge_key: str) -> bool:
    if not merge_key:
        return _go_eq(left, right)
    if not isinstance(left, dict):
        raise _bad_arg_type(_MAP, left)
    if not isinstance(right, dict):
        raise _bad_arg_type(_MAP, right)
    if merge_key not in left:
        raise _no_merge_key(left, merge_key)
    if merge_key not in right:
        raise _no_merge_key(right, merge_key)
    return _go_eq(left[merge_key], right[merge_key])


def _merge_list_field(
    original: list[Any],
    patch: list[Any],
    schema: _Field,
    is_delete_list: bool,
    cells: list[Any] | None = None,
) -> list[Any]:
    """Untagged lists take the patch's list; deletion lists apply whatever the tag.

    ``cells`` stands for the Go array behind ``original`` when the caller reads it afterwards.
    """
    if schema.strategy == "merge" or is_delete_list:
        return _merge_list(original, patch, schema, is_delete_list, cells)
    return patch


class _GoSlice:
    """A Go slice over an array of fixed size: deleting shifts the cells after the victim left
    (the last one keeps its old value) and appending writes the next free cell, moving to a
    new array only when none is left - as ``append`` does on the array kube decoded into."""

    def __init__(self, cells: list[Any]) -> None:
        self.cells = cells
        self.length = len(cells)

    def items(self) -> list[Any]:
        return self.cells[: self.length]

    def delete(self, index: int) -> None:
        self.cells[index : self.length - 1] = self.cells[index + 1 : self.length]
        self.length -= 1

    def append(self, value: Any) -> None:
        if self.length == len(self.cells):
            self.cells = [*self.cells, value]
        else:
            self.cells[self.length] = value
        self.length += 1


def _merge_list(
    original: list[Any],
    patch: list[Any],
    schema: _Field,
    is_delete_list: bool,
    cells: list[Any] | None = None,
) -> list[Any]:
    if not original and not patch:
        return original
    item_kind = _element_type(original, patch)
    merge_key = schema.merge_key
    if item_kind != _MAP:
        if is_delete_list:
            return _delete_scalars(original, patch)
        merged = _dedupe_scalars([*original, *patch])
    else:
        if not merge_key:
            raise _MergeError(f"cannot merge lists without merge key for {schema.elem}")
        # The array the live list was decoded into is exactly as long as the list: objects come
        # from the watch cache as deep copies, and conversions keep their capacity.
        items = _GoSlice(cells if cells is not None else list(original))
        items, patch = _apply_item_directives(items, patch, merge_key)
        original = items.items()
        _merge_keyed_items(items, patch, merge_key, schema)
        merged = items.items()
    if merge_key:
        named, server_only = _partition_maps(merged, patch, merge_key)
    else:
        named, server_only = _partition_scalars(merged, patch)
    return _order_items(named, server_only, patch, original, merge_key, item_kind)


def _element_type(*lists: list[Any]) -> str:
    """The one Go type all elements share; mixed types and nested lists are refused."""
    found = ""
    for items in lists:
        for item in items:
            kind = _go_type(item)
            if not found:
                if kind == "nil":
                    raise _GoPanic("reflect: call of Kind on nil Type")
                if kind == _SLICE:
                    raise _MergeError(_ERR_LIST_OF_LISTS, 422)
                found = kind
            elif kind != found:
                raise _MergeError(
                    f"list element types are not identical: {_go_format(list(lists))}"
                )
    if not found:
        raise _MergeError("no elements in any of the given slices")
    return found


def _apply_item_directives(
    original: _GoSlice, patch: list[Any], merge_key: str
) -> tuple[_GoSlice, list[Any]]:
    """``$patch`` items: delete drops the matching items, replace keeps only the patch's."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        if _DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[_DIRECTIVE]
        if directive == "delete":
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
            _delete_matching(original, merge_key, item[merge_key])
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise _MergeError("merging lists cannot yet be specified in the patch")
        else:
            raise _bad_patch_type(directive, item)
    if replace:
        return _GoSlice(plain), []
    return original, plain


def _find_keyed(items: list[Any], merge_key: str, value: Any) -> tuple[int, dict[str, Any]] | None:
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise _MergeError(f"value for key {index} is not a map")
        if merge_key in item and _go_eq(item[merge_key], value):
            return index, item
    return None


def _delete_matching(items: _GoSlice, merge_key: str, value: Any) -> None:
    while (found := _find_keyed(items.items(), merge_key, value)) is not None:
        items.delete(found[0])


def _merge_keyed_items(items: _GoSlice, patch: list[Any], merge_key: str, schema: _Field) -> None:
    """Merge each patch item into the item with its key, or add it; later patch items with
    the same key merge into the one just added."""
    for item in patch:
        if merge_key not in item:
            raise _no_merge_key(item, merge_key)
        found = _find_keyed(items.items(), merge_key, item[merge_key])
        if found is None:
            items.append(item)
        else:
            index, current = found
            items.cells[index] = _merge_map(current, item, schema)


def _dedupe_scalars(items: list[Any]) -> list[Any]:
    """apimachinery's deduplicateScalars, which moves the last element into each duplicate's
    place; the order is settled afterwards, so only which duplicate survives matters."""
    items = list(items)
    last = len(items) - 1
    i = 0
    while i < last:
        j = i + 1
        while j <= last:
            if _go_eq(items[i], items[j]):
                items[j] = items[last]
                del items[last]
                last -= 1
                j -= 1
            j += 1
        i += 1
    return items


def _delete_scalars(items: list[Any], doomed: list[Any]) -> list[Any]:
    gone = {_go_key(value) for value in doomed}
    return [value for value in items if _go_key(value) not in gone]


def _partition_scalars(items: list[Any], named: list[Any]) -> tuple[list[Any], list[Any]]:
    wanted = {_go_key(value) for value in named}
    inside = [value for value in items if _go_key(value) in wanted]
    outside = [value for value in items if _go_key(value) not in wanted]
    return inside, outside


def _partition_maps(
    items: list[Any], named: list[Any], merge_key: str
) -> tuple[list[Any], list[Any]]:
    inside: list[Any] = []
    outside: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise _bad_arg_type(_MAP, item)
        if merge_key not in item:
            raise _no_merge_key(item, merge_key)
        found = _find_keyed(named, merge_key, item[merge_key])
        (inside if found is not None else outside).append(item)
    return inside, outside


def _split_deletions(items: list[Any]) -> tuple[list[Any], list[Any]]:
    kept: list[Any] = []
    deleted: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise _bad_arg_type(_MAP, item)
        (deleted if item.get(_DIRECTIVE, None) == "delete" else kept).append(item)
    return kept, deleted


def _position(items: list[Any], value: Any, merge_key: str, item_kind: str) -> int:
    """Where ``value`` sits in ``items``, by merge key for maps, -1 if absent."""

    def identity(item: Any) -> Any:
        if item_kind == _MAP:
            return item.get(merge_key) if isinstance(item, dict) else None
        return item

    wanted = identity(value)
    for index, item in enumerate(items):
        if _go_eq(wanted, identity(item)):
            return index
    return -1


def _order_items(
    named: list[Any],
    server_only: list[Any],
    named_order: list[Any],
    server_order: list[Any],
    merge_key: str,
    item_kind: str,
) -> list[Any]:
    """Sort both groups by their own order, then interleave them (normalizeElementOrder)."""
    named = _sort_by(named, named_order, merge_key, item_kind)
    server_only = _sort_by(server_only, server_order, merge_key, item_kind)
    return _interleave(server_only, named, server_order, merge_key, item_kind)


def _sort_by(items: list[Any], order: list[Any], merge_key: str, item_kind: str) -> list[Any]:
    deleted: list[Any] = []
    if item_kind == _MAP:
        for item in [*items, *order]:
            if not isinstance(item, dict):
                raise _bad_arg_type(_MAP, item)
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
        items, deleted = _split_deletions(items)
    positions = [_position(order, item, merge_key, item_kind) for item in items]
    if all(p >= 0 for p in positions):
        ranked = sorted(zip(positions, items, strict=True), key=lambda pair: pair[0])
        return [item for _, item in ranked] + deleted
    return _go_insertion_sort(items, positions) + deleted


def _go_insertion_sort(items: list[Any], positions: list[int]) -> list[Any]:
    """sort.SliceStable with apimachinery's comparator, which calls an item that ``order``
    lacks "less" than anything; only malformed patches get here, with a handful of items."""
    pairs = list(zip(positions, items, strict=True))
    for i in range(1, len(pairs)):
        j = i
        while j > 0:
            here, before = pairs[j][0], pairs[j - 1][0]
            less = here < before if here >= 0 and before >= 0 else True
            if not less:
                break
            pairs[j], pairs[j - 1] = pairs[j - 1], pairs[j]
            j -= 1
    return [item for _, item in pairs]


def _interleave(
    server_only: list[Any],
    named: list[Any],
    server_order: list[Any],
    merge_key: str,
    item_kind: str,
) -> list[Any]:
    """mergeSortedSlice: a server item goes first only if the server's order puts it before the
    patch item - so patch items the server has never seen lead."""
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(named):
        if i >= len(server_only):
            out.append(named[j])
            j += 1
        elif j >= len(named):
            out.append(server_only[i])
            i += 1
        else:
            left = _position(server_order, server_only[i], merge_key, item_kind)
            right = _position(server_order, named[j], merge_key, item_kind)
            if left >= 0 and right >= 0 and left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(named[j])
                j += 1
    return out
