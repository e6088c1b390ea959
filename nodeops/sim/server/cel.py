"""CRD validation rules (`x-kubernetes-validations`) evaluated as apiextensions-apiserver does.

A custom resource write is refused with kube's 422 when one of its CRD's CEL rules is false: each
failed rule is one cause at its schema node's path (or the rule's `fieldPath` below it), with the
rule's `message`, its `messageExpression`'s result, or `failed rule: <rule>`, and the cause type
its `reason` names. Transition rules (those that read `oldSelf`) run only on updates and only
where the old object has a value at the same place, unless `optionalOldSelf` lets them run with
an optional. On update, a failure at a node whose value did not change is ratcheted (let through)
as CRDValidationRatcheting does, which is GA and locked on since 1.33.

Rules are compiled once per CRD version schema and cached; a CRD whose rule does not compile is
refused when it is written (`rule_compile_errors`), with cel-go's error text.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

from nodeops.common.gomessages import go_quote
from nodeops.sim.server import cellib
from nodeops.sim.server.celcheck import (
    DeclType,
    check,
    decl_type,
    display,
    escape,
    parse,
    to_cel,
)

Cause = tuple[str, str, str]

_REASONS: Final = (
    "FieldValueRequired",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueDuplicate",
)
# Cause types after which kube does not run the CEL rules at all (hasBlockingErr).
BLOCKING: Final = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)
BLOCKED_CAUSE: Final = (
    "FieldValueInvalid",
    "",
    'Invalid value: "null": some validation rules were not checked because the object was '
    "invalid; correct the existing errors to complete validation",
)
_ENV: Final = celpy.Environment()


@dataclass
class _Rule:
    spec: Mapping[str, Any]
    program: Any = None
    error: str | None = None
    uses_old_self: bool = False
    message_program: Any = None
    message_error: str | None = None
    field_path: str = ""

    @property
    def optional_old_self(self) -> bool:
        return bool(self.spec.get("optionalOldSelf"))

    def error_string(self) -> str:
        message = str(self.spec.get("message") or "").strip()
        return message or str(self.spec.get("rule") or "").strip()

    def default_message(self) -> str:
        message = str(self.spec.get("message") or "").strip()
        return message or f"failed rule: {self.error_string()}"


@dataclass
class _Node:
    """The rules at one schema node and the nodes below it that have rules of their own."""

    schema: Mapping[str, Any]
    typ: DeclType | None
    rules: list[_Rule] = field(default_factory=list)
    compile_error: str | None = None
    properties: dict[str, _Node] = field(default_factory=dict)
    items: _Node | None = None
    additional: _Node | None = None


# ------------------------------------------------------------------ compiling


def _compile_rule(spec: Mapping[str, Any], schema: Mapping[str, Any], typ: DeclType) -> _Rule:
    rule = _Rule(spec)
    text = str(spec.get("rule") or "")
    if not text.strip():
        return rule
    old = DeclType("optional", elem=typ) if rule.optional_old_self else typ
    tree, issues = parse(text)
    if tree is not None:
        checked = check(tree, text, typ, old)
        issues = checked.issues
        rule.uses_old_self = checked.uses_old_self
        if not issues and checked.result.name not in ("bool", "?"):
            rule.error = "cel expression must evaluate to a bool"
            return rule
    if issues or tree is None:
        rule.error = "compilation failed: " + display(text, issues)
        return rule
    rule.program = _ENV.program(tree, functions=cellib.FUNCTIONS)
    msg_text = str(spec.get("messageExpression") or "")
    if msg_text:
        msg_tree, issues = parse(msg_text)
        if msg_tree is not None:
            checked = check(msg_tree, msg_text, typ, old)
            issues = checked.issues
            if not issues and checked.result.name not in ("string", "?"):
                rule.message_error = "messageExpression must evaluate to a string"
                return rule
        if issues or msg_tree is None:
            rule.message_error = "messageExpression compilation failed: " + display(
                msg_text, issues
            )
            return rule
        rule.message_program = _ENV.program(msg_tree, functions=cellib.FUNCTIONS)
    path = spec.get("fieldPath")
    if path:
        rule.field_path = field_path(str(path), schema) or ""
    return rule


def _build(schema: Mapping[str, Any], typ: DeclType | None, root: bool) -> _Node | None:
    node = _Node(schema, typ)
    rules = schema.get("x-kubernetes-validations") or []
    if rules:
        if typ is None:
            node.compile_error = "failed to convert to declType for CEL validation rules"
        else:
            node.rules = [_compile_rule(r, schema, typ) for r in rules]
    elem = typ.elem if typ is not None else None
    items = schema.get("items")
    if isinstance(items, Mapping):
        node.items = _build(items, elem, False)
    for name, prop in (schema.get("properties") or {}).items():
        esc = escape(name)
        if esc is not None:
            if typ is None or esc not in typ.fields:
                continue
            sub_type: DeclType | None = typ.fields[esc][1]
        else:
            sub_type = decl_type(prop, bool(prop.get("x-kubernetes-embedded-resource")))
            if sub_type is None:
                continue
        sub = _build(prop, sub_type, False)
        if sub is not None:
            node.properties[name] = sub
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        node.additional = _build(extra, elem, False)
    if rules or node.items or node.properties or node.additional:
        return node
    return None


class _Cache:
    """Compiled rule trees by schema identity: a CRD version's schema is compiled once."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self.entries: OrderedDict[int, tuple[Mapping[str, Any], _Node | None]] = OrderedDict()

    def get(self, schema: Mapping[str, Any]) -> _Node | None:
        hit = self.entries.get(id(schema))
        if hit is not None and hit[0] is schema:
            self.entries.move_to_end(id(schema))
            return hit[1]
        node = _build(schema, decl_type(schema, resource_root=True), True)
        self.entries[id(schema)] = (schema, node)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return node


