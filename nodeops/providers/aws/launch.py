"""What an Auto Scaling group launches now, and which instances were launched from something else.

An ASG names its launch template version symbolically (`$Latest`, `$Default`, or nothing, which
means `$Default`) while its instances report the number they were launched with. Comparing the
strings (as Cyclops did before its issue #61) flags every instance as out of date forever and
cycles the group in a loop; comparing a resolved `$Latest` while ignoring `$Default` (as it still
does) keeps the loop for `$Default` groups. Both are resolved here with one DescribeLaunchTemplates
call per batch of templates (it returns the default and latest version numbers), and templates
are compared by ID as well as version, so a group switched to another template with the same
version number still counts as changed.

Mixed instances policies are followed: an instance must match the override template of its
instance type if there is one, else the policy's template.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from nodeops.providers.aws.api import AwsApi
from nodeops.providers.base import ProviderError

__all__ = [
    "CurrentSpecs",
    "LaunchSpec",
    "TemplateInfo",
    "TemplateRef",
    "Templates",
    "current_specs",
    "describe_templates",
    "instance_spec",
    "is_out_of_date",
    "template_refs",
]

_NOT_FOUND_CODES: Final = frozenset(
    {
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.Malformed",
        "InvalidLaunchTemplateName.MalformedException",
    }
)
_BATCH: Final = 100


@dataclass(frozen=True, slots=True)
class TemplateRef:
    """A launch template as a group or instance names it: by ID, by name, or both."""

    id: str | None
    name: str | None

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> TemplateRef | None:
        ident = spec.get("LaunchTemplateId") or None
        name = spec.get("LaunchTemplateName") or None
        if ident is None and name is None:
            return None
        return cls(ident, name)


@dataclass(frozen=True, slots=True)
class TemplateInfo:
    id: str
    name: str
    default_version: int
    latest_version: int

    def resolve(self, version: str | int | None) -> str:
        """The version number a symbolic version stands for now."""
        text = "$Default" if version is None or version == "" else str(version)
        if text == "$Latest":
            return str(self.latest_version)
        if text == "$Default":
            return str(self.default_version)
        return text


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """A resolved launch source: a template ID and version number, or a configuration name."""

    template_id: str | None = None
    version: str | None = None
    configuration: str | None = None

    def label(self) -> str:
        if self.configuration is not None:
            return f"lc:{self.configuration}"
        return f"{self.template_id}:{self.version}"


class Templates:
    """Launch templates found by ID and by name, for one describe call."""

    def __init__(self, infos: Iterable[TemplateInfo] = ()) -> None:
        self.by_id: dict[str, TemplateInfo] = {}
        self.by_name: dict[str, TemplateInfo] = {}
        for info in infos:
            self.add(info)

    def add(self, info: TemplateInfo) -> None:
        self.by_id[info.id] = info
        self.by_name[info.name] = info

    def find(self, ref: TemplateRef) -> TemplateInfo | None:
        if ref.id is not None:
            return self.by_id.get(ref.id)
        if ref.name is not None:
            return self.by_name.get(ref.name)
        return None


def _group_template_specs(group: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    specs: list[Mapping[str, Any]] = []
    if group.get("LaunchTemplate"):
        specs.append(group["LaunchTemplate"])
    policy = (group.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}
    if policy.get("LaunchTemplateSpecification"):
        specs.append(policy["LaunchTemplateSpecification"])
    for override in policy.get("Overrides") or ():
        if override.get("LaunchTemplateSpecification"):
            specs.append(override["LaunchTemplateSpecification"])
    return specs


def template_refs(groups: Iterable[Mapping[str, Any]]) -> set[TemplateRef]:
    """Every launch template the groups (and their mixed instances policies) name."""
    refs: set[TemplateRef] = set()
    for group in groups:
        for spec in _group_template_specs(group):
            ref = TemplateRef.of(spec)
            if ref is not None:
                refs.add(ref)
    return refs


def _info(raw: Mapping[str, Any]) -> TemplateInfo:
    return TemplateInfo(
        id=raw["LaunchTemplateId"],
        name=raw["LaunchTemplateName"],
        default_version=int(raw["DefaultVersionNumber"]),
        latest_version=int(raw["LatestVersionNumber"]),
    )


async def _describe(api: AwsApi, key: str, values: list[str]) -> list[TemplateInfo]:
    found: list[TemplateInfo] = []
    params: dict[str, Any] = {key: values}
    async for page in api.pages("ec2", "describe_launch_templates", **params):
        found.extend(_info(raw) for raw in page.get("LaunchTemplates", ()))
    return found


async def _describe_tolerant(api: AwsApi, key: str, values: list[str]) -> list[TemplateInfo]:
    """A batch fails as a whole if one template is gone; then look them up one by one."""
    try:
        return await _describe(api, key, values)
    except ProviderError as exc:
        if exc.code not in _NOT_FOUND_CODES:
            raise
    found: list[TemplateInfo] = []
    for value in values:
        try:
            found.extend(await _describe(api, key, [value]))
        except ProviderError as exc:
            if exc.code not in _NOT_FOUND_CODES:
                raise
    return found


async def describe_templates(api: AwsApi, refs: Iterable[TemplateRef]) -> Templates:
    """Default and latest versions of the templates; deleted templates are simply absent."""
    ids = sorted({r.id for r in refs if r.id is not None})
    names = sorted({r.name for r in refs if r.id is None and r.name is not None})
    templates = Templates()
    for key, values in (("LaunchTemplateIds", ids), ("LaunchTemplateNames", names)):
        for start in range(0, len(values), _BATCH):
            for info in await _describe_tolerant(api, key, values[start : start + _BATCH]):
                templates.add(info)
    return templates


def _resolve(spec: Mapping[str, Any], templates: Templates) -> LaunchSpec | None:
    ref = TemplateRef.of(spec)
    info = templates.find(ref) if ref is not None else None
    if info is None:
        return None
    return LaunchSpec(template_id=info.id, version=info.resolve(spec.get("Version")))


@dataclass(frozen=True, slots=True)
class CurrentSpecs:
    """What a group launches now: a default, and per-instance-type overrides."""

    default: LaunchSpec | None
    by_instance_type: Mapping[str, LaunchSpec]
    known: bool
    """False when a template the group names could not be resolved (deleted, or no access):
    instances are then never called out of date, since a guess would cycle the group."""

    def for_type(self, instance_type: str | None) -> LaunchSpec | None:
        if instance_type is not None and instance_type in self.by_instance_type:
            return self.by_instance_type[instance_type]
        return self.default


def current_specs(group: Mapping[str, Any], templates: Templates) -> CurrentSpecs:
    if group.get("LaunchConfigurationName"):
        spec = LaunchSpec(configuration=group["LaunchConfigurationName"])
        return CurrentSpecs(default=spec, by_instance_type={}, known=True)
    known = True
    default: LaunchSpec | None = None
    overrides: dict[str, LaunchSpec] = {}
    policy = (group.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}
    base = group.get("LaunchTemplate") or policy.get("LaunchTemplateSpecification")
    if base:
        default = _resolve(base, templates)
        known = default is not None
    for override in policy.get("Overrides") or ():
        spec = override.get("LaunchTemplateSpecification")
        instance_type = override.get("InstanceType")
        if not spec or not instance_type:
            continue
        resolved = _resolve(spec, templates)
        if resolved is None:
            known = False
        else:
            overrides[instance_type] = resolved
    if default is None and not overrides:
        known = False
    return CurrentSpecs(default=default, by_instance_type=overrides, known=known)


def instance_spec(instance: Mapping[str, Any], templates: Templates) -> LaunchSpec | None:
    """What an ASG instance was launched from, as DescribeAutoScalingGroups reports it."""
    if instance.get("LaunchConfigurationName"):
        return LaunchSpec(configuration=instance["LaunchConfigurationName"])
    spec = instance.get("LaunchTemplate")
    if not spec:
        return None
    ref = TemplateRef.of(spec)
    version = spec.get("Version")
    version_text = None if version is None else str(version)
    if version_text is None or version_text.startswith("$"):
        # Instances normally report a number; resolve a symbolic one rather than compare text.
        info = templates.find(ref) if ref is not None else None
        if info is not None:
            version_text = info.resolve(version_text)
    template_id = spec.get("LaunchTemplateId")
    if template_id is None and ref is not None:
        info = templates.find(ref)
        template_id = info.id if info is not None else None
    return LaunchSpec(template_id=template_id, version=version_text)


def is_out_of_date(
    instance: Mapping[str, Any], current: CurrentSpecs, templates: Templates
) -> bool:
    """True when the instance was launched from something the group no longer launches.

    An instance with no launch source at all (attached by hand) differs from any group that has
    one; a group whose current source is unknown calls nothing out of date.
    """
    if not current.known:
        return False
    wanted = current.for_type(instance.get("InstanceType"))
    if wanted is None:
        return False
    return instance_spec(instance, templates) != wanted
