"""CEL types of schema nodes, JSON-to-CEL values, and the compile-time checks kube makes.

kube-apiserver type-checks every rule against the type its schema node declares (cel-go's
checker), so a rule naming an undeclared variable, a field the schema does not have, a function
that does not exist, or one that is not a bool is refused when the CRD is written. cel-python only
parses, so this module walks its parse tree with the schema's types and reports those errors in
cel-go's words and positions (`ERROR: <input>:1:5: undefined field 'foo'` plus the source
snippet). Where it cannot tell a type it stays silent rather than guess: a rule it lets through
still runs, and fails at runtime as an evaluation error.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import lark
from celpy import celtypes, json_to_cel
from celpy.celparser import CELParseError, CELParser

from nodeops.sim.server import cellib

# cel.Escape: names CEL can spell, and the reserved words it must wrap.
_IDENT = re.compile(r"^[a-zA-Z_.\-/][a-zA-Z0-9_.\-/]*$")
_RESERVED = frozenset(
    {
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    }
)
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_TYPE_NAMES = frozenset(
    {"int", "uint", "double", "string", "bool", "bytes", "list", "map", "null_type", "type"}
)
_CEL_TYPE_NAME = {
    "duration": "google.protobuf.Duration",
    "timestamp": "google.protobuf.Timestamp",
}


def escape(name: str) -> str | None:
    """kube's property-name escaping, or None for a name CEL cannot reach."""
    if name in _RESERVED:
        return f"__{name}__"
    if not _IDENT.match(name):
        return None
    return (
        name.replace("__", "__underscores__")
        .replace(".", "__dot__")
        .replace("-", "__dash__")
        .replace("/", "__slash__")
    )


@dataclass(eq=False)
class DeclType:
    """The CEL type of a schema node: `object` carries its fields, `list`/`map` their element."""

    name: str
    # escaped name -> (JSON property name, type)
    fields: dict[str, tuple[str, DeclType]] = field(default_factory=dict)
    elem: DeclType | None = None

    def display(self) -> str:
        if self.name == "list":
            return f"list({self.elem.display() if self.elem else 'dyn'})"
        if self.name == "map":
            return f"map(string, {self.elem.display() if self.elem else 'dyn'})"
        if self.name == "optional":
            return f"optional_type({self.elem.display() if self.elem else 'dyn'})"
        return _CEL_TYPE_NAME.get(self.name, self.name)


UNKNOWN = DeclType("?")
DYN = DeclType("dyn")
BOOL = DeclType("bool")
INT = DeclType("int")
STRING = DeclType("string")


def _meta_schema() -> dict[str, Any]:
    s = {"type": "string"}
    return {"type": "object", "properties": {"name": s, "generateName": s}}


def decl_type(schema: Mapping[str, Any] | None, resource_root: bool = False) -> DeclType | None:
    """SchemaDeclType: None where kube exposes nothing to CEL."""
    if schema is None:
        return None
    if schema.get("x-kubernetes-int-or-string"):
        return DYN
    if resource_root:
        props = dict(schema.get("properties") or {})
        props["apiVersion"] = {"type": "string"}
        props["kind"] = {"type": "string"}
        props["metadata"] = _meta_schema()
        schema = {**schema, "properties": props}
    typ = schema.get("type")
    if typ == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return None
        elem = decl_type(items, bool(items.get("x-kubernetes-embedded-resource")))
        return DeclType("list", elem=elem) if elem is not None else None
    if typ == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            elem = decl_type(extra, bool(extra.get("x-kubernetes-embedded-resource")))
            return DeclType("map", elem=elem) if elem is not None else None
        fields: dict[str, tuple[str, DeclType]] = {}
        for name, prop in (schema.get("properties") or {}).items():
            sub = decl_type(prop, bool(prop.get("x-kubernetes-embedded-resource")))
            esc = escape(name)
            if sub is not None and esc is not None:
                fields[esc] = (name, sub)
        return DeclType("object", fields=fields)
    if typ == "string":
        fmt = schema.get("format")
        if fmt == "byte":
            return DeclType("bytes")
        if fmt == "duration":
            return DeclType("duration")
        if fmt in ("date", "date-time"):
            return DeclType("timestamp")
        return DeclType("string")
    if typ == "boolean":
        return BOOL
    if typ == "number":
        return DeclType("double")
    if typ == "integer":
        return INT
    return None


# ------------------------------------------------------------------ values


