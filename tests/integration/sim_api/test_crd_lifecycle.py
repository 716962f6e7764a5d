"""CustomResourceDefinitions on the bare sim, over HTTP: the CRD's own life (conditions, names, clashes, refusals),
discovery and OpenAPI following it, and deleting it taking its objects along (sim/crds.py, Store._sync_crds)."""

from __future__ import annotations

from typing import Any

from tests.support.crd_widget import CRDS, GADGETS, GROUP, WIDGETS, condition, gadget_crd, widget, widget_crd
from tests.support.sim_api import Api
from tests.support.waiting import eventually

JSON = dict[str, Any]


async def test_a_new_crd_has_its_names_accepted_and_is_established(api: Api) -> None:
    created = await api.ok("POST", CRDS, body=widget_crd())
    assert "customresourcecleanup.apiextensions.k8s.io" in created["metadata"]["finalizers"]
    assert created["metadata"]["generation"] == 1
    crd = await api.ok("GET", f"{CRDS}/widgets.{GROUP}")
    assert condition(crd, "NamesAccepted") | {"lastTransitionTime": ""} == {
        "type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found",
        "lastTransitionTime": ""}
    assert condition(crd, "Established")["status"] == "True"
    assert condition(crd, "Established")["reason"] == "InitialNamesAccepted"
    assert crd["status"]["acceptedNames"] == {"plural": "widgets", "singular": "widget", "kind": "Widget",
                                              "listKind": "WidgetList", "shortNames": ["wd"], "categories": ["all"]}
    assert crd["status"]["storedVersions"] == ["v1"]
    assert crd["spec"]["conversion"] == {"strategy": "None"}


async def test_the_real_servers_defaults_for_singular_and_list_kind(api: Api) -> None:
    await api.ok("POST", CRDS, body=gadget_crd())
    crd = await api.ok("GET", f"{CRDS}/gadgets.{GROUP}")
    assert crd["spec"]["names"]["singular"] == "gadget"
    assert crd["spec"]["names"]["listKind"] == "GadgetList"


async def test_the_name_must_be_plural_dot_group(api: Api) -> None:
    body = widget_crd()
    body["metadata"]["name"] = "widget.example.com"
    reply = await api.call("POST", CRDS, body=body)
    assert reply.status == 422
    assert reply.body["message"] == (
        'CustomResourceDefinition.apiextensions.k8s.io "widget.example.com" is invalid: metadata.name: '
        'Invalid value: "widget.example.com": must be spec.names.plural+"."+spec.group')
    assert reply.body["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "metadata.name",
        "message": 'Invalid value: "widget.example.com": must be spec.names.plural+"."+spec.group'}]


async def test_a_crd_refused_for_its_scope_group_and_storage_versions(api: Api) -> None:
    body = widget_crd()
    body["spec"]["scope"] = "Everywhere"
    body["spec"]["versions"][0]["storage"] = False
    reply = await api.call("POST", CRDS, body=body)
    assert reply.status == 422
    fields = [c["field"] for c in reply.body["details"]["causes"]]
    assert fields == ["spec.scope", "spec.versions"]
    assert reply.body["details"]["causes"][0]["message"] == (
        'Unsupported value: "Everywhere": supported values: "Cluster", "Namespaced"')
    body = widget_crd()
    body["spec"]["group"] = "example"
    body["metadata"]["name"] = "widgets.example"
    reply = await api.call("POST", CRDS, body=body)
    assert reply.status == 422
    assert reply.body["details"]["causes"][0]["message"] == (
        'Invalid value: "example": should be a domain with at least one dot')


async def test_a_schema_that_is_not_structural_refuses_the_crd(api: Api) -> None:
    body = widget_crd()
    del body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["type"]
    reply = await api.call("POST", CRDS, body=body)
    assert reply.status == 422
    assert any(c["field"].startswith("spec.versions[0].schema.openAPIV3Schema.properties[spec]")
               for c in reply.body["details"]["causes"]), reply.body


async def test_the_group_and_scope_are_immutable(api: Api) -> None:
    await api.ok("POST", CRDS, body=widget_crd())
    crd = await api.ok("GET", f"{CRDS}/widgets.{GROUP}")  # its status moved on since the create
    crd["spec"]["scope"] = "Cluster"
    reply = await api.call("PUT", f"{CRDS}/widgets.{GROUP}", body=crd)
    assert reply.status == 422
    assert reply.body["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.scope",
                                                "message": 'Invalid value: "Cluster": field is immutable'}]


