"""Credentials from a cloudprovider.conf, read the way the OpenStack cloud controller manager does.

The cluster's cloud controller manager already reads its `[Global]` section, so an operator beside
it needs no second copy of the secret. The file is Go's gcfg dialect, not Python's INI, which is
why quoting and comments are resolved here by hand; nothing in this module touches the SDK, so
the parsing is checked without a cloud.
"""

from __future__ import annotations

import configparser
import dataclasses
from typing import Final
from urllib.parse import urlsplit

from nodeops.providers.base import ProviderConfigError
from nodeops.providers.openstack.config import KEY

__all__ = ["CloudproviderConf", "parse_cloudprovider_conf"]


@dataclasses.dataclass(frozen=True, slots=True)
class CloudproviderConf:
    """Credentials read from a cloudprovider.conf, in keystoneauth's terms."""

    auth_type: str
    auth: dict[str, str] = dataclasses.field(repr=False)
    region: str | None = None
    cacert: str | None = None
    verify: bool = True


_GLOBAL: Final = "global"

# keystoneauth option <- the [Global] keys that set it. The `tenant-*` spellings are those of the
# OpenStack cloud controller manager (and gophercloud); `project-*` ones are accepted alongside.
_AUTH_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "auth_url": ("auth-url",),
    "username": ("username",),
    "user_id": ("user-id",),
    "password": ("password",),
    "project_id": ("tenant-id", "project-id"),
    "project_name": ("tenant-name", "project-name"),
    "user_domain_id": ("user-domain-id",),
    "user_domain_name": ("user-domain-name",),
    "project_domain_id": ("tenant-domain-id", "project-domain-id"),
    "project_domain_name": ("tenant-domain-name", "project-domain-name"),
    "application_credential_id": ("application-credential-id",),
    "application_credential_name": ("application-credential-name",),
    "application_credential_secret": ("application-credential-secret",),
}
_SECRET_KEYS: Final = frozenset({"password", "application-credential-secret"})
_TRUE: Final = frozenset({"true", "yes", "on", "1"})
_FALSE: Final = frozenset({"false", "no", "off", "0"})


