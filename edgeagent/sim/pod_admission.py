"""What kube-apiserver adds to every new pod besides plain defaulting: the ServiceAccount, Priority and
DefaultTolerationSeconds admission plugins' fields, and the pod-only defaults.

A pod created on a real server comes back with `serviceAccountName`/`serviceAccount: default`, `priority: 0`,
`preemptionPolicy: PreemptLowerPriority`, `enableServiceLinks: true` and a projected `kube-api-access-<suffix>`
volume (token, CA bundle, namespace) mounted read-only at /var/run/secrets/kubernetes.io/serviceaccount in every
container. Clients and `kubectl describe pod` see these fields; a sim that lacks them hides mistakes such as
comparing a stored pod's spec with the manifest it came from.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]

SERVICE_ACCOUNT_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME_PREFIX = "kube-api-access-"
DEFAULT_SERVICE_ACCOUNT = "default"
# The built-in PriorityClasses (scheduling.k8s.io); any other class name resolves to 0 here, as the sim serves
# no PriorityClass objects and so has no global default.
SYSTEM_PRIORITIES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
# k8s.io/apimachinery/pkg/util/rand's alphabet, which the admission plugin's rand.String(5) uses.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# The lifetime the admission plugin asks for (1 h + 7 s, so kubelets can tell a defaulted token apart).
TOKEN_EXPIRATION_SECONDS = 3607


def default_pod_only(spec: JSON) -> None:
    """SetDefaults_Pod (pods, not templates): service links on; the deprecated serviceAccount mirrors the name."""
    spec.setdefault("enableServiceLinks", True)
    mirror_service_account(spec)


def mirror_service_account(spec: JSON) -> None:
    """The v1 conversion keeps `serviceAccount` (deprecated) and `serviceAccountName` equal."""
    name = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if name:
        spec["serviceAccountName"] = name
        spec["serviceAccount"] = name


def token_volume(name: str) -> JSON:
    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                              "fieldPath": "metadata.namespace"}}]}},
            ],
            "defaultMode": 420,
        },
    }


def admit_new_pod(pod: JSON, service_account: Callable[[str, str], JSON | None]) -> None:
    """The ServiceAccount, DefaultTolerationSeconds and Priority admission plugins on CREATE.

    `service_account(namespace, name)` reads a stored ServiceAccount, if there is one.

    Unlike the real plugin, a missing ServiceAccount is not refused: the sim has no service-account controller
    creating `default` in each namespace, and pods of tests and demos never name one that matters.
    """
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    if not (spec.get("serviceAccountName") or spec.get("serviceAccount")):
        spec["serviceAccountName"] = DEFAULT_SERVICE_ACCOUNT
    mirror_service_account(spec)
    account = service_account(namespace, str(spec["serviceAccountName"])) or {}
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = account.get("automountServiceAccountToken")
    if automount is not False:
        _mount_token(spec)
    _tolerate_unready_nodes(spec)
    priority_class = spec.get("priorityClassName")
    spec.setdefault("priority", SYSTEM_PRIORITIES.get(str(priority_class), 0) if priority_class else 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


# The DefaultTolerationSeconds plugin: a pod stays bound to a NotReady/unreachable node for 5 minutes.
DEFAULT_TOLERATION_SECONDS = 300
_UNREADY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _tolerate_unready_nodes(spec: JSON) -> None:
    """Adds the 300 s NoExecute tolerations a pod does not have yet (DaemonSet pods carry their own)."""
    tolerations = spec.get("tolerations")
    existing = [t for t in tolerations if isinstance(t, dict)] if isinstance(tolerations, list) else []
    added = []
    for key in _UNREADY_TAINTS:
        if any((t.get("key") == key or not t.get("key")) and t.get("effect") in (None, "", "NoExecute")
               and (t.get("key") or t.get("operator") == "Exists") for t in existing):
            continue
        added.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                      "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})
    if added:
        spec["tolerations"] = [*(tolerations if isinstance(tolerations, list) else []), *added]


def _mount_token(spec: JSON) -> None:
    containers = [c for key in ("initContainers", "containers", "ephemeralContainers")
                  for c in spec.get(key) or [] if isinstance(c, dict)]
    needing = [c for c in containers
               if not any(isinstance(m, dict) and m.get("mountPath") == SERVICE_ACCOUNT_MOUNT_PATH
                          for m in c.get("volumeMounts") or [])]
    if not needing:
        return
    volumes = spec.get("volumes")
    if not isinstance(volumes, list):
        volumes = spec["volumes"] = []
    taken = {str(v.get("name")) for v in volumes if isinstance(v, dict)}
    while True:
        name = TOKEN_VOLUME_PREFIX + "".join(random.choices(_SUFFIX_ALPHABET, k=5))
        if name not in taken:
            break
    volumes.append(token_volume(name))
    for container in needing:
        mounts = container.get("volumeMounts")
        if not isinstance(mounts, list):
            mounts = container["volumeMounts"] = []
        mounts.append({"name": name, "readOnly": True, "mountPath": SERVICE_ACCOUNT_MOUNT_PATH})
