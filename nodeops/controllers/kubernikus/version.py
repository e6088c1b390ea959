"""Kubernetes version strings compared as semantic versions.

`v1.31.4` on the API server and `v1.31.4` on a kubelet are the same release; so are builds that
differ only in build metadata (`+k3s1`). A pre-release (`-rc.1`, `-gke.100`) is part of the
version, as semver orders it. Either direction of difference counts: a kubelet newer than the
API server (after a control-plane rollback) needs replacing as much as an older one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["KubeVersion", "VersionError", "differs", "parse_version"]

_SEMVER: Final = re.compile(
    r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


class VersionError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class KubeVersion:
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: str = ""

    def __str__(self) -> str:
        pre = f"-{'.'.join(self.prerelease)}" if self.prerelease else ""
        build = f"+{self.build}" if self.build else ""
        return f"v{self.major}.{self.minor}.{self.patch}{pre}{build}"

    @property
    def release(self) -> tuple[int, int, int, tuple[str, ...]]:
        """What semver precedence compares: everything but the build metadata."""
        return (self.major, self.minor, self.patch, self.prerelease)


def parse_version(text: str) -> KubeVersion:
    match = _SEMVER.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise VersionError(f"{text!r} is not a version like v1.31.4")
    major, minor, patch, pre, build = match.groups()
    return KubeVersion(
        int(major), int(minor), int(patch), tuple(pre.split(".")) if pre else (), build or ""
    )


def differs(kubelet: KubeVersion, server: KubeVersion) -> bool:
    """True when the kubelet runs another release than the API server (older or newer)."""
    return kubelet.release != server.release
