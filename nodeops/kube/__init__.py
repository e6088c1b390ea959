"""The nodeops controller runtime: controller-runtime's semantics with asyncio idioms.

Everything a controller (or a library user) needs is importable from here::

    from nodeops.kube import Manager, Controller, Request, Result, ReconcileContext, Stopping

See docs/library.md for a walk-through.
"""

from __future__ import annotations

from nodeops.kube import errors, finalizers, objects, resources
from nodeops.kube.client import (
    Client,
    OperationResult,
    RetryHook,
    RetryNotice,
    WatchEvent,
    WriteObserver,
)
from nodeops.kube.controller import (
    Controller,
    Mapper,
    ReconcileContext,
    ReconcileError,
    Reconciler,
    Request,
    Result,
    Stopping,
    TerminalError,
    UpdatePredicate,
    annotations_changed,
    any_of,
    generation_changed,
    labels_changed,
    to_controller_owner,
    to_self,
)
from nodeops.kube.errors import (
    AlreadyExists,
    ApiError,
    CacheLagging,
    CacheSyncTimeout,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    NotSynced,
    TooManyRequests,
)
from nodeops.kube.events import NORMAL, WARNING, EventRecorder
from nodeops.kube.finalizers import add_finalizer, remove_finalizer
from nodeops.kube.health import Check
from nodeops.kube.informer import (
    IndexFunc,
    Informer,
    InformerFactory,
    Transform,
    default_transform,
    index_by_namespace,
    index_pods_by_node,
    metadata_projection,
    object_key,
)
from nodeops.kube.leaderelection import LeaderElectionConfig, LeaderElector, LeadershipLost
from nodeops.kube.manager import (
    EXIT_FAILED,
    EXIT_LEADERSHIP_LOST,
    EXIT_OK,
    EXIT_SYNC_FAILED,
    Manager,
    Runnable,
)
from nodeops.kube.objects import owner_reference, set_owner_reference
from nodeops.kube.resources import Resource

__all__ = [
    "EXIT_FAILED",
    "EXIT_LEADERSHIP_LOST",
    "EXIT_OK",
    "EXIT_SYNC_FAILED",
    "NORMAL",
    "WARNING",
    "AlreadyExists",
    "ApiError",
    "CacheLagging",
    "CacheSyncTimeout",
    "Check",
    "Client",
    "Conflict",
    "Controller",
    "EventRecorder",
    "Forbidden",
    "Gone",
    "IndexFunc",
    "Informer",
    "InformerFactory",
    "Invalid",
    "KubeError",
    "LeaderElectionConfig",
    "LeaderElector",
    "LeadershipLost",
    "Manager",
    "Mapper",
    "NotFound",
    "NotSynced",
    "OperationResult",
    "ReconcileContext",
    "ReconcileError",
    "Reconciler",
    "Request",
    "Resource",
    "Result",
    "RetryHook",
    "RetryNotice",
    "Runnable",
    "Stopping",
    "TerminalError",
    "TooManyRequests",
    "Transform",
    "UpdatePredicate",
    "WatchEvent",
    "WriteObserver",
    "add_finalizer",
    "annotations_changed",
    "any_of",
    "default_transform",
    "errors",
    "finalizers",
    "generation_changed",
    "index_by_namespace",
    "index_pods_by_node",
    "labels_changed",
    "metadata_projection",
    "object_key",
    "objects",
    "owner_reference",
    "remove_finalizer",
    "resources",
    "set_owner_reference",
    "to_controller_owner",
    "to_self",
]
