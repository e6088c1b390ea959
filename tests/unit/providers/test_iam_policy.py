"""The documented IAM policy is exactly what the AWS provider calls.

The provider's source is read as a syntax tree: every `api.call(service, operation)` and
`api.pages(service, operation)`, any paginator, and any direct client call named like an AWS
operation. Operation names are resolved through botocore's own service models, so a misspelt
operation or an action missing from (or superfluous in) the policy fails here, and the policy in
`docs/providers.md` must be the one in `nodeops.providers.aws.iam`.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import botocore.session
from botocore import xform_name

from nodeops.providers.aws import iam

ROOT = Path(__file__).resolve().parents[3]
AWS_SOURCES = sorted((ROOT / "nodeops" / "providers" / "aws").glob("*.py"))
DOC = ROOT / "docs" / "providers.md"
WRAPPERS = frozenset({"call", "pages"})


@dataclass(frozen=True)
class Use:
    service: str
    operation: str
    where: str


@functools.cache
def operations(service: str) -> dict[str, str]:
    """snake_case method name -> API operation name, from botocore's model of `service`."""
    model = botocore.session.get_session().get_service_model(service)
    return {xform_name(op): op for op in model.operation_names}


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _text(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _argument(call: ast.Call, index: int, name: str) -> ast.AST | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == name), None)


def _resolve(
    tree: ast.Module, parents: dict[ast.AST, ast.AST], node: ast.AST, where: str
) -> list[str]:
    """The string values an argument can have: a literal, or a parameter of an enclosing
    function that every caller in the module passes a literal for."""
    literal = _text(node)
    if literal is not None:
        return [literal]
    assert isinstance(node, ast.Name), f"{where}: cannot tell the service of this call"
    scope = parents.get(node)
    while scope is not None:
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            params = [a.arg for a in scope.args.posonlyargs + scope.args.args]
            if node.id in params:
                index = params.index(node.id)
                values = []
                for call in ast.walk(tree):
                    if (
                        isinstance(call, ast.Call)
                        and isinstance(call.func, ast.Name)
                        and call.func.id == scope.name
                    ):
                        value = _text(_argument(call, index, node.id))
                        assert value is not None, f"{where}: {scope.name} called without a literal"
                        values.append(value)
                assert values, f"{where}: {scope.name} is never called with a literal service"
                return values
        scope = parents.get(scope)
    raise AssertionError(f"{where}: {node.id} is not a parameter of an enclosing function")


def uses() -> list[Use]:
    found: list[Use] = []
    all_operations = {
        name: service for service in iam.SERVICE_PREFIXES for name in operations(service)
    }
    for path in AWS_SOURCES:
        tree = ast.parse(path.read_text(), filename=str(path))
        parents = _parents(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            where = f"{path.name}:{node.lineno}"
            attr = node.func.attr
            if attr in WRAPPERS and len(node.args) >= 2:
                if _forwards(parents, node):
                    continue
                operation = _text(node.args[1])
                assert operation is not None, f"{where}: the operation must be a literal"
                for service in _resolve(tree, parents, node.args[0], where):
                    found.append(Use(service, operation, where))
            elif attr == "get_paginator":
                operation = _text(_argument(node, 0, "operation_name"))
                assert operation is not None, f"{where}: the paginated operation must be a literal"
                found.append(Use(all_operations.get(operation, "?"), operation, where))
            elif attr in all_operations and not _is_own_module_call(node.func):
                found.append(Use(all_operations[attr], attr, where))
    return found


def _forwards(parents: dict[ast.AST, ast.AST], call: ast.Call) -> bool:
    """One wrapper calling the other with its own parameters (`pages` calling `call`)."""
    scope = parents.get(call)
    while scope is not None and not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        scope = parents.get(scope)
    if scope is None or scope.name not in WRAPPERS:
        return False
    params = {a.arg for a in scope.args.args}
    return all(isinstance(a, ast.Name) and a.id in params for a in call.args[:2])


def _is_own_module_call(func: ast.Attribute) -> bool:
    """`ec2.describe_instances(api, ...)` calls the provider's own helper, not a client."""
    own = {p.stem for p in AWS_SOURCES}
    return isinstance(func.value, ast.Name) and func.value.id in own


def called_actions() -> dict[str, list[str]]:
    actions: dict[str, list[str]] = {}
    for use in uses():
        assert use.service in iam.SERVICE_PREFIXES, f"{use.where}: unknown service {use.service}"
        known = operations(use.service)
        assert use.operation in known, (
            f"{use.where}: {use.service} has no operation {use.operation!r}"
        )
        action = f"{iam.SERVICE_PREFIXES[use.service]}:{known[use.operation]}"
        actions.setdefault(action, []).append(use.where)
    return actions


def test_the_scan_sees_the_provider_calls() -> None:
    found = called_actions()
    # A few calls known to be there, so a scan that finds nothing cannot pass.
    for action in (
        "autoscaling:DetachInstances",
        "ec2:TerminateInstances",
        "elasticloadbalancing:DeregisterTargets",
        "elasticloadbalancing:DescribeTags",
    ):
        assert action in found


def test_policy_lists_exactly_the_actions_called() -> None:
    found = called_actions()
    missing = sorted(set(found) - iam.actions())
    unused = sorted(iam.actions() - set(found))
    assert not missing, f"called but not in the policy: {[(a, found[a]) for a in missing]}"
    assert not unused, f"in the policy but never called: {unused}"


def test_policy_actions_are_unique_and_sorted_per_statement() -> None:
    for statement in iam.POLICY["Statement"]:
        assert statement["Action"] == sorted(set(statement["Action"])), statement["Sid"]


def test_documentation_shows_the_policy() -> None:
    doc = DOC.read_text()
    assert f"```json\n{iam.render()}\n```" in doc, (
        "docs/providers.md must contain the output of `python -m nodeops.providers.aws.iam`"
    )