def to_cel(value: Any, typ: DeclType | None) -> Any:
    """UnstructuredToVal: the JSON value as the CEL value its schema type makes it."""
    if value is None:
        return None
    if typ is None or typ.name in ("dyn", "?"):
        return json_to_cel(value)
    name = typ.name
    try:
        if name == "object" and isinstance(value, Mapping):
            return celtypes.MapType(
                {
                    celtypes.StringType(esc): to_cel(value[prop], sub)
                    for esc, (prop, sub) in typ.fields.items()
                    if prop in value
                }
            )
        if name == "map" and isinstance(value, Mapping):
            return celtypes.MapType(
                {celtypes.StringType(k): to_cel(v, typ.elem) for k, v in value.items()}
            )
        if name == "list" and isinstance(value, list):
            return celtypes.ListType([to_cel(v, typ.elem) for v in value])
        if isinstance(value, str):
            if name == "duration":
                return celtypes.DurationType(value)
            if name == "timestamp":
                return celtypes.TimestampType(value)
            if name == "bytes":
                return celtypes.BytesType(base64.b64decode(value, validate=True))
        if name == "double" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return celtypes.DoubleType(float(value))
    except (ValueError, TypeError, binascii.Error):
        pass
    return json_to_cel(value)


# ------------------------------------------------------------------ errors


@dataclass(frozen=True, slots=True)
class Issue:
    offset: int
    message: str


def display(text: str, issues: list[Issue]) -> str:
    """cel-go's Issues.String(): each error with its line:column and a caret under the source."""
    out = []
    for issue in sorted(issues, key=lambda i: i.offset):
        line_no = text.count("\n", 0, issue.offset) + 1
        line_start = text.rfind("\n", 0, issue.offset) + 1
        col = issue.offset - line_start
        line_end = text.find("\n", line_start)
        snippet = text[line_start : line_end if line_end >= 0 else len(text)].replace("\t", " ")
        dots = "".join("\uff0e" if len(c.encode()) > 1 else "." for c in snippet[:col])
        caret = "\uff3e" if col < len(snippet) and len(snippet[col].encode()) > 1 else "^"
        out.append(
            f"ERROR: <input>:{line_no}:{col + 1}: {issue.message}\n | {snippet}\n | {dots}{caret}"
        )
    return "\n".join(out)


_EXPR_START = (
    "{'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, "
    "STRING, BYTES, IDENTIFIER}"
)


def parse(text: str) -> tuple[lark.Tree | None, list[Issue]]:
    """Parse, or the syntax error as cel-go's ANTLR parser words it."""
    parser = CELParser()
    try:
        return _qualify(parser.parse(text)), []
    except CELParseError as exc:
        cause = exc.__context__
        offset = len(text)
        message = "Syntax error: mismatched input '<EOF>' expecting " + _EXPR_START
        if isinstance(cause, lark.exceptions.UnexpectedCharacters):
            offset = cause.pos_in_stream or 0
            message = f"Syntax error: token recognition error at: '{text[offset : offset + 1]}'"
        elif isinstance(cause, lark.exceptions.UnexpectedToken):
            tok = cause.token
            if tok.type != "$END" and tok.start_pos is not None:
                offset = tok.start_pos
                message = f"Syntax error: mismatched input '{tok.value}' expecting " + (
                    _EXPR_START if _wants_expression(cause) else "<EOF>"
                )
            elif not _wants_expression(cause):
                message = "Syntax error: mismatched input '<EOF>' expecting <EOF>"
        return None, [Issue(offset, message)]


_QUALIFIED = frozenset(name for name in cellib.DECLS if "." in name)


def _qualify(tree: lark.Tree) -> lark.Tree:
    """cel-go resolves `format.dns1123Label()` and `ip.isCanonical(s)` to the functions of those
    dotted names before it looks for a variable `format` or `ip`: rewrite such member calls into
    calls of the dotted name, which both the checker and cel-python then see as global calls."""
    found = [n for n in tree.iter_subtrees() if n.data == "member_dot_arg"]
    for node in found:
        target, method = node.children[0], node.children[1]
        assert isinstance(method, lark.Token)
        ident = _ident_token(target)
        if ident is None or f"{ident}.{method}" not in _QUALIFIED:
            continue
        name = lark.Token(
            "IDENT",
            f"{ident}.{method}",
            start_pos=ident.start_pos,
            line=ident.line,
            column=ident.column,
            end_pos=method.end_pos,
        )
        call = lark.Tree("ident_arg", [name, *node.children[2:]], node.meta)
        node.data = "primary"
        node.children = [call]
    return tree


