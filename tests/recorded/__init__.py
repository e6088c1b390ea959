"""What a real kube-apiserver answered, kept as data, and the simulator held to it.

`cases.py` holds requests whose answers matter to nodeops (CRD installation, field validation,
table watches, evictions beside the disruption controller, pod GC of pods whose node is gone).
`python -m tests.recorded.record --kubeconfig K` runs them against any API server and writes the
answers to `answers/kube-apiserver-<version>.json`; `tests/integration/sim/test_recorded_answers.py`
runs the same cases against the simulated API server and compares.
"""
