"""deploy/k8s-1.30/: the ValidatingAdmissionPolicy that confines the agent's ServiceAccount to its node's pods.

Validated offline: the strict schema of Kubernetes 1.30 (and the newest known), and its CEL evaluated with
cel-python against the requests the API server would admit it for. The sim enforces it as well, end to end:
tests/integration/rbac/test_admission_policy_on_sim.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy.adapter import json_to_cel

from tests.support.identities import AGENT_USER, load_deploy, rule_atoms

ROOT = Path(__file__).resolve().parents[2]
POLICY_FILE = ROOT / "deploy" / "k8s-1.30" / "agent-own-node-pods.yaml"
VALIDATOR = Path(sys.executable).parent / "kubernetes-validate"
NODE_NAME = "authentication.kubernetes.io/node-name"
JSON = dict[str, Any]


def _docs() -> dict[str, JSON]:
    return {d["kind"]: d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d}


@pytest.mark.parametrize("version", ["1.30.0", None])
def test_policy_passes_strict_schema_validation(version: str | None) -> None:
    if not VALIDATOR.exists():
        pytest.fail(f"{VALIDATOR} is missing: install the test extra (make venv-test)")
    args = [str(VALIDATOR), "--strict", *(["-k", version] if version else []), str(POLICY_FILE)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" passed for resource ") == 2, result.stdout


def test_binding_denies_with_the_policy() -> None:
    docs = _docs()
    policy, binding = docs["ValidatingAdmissionPolicy"], docs["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_policy_covers_every_pod_write_deploy_grants_the_agent() -> None:
    """Each write verb deploy/ gives the agent on pods must be one the policy matches (patch is an UPDATE)."""
    rules = _docs()["ValidatingAdmissionPolicy"]["spec"]["matchConstraints"]["resourceRules"]
    covered = {(op, res) for rule in rules for op in rule["operations"] for res in rule["resources"]
               if "" in rule["apiGroups"]}
    operation = {"delete": "DELETE", "patch": "UPDATE", "update": "UPDATE", "create": "CREATE"}
    writes = [a for a in rule_atoms(load_deploy()) if AGENT_USER in a.subjects and a.verb in operation
              and "" in a.api_groups and any(r.startswith("pods") for r in a.resources)]
    assert writes, "deploy/ grants the agent no pod writes any more: is the policy still needed?"
    for atom in writes:
        for resource in atom.resources:
            assert (operation[atom.verb], resource) in covered, atom.id


def _evaluate(expression: str, request: JSON, old: JSON | None) -> Any:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    activation = {"request": json_to_cel(request), "oldObject": json_to_cel(old)}
    return program.evaluate(activation)


def _request(username: str, node: str | None, operation: str = "DELETE") -> JSON:
    user: JSON = {"username": username, "groups": ["system:serviceaccounts", "system:authenticated"]}
    if node is not None:
        user["extra"] = {NODE_NAME: [node], "authentication.kubernetes.io/pod-name": ["agent-x"]}
    return {"operation": operation, "userInfo": user}


def admitted(request: JSON, old: JSON) -> bool:
    """The API server's verdict: not matched (any other user) or every validation true."""
    spec = _docs()["ValidatingAdmissionPolicy"]["spec"]
    if not all(bool(_evaluate(c["expression"], request, old)) for c in spec.get("matchConditions", [])):
        return True
    return all(bool(_evaluate(v["expression"], request, old)) for v in spec["validations"])


POD_ON_EDGE_1 = {"metadata": {"name": "app-1"}, "spec": {"nodeName": "edge-1"}}
POD_ON_EDGE_2 = {"metadata": {"name": "app-2"}, "spec": {"nodeName": "edge-2"}}
UNSCHEDULED = {"metadata": {"name": "app-3"}, "spec": {}}


@pytest.mark.parametrize("operation", ["DELETE", "UPDATE"])
def test_agent_may_change_only_its_own_nodes_pods(operation: str) -> None:
    assert admitted(_request(AGENT_USER, "edge-1", operation), POD_ON_EDGE_1)
    assert not admitted(_request(AGENT_USER, "edge-1", operation), POD_ON_EDGE_2)
    assert not admitted(_request(AGENT_USER, "edge-1", operation), UNSCHEDULED)


def test_agent_token_without_a_node_changes_nothing() -> None:
    """`kubectl create token` or a pre-1.30 server: no node in the token, so no pod may be changed."""
    assert not admitted(_request(AGENT_USER, None), POD_ON_EDGE_1)


def test_other_users_are_not_affected() -> None:
    assert admitted(_request("system:serviceaccount:edgeagent-system:edgeagent-controller", None), POD_ON_EDGE_2)
    assert admitted(_request("system:node:edge-1", None), POD_ON_EDGE_2)