def _ident_token(expr: Any) -> lark.Token | None:
    node = expr
    while isinstance(node, lark.Tree) and node.data in ("member", "primary"):
        if len(node.children) != 1:
            return None
        node = node.children[0]
    if isinstance(node, lark.Tree) and node.data == "ident":
        tok = node.children[0]
        return tok if isinstance(tok, lark.Token) else None
    return None


def _wants_expression(exc: lark.exceptions.UnexpectedToken) -> bool:
    return bool({"IDENT", "INT_LIT", "STRING_LIT"} & set(exc.expected or ()))


# ------------------------------------------------------------------ checker


@dataclass
class Checked:
    issues: list[Issue]
    result: DeclType
    uses_old_self: bool


def check(tree: lark.Tree, text: str, self_type: DeclType, old_self: DeclType | None) -> Checked:
    """Type-check a parsed rule with `self` (and `oldSelf`, when declared) of these types."""
    c = _Checker(text, self_type, old_self)
    result = c.visit(tree)
    return Checked(c.issues, result, c.uses_old_self)


_BINARY = {
    "relation_lt": "<",
    "relation_le": "<=",
    "relation_gt": ">",
    "relation_ge": ">=",
    "relation_eq": "==",
    "relation_ne": "!=",
    "relation_in": "in",
    "addition_add": "+",
    "addition_sub": "-",
    "multiplication_mul": "*",
    "multiplication_div": "/",
    "multiplication_mod": "%",
}
_NUMERIC = frozenset({"int", "uint", "double"})
_PRIMITIVE = frozenset(
    {"int", "uint", "double", "string", "bool", "bytes", "duration", "timestamp", "null_type"}
)