def parse_cloudprovider_conf(
    text: str, *, source: str = "cloudprovider.conf", key: str = f"{KEY}.cloudprovider_conf"
) -> CloudproviderConf:
    """Read the `[Global]` section of a cloudprovider.conf.

    The file is Go's gcfg dialect, not Python's INI: values may be double-quoted with
    backslash escapes, and an unquoted `;` or `#` starts a comment, so passwords containing them
    are quoted and must be unquoted here exactly as the cloud controller manager does.
    `domain-name`/`domain-id` name the domain of both the user and the project unless the
    specific keys are given (Kubernikus writes only `domain-name`). Other keys and sections
    belong to the cloud controller manager and are ignored.

    Raises `ProviderConfigError` under `key`, the message naming the file and the [Global] key.
    """

    def fail(message: str) -> ProviderConfigError:
        return ProviderConfigError(key, f"{source}: {message}")

    parser = configparser.ConfigParser(
        delimiters=("=",),
        comment_prefixes=("#", ";"),
        inline_comment_prefixes=None,
        interpolation=None,
        strict=False,
        allow_no_value=True,
        empty_lines_in_values=False,
    )
    try:
        parser.read_string(text, source=source)
    except configparser.MissingSectionHeaderError as exc:
        # configparser's own message quotes the line, which may be a password: lines only.
        raise fail(f"not a valid INI file: line {exc.lineno} comes before any [section]") from None
    except configparser.ParsingError as exc:
        lines = ", ".join(str(number) for number, _ in exc.errors)
        raise fail(
            f"not a valid INI file: cannot parse line {lines} (expected key = value)"
        ) from None
    except configparser.Error as exc:
        raise fail(f"not a valid INI file: {exc.message}") from None
    sections = [s for s in parser.sections() if s.strip().lower() == _GLOBAL]
    if not sections:
        raise fail("has no [Global] section")
    raw: dict[str, str | None] = {}
    for section in sections:
        raw.update(parser.items(section))

    values: dict[str, str] = {}
    for name, value in raw.items():
        if value is None:
            if name == "tls-insecure":
                values[name] = "true"  # gcfg: a bare boolean variable means true
                continue
            raise fail(f"[Global] {name} has no value")
        try:
            values[name] = _gcfg_value(value)
        except ValueError as exc:
            if name in _SECRET_KEYS:  # the reason may quote a piece of the secret
                raise fail(f"[Global] {name}: unterminated quote or invalid escape") from None
            raise fail(f"[Global] {name}: {exc}") from None

    def one_of(names: tuple[str, ...]) -> str | None:
        given = {n: values[n] for n in names if values.get(n)}
        if len(set(given.values())) > 1:
            listed = " and ".join(given)
            raise fail(f"[Global] {listed} are both set, to different values; keep one")
        return next(iter(given.values()), None)

    if (values.get("use-clouds") or "").lower() in _TRUE:
        raise fail(
            f"[Global] use-clouds refers to a clouds.yaml; set {KEY}.cloud and "
            f"{KEY}.clouds_yaml instead of {KEY}.cloudprovider_conf"
        )

    auth = {opt: v for opt, names in _AUTH_KEYS.items() if (v := one_of(names)) is not None}
    domain_id = values.get("domain-id") or None
    domain_name = values.get("domain-name") or None

    auth_url = auth.get("auth_url")
    if not auth_url:
        raise fail("[Global] auth-url is missing")
    parts = urlsplit(auth_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise fail(f"[Global] auth-url {auth_url!r} is not an http:// or https:// URL")

    has_user_domain = bool(
        auth.get("user_domain_id") or auth.get("user_domain_name") or domain_id or domain_name
    )
    if any(k.startswith("application_credential") for k in auth):
        auth_type = "v3applicationcredential"
        if not auth.get("application_credential_secret"):
            raise fail("[Global] application-credential-secret is missing")
        if not auth.get("application_credential_id"):
            if not auth.get("application_credential_name"):
                raise fail(
                    "[Global] application-credential-id (or application-credential-name "
                    "with the user) is missing"
                )
            if not (auth.get("user_id") or (auth.get("username") and has_user_domain)):
                raise fail(
                    "[Global] application-credential-name needs user-id, or username with "
                    "domain-name"
                )
        # Project and password are part of the credential itself; keystone rejects extras.
        for extra in ("password", "project_id", "project_name"):
            auth.pop(extra, None)
        auth.pop("project_domain_id", None)
        auth.pop("project_domain_name", None)
    else:
        auth_type = "password"
        if not auth.get("password"):
            raise fail("[Global] password is missing")
        if not (auth.get("username") or auth.get("user_id")):
            raise fail("[Global] username (or user-id) is missing")
        if auth.get("username") and not has_user_domain:
            raise fail("[Global] username needs its domain: domain-name or user-domain-name")
        if not (auth.get("project_id") or auth.get("project_name")):
            raise fail(
                "[Global] tenant-id (or tenant-name) is missing; without a project the token "
                "has no service catalog"
            )
        if (
            not auth.get("project_id")
            and not (auth.get("project_domain_id") or auth.get("project_domain_name"))
            and not (domain_id or domain_name)
        ):
            raise fail("[Global] tenant-name needs its domain: domain-name or tenant-domain-name")
        if not (auth.get("project_domain_id") or auth.get("project_domain_name")):
            if domain_id:
                auth["project_domain_id"] = domain_id
            elif domain_name:
                auth["project_domain_name"] = domain_name

    if not (auth.get("user_domain_id") or auth.get("user_domain_name")) and (auth.get("username")):
        if domain_id:
            auth["user_domain_id"] = domain_id
        elif domain_name:
            auth["user_domain_name"] = domain_name

    verify = True
    insecure = values.get("tls-insecure")
    if insecure is not None:
        lowered = insecure.lower()
        if lowered not in _TRUE | _FALSE:
            raise fail(f"[Global] tls-insecure {insecure!r} is not a boolean")
        verify = lowered in _FALSE

    return CloudproviderConf(
        auth_type=auth_type,
        auth=auth,
        region=values.get("region") or None,
        cacert=values.get("ca-file") or None,
        verify=verify,
    )


_ESCAPES: Final = {"n": "\n", "t": "\t", "b": "\b", '"': '"', "\\": "\\"}


def _gcfg_value(raw: str) -> str:
    """A gcfg value: quotes removed, escapes resolved, an unquoted comment and trailing blanks cut."""
    out: list[str] = []
    blanks = ""
    quoted = False
    chars = iter(raw.strip())
    for char in chars:
        if char == "\\":
            escaped = next(chars, None)
            if escaped is None or escaped not in _ESCAPES:
                raise ValueError(f"invalid escape sequence \\{escaped or ''}")
            out.append(blanks + _ESCAPES[escaped])
            blanks = ""
        elif quoted:
            if char == '"':
                quoted = False
            else:
                out.append(char)
        elif char == '"':
            out.append(blanks)
            blanks = ""
            quoted = True
        elif char in ";#":
            break
        elif char.isspace():
            blanks += char
        else:
            out.append(blanks + char)
            blanks = ""
    if quoted:
        raise ValueError("unterminated quoted value")
    return "".join(out)
