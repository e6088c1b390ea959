"""Informers: a watched, indexed cache of one resource, shared by every controller that reads it.

Semantics are client-go's reflector and shared informer: the initial state streamed by a
watch-list that then goes on as the watch (a paginated list and a watch from its resourceVersion
where the server refuses watch-lists), bookmarks on; a random server timeout of 5-10 minutes and
a client read timeout so a dead connection cannot stall the cache; a relist on 410 Gone;
exponential backoff (0.8 s up to 30 s, with jitter) on errors, per failure streak and as long as
a `Retry-After` asks where the server sent one; add/update/delete handlers with old and new
objects.

The cache keeps each object as compact JSON bytes after the transform, not as a dict: a Python
dict costs about five times the JSON it came from, and an operator watching every pod of a
150,000-pod cluster must not need gigabytes for it. Reads decode on access, which costs
microseconds per object; handlers receive the already-decoded objects of the watch events.

The implementation is split by concern: `informercache` (the store, indexes, handlers and
waits), `listwatch` (the loop and its sync strategies), `relistbackoff` (retry policy),
`watchdecoding` (response decoding), `transforms` and `indexers` (what controllers plug in),
`syncwait` and `informerfactory` (sharing and read-your-writes). This module is the public
face: everything is imported from here.
"""

from __future__ import annotations

from nodeops.kube.freememory import _release_free_memory
from nodeops.kube.indexers import IndexFunc, index_by_namespace, index_pods_by_node, object_key
from nodeops.kube.informercache import (
    AddHandler,
    DeleteHandler,
    InformerCache,
    UpdateHandler,
)
from nodeops.kube.informerfactory import InformerFactory, InformerKey
from nodeops.kube.listwatch import BROKEN_WATCH_LISTS, Informer
from nodeops.kube.relistbackoff import Backoff
from nodeops.kube.syncwait import wait_all_synced
from nodeops.kube.transforms import (
    LAST_APPLIED,
    Obj,
    Transform,
    default_transform,
    metadata_projection,
)
from nodeops.kube.watchdecoding import INITIAL_EVENTS_END, _list_head

__all__ = [
    "BROKEN_WATCH_LISTS",
    "INITIAL_EVENTS_END",
    "LAST_APPLIED",
    "AddHandler",
    "Backoff",
    "DeleteHandler",
    "IndexFunc",
    "Informer",
    "InformerCache",
    "InformerFactory",
    "InformerKey",
    "Obj",
    "Transform",
    "UpdateHandler",
    "_list_head",
    "_release_free_memory",
    "default_transform",
    "index_by_namespace",
    "index_pods_by_node",
    "metadata_projection",
    "object_key",
    "wait_all_synced",
]
