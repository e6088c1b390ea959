"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's algorithm and defaults.

Only one replica of the operator may act on the cluster at a time, and a replica that dies must be
replaced within seconds without anyone's help. The algorithm is client-go's
`tools/leaderelection` with a LeaseLock, which every controller-runtime operator runs, so a
cluster administrator reads our Lease exactly as theirs:

- Every write is a PUT carrying the resourceVersion last read, so when two candidates race for
  the same Lease the server lets exactly one of them win; the other gets a 409 and backs off.
- A candidate takes over only when the record it sees has not changed for the record's lease
  duration, measured on its own monotonic clock from the moment it saw the record change. The
  holder's `renewTime` is never compared with the local clock, so clock skew between replicas
  cannot make a live leader look expired (or a dead one look alive).
- The leader renews every retry period and gives up once no renewal has succeeded within the
  renew deadline, which is shorter than the lease duration: it stops acting before anyone else may
  start.
- On a graceful stop the leader writes the Lease with no holder, so a successor need not wait out
  the lease duration.

Beyond client-go, a candidate also watches its Lease while it waits (a watch on that one object).
The watch only decides *when* the next attempt is made, never whether it may succeed: a released
or deleted lease is attempted at once instead of at the next jittered retry (a handover after a
graceful stop then takes a round trip, not 2-4.4 s), and a lease whose holder stopped renewing is
attempted the moment it expires by our local observation (which the watch makes precise, seeing
every renewal as it lands). Each attempt is still client-go's read-check-PUT guarded by the
resourceVersion, so a watch that lags, is cut or never delivers costs speed, not safety: the
jittered retries go on underneath as before.

Where client-go has known gaps they are closed here rather than copied: the renew deadline is
counted from the start of the last successful renewal (client-go adds a retry period on top, which
can exceed the lease duration), every call carries a deadline, a renewal that finds another holder
stops leading at once, and `on_stopped_leading` runs as soon as leadership ends rather than after
the release attempt.

The package holds the configuration (`config`), the election record a Lease carries (`record`)
and the elector that runs a term (`elector`).
"""

from nodeops.kube.leaderelection.config import JITTER_FACTOR, LeaderElectionConfig, default_identity
from nodeops.kube.leaderelection.elector import LeaderElector, LeadershipLost

__all__ = [
    "JITTER_FACTOR",
    "LeaderElectionConfig",
    "LeaderElector",
    "LeadershipLost",
    "default_identity",
]
