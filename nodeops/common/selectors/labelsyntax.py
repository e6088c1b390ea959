"""Label key and value validation (k8s.io/apimachinery/pkg/api/validate/content).

Selector parsing and the simulator's object validation refuse the same keys and values with the
same messages, so both take them from here.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["label_key_errors", "label_value_errors"]

_LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_KEY_RE: Final = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE_FMT: Final = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_RE: Final = re.compile(_LABEL_VALUE_FMT)
_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_RE: Final = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_MAX: Final = 63
_SUBDOMAIN_MAX: Final = 253


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _byte_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def label_key_errors(key: str) -> list[str]:
    errs: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if _byte_len(prefix) > _SUBDOMAIN_MAX:
                errs.append(f"prefix part must be no more than {_SUBDOMAIN_MAX} bytes")
            if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errs.append(
                    "prefix part "
                    + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com")
                )
    else:
        return [
            "a valid label key "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif _byte_len(name) > _LABEL_MAX:
        errs.append(f"name part must be no more than {_LABEL_MAX} bytes")
    if not _LABEL_KEY_RE.fullmatch(name):
        errs.append(
            "name part "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    errs: list[str] = []
    if _byte_len(value) > _LABEL_MAX:
        errs.append(f"must be no more than {_LABEL_MAX} bytes")
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errs