class _Checker:
    def __init__(self, text: str, self_type: DeclType, old_self: DeclType | None) -> None:
        self.text = text
        self.issues: list[Issue] = []
        self.uses_old_self = False
        self.scopes: list[dict[str, DeclType]] = [{"self": self_type}]
        if old_self is not None:
            self.scopes[0]["oldSelf"] = old_self

    def error(self, offset: int, message: str) -> DeclType:
        self.issues.append(Issue(offset, message))
        return UNKNOWN

    def visit(self, node: lark.Tree | lark.Token) -> DeclType:
        if isinstance(node, lark.Token):
            return UNKNOWN
        handler = getattr(self, "_" + str(node.data), None)
        if handler is None:
            for child in node.children:
                self.visit(child)
            return UNKNOWN
        result: DeclType = handler(node)
        return result

    def _pass(self, node: lark.Tree) -> DeclType:
        return self.visit(node.children[-1]) if len(node.children) == 1 else UNKNOWN

    _member = _primary = _paren_expr = _pass

    def _expr(self, node: lark.Tree) -> DeclType:
        if len(node.children) == 1:
            return self.visit(node.children[0])
        self.visit(node.children[0])
        a, b = self.visit(node.children[1]), self.visit(node.children[2])
        return a if _same(a, b) else (a if b.name == "null_type" else UNKNOWN)

    def _logic(self, node: lark.Tree, op: str) -> DeclType:
        if len(node.children) == 1:
            return self.visit(node.children[0])
        left, right = (self.visit(c) for c in node.children)
        if _known(left) and _known(right) and not (_boolish(left) and _boolish(right)):
            offset = self._between(node.children[0], node.children[1], op)
            return self.error(offset, _no_overload(f"_{op}_", [left, right]))
        return BOOL

    def _conditionalor(self, node: lark.Tree) -> DeclType:
        return self._logic(node, "||")

    def _conditionaland(self, node: lark.Tree) -> DeclType:
        return self._logic(node, "&&")

    def _binary(self, node: lark.Tree) -> DeclType:
        if len(node.children) == 1:
            return self.visit(node.children[0])
        op_tree, right_tree = node.children
        assert isinstance(op_tree, lark.Tree)
        kind = str(op_tree.data)
        op = _BINARY[kind]
        left = self.visit(op_tree.children[0])
        right = self.visit(right_tree)
        offset = (op_tree.meta.end_pos or 0) - len(op)
        fn = "@in" if op == "in" else f"_{op}_"
        result = _binary_result(op, left, right)
        if result is None:
            return self.error(offset, _no_overload(fn, [left, right]))
        return result

    _relation = _addition = _multiplication = _binary

    def _unary(self, node: lark.Tree) -> DeclType:
        if len(node.children) == 1:
            return self.visit(node.children[0])
        op, operand = node.children
        typ = self.visit(operand)
        assert isinstance(op, lark.Tree)
        if op.data == "unary_not":
            if _known(typ) and not _boolish(typ):
                return self.error(op.meta.start_pos or 0, _no_overload("!_", [typ]))
            return BOOL
        if _known(typ) and typ.name not in _NUMERIC | {"duration", "dyn"}:
            return self.error(op.meta.start_pos or 0, _no_overload("-_", [typ]))
        return typ

    def _ident(self, node: lark.Tree) -> DeclType:
        tok = node.children[0]
        assert isinstance(tok, lark.Token)
        name = str(tok.value)
        for scope in reversed(self.scopes):
            if name in scope:
                if name == "oldSelf" and scope is self.scopes[0]:
                    self.uses_old_self = True
                return scope[name]
        if name in _TYPE_NAMES or name in _CEL_TYPE_NAME:
            return DeclType("type")
        return self.error(tok.start_pos or 0, f"undeclared reference to '{name}' (in container '')")

    def _member_dot(self, node: lark.Tree) -> DeclType:
        target_tree, tok = node.children
        assert isinstance(tok, lark.Token)
        target = self.visit(target_tree)
        return self._select(target, tok)

    def _select(self, target: DeclType, tok: lark.Token) -> DeclType:
        offset = self.text.rfind(".", 0, tok.start_pos or 0)
        name = str(tok.value)
        if target.name == "object":
            if name not in target.fields:
                return self.error(offset, f"undefined field '{name}'")
            return target.fields[name][1]
        if target.name == "map":
            return target.elem or UNKNOWN
        if target.name in _PRIMITIVE or target.name == "list":
            return self.error(offset, f"type '{target.display()}' does not support field selection")
        return DYN if target.name == "dyn" else UNKNOWN

    def _args(self, node: lark.Tree | None) -> list[lark.Tree]:
        if node is None:
            return []
        return [c for c in node.children if isinstance(c, lark.Tree)]

    def _ident_arg(self, node: lark.Tree) -> DeclType:
        tok = node.children[0]
        assert isinstance(tok, lark.Token)
        name = str(tok.value)
        args = self._args(node.children[1] if len(node.children) > 1 else None)
        paren = self.text.find("(", tok.end_pos or 0)
        if name == "has":
            if len(args) != 1 or not _is_select(args[0]):
                return self.error(paren, "invalid argument to has() macro")
            self._has_target(args[0])
            return BOOL
        types = [self.visit(a) for a in args]
        declared = _resolve(name, None, types)
        if declared is not None:
            return declared
        if name in cellib.DECLS and (name not in cellib.GLOBALS or _library_args(types)):
            return self.error(paren, _no_overload(name, types))
        if name not in cellib.GLOBALS:
            return self.error(paren, f"undeclared reference to '{name}' (in container '')")
        return _global_result(name, types)

    def _has_target(self, expr: lark.Tree) -> None:
        sel = _unwrap(expr)
        assert sel is not None
        target_tree, tok = sel.children
        assert isinstance(tok, lark.Token)
        self._select(self.visit(target_tree), tok)

    def _member_dot_arg(self, node: lark.Tree) -> DeclType:
        target_tree, tok = node.children[0], node.children[1]
        assert isinstance(tok, lark.Token)
        name = str(tok.value)
        args = self._args(node.children[2] if len(node.children) > 2 else None)
        paren = self.text.find("(", tok.end_pos or 0)
        target = self.visit(target_tree)
        if name in _MACROS and len(args) == 2:
            var = _unwrap_ident(args[0])
            if var is None:
                self.visit(args[1])
                return self.error(paren, "argument must be a simple name")
            if target.name == "list":
                elem = target.elem or UNKNOWN
            elif target.name == "map":
                elem = STRING
            elif target.name in ("dyn", "?"):
                elem = target
            else:
                elem = UNKNOWN
            self.scopes.append({var: elem})
            body = self.visit(args[1])
            self.scopes.pop()
            if name == "map":
                return DeclType("list", elem=body if _known(body) else DYN)
            if name == "filter":
                return target if target.name == "list" else UNKNOWN
            return BOOL
        types = [self.visit(a) for a in args]
        declared = _resolve(name, target, types)
        if declared is not None:
            return declared
        receivers = cellib.METHODS.get(name)
        if receivers is None and name in cellib.DECLS:
            return self.error(paren, _no_overload(name, [target, *types], instance=True))
        if receivers is None:
            return self.error(paren, f"undeclared reference to '{name}' (in container '')")
        if _known(target) and target.name in _LIBRARY_TYPES:
            return self.error(paren, _no_overload(name, [target, *types], instance=True))
        if _known(target) and target.name != "dyn" and target.name not in receivers:
            return self.error(paren, _no_overload(name, [target, *types], instance=True))
        return _method_result(name, target, types)

    def _member_index(self, node: lark.Tree) -> DeclType:
        target = self.visit(node.children[0])
        key = self.visit(node.children[1])
        if target.name == "list":
            return target.elem or UNKNOWN
        if target.name == "map":
            return target.elem or UNKNOWN
        if target.name == "object" and key.name == "string":
            return DYN
        if target.name in _PRIMITIVE:
            offset = self.text.find("[", node.meta.start_pos or 0)
            return self.error(offset, _no_overload("_[_]", [target, key]))
        return UNKNOWN

    def _literal(self, node: lark.Tree) -> DeclType:
        tok = node.children[0]
        assert isinstance(tok, lark.Token)
        return DeclType(
            {
                "INT_LIT": "int",
                "UINT_LIT": "uint",
                "FLOAT_LIT": "double",
                "STRING_LIT": "string",
                "MLSTRING_LIT": "string",
                "BYTES_LIT": "bytes",
                "BOOL_LIT": "bool",
                "NULL_LIT": "null_type",
            }.get(tok.type, "?")
        )

    def _list_lit(self, node: lark.Tree) -> DeclType:
        elems = [self.visit(a) for a in self._args(node.children[0] if node.children else None)]
        first = elems[0] if elems else DYN
        same = all(_same(first, e) for e in elems)
        return DeclType("list", elem=first if same and _known(first) else DYN)

    def _map_lit(self, node: lark.Tree) -> DeclType:
        values = [self.visit(a) for a in self._args(node.children[0] if node.children else None)]
        vals = values[1::2]
        first = vals[0] if vals else DYN
        same = all(_same(first, v) for v in vals)
        return DeclType("map", elem=first if same and _known(first) else DYN)

    def _between(self, left: Any, right: Any, op: str) -> int:
        start = left.meta.end_pos if isinstance(left, lark.Tree) else 0
        end = right.meta.start_pos if isinstance(right, lark.Tree) else len(self.text)
        found = self.text.find(op, start or 0, end)
        return found if found >= 0 else (start or 0)


