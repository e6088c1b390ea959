"""Each AWS provider method's documented actions are exactly those its code can call.

The provider's modules are read as syntax trees and a call graph is built: module functions
(`loadbalancers.registrations(...)`, `_registrations(...)`), methods of the modules' classes
(`scan.classic()`), and the AWS operations reached through `api.call` / `api.pages`. The actions
reachable from a public `AwsProvider` method must be `iam.METHOD_ACTIONS[method]`, which is what
controllers build their own smaller policies from.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator

from nodeops.providers.aws import iam
from tests.unit.providers.test_iam_policy import (
    AWS_SOURCES,
    WRAPPERS,
    _forwards,
    _parents,
    _resolve,
    _text,
    operations,
)

Fn = tuple[str, str]  # (module stem, qualified name)


class Graph:
    def __init__(self) -> None:
        self.trees = {p.stem: ast.parse(p.read_text(), filename=str(p)) for p in AWS_SOURCES}
        self.functions: dict[Fn, ast.AST] = {}
        self.methods: dict[str, list[Fn]] = {}
        # `from nodeops.providers.aws.launch import describe_templates` in each module.
        self.imported: dict[Fn, Fn] = {}
        for module, tree in self.trees.items():
            for node in tree.body:
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "nodeops.providers.aws."
                ):
                    source = (node.module or "").rsplit(".", 1)[1]
                    for alias in node.names:
                        self.imported[(module, alias.asname or alias.name)] = (source, alias.name)
        for module, tree in self.trees.items():
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    self.functions[(module, node.name)] = node
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                            fn = (module, f"{node.name}.{item.name}")
                            self.functions[fn] = item
                            self.methods.setdefault(item.name, []).append(fn)

    def _calls(self, fn: Fn) -> Iterator[ast.Call]:
        for node in ast.walk(self.functions[fn]):
            if isinstance(node, ast.Call):
                yield node

    @functools.cache  # noqa: B019 - one graph per test run
    def direct(self, fn: Fn) -> tuple[frozenset[str], frozenset[Fn]]:
        module = fn[0]
        tree = self.trees[module]
        parents = _parents(tree)
        actions: set[str] = set()
        callees: set[Fn] = set()
        for call in self._calls(fn):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr in WRAPPERS and len(call.args) >= 2:
                if _forwards(parents, call):
                    continue
                operation = _text(call.args[1])
                assert operation is not None
                for service in _resolve(tree, parents, call.args[0], f"{module}:{call.lineno}"):
                    name = operations(service)[operation]
                    actions.add(f"{iam.SERVICE_PREFIXES[service]}:{name}")
            elif isinstance(func, ast.Name) and (module, func.id) in self.functions:
                callees.add((module, func.id))
            elif isinstance(func, ast.Name) and (module, func.id) in self.imported:
                callees.add(self.imported[(module, func.id)])
            elif isinstance(func, ast.Attribute):
                owner = func.value
                if isinstance(owner, ast.Name) and (owner.id, func.attr) in self.functions:
                    callees.add((owner.id, func.attr))
                else:
                    callees.update(self.methods.get(func.attr, ()))
        return frozenset(actions), frozenset(callees)

    def reachable(self, start: Fn) -> set[str]:
        seen: set[Fn] = set()
        todo = [start]
        found: set[str] = set()
        while todo:
            fn = todo.pop()
            if fn in seen:
                continue
            seen.add(fn)
            actions, callees = self.direct(fn)
            found |= actions
            todo.extend(callees)
        return found


def test_every_provider_method_is_mapped_to_exactly_its_actions() -> None:
    graph = Graph()
    public = sorted(
        name.split(".", 1)[1]
        for module, name in graph.functions
        if module == "provider"
        and name.startswith("AwsProvider.")
        and not name.split(".", 1)[1].startswith("_")
        and name.split(".", 1)[1] != "close"
    )
    assert set(public) == set(iam.METHOD_ACTIONS), "every public method needs an entry"
    for method in public:
        assert set(iam.METHOD_ACTIONS[method]) == graph.reachable(
            ("provider", f"AwsProvider.{method}")
        ), method
    # Every method's actions are in the provider's whole policy.
    assert {a for acts in iam.METHOD_ACTIONS.values() for a in acts} <= iam.actions()


def test_policy_for_a_few_methods() -> None:
    policy = iam.policy_for(["register", "target_health"], sid="Detacher")
    assert policy["Statement"] == [
        {
            "Sid": "DetacherDescribe",
            "Effect": "Allow",
            "Action": [
                "elasticloadbalancing:DescribeInstanceHealth",
                "elasticloadbalancing:DescribeLoadBalancerAttributes",
                "elasticloadbalancing:DescribeLoadBalancers",
                "elasticloadbalancing:DescribeTargetHealth",
            ],
            "Resource": "*",
        },
        {
            "Sid": "DetacherChange",
            "Effect": "Allow",
            "Action": [
                "elasticloadbalancing:RegisterInstancesWithLoadBalancer",
                "elasticloadbalancing:RegisterTargets",
            ],
            "Resource": "*",
        },
    ]
