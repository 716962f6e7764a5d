"""Small helpers over raw Kubernetes object dicts, shared by the agent, controller and sim.

The names the agent, controller and sim exchange live in `edgeagent.contract`.

Objects stay the JSON the API server sent; these helpers read them without building model classes.
"""

from __future__ import annotations

import re
import sys
from typing import Any

JSON = dict[str, Any]

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_dns1123_label(value: str) -> bool:
    """Namespaces are DNS-1123 labels (≤ 63)."""
    return len(value) <= 63 and DNS1123_LABEL.match(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    """Pod names are DNS-1123 subdomains (≤ 253)."""
    return len(value) <= 253 and DNS1123_SUBDOMAIN.match(value) is not None


def meta(obj: JSON) -> JSON:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def name_of(obj: JSON) -> str:
    return str(meta(obj).get("name", ""))


def namespace_of(obj: JSON) -> str:
    return str(meta(obj).get("namespace", ""))


def key_of(obj: JSON) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (the informer cache key)."""
    ns = namespace_of(obj)
    return f"{ns}/{name_of(obj)}" if ns else name_of(obj)


def uid_of(obj: JSON) -> str:
    return str(meta(obj).get("uid", ""))


def labels_of(obj: JSON) -> dict[str, str]:
    labels = meta(obj).get("labels")
    return labels if isinstance(labels, dict) else {}


def annotations_of(obj: JSON) -> dict[str, str]:
    annotations = meta(obj).get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def controller_owner(obj: JSON) -> JSON | None:
    """The ownerReference with `controller: true`, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def daemonset_owner(pod: JSON) -> JSON | None:
    ref = controller_owner(pod)
    if ref and ref.get("kind") == "DaemonSet" and str(ref.get("apiVersion", "")).startswith("apps/"):
        return ref
    return None


def get_condition(obj: JSON, cond_type: str) -> JSON | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == cond_type:
            return cond
    return None


def condition_is_true(obj: JSON, cond_type: str) -> bool:
    cond = get_condition(obj, cond_type)
    return cond is not None and cond.get("status") == "True"


def is_pod_ready(pod: JSON) -> bool:
    return condition_is_true(pod, "Ready")


def node_name_of(pod: JSON) -> str:
    """The node a pod is bound to ("" while unscheduled)."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_terminating(obj: JSON) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def is_node_ready(node: JSON) -> bool:
    return condition_is_true(node, "Ready")


def includes_write(seen_rv: str, written_rv: str) -> bool:
    """Whether an object seen at resourceVersion `seen_rv` (a watch event, a cache) already includes a write of
    ours that the server answered with `written_rv`.

    Another writer's change that landed just before ours can reach the watch after our write's answer: judged
    against it, our write looks undone and would be sent again, a no-op. kube-apiserver's resourceVersions are
    etcd revisions, integers that only grow (the sim's too), so an older one is recognised. The API calls them
    opaque: one that is not a number cannot be ordered, and any version counts (a write may then repeat once).
    """
    if seen_rv.isdigit() and written_rv.isdigit():
        return int(seen_rv) >= int(written_rv)
    return True


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


# Strings up to this long are interned by share_strings(): namespaces, label keys and values, condition types
# and statuses, images and owner kinds repeat across every cached object, and one copy each is enough.
_SHARED_MAX = 64


def share_strings(value: Any) -> Any:
    """An equal copy in which short strings (keys and values) are the interned, shared ones.

    An informer transform for large caches: the JSON decoder makes a new string for every value, so 1,000
    cached pods hold a thousand copies of "default", "True" and their image names (half their memory).
    """
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= _SHARED_MAX else value
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: share_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [share_strings(v) for v in value]
    return value
