"""The real kubectl (1.32) with a CRD that is not ours, a "Widget", on the sim: what people type to install a CRD
and use its kind, as they would on a real cluster (sim/crds.py, sim/custom_writes.py, sim/custom_printers.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.support.crd_widget import widget, widget_crd
from tests.support.identities import identity_kubeconfig, mint_token
from tests.support.kubectl import KUBECTL, Kubectl, table
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (needed for the kubectl e2e tests)"),
]


def _yaml(doc: object) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


async def _install(kubectl: Kubectl) -> None:
    out = await kubectl("apply", "-f", "-", stdin=_yaml(widget_crd()))
    assert out.strip() == "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created"
    out = await kubectl("wait", "--for", "condition=established", "crd/widgets.example.com", "--timeout", "10s")
    assert "condition met" in out


@pytest.fixture
def kubectl(sim: SimCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.admin_kubeconfig, tmp_path / "kube-cache")


async def test_install_discover_create_get_and_explain(kubectl: Kubectl) -> None:
    await _install(kubectl)
    header, rows = table(await kubectl("api-resources", "--api-group", "example.com"))
    assert header == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    assert rows == [["widgets", "wd", "example.com/v1", "true", "Widget"]]
    out = await kubectl("apply", "-f", "-", stdin=_yaml(widget("w1", size="medium", replicas=3)))
    assert out.strip() == "widget.example.com/w1 created"
    got = json.loads(await kubectl("get", "wd", "w1", "-o", "json"))
    assert got["spec"] == {"size": "medium", "replicas": 3, "minReplicas": 0}  # defaulted
    header, rows = table(await kubectl("get", "widgets"))
    assert header == ["NAME", "SIZE", "REPLICAS", "READY", "AGE"]
    assert rows[0][:3] == ["w1", "medium", "3"] and rows[0][3].endswith("s")  # READY is <none>: not printed
    # `get all` expands the `all` category from discovery, which now includes widgets.
    header, rows = table(await kubectl("get", "all"))
    assert rows[-1][:3] == ["widget.example.com/w1", "medium", "3"]
    explained = await kubectl("explain", "widgets.spec")
    assert "What the widget should be." in explained
    assert "size\t<string> -required-" in explained and "How big the widget is." in explained
    assert "enum: small, medium, large" in explained
    # A second apply of the same file changes nothing.
    again = await kubectl("apply", "-f", "-", stdin=_yaml(widget("w1", size="medium", replicas=3)))
    assert again.strip() == "widget.example.com/w1 unchanged"


async def test_refusals_read_as_the_real_servers(kubectl: Kubectl) -> None:
    await _install(kubectl)
    bad = await kubectl.run("apply", "-f", "-", stdin=_yaml(widget("w2", size="huge")))
    assert bad.code == 1
    lines = bad.err.splitlines()
    assert lines[:2] == ['The Widget "w2" is invalid: ',
                         '* spec.size: Unsupported value: "huge": supported values: "small", "medium", "large"']
    cel = await kubectl.run("apply", "-f", "-", stdin=_yaml(widget("w3", replicas=1, minReplicas=2)))
    assert cel.code == 1
    assert cel.err.strip() == 'The Widget "w3" is invalid: spec: Invalid value: replicas must be at least minReplicas'
    # kubectl asks for Strict: an unknown field is refused with the decoder's message...
    strict = await kubectl.run("apply", "-f", "-", stdin=_yaml(widget("w4", foo=1)))
    assert strict.code == 1
    assert ('Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.foo"'
            in strict.err)
    # ...with --validate=warn it is pruned and kubectl prints the server's warning.
    warned = await kubectl.run("apply", "--validate=warn", "-f", "-", stdin=_yaml(widget("w4", foo=1)))
    assert warned.code == 0 and 'Warning: unknown field "spec.foo"' in warned.err
    # Custom kinds take no strategic merge patch: kubectl's default patch type meets the 415.
    smp = await kubectl.run("patch", "wd", "w4", "-p", '{"spec":{"size":"large"}}')
    assert smp.code == 1
    assert ("the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml") in smp.err
    merged = await kubectl("patch", "wd", "w4", "--type", "merge", "-p", '{"spec":{"size":"large"}}')
    assert merged.strip() == "widget.example.com/w4 patched"


async def test_status_apart_generation_and_printer_columns(kubectl: Kubectl) -> None:
    await _install(kubectl)
    await kubectl("apply", "-f", "-", stdin=_yaml(widget("w1")))
    await kubectl("patch", "wd", "w1", "--subresource", "status", "--type", "merge",
                  "-p", '{"status":{"conditions":[{"type":"Ready","status":"True"}]},"spec":{"size":"large"}}')
    got = json.loads(await kubectl("get", "wd", "w1", "-o", "json"))
    assert got["spec"]["size"] == "small" and got["metadata"]["generation"] == 1
    await kubectl("patch", "wd", "w1", "--type", "merge", "-p", '{"spec":{"size":"large"},"status":{}}')
    got = json.loads(await kubectl("get", "wd", "w1", "-o", "json"))
    assert got["metadata"]["generation"] == 2 and got["status"]["conditions"][0]["status"] == "True"
    _, rows = table(await kubectl("get", "wd"))
    assert rows[0][:4] == ["w1", "large", "1", "True"]


async def test_watch_and_deletion_cascade(kubectl: Kubectl) -> None:
    await _install(kubectl)
    await kubectl("apply", "-f", "-", stdin=_yaml(widget("w1")))
    seen: list[str] = []
    async with kubectl.stream("get", "wd", "--watch", "--output-watch-events", "--no-headers") as lines:
        async def read() -> None:
            while line := await lines.readline():
                seen.append(line.decode().split()[0] + " " + line.decode().split()[1])

        reader = asyncio.create_task(read())
        await eventually(lambda: "ADDED w1" in seen, what="the watch's initial ADDED")
        await kubectl("apply", "-f", "-", stdin=_yaml(widget("w2")))
        out = await kubectl("delete", "crd", "widgets.example.com")
        assert out.strip() == 'customresourcedefinition.apiextensions.k8s.io "widgets.example.com" deleted'
        await eventually(lambda: {"DELETED w1", "DELETED w2"} <= set(seen), what="DELETED for both widgets")
        await asyncio.wait_for(reader, 10)  # the server ends the watch of a kind that is gone
    assert seen[:2] == ["ADDED w1", "ADDED w2"]
    gone = await kubectl.run("get", "crd", "widgets.example.com")
    assert gone.code == 1 and "NotFound" in gone.err


async def test_kept_across_a_restart(sim_factory: SimFactory, tmp_path: Path) -> None:
    directory = tmp_path / "kept"
    first = await sim_factory(dir=directory, nodes=1)
    kubectl = Kubectl(first.admin_kubeconfig, tmp_path / "cache-1")
    await _install(kubectl)
    await kubectl("apply", "-f", "-", stdin=_yaml(widget("w1", size="large")))
    uid = json.loads(await kubectl("get", "wd", "w1", "-o", "json"))["metadata"]["uid"]
    await kubectl("apply", "-f", "-", stdin=_yaml(widget("gone")))
    await kubectl("delete", "wd", "gone")
    await first.stop()
    second = await sim_factory(dir=directory, nodes=1)
    assert second.resumed
    kubectl = Kubectl(second.admin_kubeconfig, tmp_path / "cache-2")
    got = json.loads(await kubectl("get", "wd", "w1", "-o", "json"))
    assert got["metadata"]["uid"] == uid and got["spec"]["size"] == "large"
    _, rows = table(await kubectl("get", "wd"))
    assert [row[:3] for row in rows] == [["w1", "large", "1"]]  # the deleted one stays deleted
    refused = await kubectl.run("apply", "-f", "-", stdin=_yaml(widget("w2", size="huge")))
    assert refused.code == 1 and "Unsupported value" in refused.err  # the schema came back too


async def test_rbac_denies_then_a_role_grants(sim_factory: SimFactory, tmp_path: Path) -> None:
    sim = await sim_factory(nodes=1, authorization="rbac")
    admin_kubectl = Kubectl(sim.admin_kubeconfig, tmp_path / "cache-admin")
    await _install(admin_kubectl)
    await admin_kubectl("apply", "-f", "-", stdin=_yaml(widget("w1")))
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await admin.create("/api/v1/namespaces/default/serviceaccounts",
                           {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}})
        token = await mint_token(admin, "reader", "default")
    assert sim.tls is not None
    config = identity_kubeconfig(tmp_path / "reader.kubeconfig", sim.url, token, sim.tls.ca_file)
    reader = Kubectl(config, tmp_path / "cache-reader")
    denied = await reader.run("get", "widgets.example.com")
    assert denied.code == 1
    assert denied.err.strip() == (
        'Error from server (Forbidden): widgets.example.com is forbidden: User '
        '"system:serviceaccount:default:reader" cannot list resource "widgets" in API group "example.com" in the '
        'namespace "default"')
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "widget-reader", "namespace": "default"},
            "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "widget-reader", "namespace": "default"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "widget-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]}
    await admin_kubectl("apply", "-f", "-", stdin=_yaml({"apiVersion": "v1", "kind": "List", "items": [role, binding]}))
    names = await reader("get", "widgets.example.com", "-o", "name")
    assert names.strip() == "widget.example.com/w1"
    still = await reader.run("delete", "widgets.example.com", "w1")
    assert still.code == 1 and 'cannot delete resource "widgets" in API group "example.com"' in still.err


async def test_kubectl_scale_through_the_scale_subresource(kubectl: Kubectl) -> None:
    crd = widget_crd()
    crd["spec"]["versions"][0]["subresources"]["scale"] = {"specReplicasPath": ".spec.replicas",
                                                           "statusReplicasPath": ".status.observed"}
    await kubectl("apply", "-f", "-", stdin=_yaml(crd))
    await kubectl("wait", "--for", "condition=established", "crd/widgets.example.com", "--timeout", "10s")
    await kubectl("apply", "-f", "-", stdin=_yaml(widget("w1")))
    out = await kubectl("scale", "wd", "w1", "--replicas", "4")
    assert out.strip() == "widget.example.com/w1 scaled"
    assert json.loads(await kubectl("get", "wd", "w1", "-o", "json"))["spec"]["replicas"] == 4
    too_many = await kubectl.run("scale", "wd", "w1", "--replicas", "11")
    assert too_many.code == 1 and "spec.replicas" in too_many.err


async def test_reapplying_and_changing_the_crd(kubectl: Kubectl) -> None:
    await _install(kubectl)
    again = await kubectl("apply", "-f", "-", stdin=_yaml(widget_crd()))
    assert again.strip() == "customresourcedefinition.apiextensions.k8s.io/widgets.example.com unchanged"
    refused = await kubectl.run("apply", "-f", "-", stdin=_yaml(widget("w1", size="huge")))
    assert refused.code == 1
    crd = widget_crd()
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"]["enum"] \
        .append("huge")
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Min", "type": "integer", "jsonPath": ".spec.minReplicas"}]
    changed = await kubectl("apply", "-f", "-", stdin=_yaml(crd))
    assert changed.strip() == "customresourcedefinition.apiextensions.k8s.io/widgets.example.com configured"
    assert json.loads(await kubectl("get", "crd", "widgets.example.com", "-o", "json"))["metadata"]["generation"] == 2
    # The new schema and columns apply at once.
    await kubectl("apply", "-f", "-", stdin=_yaml(widget("w1", size="huge")))
    header, rows = table(await kubectl("get", "wd"))
    assert header == ["NAME", "MIN"] and rows == [["w1", "0"]]
    explained = await kubectl("explain", "crd.spec.names")
    assert "shortNames" in explained


async def test_everyday_commands_on_custom_objects(kubectl: Kubectl) -> None:
    await _install(kubectl)
    listed = {"apiVersion": "v1", "kind": "List", "items": [widget("a"), widget("b", size="large")]}
    assert (await kubectl("apply", "-f", "-", stdin=_yaml(listed))).split("\n")[:2] == [
        "widget.example.com/a created", "widget.example.com/b created"]
    assert (await kubectl("create", "-f", "-", stdin=_yaml(widget("c")))).strip() == "widget.example.com/c created"
    replaced = await kubectl("replace", "-f", "-", stdin=_yaml(widget("c", size="medium")))
    assert replaced.strip() == "widget.example.com/c replaced"
    assert (await kubectl("label", "wd", "a", "tier=front")).strip() == "widget.example.com/a labeled"
    assert (await kubectl("get", "wd", "-l", "tier=front", "-o", "name")).split() == ["widget.example.com/a"]
    assert (await kubectl("get", "wd", "--field-selector", "metadata.name=b", "-o", "name")).split() == [
        "widget.example.com/b"]
    bad = await kubectl.run("get", "wd", "--field-selector", "spec.size=small")
    assert bad.code == 1
    assert bad.err.strip().endswith('"spec.size" is not a known field selector: only "metadata.name", '
                                    '"metadata.namespace"')
    deleted = await kubectl("delete", "wd", "--all")
    assert deleted.split("\n")[:3] == ['widget.example.com "a" deleted', 'widget.example.com "b" deleted',
                                       'widget.example.com "c" deleted']
    assert (await kubectl.run("get", "wd")).err.strip() == "No resources found in default namespace."


async def test_unknown_fields_of_a_built_in_kind_meet_kubectls_validation(kubectl: Kubectl) -> None:
    """`fieldValidation` is not only for custom kinds: kubectl's Strict refuses a Pod field its type lacks with
    the decoder's text, `--validate=warn` gets it dropped with the server's warning (sim/builtin_fields.py)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"},
           "spec": {"foo": 1, "containers": [{"name": "c", "image": "busybox"}]}}
    strict = await kubectl.run("apply", "-f", "-", stdin=_yaml(pod))
    assert strict.code == 1
    assert ('Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.foo"'
            in strict.err), strict.err
    warned = await kubectl.run("apply", "--validate=warn", "-f", "-", stdin=_yaml(pod))
    assert warned.code == 0 and 'Warning: unknown field "spec.foo"' in warned.err, warned.err
    assert "foo" not in json.loads(await kubectl("get", "pod", "p1", "-o", "json"))["spec"]


