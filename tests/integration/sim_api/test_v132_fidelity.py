"""Where the sim differed from a real API server measured side by side (issue 22 items 12-17): each test
asserts what the real server answers, so each failed against the sim as it was."""

from __future__ import annotations

import re
from typing import Any

from edgeagent.sim.resources import PODS
from tests.support.sim_api import Api, create_pod

PODS_PATH = "/api/v1/namespaces/default/pods"
STRATEGIC = "application/strategic-merge-patch+json"
JSON = dict[str, Any]


async def test_a_status_patch_with_a_wrong_uid_lists_the_cause_twice(api: Api) -> None:
    create_pod(api.store, "a")
    patch = {"metadata": {"uid": "someone-else"}, "status": {"phase": "Failed"}}
    reply = await api.call("PATCH", f"{PODS_PATH}/a/status", body=patch, content_type=STRATEGIC)
    assert reply.status == 422
    cause = {"reason": "FieldValueInvalid", "message": 'Invalid value: "someone-else": field is immutable',
             "field": "metadata.uid"}
    assert reply.body["details"]["causes"] == [cause, cause]
    # The message names it once (the aggregate dedups identical texts), as the real server's does.
    assert reply.body["message"] == (
        'Pod "a" is invalid: metadata.uid: Invalid value: "someone-else": field is immutable')
    assert api.store.get(PODS, "default", "a")["status"]["phase"] == "Pending"


SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


