"""Prometheus metrics with controller-runtime's names, labels and buckets.

Dashboards and alerts written for controller-runtime operators work unchanged against nodeops.
All metrics live in one registry (`REGISTRY`) that the manager serves on `/metrics`.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

_RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7,
    0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15,
    20, 25, 30, 40, 50, 60,
)  # fmt: skip
_QUEUE_BUCKETS = tuple(1e-8 * 10**i for i in range(12))
_REST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)

# --- controller
RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    ["controller", "result"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
    ["controller"],
    registry=REGISTRY,
)
TERMINAL_RECONCILE_ERRORS = Counter(
    "controller_runtime_terminal_reconcile_errors_total",
    "Total number of terminal reconciliation errors per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_PANICS = Counter(
    "controller_runtime_reconcile_panics_total",
    "Total number of reconciliation panics per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_TIMEOUTS = Counter(
    "controller_runtime_reconcile_timeouts_total",
    "Total number of reconciliation timeouts per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=_RECONCILE_BUCKETS,
    registry=REGISTRY,
)
MAX_CONCURRENT_RECONCILES = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    ["controller"],
    registry=REGISTRY,
)
ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller",
    ["controller"],
    registry=REGISTRY,
)

# --- workqueue
WORKQUEUE_DEPTH = Gauge(
    "workqueue_depth",
    "Current depth of workqueue",
    ["name", "controller", "priority"],
    registry=REGISTRY,
)
WORKQUEUE_ADDS = Counter(
    "workqueue_adds_total",
    "Total number of adds handled by workqueue",
    ["name", "controller"],
    registry=REGISTRY,
)
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    ["name", "controller"],
    buckets=_QUEUE_BUCKETS,
    registry=REGISTRY,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes",
    ["name", "controller"],
    buckets=_QUEUE_BUCKETS,
    registry=REGISTRY,
)
WORKQUEUE_UNFINISHED_WORK = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed by "
    "work_duration. Large values indicate stuck threads.",
    ["name", "controller"],
    registry=REGISTRY,
)
WORKQUEUE_LONGEST_RUNNING = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    ["name", "controller"],
    registry=REGISTRY,
)
WORKQUEUE_RETRIES = Counter(
    "workqueue_retries_total",
    "Total number of retries handled by workqueue",
    ["name", "controller"],
    registry=REGISTRY,
)

# --- REST client
REST_REQUESTS = Counter(
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "method", "host"],
    registry=REGISTRY,
)
REST_LATENCY = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.",
    ["verb", "host"],
    buckets=_REST_BUCKETS,
    registry=REGISTRY,
)
REST_RETRIES = Counter(
    "rest_client_request_retries_total",
    "Number of request retries, partitioned by status code, verb, and host.",
    ["code", "verb", "host"],
    registry=REGISTRY,
)
REST_RATE_LIMITER_WAIT = Histogram(
    "rest_client_rate_limiter_duration_seconds",
    "Client side rate limiter latency in seconds. Broken down by verb, and host.",
    ["verb", "host"],
    buckets=_REST_BUCKETS,
    registry=REGISTRY,
)

# --- leader election
LEADER_STATUS = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
    "1 indicates master. 'name' is the string used to identify the lease.",
    ["name"],
    registry=REGISTRY,
)
LEADER_SLOWPATH = Counter(
    "leader_election_slowpath_total",
    "Total number of slow path exercised in renewing leader leases. 'name' is the string used "
    "to identify the lease.",
    ["name"],
    registry=REGISTRY,
)

# --- informers (our own)
INFORMER_LISTS = Counter(
    "nodeops_informer_lists_total", "Full lists done by informers", ["resource"], registry=REGISTRY
)
INFORMER_WATCH_RESTARTS = Counter(
    "nodeops_informer_watch_restarts_total",
    "Watches restarted by informers, by reason",
    ["resource", "reason"],
    registry=REGISTRY,
)
INFORMER_OBJECTS = Gauge(
    "nodeops_informer_objects", "Objects held in an informer cache", ["resource"], registry=REGISTRY
)
INFORMER_OBJECT_ERRORS = Counter(
    "nodeops_informer_object_errors_total",
    "Objects an informer skipped because its transform or an indexer failed on them",
    ["resource", "stage"],
    registry=REGISTRY,
)
INFORMER_LIST_WATCH_FAILURES = Counter(
    "nodeops_informer_list_watch_failures_total",
    "Failed list or watch attempts of informers, by the kind of error",
    ["resource", "error"],
    registry=REGISTRY,
)
INFORMER_STALE = Histogram(
    "nodeops_informer_stale_seconds",
    "How long an informer's synced cache stayed behind after a failed list/watch or an expired "
    "watch, until its next sync or watch was established",
    ["resource"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0),
    registry=REGISTRY,
)
READ_YOUR_WRITES_WAIT = Histogram(
    "nodeops_read_your_writes_wait_seconds",
    "How long a write waited for the manager's informers to show it",
    ["resource"],
    buckets=_REST_BUCKETS,
    registry=REGISTRY,
)

# --- events (our own)
EVENTS_DROPPED = Counter(
    "nodeops_events_dropped_total",
    "Kubernetes Events that were not recorded, by reason",
    ["reason"],
    registry=REGISTRY,
)

# --- manager (our own)
RUNNABLE_FAILURES = Counter(
    "nodeops_manager_task_failures_total",
    "Supervised tasks (informers, controllers, runnables) that ended unexpectedly",
    ["kind", "name"],
    registry=REGISTRY,
)