async def test_a_stored_version_stays_in_the_crd_until_the_status_drops_it(kubectl: Kubectl) -> None:
    crd = widget_crd()
    v1 = crd["spec"]["versions"][0]
    crd["spec"]["versions"] = [{**v1, "name": "v1alpha1"}, {**v1, "storage": False}]
    await kubectl("apply", "-f", "-", stdin=_yaml(crd))
    crd["spec"]["versions"][0]["storage"], crd["spec"]["versions"][1]["storage"] = False, True
    await kubectl("apply", "-f", "-", stdin=_yaml(crd))
    stored = await kubectl("get", "crd", "widgets.example.com", "-o", "jsonpath={.status.storedVersions}")
    assert json.loads(stored) == ["v1alpha1", "v1"]
    crd["spec"]["versions"] = crd["spec"]["versions"][1:]
    refused = await kubectl.run("apply", "-f", "-", stdin=_yaml(crd))
    assert refused.code == 1
    assert refused.err.strip() == ('The CustomResourceDefinition "widgets.example.com" is invalid: '
                                   'status.storedVersions[0]: Invalid value: "v1alpha1": must appear in spec.versions')
    await kubectl("patch", "crd", "widgets.example.com", "--subresource", "status", "--type", "merge",
                  "-p", '{"status":{"storedVersions":["v1"]}}')
    out = await kubectl("apply", "-f", "-", stdin=_yaml(crd))
    assert out.strip() == "customresourcedefinition.apiextensions.k8s.io/widgets.example.com configured"
