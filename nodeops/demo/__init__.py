"""`nodeops demo`: a simulated cluster and the cycling controllers in one process.

`world.World` builds the cluster (cloud node groups, workloads with disruption budgets, a load
balancer taking traffic), the manager with the cycling controllers, and the simulator's own
record of what happened; `command` drives one roll and reports it. Benchmarks and end-to-end
tests build their worlds the same way.
"""