def _unwrap(expr: lark.Tree) -> lark.Tree | None:
    """The member_dot inside an expression that is nothing but a field selection."""
    node: Any = expr
    while isinstance(node, lark.Tree) and len(node.children) == 1:
        node = node.children[0]
    if isinstance(node, lark.Tree) and node.data == "member_dot":
        return node
    return None


def _unwrap_ident(expr: lark.Tree) -> str | None:
    node: Any = expr
    while isinstance(node, lark.Tree) and len(node.children) == 1 and node.data != "ident":
        node = node.children[0]
    if isinstance(node, lark.Tree) and node.data == "ident":
        return str(node.children[0])
    return None


def _is_select(expr: lark.Tree) -> bool:
    return _unwrap(expr) is not None


def _known(t: DeclType) -> bool:
    return t.name != "?"


def _boolish(t: DeclType) -> bool:
    return t.name in ("bool", "dyn")


def _same(a: DeclType, b: DeclType) -> bool:
    if not (_known(a) and _known(b)):
        return False
    if a.name != b.name:
        return False
    if a.name in ("list", "map", "optional"):
        return a.elem is b.elem or (
            a.elem is not None and b.elem is not None and _same(a.elem, b.elem)
        )
    if a.name == "object":
        return a is b
    return True


def _no_overload(fn: str, args: list[DeclType], instance: bool = False) -> str:
    names = [_display(a) for a in args]
    if instance:
        sig = f"{names[0]}.({', '.join(names[1:])})"
    else:
        sig = f"({', '.join(names)})"
    return f"found no matching overload for '{fn}' applied to '{sig}'"


def _display(t: DeclType) -> str:
    return "object" if t.name == "object" else t.display()