_CACHE: Final = _Cache()


def compiled(schema: Mapping[str, Any]) -> _Node | None:
    """The CRD version schema's rule tree, compiled on first use and kept."""
    return _CACHE.get(schema)


# ------------------------------------------------------------------ CRD admission


def rule_compile_errors(crd_version_schema: dict[str, Any], base_path: str) -> list[Cause]:
    """Causes kube gives for a CRD whose rules do not compile, under `base_path` (the path of
    the version's `openAPIV3Schema`)."""
    schema = crd_version_schema.get("openAPIV3Schema", crd_version_schema)
    if not isinstance(schema, Mapping):
        return []
    causes: list[Cause] = []
    _schema_errors(schema, decl_type(schema, resource_root=True), base_path, causes, None)
    return causes


def _schema_errors(
    schema: Mapping[str, Any],
    typ: DeclType | None,
    path: str,
    causes: list[Cause],
    uncorrelatable: str | None,
) -> None:
    for i, spec in enumerate(schema.get("x-kubernetes-validations") or []):
        base = f"{path}.x-kubernetes-validations[{i}]"
        if not str(spec.get("rule") or "").strip():
            causes.append(
                ("FieldValueRequired", f"{base}.rule", "Required value: rule is not specified")
            )
            continue
        reason = spec.get("reason")
        if reason is not None and reason not in _REASONS:
            supported = ", ".join(go_quote(r) for r in sorted(_REASONS))
            causes.append(
                (
                    "FieldValueNotSupported",
                    f"{base}.reason",
                    f"Unsupported value: {go_quote(str(reason))}: supported values: {supported}",
                )
            )
            continue
        if spec.get("fieldPath") and field_path(str(spec["fieldPath"]), schema) is None:
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{base}.fieldPath",
                    f"Invalid value: {go_quote(str(spec['fieldPath']))}: must be a valid path",
                )
            )
            continue
        if typ is None:
            causes.append(
                (
                    "InternalError",
                    f"{path}.x-kubernetes-validations",
                    "Internal error: failed to convert to declType for CEL validation rules",
                )
            )
            break
        rule = _compile_rule(spec, schema, typ)
        shown = _go_rule(spec)
        if rule.error is not None:
            causes.append(
                ("FieldValueInvalid", f"{base}.rule", f"Invalid value: {shown}: {rule.error}")
            )
        if rule.message_error is not None:
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{base}.messageExpression",
                    f"Invalid value: {shown}: {rule.message_error}",
                )
            )
        if rule.error is None and rule.uses_old_self and uncorrelatable is not None:
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{base}.rule",
                    f"Invalid value: {go_quote(str(spec['rule']))}: oldSelf cannot be used on "
                    f"the uncorrelatable portion of the schema within {uncorrelatable}",
                )
            )
        elif rule.error is None and not rule.uses_old_self and "optionalOldSelf" in spec:
            flag = "true" if spec["optionalOldSelf"] else "false"
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{base}.optionalOldSelf",
                    f"Invalid value: {flag}: may not be set if oldSelf is not used in rule",
                )
            )
    elem = typ.elem if typ is not None else None
    items = schema.get("items")
    if isinstance(items, Mapping):
        correlatable = schema.get("x-kubernetes-list-type") == "map"
        below = uncorrelatable or (None if correlatable else f"{path}.items")
        _schema_errors(items, elem, f"{path}.items", causes, below)
    for name, prop in (schema.get("properties") or {}).items():
        esc = escape(name)
        sub_type = typ.fields[esc][1] if typ is not None and esc in typ.fields else None
        if esc is None:
            sub_type = decl_type(prop, bool(prop.get("x-kubernetes-embedded-resource")))
        _schema_errors(prop, sub_type, f"{path}.properties[{name}]", causes, uncorrelatable)
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        _schema_errors(extra, elem, f"{path}.additionalProperties", causes, uncorrelatable)