def _clashing(plural: str, kind: str, short: list[str]) -> JSON:
    body = widget_crd()
    body["metadata"]["name"] = f"{plural}.{GROUP}"
    body["spec"]["names"] = {"plural": plural, "kind": kind, "listKind": f"{plural.capitalize()}Items",
                             "shortNames": short}
    return body


async def test_a_clash_of_names_in_the_group_is_not_accepted_nor_established(api: Api) -> None:
    await api.ok("POST", CRDS, body=widget_crd())
    cases = [
        (_clashing("doohickeys", "Widget", []), "KindConflict", '"Widget" is already in use'),
        (_clashing("gizmos", "Gizmo", ["wd"]), "ShortNamesConflict", '"wd" is already in use'),
        (_clashing("widget", "Thing", []), "PluralConflict", '"widget" is already in use'),
    ]
    # With the default listKind (KindList) a clash of kind clashes the list kind too, and that is checked last.
    await api.ok("POST", CRDS, body={**_clashing("thingamajigs", "Widget", []), "spec": {
        **_clashing("thingamajigs", "Widget", [])["spec"], "names": {"plural": "thingamajigs", "kind": "Widget"}}})
    crd = await api.ok("GET", f"{CRDS}/thingamajigs.{GROUP}")
    assert condition(crd, "NamesAccepted")["reason"] == "ListKindConflict"
    assert condition(crd, "NamesAccepted")["message"] == '"WidgetList" is already in use'
    for body, reason, message in cases:
        await api.ok("POST", CRDS, body=body)
        crd = await api.ok("GET", f"{CRDS}/{body['metadata']['name']}")
        accepted = condition(crd, "NamesAccepted")
        assert (accepted["status"], accepted["reason"], accepted["message"]) == ("False", reason, message)
        established = condition(crd, "Established")
        assert (established["status"], established["reason"], established["message"]) == (
            "False", "NotAccepted", "not all names are accepted")
    resources = await api.ok("GET", f"/apis/{GROUP}/v1")
    assert [r["name"] for r in resources["resources"]] == ["widgets", "widgets/status"]


async def test_a_clash_resolves_when_the_holder_of_the_name_goes(api: Api) -> None:
    await api.ok("POST", CRDS, body=widget_crd())
    await api.ok("POST", CRDS, body=_clashing("doohickeys", "Widget", []))
    await api.ok("DELETE", f"{CRDS}/widgets.{GROUP}")
    crd = await api.ok("GET", f"{CRDS}/doohickeys.{GROUP}")
    assert condition(crd, "NamesAccepted")["status"] == "True"
    assert condition(crd, "Established")["status"] == "True"
    await api.ok("GET", f"/apis/{GROUP}/v1/namespaces/default/doohickeys")


async def test_discovery_lists_the_group_and_its_kinds_once_established(api: Api) -> None:
    assert (await api.call("GET", f"/apis/{GROUP}")).status == 404
    assert GROUP not in [g["name"] for g in (await api.ok("GET", "/apis"))["groups"]]
    await api.ok("POST", CRDS, body=widget_crd())
    await api.ok("POST", CRDS, body=gadget_crd())
    groups = {g["name"]: g for g in (await api.ok("GET", "/apis"))["groups"]}
    assert groups[GROUP]["preferredVersion"] == {"groupVersion": f"{GROUP}/v1", "version": "v1"}
    assert (await api.ok("GET", f"/apis/{GROUP}"))["versions"] == [{"groupVersion": f"{GROUP}/v1", "version": "v1"}]
    resources = {r["name"]: r for r in (await api.ok("GET", f"/apis/{GROUP}/v1"))["resources"]}
    assert resources["widgets"] == {
        "name": "widgets", "singularName": "widget", "namespaced": True, "kind": "Widget",
        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        "shortNames": ["wd"], "categories": ["all"]}
    assert resources["widgets/status"]["verbs"] == ["get", "patch", "update"]
    assert resources["gadgets"]["namespaced"] is False
    assert "gadgets/status" not in resources


