"""Run the agent and the controller under the identities deploy/ gives them, on a sim in rbac mode.

`apply_deploy` creates deploy/'s objects as the admin, `mint_token` asks the sim for a ServiceAccount token
exactly as `kubectl create token` does (TokenRequest), and `identity_kubeconfig` writes a kubeconfig with it.
`rule_atoms` splits every Role and ClusterRole of deploy/ into (rule, verb) grants, derived from the files so
that a grant someone adds is covered without editing the tests; `without` drops one of them.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from edgeagent.kube.client import KubeClient
from edgeagent.sim.resources import RESOURCES, Resource

JSON = dict[str, Any]
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NAMESPACE = "edgeagent-system"
AGENT_SA = "edgeagent-agent"
CONTROLLER_SA = "edgeagent-controller"
AGENT_USER = f"system:serviceaccount:{NAMESPACE}:{AGENT_SA}"
CONTROLLER_USER = f"system:serviceaccount:{NAMESPACE}:{CONTROLLER_SA}"


def load_deploy(directory: Path = DEPLOY) -> list[JSON]:
    """Every object of deploy/*.yaml in `kubectl apply -f deploy/` order, less the CustomResourceDefinitions while
    the sim does not serve that kind (issue 34 teaches it to; nothing the scenarios run reads a custom resource
    before the controller is wired to RolloutPlans)."""
    docs: list[JSON] = []
    for path in sorted(directory.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    if not any(res.kind == "CustomResourceDefinition" for res in RESOURCES.values()):
        docs = [d for d in docs if d.get("kind") != "CustomResourceDefinition"]
    return docs


def aggregated(doc: JSON) -> bool:
    """A ClusterRole aggregated into the built-in user-facing roles (edit, admin, view): for people, bound through
    those roles, never to a component of edgeagent."""
    labels = (doc.get("metadata") or {}).get("labels") or {}
    return any(key.startswith("rbac.authorization.k8s.io/aggregate-to-") for key in labels)


def _resource(kind: str) -> Resource:
    for res in RESOURCES.values():
        if res.kind == kind:
            return res
    raise LookupError(f"the sim does not serve kind {kind}")


def collection_path(doc: JSON) -> str:
    res = _resource(str(doc["kind"]))
    base = f"/apis/{res.group}/{res.version}" if res.group else f"/api/{res.version}"
    if res.namespaced:
        return f"{base}/namespaces/{doc['metadata'].get('namespace', 'default')}/{res.plural}"
    return f"{base}/{res.plural}"


async def apply_deploy(admin: KubeClient, docs: list[JSON]) -> None:
    for doc in docs:
        await admin.create(collection_path(doc), doc)


async def mint_token(admin: KubeClient, service_account: str, namespace: str = NAMESPACE, *,
                     bound_pod: JSON | None = None, seconds: int = 3600) -> str:
    spec: JSON = {"audiences": [], "expirationSeconds": seconds}
    if bound_pod is not None:
        meta = bound_pod["metadata"]
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}
    answer = await admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
                                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
    return str(answer["status"]["token"])


def identity_kubeconfig(path: Path, server: str, token: str, ca_file: Path | None) -> Path:
    """A kubeconfig for `server` with a bearer token (0600: it holds a credential)."""
    cluster: JSON = {"server": server}
    if ca_file is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_file.read_bytes()).decode("ascii")
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "c", "cluster": cluster}],
           "users": [{"name": "u", "user": {"token": token}}],
           "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass(frozen=True)
class RuleAtom:
    """One verb of one rule of one Role/ClusterRole in deploy/, and the ServiceAccounts bound to that role."""

    kind: str
    name: str
    namespace: str
    rule: int
    verb: str
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    subjects: tuple[str, ...]

    @property
    def id(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        groups = ",".join(g or "core" for g in self.api_groups)
        return f"{self.kind}:{where}{self.name}:{groups}:{','.join(self.resources)}:{self.verb}"

    def matches(self, denial: JSON) -> bool:
        """Whether a 403 recorded by the sim is one this grant would have allowed."""
        if denial.get("code") != 403 or denial.get("user") not in self.subjects:
            return False
        if self.namespace and denial.get("namespace") != self.namespace:
            return False
        return (denial.get("verb") == self.verb and denial.get("group") in self.api_groups
                and denial.get("resource") in self.resources)


def _subjects(docs: list[JSON], kind: str, name: str, namespace: str) -> tuple[str, ...]:
    binding_kind = "ClusterRoleBinding" if kind == "ClusterRole" else "RoleBinding"
    users = []
    for doc in docs:
        ref = doc.get("roleRef") or {}
        if doc["kind"] == binding_kind and ref.get("kind") == kind and ref.get("name") == name and (
                kind == "ClusterRole" or doc["metadata"].get("namespace") == namespace):
            users += [f"system:serviceaccount:{s.get('namespace') or namespace}:{s['name']}"
                      for s in doc.get("subjects") or [] if s.get("kind") == "ServiceAccount"]
    return tuple(users)


def rule_atoms(docs: list[JSON]) -> list[RuleAtom]:
    atoms = []
    for doc in docs:
        if doc["kind"] not in ("Role", "ClusterRole") or aggregated(doc):
            continue
        meta = doc["metadata"]
        namespace = str(meta.get("namespace", "")) if doc["kind"] == "Role" else ""
        subjects = _subjects(docs, doc["kind"], meta["name"], namespace)
        for index, rule in enumerate(doc.get("rules") or []):
            for verb in rule.get("verbs") or []:
                atoms.append(RuleAtom(doc["kind"], meta["name"], namespace, index, verb,
                                      tuple(rule.get("apiGroups") or []), tuple(rule.get("resources") or []),
                                      subjects))
    return atoms


def without(docs: list[JSON], atom: RuleAtom) -> list[JSON]:
    """deploy/ with that one verb removed (and its rule, once no verb is left)."""
    out = copy.deepcopy(docs)
    for doc in out:
        meta = doc["metadata"]
        if (doc["kind"], meta["name"], str(meta.get("namespace", "")) if doc["kind"] == "Role" else "") == (
                atom.kind, atom.name, atom.namespace):
            rule = doc["rules"][atom.rule]
            rule["verbs"] = [v for v in rule["verbs"] if v != atom.verb]
            if not rule["verbs"]:
                del doc["rules"][atom.rule]
            return out
    raise LookupError(atom.id)


def controller_args(docs: list[JSON]) -> dict[str, str]:
    """The `--flag=value` args of the controller Deployment's container (`--switch` maps to "true")."""
    for doc in docs:
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "edgeagent-controller":
            args: dict[str, str] = {}
            for arg in doc["spec"]["template"]["spec"]["containers"][0].get("args") or []:
                key, sep, value = str(arg).partition("=")
                args[key] = value if sep else "true"
            return args
    raise LookupError("no edgeagent-controller Deployment in deploy/")