def _go_rule(spec: Mapping[str, Any]) -> str:
    """%#v of kube's internal ValidationRule, the bad value of a rule that does not compile."""
    reason = (
        "(*apiextensions.FieldValueErrorReason)(0xc000a1c2d0)"
        if spec.get("reason") is not None
        else "(*apiextensions.FieldValueErrorReason)(nil)"
    )
    optional = (
        "(*bool)(0xc000a1c2d8)" if spec.get("optionalOldSelf") is not None else "(*bool)(nil)"
    )
    return (
        f"apiextensions.ValidationRule{{Rule:{go_quote(str(spec.get('rule') or ''))}, "
        f"Message:{go_quote(str(spec.get('message') or ''))}, "
        f"MessageExpression:{go_quote(str(spec.get('messageExpression') or ''))}, "
        f"Reason:{reason}, FieldPath:{go_quote(str(spec.get('fieldPath') or ''))}, "
        f"OptionalOldSelf:{optional}}}"
    )


def field_path(path: str, schema: Mapping[str, Any]) -> str | None:
    """ValidFieldPath: the rule's `fieldPath` as a field path string, None if it is invalid."""
    out: list[str] = []
    i, n = 0, len(path)
    node: Any = schema
    while i < n:
        if path[i] == ".":
            j = i + 1
            while j < n and path[j] not in ".[]":
                j += 1
            name, i = path[i + 1 : j], j
            if not name:
                return None
        elif path[i] == "[":
            if i + 1 >= n or path[i + 1] != "'":
                return None
            j = i + 2
            while j < n and not (path[j] == "'" and path[j - 1] != "\\"):
                j += 1
            if j + 1 >= n or path[j + 1] != "]":
                return None
            unquoted = _unescape_single_quoted(path[i + 2 : j])
            if unquoted is None:
                return None
            name = unquoted
            i = j + 2
        else:
            return None
        if not isinstance(node, Mapping):
            return None
        if node.get("properties") is not None:
            if name not in node["properties"]:
                return None
            node = node["properties"][name]
            out.append(("." if out else "") + name)
        elif isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
            out.append(f"[{name}]")
        else:
            return None
    return "".join(out)


def _unescape_single_quoted(s: str) -> str | None:
    table = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
    table.update({"'": "'", "\\": "\\"})
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\":
            if i + 1 >= len(s) or s[i + 1] not in table:
                return None
            out.append(table[s[i + 1]])
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


# ------------------------------------------------------------------ validating


_MISSING: Final = object()


@dataclass(slots=True)
class _Corr:
    """Ratcheting: the old value correlated with the new one at this node (CorrelatedObject)."""

    old: Any
    new: Any
    schema: Mapping[str, Any]

    def equal(self) -> bool:
        return _deep_equal(self.old, self.new)

    def key(self, name: str) -> _Corr | None:
        if not (isinstance(self.old, dict) and isinstance(self.new, dict)):
            return None
        if name not in self.old or name not in self.new:
            return None
        props = self.schema.get("properties") or {}
        sub = props.get(name)
        if sub is None:
            extra = self.schema.get("additionalProperties")
            sub = extra if isinstance(extra, Mapping) else None
        if sub is None:
            return None
        return _Corr(self.old[name], self.new[name], sub)

    def index(self, i: int) -> _Corr | None:
        items = self.schema.get("items")
        if not (isinstance(self.new, list) and isinstance(self.old, list)) or i >= len(self.new):
            return None
        if not isinstance(items, Mapping):
            return None
        old = _map_list_get(self.schema, self.old, self.new[i])
        if old is _MISSING:
            return None
        return _Corr(old, self.new[i], items)


