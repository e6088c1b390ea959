"""Nova servers as the provider protocol's `Server`, and how a node's server is looked up by name.

Nova's own matching is loose (a `name` filter is a database regular expression, a deleted server
may linger as SOFT_DELETED), so what counts as "the node's server" and "gone" is decided here.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, Final

from nodeops.providers.base import Server
from nodeops.providers.openstack.config import NAME

__all__ = ["GONE_STATUSES", "is_uuid", "name_regex", "server_from_sdk"]

GONE_STATUSES: Final = frozenset({"DELETED", "SOFT_DELETED"})
"""Nova statuses of a server that no longer runs.

`SOFT_DELETED` is what a delete produces on clouds with deferred deletion
(`reclaim_instance_interval`): the VM is powered off and Nova reclaims it later, so for the node
it is gone, and waiting for the 404 would wait for the reclaim interval (hours)."""


_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9._-]+")


def name_regex(name: str) -> str:
    """A Nova `name` filter matching `name` exactly.

    Nova hands the filter to its database's regex engine (MySQL, PostgreSQL), whose escaping
    rules differ from Python's; node names are DNS subdomains, whose only special character is
    `.`, left unescaped: it still matches itself, and equality is checked afterwards anyway.
    Anything else is escaped with a backslash, which every POSIX-style engine reads as literal.
    """
    if _PLAIN_NAME.fullmatch(name):
        body = name
    else:
        body = "".join(c if c.isalnum() else f"\\{c}" for c in name)
    return f"^{body}$"


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def server_from_sdk(raw: Any) -> Server:
    server_id = str(raw.id)
    return Server(
        id=server_id,
        name=str(raw.name or ""),
        status=str(raw.status or "").upper(),
        provider_id=f"{NAME}:///{server_id}",
        zone=getattr(raw, "availability_zone", None) or None,
    )
