"""Messages render with Go text/template semantics over the data the reference's templates see."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nodeops.controllers.maintenance.templating import Template, TemplateError, message_data

NODE = {
    "metadata": {
        "name": "node-1",
        "labels": {"flatcar-linux-update.v1.flatcar-linux.net/version": "3815.2.0", "zone": "a"},
        "annotations": {"flatcar-linux-update.v1.flatcar-linux.net/new-version": "3815.2.1"},
    },
    "spec": {"unschedulable": True, "podCIDR": "10.0.0.0/24"},
    "status": {
        "nodeInfo": {"kubeletVersion": "v1.30.1"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}


def render(source: str, **overrides: object) -> str:
    data = message_data(
        NODE,
        state="in-maintenance",
        profile="flatcar",
        in_maintenance=True,
        last_transition=datetime(2026, 7, 1, 10, 0, tzinfo=UTC),
    )
    data.update(overrides)
    return Template(source).render(data)


def test_reference_messages() -> None:
    assert (
        render(
            "{{ .Node.Name }} will reboot now to update Flatcar Linux from version {{ index "
            '.Node.Labels "flatcar-linux-update.v1.flatcar-linux.net/version" }} to version '
            '{{ index .Node.Annotations "flatcar-linux-update.v1.flatcar-linux.net/new-version" }}'
        )
        == "node-1 will reboot now to update Flatcar Linux from version 3815.2.0 to version "
        "3815.2.1"
    )
    assert render("The node {{ .Node.Name }} is {{ .State }} ({{ .Profile }})") == (
        "The node node-1 is in-maintenance (flatcar)"
    )


def test_go_struct_fields() -> None:
    assert render("{{ .Node.Spec.Unschedulable }} {{ .Node.Spec.PodCIDR }}") == "true 10.0.0.0/24"
    assert render("{{ .Node.Status.NodeInfo.KubeletVersion }}") == "v1.30.1"
    assert render("{{ range .Node.Status.Conditions }}{{ .Type }}={{ .Status }}{{ end }}") == (
        "Ready=True"
    )
    assert render("{{ .LastTransition }}") == "2026-07-01 10:00:00 +0000 UTC"
    assert render("{{ .InMaintenance }}") == "true"


def test_go_semantics_missing_keys_and_printing() -> None:
    # map[string]string: a missing key is the empty string, as in Go.
    assert render('[{{ index .Node.Labels "nope" }}]') == "[]"
    assert render("{{ .Node.Labels }}") == (
        "map[flatcar-linux-update.v1.flatcar-linux.net/version:3815.2.0 zone:a]"
    )
    assert render("{{ .Missing }}") == "<no value>"
    assert render("{{ .Nil }}", Nil=None) == "<no value>"


def test_control_flow_and_trim_markers() -> None:
    assert render("{{ if .InMaintenance }}yes{{ else }}no{{ end }}") == "yes"
    # Go's truthiness: zero numbers, empty strings, lists and maps, and nil are false.
    for empty in (0, "", [], {}, None, False):
        assert render("{{ if .V }}t{{ else }}f{{ end }}", V=empty) == "f"
    assert render("{{ if .V }}t{{ end }}", V=[0]) == "t"
    assert render("{{ with .Empty }}x{{ else }}none{{ end }}", Empty="") == "none"
    assert render("a  {{- .State -}}  b") == "ain-maintenanceb"
    assert render("{{ range $k, $v := .Node.Labels }}{{ $k }};{{ end }}") == (
        "flatcar-linux-update.v1.flatcar-linux.net/version;zone;"
    )
    assert render('{{ if eq .State "in-maintenance" }}M{{ end }}') == "M"
    assert render('{{ printf "%s/%q" .Profile .State }}') == 'flatcar/"in-maintenance"'
    assert render("{{ len .Node.Labels }} {{ .State | len }}") == "2 14"
    assert render('{{ and .InMaintenance "x" }} {{ or "" "y" }} {{ not true }}') == "x y false"


def test_syntax_errors_have_a_place() -> None:
    with pytest.raises(TemplateError) as err:
        Template("hello\n{{ if .State }} x", "message")
    assert err.value.line == 2 and err.value.field == "message"
    with pytest.raises(TemplateError, match="not defined"):
        Template("{{ exec .State }}")


def test_rendering_is_bounded_and_executes_nothing() -> None:
    with pytest.raises(TemplateError, match="budget"):
        render('{{ range .Many }}{{ printf "%0100d" 1 }}{{ end }}', Many=list(range(1000)))
    with pytest.raises(TemplateError):
        render("{{ call .Node.Name }}")
    # Python attributes of the data are not reachable (Go cannot reach a string's field either).
    with pytest.raises(TemplateError, match="not allowed"):
        render("{{ .State.upper }}")