@dataclass(slots=True)
class _Ratchet:
    current: _Corr | None = None
    parent: _Corr | None = None
    enabled: bool = False

    def should_ratchet(self) -> bool:
        if not self.enabled:
            return False
        if self.current is not None:
            return self.current.equal()
        return self.parent is not None and self.parent.equal()

    def key(self, name: str, root: bool) -> _Ratchet:
        if self.current is None:
            return self
        if root and name in ("apiVersion", "kind"):
            return _Ratchet()
        return _Ratchet(self.current.key(name), self.current, True)

    def index(self, i: int) -> _Ratchet:
        if self.current is None:
            return self
        return _Ratchet(self.current.index(i), self.current, True)


def _deep_equal(a: Any, b: Any) -> bool:
    """reflect.DeepEqual of decoded JSON: an int is never equal to a float or a bool."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _map_list_get(schema: Mapping[str, Any], old: list[Any], item: Any) -> Any:
    """The old item with the same list-map keys as `item`, for lists of type map only."""
    keys = schema.get("x-kubernetes-list-map-keys") or []
    if schema.get("x-kubernetes-list-type") != "map" or not keys or not isinstance(item, dict):
        return _MISSING
    want = [item.get(k, _MISSING) for k in keys]
    for cand in old:
        if isinstance(cand, dict) and all(
            _deep_equal(cand.get(k, _MISSING), w) if w is not _MISSING else k not in cand
            for k, w in zip(keys, want, strict=True)
        ):
            return cand
    return _MISSING


def validate(
    schema: Mapping[str, Any], obj: dict[str, Any], old: dict[str, Any] | None
) -> list[Cause]:
    """The causes of every failed rule of the CRD version schema for this write."""
    root = compiled(schema)
    if root is None:
        return []
    ratchet = _Ratchet(_Corr(old, obj, schema), None, True) if old is not None else _Ratchet()
    causes: list[Cause] = []
    _validate(root, "", obj, old, ratchet, causes, True)
    return causes


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _validate(
    node: _Node,
    path: str,
    obj: Any,
    old: Any,
    ratchet: _Ratchet,
    causes: list[Cause],
    root: bool,
) -> None:
    if obj is None:
        return
    _expressions(node, path, obj, old, ratchet, causes)
    if isinstance(obj, list):
        if node.items is not None:
            old_list = old if isinstance(old, list) else []
            for i, item in enumerate(obj):
                old_item = _map_list_get(node.schema, old_list, item)
                _validate(
                    node.items,
                    f"{path}[{i}]",
                    item,
                    None if old_item is _MISSING else old_item,
                    ratchet.index(i),
                    causes,
                    False,
                )
    elif isinstance(obj, dict):
        old_map = old if isinstance(old, dict) else {}
        if node.additional is not None:
            for k, v in obj.items():
                _validate(
                    node.additional,
                    f"{path}[{k}]",
                    v,
                    old_map.get(k),
                    ratchet.key(k, root),
                    causes,
                    False,
                )
        if node.properties:
            for k, v in obj.items():
                sub = node.properties.get(k)
                if sub is not None:
                    _validate(
                        sub,
                        _child(path, k),
                        v,
                        old_map.get(k),
                        ratchet.key(k, root),
                        causes,
                        False,
                    )


def _expressions(
    node: _Node, path: str, obj: Any, old: Any, ratchet: _Ratchet, causes: list[Cause]
) -> None:
    sts_type = str(node.schema.get("type") or "")
    if node.compile_error is not None:
        causes.append(
            _invalid(path, sts_type, f"rule compiler initialization error: {node.compile_error}")
        )
        return
    if not node.rules:
        return
    self_val: Any = None
    old_val: Any = None
    for rule in node.rules:
        if rule.error is not None:
            causes.append(_invalid(path, sts_type, f"rule compile error: {rule.error}"))
            continue
        if rule.program is None:
            continue
        if rule.uses_old_self and old is None and not rule.optional_old_self:
            continue
        if self_val is None:
            self_val = to_cel(obj, node.typ)
            old_val = to_cel(old, node.typ) if old is not None else None
        activation: dict[str, Any] = {"self": self_val}
        if rule.uses_old_self:
            activation["oldSelf"] = cellib.Optional(old_val) if rule.optional_old_self else old_val
        try:
            result = rule.program.evaluate(activation)
        except CELEvalError as exc:
            causes.append(_eval_error(path, sts_type, exc, rule))
            continue
        except (
            TypeError,
            ValueError,
            KeyError,
            IndexError,
            ZeroDivisionError,
            RecursionError,
        ) as exc:
            causes.append(_invalid(path, sts_type, f"{exc} evaluating rule: {rule.error_string()}"))
            continue
        if isinstance(result, CELEvalError):
            causes.append(_eval_error(path, sts_type, result, rule))
            continue
        if result is True or (isinstance(result, celtypes.BoolType) and bool(result)):
            continue
        field_path_str = _child(path, rule.field_path) if rule.field_path else path
        detail = _message(rule, activation) or rule.default_message()
        cause = _field_error(field_path_str, obj, sts_type, detail, rule.spec.get("reason"))
        if not rule.uses_old_self and ratchet.should_ratchet():
            continue  # kube sends it as a warning and accepts the write
        causes.append(cause)


def _message(rule: _Rule, activation: dict[str, Any]) -> str | None:
    """messageExpression's result; on any failure kube falls back to the static message."""
    if rule.message_program is None:
        return None
    try:
        out = rule.message_program.evaluate(activation)
    except Exception:
        return None
    if not isinstance(out, str):
        return None
    text = out.strip()
    if not text or "\n" in text or len(text) > 5 * 1024:
        return None
    return text