async def test_a_new_pod_gets_the_defaults_and_the_token_volume_a_real_server_adds(api: Api) -> None:
    body = {"metadata": {"name": "web"}, "spec": {
        "initContainers": [{"name": "init", "image": "busybox"}],
        "containers": [{"name": "a", "image": "nginx:1.19.4"}, {"name": "b", "image": "nginx:1.19.4",
                                                                "volumeMounts": [{"name": "x", "mountPath": "/x"}]}],
        "volumes": [{"name": "x", "emptyDir": {}}]}}
    spec = (await api.ok("POST", PODS_PATH, body=body))["spec"]
    assert (spec["serviceAccountName"], spec["serviceAccount"]) == ("default", "default")
    assert (spec["priority"], spec["preemptionPolicy"], spec["enableServiceLinks"]) == (0, "PreemptLowerPriority", True)
    assert spec["securityContext"] == {}
    assert spec["volumes"][0] == {"name": "x", "emptyDir": {}}
    token = spec["volumes"][1]
    assert re.fullmatch(r"kube-api-access-[bcdfghjklmnpqrstvwxz2456789]{5}", token["name"])
    sources = token["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    assert sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == "metadata.namespace"
    mount = {"name": token["name"], "readOnly": True, "mountPath": SA_PATH}
    assert spec["initContainers"][0]["volumeMounts"] == [mount]
    assert spec["containers"][0]["volumeMounts"] == [mount]
    assert spec["containers"][1]["volumeMounts"] == [{"name": "x", "mountPath": "/x"}, mount]
    assert [(t["key"], t["tolerationSeconds"]) for t in spec["tolerations"]] == [
        ("node.kubernetes.io/not-ready", 300), ("node.kubernetes.io/unreachable", 300)]


async def test_pod_defaults_follow_the_pod_and_its_service_account(api: Api) -> None:
    await api.ok("POST", "/api/v1/namespaces/default/serviceaccounts",
                 body={"metadata": {"name": "quiet"}, "automountServiceAccountToken": False})
    quiet = (await api.ok("POST", PODS_PATH, body={"metadata": {"name": "q"}, "spec": {
        "serviceAccountName": "quiet", "containers": [{"name": "a", "image": "nginx"}]}}))["spec"]
    assert quiet["serviceAccount"] == "quiet" and "volumes" not in quiet
    assert "volumeMounts" not in quiet["containers"][0]
    critical = (await api.ok("POST", PODS_PATH, body={"metadata": {"name": "c"}, "spec": {
        "priorityClassName": "system-node-critical", "automountServiceAccountToken": False,
        "containers": [{"name": "a", "image": "nginx"}]}}))["spec"]
    assert critical["priority"] == 2000001000 and "volumes" not in critical


async def test_a_daemonset_template_gets_only_the_template_defaults(api: Api) -> None:
    ds = {"metadata": {"name": "ds"}, "spec": {
        "selector": {"matchLabels": {"app": "a"}},
        "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "a", "image": "x"}]}}}}
    spec = (await api.ok("POST", "/apis/apps/v1/namespaces/default/daemonsets", body=ds))["spec"]["template"]["spec"]
    assert spec["securityContext"] == {}
    for pod_only in ("serviceAccountName", "priority", "enableServiceLinks", "volumes", "preemptionPolicy"):
        assert pod_only not in spec


VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAPB = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


async def _policy(api: Api, name: str, expression: str, *, actions: list[str] | None = None, reason: str | None = None,
                  failure: str = "Fail", conditions: list[str] | None = None, bind: bool = True,
                  resources: tuple[str, ...] = ("pods",)) -> None:
    validation: JSON = {"expression": expression}
    if reason is not None:
        validation.update(reason=reason, message=f"{name} says no")
    spec: JSON = {"failurePolicy": failure, "validations": [validation], "matchConstraints": {"resourceRules": [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE", "UPDATE"], "resources": list(resources)}]}}
    if conditions:
        spec["matchConditions"] = [{"name": f"c{i}", "expression": c} for i, c in enumerate(conditions)]
    await api.ok("POST", VAP, body={"metadata": {"name": name}, "spec": spec})
    if bind:
        await api.ok("POST", VAPB, body={"metadata": {"name": name},
                                         "spec": {"policyName": name, "validationActions": actions or ["Deny"]}})


PROTECTED = "!has(oldObject.metadata.labels) || !('protected' in oldObject.metadata.labels)"


async def test_a_bound_policy_denies_with_its_reason_and_message(api: Api) -> None:
    create_pod(api.store, "p", labels={"protected": "yes"})
    await _policy(api, "keep", PROTECTED)
    reply = await api.call("DELETE", f"{PODS_PATH}/p")
    assert (reply.status, reply.body["reason"]) == (422, "Invalid")
    text = f"ValidatingAdmissionPolicy 'keep' with binding 'keep' denied request: failed expression: {PROTECTED}"
    assert reply.body["message"] == f'pods "p" is invalid: {text}'
    assert reply.body["details"]["causes"] == [{"message": text}]
    reply = await api.call("DELETE", f"{PODS_PATH}/p", query={"dryRun": "All"})
    assert reply.status == 422  # a dry run is admitted like the real request
    await api.ok("DELETE", f"{VAPB}/keep")
    await _policy(api, "keep2", PROTECTED, reason="Forbidden")
    reply = await api.call("DELETE", f"{PODS_PATH}/p")
    assert (reply.status, reply.body["message"]) == (
        403, "pods \"p\" is forbidden: ValidatingAdmissionPolicy 'keep2' with binding 'keep2' denied request: "
             "keep2 says no")
    assert "deletionTimestamp" not in api.store.get(PODS, "default", "p")["metadata"]


async def test_policies_apply_only_when_bound_matched_and_denying(api: Api) -> None:
    create_pod(api.store, "p", labels={"protected": "yes"})
    await _policy(api, "unbound", "false", bind=False)
    await _policy(api, "warn-only", "false", actions=["Warn", "Audit"])
    await _policy(api, "someone-else", "false", conditions=["request.userInfo.username == 'alice'"])
    await _policy(api, "status-only", "false", resources=("pods/status",))  # not the pod itself
    await api.ok("POST", PODS_PATH, body={"metadata": {"name": "x"}, "spec": {"containers": [{"name": "a",
                                                                                              "image": "a"}]}})
    await api.ok("PATCH", f"{PODS_PATH}/p", body={"metadata": {"labels": {"v": "2"}}},
                 content_type="application/merge-patch+json")
    reply = await api.call("PATCH", f"{PODS_PATH}/p/status", body={"status": {"phase": "Running"}},
                           content_type="application/merge-patch+json")
    assert reply.status == 422 and "'status-only'" in reply.body["message"]
    await api.ok("DELETE", f"{PODS_PATH}/p")


async def test_an_expression_error_follows_the_failure_policy(api: Api) -> None:
    create_pod(api.store, "p")
    await _policy(api, "ignored", "oldObject.spec.noSuchField.size() > 0", failure="Ignore")
    await api.ok("PATCH", f"{PODS_PATH}/p", body={"metadata": {"labels": {"v": "2"}}},
                 content_type="application/merge-patch+json")
    await _policy(api, "failing", "oldObject.spec.noSuchField.size() > 0")
    reply = await api.call("DELETE", f"{PODS_PATH}/p")
    assert reply.status == 422
    assert reply.body["message"].startswith(
        "pods \"p\" is invalid: ValidatingAdmissionPolicy 'failing' with binding 'failing' denied request: "
        "expression error:")


async def test_the_sims_own_writes_are_not_admitted(api: Api) -> None:
    """Only clients' requests meet admission here: the sim's kubelets and controllers act in-process."""
    create_pod(api.store, "p")
    await _policy(api, "nothing", "false")
    api.store.delete(PODS, "default", "p", {"gracePeriodSeconds": 0})
    assert (await api.call("GET", f"{PODS_PATH}/p")).status == 404


async def test_admission_policies_get_the_servers_defaults(api: Api) -> None:
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}
    body = {"metadata": {"name": "p"}, "spec": {"validations": [{"expression": "true"}],
                                                "matchConstraints": {"resourceRules": [rule]}}}
    spec = (await api.ok("POST", VAP, body=body))["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"] == {"resourceRules": [{**rule, "scope": "*"}], "matchPolicy": "Equivalent",
                                        "namespaceSelector": {}, "objectSelector": {}}
    binding = {"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny"],
                                                   "matchResources": {"resourceRules": [rule]}}}
    match = (await api.ok("POST", VAPB, body=binding))["spec"]["matchResources"]
    assert (match["matchPolicy"], match["resourceRules"][0]["scope"]) == ("Equivalent", "*")


async def test_policy_match_rules_selectors_exclusions_and_variables(api: Api) -> None:
    await api.ok("POST", "/api/v1/namespaces", body={"metadata": {"name": "guarded", "labels": {"tier": "prod"}}})
    create_pod(api.store, "a", namespace="guarded", labels={"keep": "yes"})
    create_pod(api.store, "b", namespace="guarded")
    create_pod(api.store, "c", labels={"keep": "yes"})
    create_pod(api.store, "named", namespace="guarded", labels={"keep": "yes"})
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}
    spec = {"validations": [{"expression": "variables.locked == false", "message": "locked"}],
            "variables": [{"name": "locked", "expression": "oldObject.metadata.labels['keep'] == 'yes'"}],
            "matchConstraints": {"resourceRules": [rule],
                                 "namespaceSelector": {"matchLabels": {"tier": "prod"}},
                                 "objectSelector": {"matchLabels": {"keep": "yes"}},
                                 "excludeResourceRules": [{**rule, "resourceNames": ["named"]}]}}
    await api.ok("POST", VAP, body={"metadata": {"name": "lock"}, "spec": spec})
    await api.ok("POST", VAPB, body={"metadata": {"name": "lock"},
                                     "spec": {"policyName": "lock", "validationActions": ["Deny"]}})
    denied = await api.call("DELETE", "/api/v1/namespaces/guarded/pods/a")
    assert denied.status == 422 and denied.body["message"].endswith("denied request: locked")
    await api.ok("DELETE", "/api/v1/namespaces/guarded/pods/b")  # objectSelector: no keep label
    await api.ok("DELETE", f"{PODS_PATH}/c")  # namespaceSelector: default is not tier=prod
    await api.ok("DELETE", "/api/v1/namespaces/guarded/pods/named")  # excluded by name