async def test_openapi_documents_follow_the_crd(api: Api) -> None:
    await api.ok("POST", CRDS, body=widget_crd())
    index = await api.ok("GET", "/openapi/v3")
    assert f"apis/{GROUP}/v1" in index["paths"]
    doc = await api.ok("GET", f"/openapi/v3/apis/{GROUP}/v1")
    schema = doc["components"]["schemas"]["com.example.v1.Widget"]
    assert schema["x-kubernetes-group-version-kind"] == [{"group": GROUP, "version": "v1", "kind": "Widget"}]
    assert schema["properties"]["spec"]["properties"]["size"]["description"] == "How big the widget is."
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in doc["components"]["schemas"]
    v2 = await api.ok("GET", "/openapi/v2")
    assert "com.example.v1.Widget" in v2["definitions"]
    await api.ok("DELETE", f"{CRDS}/widgets.{GROUP}")
    assert f"apis/{GROUP}/v1" not in (await api.ok("GET", "/openapi/v3"))["paths"]
    assert "com.example.v1.Widget" not in (await api.ok("GET", "/openapi/v2"))["definitions"]


async def test_deleting_the_crd_deletes_its_objects_and_ends_their_watches(api: Api) -> None:
    await api.ok("POST", CRDS, body=widget_crd())
    for name in ("a", "b"):
        await api.ok("POST", WIDGETS, body=widget(name))
    watcher = await api.watch(WIDGETS)
    crd_watch = await api.watch(CRDS)
    await eventually(lambda: len(watcher.of_type("ADDED")) == 2, what="the watch's initial objects")
    await api.ok("DELETE", f"{CRDS}/widgets.{GROUP}")
    await eventually(lambda: watcher.done, what="the widgets watch to end")
    assert [e["object"]["metadata"]["name"] for e in watcher.of_type("DELETED")] == ["a", "b"]
    await eventually(lambda: crd_watch.of_type("DELETED"), what="the CRD's DELETED event")
    terminating = [e["object"] for e in crd_watch.of_type("MODIFIED") if condition(e["object"], "Terminating")]
    assert condition(terminating[0], "Terminating")["reason"] == "InstanceDeletionInProgress"
    assert (await api.call("GET", WIDGETS)).status == 404
    assert (await api.call("GET", f"{CRDS}/widgets.{GROUP}")).status == 404
    # A new CRD of the same name starts empty.
    await api.ok("POST", CRDS, body=widget_crd())
    assert (await api.ok("GET", WIDGETS))["items"] == []


async def test_cluster_scoped_objects(api: Api) -> None:
    await api.ok("POST", CRDS, body=gadget_crd())
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"anything": [1]}}
    created = await api.ok("POST", GADGETS, body=body)
    assert "namespace" not in created["metadata"]
    assert created["spec"] == {"anything": [1]}  # preserved: the schema keeps unknown fields there
    assert (await api.call("GET", f"/apis/{GROUP}/v1/namespaces/default/gadgets")).status == 404
    listed = await api.ok("GET", GADGETS)
    assert listed["kind"] == "GadgetList" and listed["apiVersion"] == f"{GROUP}/v1"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["g1"]


async def test_two_served_versions_share_the_objects(api: Api) -> None:
    crd = widget_crd()
    v2 = {**crd["spec"]["versions"][0], "name": "v2", "storage": False}
    crd["spec"]["versions"].append(v2)
    await api.ok("POST", CRDS, body=crd)
    group = await api.ok("GET", f"/apis/{GROUP}")
    assert [v["version"] for v in group["versions"]] == ["v2", "v1"]
    assert group["preferredVersion"]["version"] == "v2"
    v2_path = f"/apis/{GROUP}/v2/namespaces/default/widgets"
    watcher = await api.watch(v2_path)
    created = await api.ok("POST", v2_path, body={**widget("w1"), "apiVersion": f"{GROUP}/v2"})
    assert created["apiVersion"] == f"{GROUP}/v2"
    assert (await api.ok("GET", f"{WIDGETS}/w1"))["apiVersion"] == f"{GROUP}/v1"  # read through the other version
    assert (await api.ok("GET", f"{v2_path}/w1"))["apiVersion"] == f"{GROUP}/v2"
    assert api.store.get(api.store.registry.stored[f"widgets.{GROUP}"], "default", "w1")["apiVersion"] == (
        f"{GROUP}/v1")  # stored in the storage version
    assert (await api.ok("GET", v2_path))["apiVersion"] == f"{GROUP}/v2"
    await eventually(lambda: watcher.of_type("ADDED"), what="the v2 watch's ADDED")
    assert watcher.of_type("ADDED")[0]["object"]["apiVersion"] == f"{GROUP}/v2"