def _eval_error(path: str, sts_type: str, exc: CELEvalError, rule: _Rule) -> Cause:
    text = _cel_go_error(exc)
    if text.startswith("no such overload"):
        detail = (
            f"'{text}': call arguments did not match a supported operator, function or macro "
            f"signature for rule: {rule.error_string()}"
        )
    else:
        detail = f"{text} evaluating rule: {rule.error_string()}"
    return _invalid(path, sts_type, detail)


def _cel_go_error(exc: CELEvalError) -> str:
    """cel-python's evaluation error in cel-go's runtime words."""
    message = str(exc.args[0]) if exc.args else "evaluation error"
    cause = exc.args[1] if len(exc.args) > 1 else None
    detail = exc.args[2] if len(exc.args) > 2 else ()
    if message.startswith("no such member") or cause is KeyError:
        key = detail[0] if isinstance(detail, tuple) and detail else None
        if message.startswith("undeclared reference"):
            return message.split(" (in activation")[0]
        if key is not None:
            return f"no such key: {key}"
        return "no such key"
    if message.startswith("found no matching overload") or message == "no such overload":
        return "no such overload"
    if cause is ZeroDivisionError:
        return "division by zero" if "divide" in message else "modulus by zero"
    if cause is IndexError:
        return "index out of range"
    if cause is ValueError and isinstance(detail, tuple) and detail:
        return str(detail[0])
    return message


def _go_value(value: Any) -> str:
    """The bad value as field.Error prints it: %q for strings, %v for numbers and booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    return go_quote(str(value))


def _go_float(f: float) -> str:
    """Go's %v of a float64 (strconv 'g', shortest): exponent form below 1e-4 and from 1e6."""
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if math.isnan(f):
        return "NaN"
    if f == 0:
        return "0"
    sign, digits_t, exponent = Decimal(repr(f)).as_tuple()
    digits = "".join(map(str, digits_t)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    point = len(digits_t) + exponent  # digits before the decimal point
    exp10 = point - 1
    minus = "-" if sign else ""
    if exp10 < -4 or exp10 >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{minus}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{minus}{digits}{'0' * (point - len(digits))}"
    return f"{minus}{digits[:point]}.{digits[point:]}"


def _invalid(path: str, value: str, detail: str) -> Cause:
    return ("FieldValueInvalid", path, f"Invalid value: {go_quote(value)}: {detail}")


def _field_error(path: str, obj: Any, sts_type: str, detail: str, reason: Any) -> Cause:
    """fieldErrorForReason: objects and arrays print no value, scalars their value."""
    omit = sts_type in ("object", "array")
    shown = "" if omit else _go_value(obj) + ": "
    if reason == "FieldValueForbidden":
        return ("FieldValueForbidden", path, f"Forbidden: {detail}")
    if reason == "FieldValueRequired":
        return ("FieldValueRequired", path, f"Required value: {detail}")
    if reason == "FieldValueDuplicate":
        return (
            "FieldValueDuplicate",
            path,
            "Duplicate value" + ("" if omit else f": {_go_value(obj)}"),
        )
    return ("FieldValueInvalid", path, f"Invalid value: {shown}{detail}")


def write_causes(
    crd_version: Mapping[str, Any] | None,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    prior: Sequence[Cause] = (),
) -> list[Cause]:
    """The rule causes of a custom resource write after the schema's own causes `prior`:
    none of the rules run once the schema found a blocking error (hasBlockingErr)."""
    schema = ((crd_version or {}).get("schema") or {}).get("openAPIV3Schema")
    if not isinstance(schema, Mapping) or compiled(schema) is None:
        return []
    if any(reason in BLOCKING for reason, _, _ in prior):
        return [BLOCKED_CAUSE]
    return validate(schema, obj, old)
