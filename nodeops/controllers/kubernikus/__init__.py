"""Kubernikus: kubelet version drift labels, and node replacement driven by a delete-node label.

`nodeops run --controllers kubernikus` compares every node's kubelet with the API server's
version and labels the ones that differ (`<prefix>kubelet-needs-update=true`); a node labelled
`<prefix>delete-node=true` is cordoned, drained, its VM deleted through the cloud provider and
its Node removed, so the node pool replaces it with a current one. Together with the maintenance
controller (which decides *when*, through its profiles and the same labels) this replaces
outdated nodes one at a time. See docs/kubernikus.md.

Settings (flags `--kubernikus-<field>`, environment `NODEOPS_KUBERNIKUS_<FIELD>`):

- `config`: kubernikus.yaml (default `config/kubernikus.yaml`, where the reference reads it);
- `compat`: `sapcc` for `cloud.sap/` keys (SAP's maintenance-controller's), as
  `--maintenance-compat` does for the maintenance controller;
- `key_prefix`: the key prefix without `compat` (default `nodeops.dev/`);
- `cloudprovider_conf`: the mounted cloudprovider.conf used when neither kubernikus.yaml's
  `cloudProviderSecret` nor `--provider` says otherwise;
- `workers`: nodes reconciled at once.
"""

from __future__ import annotations

from nodeops.controllers import ControllerPlugin, SetupContext
from nodeops.controllers.kubernikus.settings import KubernikusSettings

__all__ = ["PLUGIN", "KubernikusSettings"]


async def _setup(ctx: SetupContext, settings: KubernikusSettings) -> None:
    from nodeops.controllers.kubernikus.wiring import setup

    await setup(ctx, settings)


PLUGIN = ControllerPlugin(
    name="kubernikus",
    settings=KubernikusSettings,
    setup=_setup,
    description="kubelet version drift labels; delete-node label -> cordon, drain, delete VM",
)
