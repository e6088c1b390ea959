"""Reading another cluster's kubeconfig without the operator's runtime.

The simulator sits below `nodeops.kube` and may not borrow its client, so this reads the few
kubeconfig fields an attach needs itself: the server, how to trust it, and how to prove who we
are (a bearer token or a client certificate). Exec and auth-provider plugins are refused by
name, since silently connecting as nobody would look like missing permissions.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nodeops.common.exectoken import ExecTokenSource

__all__ = ["AttachError", "Target", "load_target"]


class AttachError(Exception):
    """Bad input to attach or detach; its message is the one line the user sees."""


@dataclass(frozen=True)
class Target:
    """Where the API server is and how to talk to it."""

    server: str
    token: str | None
    ssl_context: ssl.SSLContext | None
    context: str
    token_source: ExecTokenSource | None = None
    """The kubeconfig user's exec plugin (cloud clusters' short-lived tokens), if it has one."""


def _named(entries: Any, name: str, what: str, source: Path) -> Mapping[str, Any]:
    for entry in entries or ():
        if isinstance(entry, Mapping) and entry.get("name") == name:
            value = entry.get(what)
            return value if isinstance(value, Mapping) else {}
    raise AttachError(f"{source}: no {what} named {name!r}")


@contextlib.contextmanager
def _pem_file(data: bytes) -> Iterator[str]:
    """`ssl` loads certificates and keys only from files; inline ones pass through one."""
    fd, name = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield name
    finally:
        os.unlink(name)


def _material(entry: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    """`<key>-data` (base64) or the file `<key>` names, relative to the kubeconfig."""
    inline = entry.get(f"{key}-data")
    if inline:
        return base64.b64decode(str(inline))
    path = entry.get(key)
    if path:
        return (base / str(path)).expanduser().read_bytes()
    return None


def _ssl_context(
    cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path
) -> ssl.SSLContext | None:
    ca = _material(cluster, "certificate-authority", base)
    cert = _material(user, "client-certificate", base)
    key = _material(user, "client-key", base)
    insecure = bool(cluster.get("insecure-skip-tls-verify"))
    if ca is None and cert is None and not insecure:
        return None
    context = ssl.create_default_context(cadata=ca.decode() if ca else None)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        if key is None:
            raise AttachError("the kubeconfig's user has a client certificate but no key")
        with _pem_file(cert) as cert_file, _pem_file(key) as key_file:
            context.load_cert_chain(cert_file, key_file)
    return context


def load_target(path: str | os.PathLike[str], context: str | None = None) -> Target:
    """The server, credentials and trust of `context` (default: the current context)."""
    source = Path(path).expanduser()
    try:
        config = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AttachError(f"cannot read kubeconfig {source}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise AttachError(f"{source} is not YAML: {exc}") from None
    if not isinstance(config, Mapping):
        raise AttachError(f"{source} is not a kubeconfig")
    name = context or config.get("current-context")
    if not name:
        raise AttachError(f"{source} has no current-context; name one with --context")
    ctx = _named(config.get("contexts"), str(name), "context", source)
    cluster = _named(config.get("clusters"), str(ctx.get("cluster")), "cluster", source)
    user: Mapping[str, Any] = (
        _named(config.get("users"), str(ctx["user"]), "user", source) if ctx.get("user") else {}
    )
    server = str(cluster.get("server") or "").rstrip("/")
    if not server.startswith(("http://", "https://")):
        raise AttachError(f"{source}: cluster {ctx.get('cluster')!r} has no http(s) server")
    if user.get("auth-provider"):
        raise AttachError(
            f"{source}: the user of context {name!r} authenticates through an auth-provider "
            "plugin (removed from kubectl in 1.26); use an exec plugin, a token or a client "
            "certificate"
        )
    exec_config = user.get("exec")
    if exec_config is not None and not isinstance(exec_config, Mapping):
        raise AttachError(f"{source}: the exec section of user {ctx['user']!r} is not a mapping")
    base = source.parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        try:
            token = (base / str(user["tokenFile"])).expanduser().read_text().strip()
        except OSError as exc:
            raise AttachError(f"cannot read tokenFile: {exc.strerror or exc}") from None
    try:
        ssl_context = _ssl_context(cluster, user, base)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise AttachError(f"{source}: bad TLS material: {exc}") from None
    return Target(
        server=server,
        token=str(token) if token else None,
        ssl_context=ssl_context,
        context=name,
        token_source=ExecTokenSource(dict(exec_config)) if exec_config else None,
    )
