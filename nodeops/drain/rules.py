"""NodeDrainRules as the drain engine sees them (`RuleView`), read from the cluster.

A cluster without the CRD installed has no rules; a rule that does not validate fails the drain
with a message naming the rule and the field, as Cluster API does, rather than being silently
ignored and draining pods in an order nobody asked for.
"""

from __future__ import annotations

from nodeops.api.drainrule import parse as parse_rule
from nodeops.api.errors import InvalidResource
from nodeops.drain.classify import Behavior, RuleView
from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.resources import NODEDRAINRULES


class InvalidRule(Exception):
    pass


async def load_rules(client: Client) -> list[RuleView]:
    try:
        items, _ = await client.list(NODEDRAINRULES)
    except errors.NotFound:
        return []
    views = []
    for item in items:
        name = (item.get("metadata") or {}).get("name", "")
        try:
            rule = parse_rule(item)
        except InvalidResource as exc:
            raise InvalidRule(f'NodeDrainRule "{name}" is invalid: {exc}') from exc
        views.append(
            RuleView(
                name=name,
                behavior=Behavior(rule.behavior),
                order=rule.order,
                applies_to_node=rule.applies_to_node,
                applies_to_pod=rule.applies_to_pod,
                needs_namespace_labels=any(
                    p.namespace_selector is not None for p in rule.spec.pods or ()
                ),
            )
        )
    return views
