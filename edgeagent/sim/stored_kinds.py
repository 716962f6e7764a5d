"""What the real API server fills in for ConfigMaps, Secrets and Services, which the sim only stores.

No controller acts on these kinds here, but what `kubectl get -o yaml` shows after `kubectl create` must
be what a real cluster shows: a Secret's `stringData` folded into base64 `data` and `type: Opaque`, a
Service with its allocated cluster IP, protocols, target ports and the other defaulted fields.
"""

from __future__ import annotations

import base64
import ipaddress
import random
from collections.abc import Iterable
from typing import Any

from edgeagent.sim import errors

JSON = dict[str, Any]

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")  # kube-apiserver's default --service-cluster-ip-range
NODE_PORTS = range(30000, 32768)  # its default --service-node-port-range


def _fold_string_data(secret: JSON) -> None:
    """`stringData` is write-only: merged into `data` (base64), overriding keys already there."""
    string_data = secret.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = secret.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def _default_secret(secret: JSON) -> None:
    _fold_string_data(secret)
    if not secret.get("type"):
        secret["type"] = "Opaque"


def _used_ips(services: Iterable[JSON]) -> set[str]:
    return {ip for svc in services for ip in (svc.get("spec") or {}).get("clusterIPs") or []}


def _used_node_ports(services: Iterable[JSON]) -> set[int]:
    return {int(p["nodePort"]) for svc in services for p in (svc.get("spec") or {}).get("ports") or []
            if isinstance(p, dict) and isinstance(p.get("nodePort"), int)}


def _allocate_ip(used: set[str], name: str) -> str:
    hosts = SERVICE_CIDR.num_addresses - 2
    start = random.Random(name).randrange(hosts)  # stable per name; probe onwards on collisions
    for offset in range(hosts):
        ip = str(SERVICE_CIDR.network_address + 1 + (start + offset) % hosts)
        if ip not in used and not ip.endswith(".0.1"):  # .1 is the kubernetes service's
            return ip
    raise errors.internal_error("the service IP range is full")


def _default_service(svc: JSON, existing: list[JSON], old: JSON | None) -> None:
    spec = svc.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    old_spec = (old or {}).get("spec") or {}
    spec.setdefault("type", "ClusterIP")
    external_name = spec["type"] == "ExternalName"
    if not external_name:
        if old_spec.get("clusterIP") and not spec.get("clusterIP"):
            spec["clusterIP"], spec["clusterIPs"] = old_spec["clusterIP"], list(old_spec.get("clusterIPs") or [])
        if not spec.get("clusterIP"):
            ip = _allocate_ip(_used_ips(existing), str((svc.get("metadata") or {}).get("name", "")))
            spec["clusterIP"] = ip
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    spec.setdefault("sessionAffinity", "None")
    used_ports = _used_node_ports(existing)
    for port in spec.get("ports") or []:
        if not isinstance(port, dict):
            continue
        port.setdefault("protocol", "TCP")
        if "port" in port:
            port.setdefault("targetPort", port["port"])
        if spec["type"] in ("NodePort", "LoadBalancer") and not port.get("nodePort"):
            free = next((p for p in NODE_PORTS if p not in used_ports), None)
            if free is None:
                raise errors.internal_error("the node port range is full")
            port["nodePort"] = free
            used_ports.add(free)
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    svc.setdefault("status", {"loadBalancer": {}})


def _default_match(match: JSON) -> None:
    match.setdefault("matchPolicy", "Equivalent")
    match.setdefault("namespaceSelector", {})
    match.setdefault("objectSelector", {})
    for rule in match.get("resourceRules") or []:
        if isinstance(rule, dict):
            rule.setdefault("scope", "*")


def _default_admission_policy(obj: JSON) -> None:
    """admissionregistration.k8s.io/v1 defaults, as `kubectl get -o yaml` shows them on a real server."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("failurePolicy", "Fail")
    match = spec.get("matchConstraints")
    if isinstance(match, dict):
        _default_match(match)


def default(kind: str, obj: JSON, existing: list[JSON], old: JSON | None = None) -> None:
    """Fill in server-side defaults on create (`old` None) and update. `existing`: every stored object of
    this kind (for allocating unique cluster IPs and node ports)."""
    if kind == "Secret":
        _default_secret(obj)
    elif kind == "Service":
        _default_service(obj, existing, old)
    elif kind == "ValidatingAdmissionPolicy":
        _default_admission_policy(obj)
    elif kind == "ValidatingAdmissionPolicyBinding":
        spec = obj.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("matchResources"), dict):
            _default_match(spec["matchResources"])


KINDS = frozenset({"Secret", "Service", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"})
