"""The simulator's nodes and clouds attached to another API server (`nodeops sim attach`).

`attachment.Attachment` runs them, `cleanup.remove_labelled` removes what they created (also
for `nodeops sim detach`), `preflight` refuses bad input before anything is created, `labels`
marks every object created, `kubeconfig` reads the target's credentials.
"""

from nodeops.sim.attach.attachment import CONTROLLERS, Attachment, AttachOptions, parse_controllers
from nodeops.sim.attach.cleanup import remove_labelled
from nodeops.sim.attach.kubeconfig import AttachError, Target, load_target
from nodeops.sim.attach.labels import ATTACH_LABEL, LabellingClient

__all__ = [
    "ATTACH_LABEL",
    "CONTROLLERS",
    "AttachError",
    "AttachOptions",
    "Attachment",
    "LabellingClient",
    "Target",
    "load_target",
    "parse_controllers",
    "remove_labelled",
]
