"""vSphere access: a vCenter session (pyVmomi, the optional `vsphere` extra) and the inventory
of hosts and virtual machines the esx controller decides from.

It lives among the providers rather than inside the esx controller because it is a cloud API
like the others, below the controllers in the layers: another controller that needs vCenter
(controllers never import each other) or a benchmark uses it as it is. `inventory` is plain
data without third-party imports; `vcenter` imports pyVmomi only when it first talks to vCenter,
so importing it costs nothing where the extra is not installed.
"""
