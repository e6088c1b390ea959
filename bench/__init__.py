"""Benchmarks: `python -m bench.<name>`; each prints its result on stdout, and nothing else.

Logging, left unconfigured, would print every debug line of the operator's code on stdout,
before the JSON document a script reads. So logs go to stderr, warnings and up, as soon as any
benchmark is imported; a benchmark may choose another level or format (stderr all the same).
"""

from nodeops.kube.logging import configure

configure("warning", "console")
