"""Site policy: maintenance windows (windows.py), the operator hold and the open/held answer (site.py), its
`UpgradeHeld` condition on the node's pods (held.py), and the automatic upgrade and pre-pull it gates
(autoupgrade.py, autoprepull.py; both publishers run on passes.py).
"""
