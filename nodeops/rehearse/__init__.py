"""Rehearse a roll before it runs: `nodeops cycle NODEGROUP... --rehearse`.

A read-only snapshot of what a roll depends on is copied into an in-process simulated cluster
and cloud, and the cycling controllers themselves roll the copy on a fast clock. What they do
there (how long, which budgets hold them, which workloads dip, which pods find no room) is the
prediction; nothing is written to the live cluster or its cloud.

It sits above `nodeops.demo`, whose world (a simulator with the controllers wired to it) it
reuses, because it needs both the simulator and the controllers, which the layers below keep
apart.
"""

from nodeops.rehearse.rehearsal import Rehearsal, RehearsalOptions, RehearseError, rehearse
from nodeops.rehearse.report import Report

__all__ = ["Rehearsal", "RehearsalOptions", "RehearseError", "Report", "rehearse"]
