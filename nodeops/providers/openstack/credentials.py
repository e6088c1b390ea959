"""The SDK's view of the configured cloud, from whichever credential source is configured.

A clouds.yaml cloud, a cloudprovider.conf, or either given as text (from a Kubernetes Secret):
each becomes an SDK `CloudRegion` here, and every way it can be wrong becomes a
`ProviderConfigError` naming the key to fix, in the file's own words. Environment variables are
never read: the cloud named in the configuration is the one used, whatever OS_* variables the pod
happens to have. Nothing here talks to the network; authentication happens on the first call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nodeops.common.extras import optional_dependencies

with optional_dependencies("openstack"):
    import openstack.config
    import openstack.exceptions as os_exc
    from keystoneauth1 import exceptions as ksa_exc

from nodeops.providers.base import ProviderConfigError
from nodeops.providers.openstack.cloudproviderconf import parse_cloudprovider_conf
from nodeops.providers.openstack.config import KEY, OpenStackConfig

__all__ = ["cloud_region"]


def cloud_region(
    config: OpenStackConfig, source_text: str | None = None
) -> openstack.config.cloud_region.CloudRegion:
    """The configured cloud (reads files only; authentication happens on the first call).

    `source_text`, when given, is the credential source's content, and the configured path is
    only its name in error messages.
    """
    options: dict[str, Any] = {
        "api_timeout": config.retry.attempt_timeout,
        "connect_retries": 0,
        "status_code_retries": 0,
    }
    if config.region is not None:
        options["region_name"] = config.region
    if config.cloud is not None and source_text is not None:
        source = str(config.clouds_yaml or "clouds.yaml")
        region = _clouds_yaml_text_region(source_text, config.cloud, source, options)
    elif config.cloud is not None:
        region = _load_clouds_yaml(config.cloud, config.clouds_yaml, options)
    else:
        assert config.cloudprovider_conf is not None  # the model guarantees one source
        region = _load_cloudprovider_conf(config.cloudprovider_conf, options, source_text)
    return region


def _load_clouds_yaml(
    cloud: str, path: Path | None, options: dict[str, Any]
) -> openstack.config.cloud_region.CloudRegion:
    files: list[str] | None = None
    secure: list[str] | None = None
    if path is not None:
        _check_clouds_yaml(path, cloud)
        files = [str(path)]
        secure = [str(path.with_name("secure.yaml"))]
    try:
        # Environment variables stay out: the cloud named in the configuration is the one
        # used, whatever OS_* variables the pod happens to have.
        loader = openstack.config.OpenStackConfig(
            config_files=files, secure_files=secure, load_envvars=False
        )
        return loader.get_one(cloud=cloud, **options)
    except (os_exc.ConfigException, ksa_exc.AuthPluginException) as exc:
        where = f"{path}: " if path is not None else ""
        region_fault = "region_name" in options and "region" in str(exc).lower()
        key = f"{KEY}.region" if region_fault else f"{KEY}.cloud"
        raise ProviderConfigError(key, f"{where}{exc}") from None


def _load_cloudprovider_conf(
    path: Path, options: dict[str, Any], text: str | None = None
) -> openstack.config.cloud_region.CloudRegion:
    key = f"{KEY}.cloudprovider_conf"
    if text is None:
        try:
            text = path.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            raise ProviderConfigError(key, f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ProviderConfigError(key, f"{path}: {exc}") from None
    conf = parse_cloudprovider_conf(text, source=str(path), key=key)
    options.setdefault("region_name", conf.region)
    if options["region_name"] is None:
        del options["region_name"]
    if conf.cacert is not None:
        options["cacert"] = conf.cacert
    try:
        loader = openstack.config.OpenStackConfig(
            config_files=[], vendor_files=[], secure_files=[], load_envvars=False
        )
        return loader.get_one(
            auth_type=conf.auth_type, auth=dict(conf.auth), verify=conf.verify, **options
        )
    except (os_exc.ConfigException, ksa_exc.AuthPluginException) as exc:
        raise ProviderConfigError(key, f"{path}: {exc}") from None


def _check_clouds_yaml(path: Path, cloud: str) -> None:
    """Fail on an unreadable clouds.yaml or a missing cloud with the file's own words.

    The SDK skips a file it cannot parse with a log line and then reports the cloud as not
    found, which sends the reader looking in the wrong place.
    """
    key = f"{KEY}.clouds_yaml"
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProviderConfigError(key, f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProviderConfigError(key, f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ProviderConfigError(key, f"{path}: not valid YAML: {exc}") from None
    clouds = document.get("clouds") if isinstance(document, dict) else None
    if not isinstance(clouds, dict):
        raise ProviderConfigError(key, f"{path}: has no `clouds` mapping")
    if cloud not in clouds:
        known = ", ".join(sorted(map(str, clouds))) or "none"
        raise ProviderConfigError(
            f"{KEY}.cloud", f"{path}: no cloud named {cloud!r} (defined: {known})"
        )


def _clouds_yaml_text_region(
    text: str, cloud: str, source: str, options: dict[str, Any]
) -> openstack.config.cloud_region.CloudRegion:
    """The cloud `cloud` of a clouds.yaml given as text, without reading any file."""
    key = f"{KEY}.clouds_yaml"
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # The position only: a YAML error's snippet may quote a password.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ProviderConfigError(key, f"{source}: not valid YAML{where}") from None
    clouds = document.get("clouds") if isinstance(document, dict) else None
    if not isinstance(clouds, dict):
        raise ProviderConfigError(key, f"{source}: has no `clouds` mapping")
    entry = clouds.get(cloud)
    if not isinstance(entry, dict):
        known = ", ".join(sorted(map(str, clouds))) or "none"
        raise ProviderConfigError(
            f"{KEY}.cloud", f"{source}: no cloud named {cloud!r} (defined: {known})"
        )
    settings = {k: v for k, v in entry.items() if k not in ("profile", "regions")}
    settings.update(options)
    try:
        loader = openstack.config.OpenStackConfig(
            config_files=[], vendor_files=[], secure_files=[], load_envvars=False
        )
        return loader.get_one(**settings)
    except (os_exc.ConfigException, ksa_exc.AuthPluginException) as exc:
        raise ProviderConfigError(f"{KEY}.cloud", f"{source}: {exc}") from None