def _binary_result(op: str, left: DeclType, right: DeclType) -> DeclType | None:
    """The result type of a binary operator, UNKNOWN when unsure, None for kube's overload error."""
    if not (_known(left) and _known(right)) or "dyn" in (left.name, right.name):
        return BOOL if op in ("<", "<=", ">", ">=", "==", "!=", "in") else UNKNOWN
    if left.name == "object" or right.name == "object":
        return BOOL if op in ("==", "!=", "in") else UNKNOWN
    ln, rn = left.name, right.name
    if op in ("==", "!="):
        if ln == rn or "null_type" in (ln, rn) or (ln in _NUMERIC and rn in _NUMERIC):
            return BOOL
        return None
    if op == "in":
        if rn in ("list", "map"):
            return BOOL
        return None
    if op in ("<", "<=", ">", ">="):
        if ln == rn and ln in _PRIMITIVE - {"null_type"}:
            return BOOL
        if ln in _NUMERIC and rn in _NUMERIC:
            return BOOL
        return None
    if op == "+":
        if ln == rn and ln in ("int", "uint", "double", "string", "bytes", "list", "duration"):
            return left
        if {ln, rn} == {"timestamp", "duration"}:
            return DeclType("timestamp")
        return None
    if op == "-":
        if ln == rn and ln in ("int", "uint", "double", "duration"):
            return left
        if ln == "timestamp" and rn == "timestamp":
            return DeclType("duration")
        if ln == "timestamp" and rn == "duration":
            return left
        return None
    if op in ("*", "/"):
        return left if ln == rn and ln in _NUMERIC else None
    if op == "%":
        return left if ln == rn and ln in ("int", "uint") else None
    return UNKNOWN


_LIBRARY_TYPES = frozenset(
    o.result for overloads in cellib.DECLS.values() for o in overloads if "." in o.result
)


def _library_args(args: list[DeclType]) -> bool:
    return any(a.name in _LIBRARY_TYPES for a in args)


def _type_of(spec: str) -> DeclType:
    """A DeclType from an overload's type name: `optional(list(string))` and the like."""
    for kind in ("optional", "list"):
        if spec.startswith(kind + "(") and spec.endswith(")"):
            return DeclType(kind, elem=_type_of(spec[len(kind) + 1 : -1]))
    return DeclType(spec)


def _accepts(spec: str, t: DeclType) -> bool:
    return not _known(t) or t.name == "dyn" or t.name == spec


def _resolve(name: str, target: DeclType | None, args: list[DeclType]) -> DeclType | None:
    """The result type of a call the libraries' overloads accept; UNKNOWN when more than one
    could match an argument of unknown type; None when none of them takes these arguments."""
    overloads = cellib.DECLS.get(name, ())
    matches = [
        o
        for o in overloads
        if (o.receiver is None) == (target is None)
        and len(o.args) == len(args)
        and (target is None or o.receiver is None or _accepts(o.receiver, target))
        and all(_accepts(spec, a) for spec, a in zip(o.args, args, strict=True))
    ]
    if target is not None and matches and not (_known(target) and target.name != "dyn"):
        if name in cellib.METHODS:
            return None  # a dyn receiver: the string/list methods may be meant
    if not matches:
        return None
    results = {o.result for o in matches}
    return _type_of(results.pop()) if len(results) == 1 else UNKNOWN


def _global_result(name: str, args: list[DeclType]) -> DeclType:
    if name in ("size", "int"):
        return INT
    if name in ("matches", "bool", "isURL"):
        return BOOL
    if name in ("string", "uint", "double", "bytes", "duration", "timestamp", "type", "url"):
        return DeclType(name)
    if name == "dyn":
        return DYN
    return UNKNOWN


_INT_METHODS = frozenset(
    {
        "size",
        "indexOf",
        "lastIndexOf",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getFullYear",
        "getMonth",
        "getHours",
        "getMinutes",
        "getSeconds",
        "getMilliseconds",
    }
)


def _method_result(name: str, target: DeclType, args: list[DeclType]) -> DeclType:
    if name in (
        "startsWith",
        "endsWith",
        "contains",
        "matches",
        "isSorted",
        "hasValue",
    ):
        return BOOL
    if name in _INT_METHODS:
        return INT
    if name in (
        "charAt",
        "lowerAscii",
        "upperAscii",
        "replace",
        "substring",
        "trim",
        "join",
        "find",
        "getScheme",
        "getHost",
        "getHostname",
        "getPort",
        "getEscapedPath",
    ):
        return STRING
    if name in ("split", "findAll"):
        return DeclType("list", elem=STRING)
    if name in ("value", "orValue") and target.name == "optional":
        return target.elem or UNKNOWN
    if name in ("sum", "max") and target.name == "list":
        return target.elem or UNKNOWN
    return UNKNOWN
