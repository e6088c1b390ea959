"""Resource quantities: parsing is plain data, shared with the operator from `nodeops.common`."""

from nodeops.common.quantity import cpu_millis, parse_quantity, units

__all__ = ["cpu_millis", "parse_quantity", "units"]
