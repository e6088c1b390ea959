"""List and watch query parameters, defaulted and validated as kube-apiserver does.

kube decodes the query into `ListOptions`, defaults it (with the WatchList feature on, as it is
since v1.34, a watch from resourceVersion "" or "0" that says nothing about initial events is
turned into a watch-list: `sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`) and
validates it (`ValidateListOptions`); a combination it does not support is a 422 naming
`ListOptions.meta.k8s.io`. Booleans are read as kube reads them: absent is false, `0` and `false`
(any case) are false, anything else, even an empty value, is true.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from nodeops.common.gomessages import go_quote
from nodeops.sim.server import errors

NOT_OLDER_THAN: Final = "NotOlderThan"
EXACT: Final = "Exact"
INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"


def kube_bool(value: str | None) -> bool:
    """runtime.Convert_Slice_string_To_bool of one query value."""
    if value is None:
        return False
    return not (value == "0" or value.lower() == "false")


@dataclass(frozen=True, slots=True)
class ListOptions:
    resource_version: str
    resource_version_match: str
    # None when the request did not say; a watch-list when True.
    send_initial_events: bool | None
    allow_watch_bookmarks: bool
    continue_token: str

    @property
    def watch_list(self) -> bool:
        """Initial events from the current state, then the watch (kube's isListWatchRequest
        adds "with bookmarks" for the end-of-initial-events bookmark)."""
        return bool(self.send_initial_events)


def _forbidden(message: str, field: str = "resourceVersionMatch") -> tuple[str, str, str]:
    return ("FieldValueForbidden", field, f"Forbidden: {message}")


def _not_supported(value: str, supported: tuple[str, ...]) -> tuple[str, str, str]:
    shown = ", ".join(go_quote(s) for s in supported)
    return (
        "FieldValueNotSupported",
        "resourceVersionMatch",
        f"Unsupported value: {go_quote(value)}: supported values: {shown}",
    )


def parse(query: Mapping[str, str], *, watch: bool) -> ListOptions:
    """The request's options after kube's defaulting; raises kube's 422 for what it refuses."""
    rv = query.get("resourceVersion", "")
    match = query.get("resourceVersionMatch", "")
    initial = kube_bool(query["sendInitialEvents"]) if "sendInitialEvents" in query else None
    continue_token = query.get("continue", "")
    if watch and initial is None and not match and rv in ("", "0"):
        initial, match = True, NOT_OLDER_THAN
    causes = _watch_causes(match, initial, continue_token) if watch else []
    if not watch:
        causes = _list_causes(rv, match, initial, continue_token)
    if causes:
        raise errors.invalid("ListOptions", "meta.k8s.io", "", causes)
    return ListOptions(
        resource_version=rv,
        resource_version_match=match,
        send_initial_events=initial,
        allow_watch_bookmarks=kube_bool(query.get("allowWatchBookmarks")),
        continue_token=continue_token,
    )


def _watch_causes(
    match: str, initial: bool | None, continue_token: str
) -> list[tuple[str, str, str]]:
    causes = []
    if initial is not None and match != NOT_OLDER_THAN:
        causes.append(
            _forbidden(
                f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}"
            )
        )
    if match:
        if initial is None:
            causes.append(
                _forbidden(
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
                    "provided"
                )
            )
        if match != NOT_OLDER_THAN:
            causes.append(_not_supported(match, (NOT_OLDER_THAN,)))
        if continue_token:
            causes.append(_forbidden("resourceVersionMatch is forbidden when continue is provided"))
    return causes


def _list_causes(
    rv: str, match: str, initial: bool | None, continue_token: str
) -> list[tuple[str, str, str]]:
    causes = []
    if match:
        if not rv:
            causes.append(
                _forbidden("resourceVersionMatch is forbidden unless resourceVersion is provided")
            )
        if continue_token:
            causes.append(_forbidden("resourceVersionMatch is forbidden when continue is provided"))
        if match not in (EXACT, NOT_OLDER_THAN):
            causes.append(_not_supported(match, (EXACT, NOT_OLDER_THAN, "")))
        if match == EXACT and rv == "0":
            causes.append(
                _forbidden('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
            )
    if initial is not None:
        causes.append(_forbidden("sendInitialEvents is forbidden for list", "sendInitialEvents"))
    return causes
