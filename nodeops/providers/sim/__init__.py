"""The `sim` provider: the simulated cloud of `nodeops sim serve`, reached over its HTTP API.

It talks to `/sim/cloud/` exactly as the other providers talk to their clouds, through the
network with retries and timeouts and never by importing the simulator, so the operator's
cloud-facing paths (idempotent detach and terminate, draining waits, retried 5xx) run the same
way against the simulator as in production. The idempotency rules are the `aws` provider's:
detaching a detached or leaving instance, terminating a terminated or unknown one, and
deregistering an absent target are successes, decided from the cloud's state rather than from
error messages.

Node provider IDs are `sim:///<group>/<instance id>`; a node without one is matched by its name
against the instances' private DNS names, as on AWS.

Registered as `sim` in the `nodeops.providers` entry-point group; configured by `SimConfig`. The
package follows the `aws` provider's shape: settings (`config`), the HTTP API (`api`), one module
per protocol (`nodegroups`, `loadbalancers`, `servers`) and the provider that joins them
(`provider`).
"""

from nodeops.providers.sim.api import classify_sim_error
from nodeops.providers.sim.config import SimConfig
from nodeops.providers.sim.provider import SimProvider

__all__ = ["SimConfig", "SimProvider", "classify_sim_error"]