async def test_an_object_with_a_finalizer_holds_the_crd_in_terminating(api: Api) -> None:
    await api.ok("POST", CRDS, body=widget_crd())
    held = widget("held")
    held["metadata"]["finalizers"] = ["example.com/keep"]
    await api.ok("POST", WIDGETS, body=held)
    await api.ok("POST", WIDGETS, body=widget("free"))
    answer = await api.ok("DELETE", f"{CRDS}/widgets.{GROUP}")
    assert answer["metadata"]["deletionTimestamp"]
    assert condition(answer, "Terminating")["status"] == "True"
    # The kind is still served: what is left can be read and finished, nothing new created.
    items = (await api.ok("GET", WIDGETS))["items"]
    assert [i["metadata"]["name"] for i in items] == ["held"] and items[0]["metadata"]["deletionTimestamp"]
    refused = await api.call("POST", WIDGETS, body=widget("new"))
    assert refused.status == 405
    assert refused.body["message"] == "create not allowed while custom resource definition is terminating"
    await api.ok("PATCH", f"{WIDGETS}/held", body={"metadata": {"finalizers": None}},
                 content_type="application/merge-patch+json")
    assert (await api.call("GET", f"{CRDS}/widgets.{GROUP}")).status == 404
    assert (await api.call("GET", WIDGETS)).status == 404


async def test_dependents_of_the_objects_go_with_the_crd(api: Api) -> None:
    await api.ok("POST", CRDS, body=widget_crd())
    owner = await api.ok("POST", WIDGETS, body=widget("w1"))
    ref = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "name": "w1", "uid": owner["metadata"]["uid"]}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "of-w1", "ownerReferences": [ref]}}
    await api.ok("POST", "/api/v1/namespaces/default/configmaps", body=config_map)
    await api.ok("DELETE", f"{CRDS}/widgets.{GROUP}")
    assert (await api.call("GET", "/api/v1/namespaces/default/configmaps/of-w1")).status == 404


async def test_a_protected_group_needs_the_approval_annotation_and_built_ins_are_never_shadowed(api: Api) -> None:
    body = widget_crd()
    body["spec"]["group"] = "coordination.k8s.io"
    body["spec"]["names"]["plural"] = "leases"
    body["spec"]["names"]["kind"] = "Lease"
    body["spec"]["names"]["listKind"] = "LeaseList"
    body["metadata"]["name"] = "leases.coordination.k8s.io"
    reply = await api.call("POST", CRDS, body=body)
    assert reply.status == 422
    assert reply.body["details"]["causes"] == [{
        "reason": "FieldValueRequired", "field": "metadata.annotations[api-approved.kubernetes.io]",
        "message": 'Required value: protected groups must have approval annotation "api-approved.kubernetes.io", '
                   "see https://github.com/kubernetes/enhancements/pull/1111"}]
    body["metadata"]["annotations"] = {"api-approved.kubernetes.io": "unapproved, testing only"}
    await api.ok("POST", CRDS, body=body)
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l1"},
             "spec": {"holderIdentity": "me"}}
    created = await api.ok("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", body=lease)
    assert created["spec"] == {"holderIdentity": "me"}  # the built-in Lease, not the CRD's schema (size required)


async def test_printer_columns_are_checked(api: Api) -> None:
    body = widget_crd()
    body["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Size", "type": "text", "jsonPath": ".spec.size"},
        {"name": "Bad", "type": "string", "jsonPath": "spec.size"},
    ]
    reply = await api.call("POST", CRDS, body=body)
    assert reply.status == 422
    assert [(c["field"], c["message"]) for c in reply.body["details"]["causes"]] == [
        ("spec.versions[0].additionalPrinterColumns[0].type",
         'Unsupported value: "text": supported values: "boolean", "date", "integer", "number", "string"'),
        ("spec.versions[0].additionalPrinterColumns[1].JSONPath",
         'Invalid value: "spec.size": must be a simple json path starting with .'),
    ]
