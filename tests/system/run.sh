#!/usr/bin/env bash
# make test-system: the unit under a real systemd and the image under a real container runtime.
#
#   1. A minimal Debian 12 rootfs (debootstrap, cached under .cache/system/) boots with systemd as PID 1 in
#      systemd-nspawn. The project is installed there exactly as docs/operations.md says (its "With pip" and
#      "Under systemd" command blocks are extracted and run as they are), against `edgeagent sim` on the host
#      (the machine shares the host's network). Checked: READY (Type=notify), GET /pods, the documented
#      journalctl | jq pipelines, a clean stop, the queue across restarts, the watchdog restarting a
#      stopped (SIGSTOP) agent, and the queued upgrade applied when the link returns.
#   2. The Dockerfile, unchanged, is built with podman (runc, vfs storage, explicit ulimits) on a stand-in
#      for its base image made from that rootfs (no container registry is reachable), and run with a host
#      state directory: uid 10267, the HEALTHCHECK (with --port), GET /pods, 0600 state files.
#   3. deploy/ applied as docs/operations.md says (`kubectl apply -f deploy/`, the host's kubectl) to a second
#      sim with --authorization rbac: the RolloutPlan CRD is Established; the controller from the same image
#      runs as deploy/controller-deployment.yaml runs it (its args, a token of its ServiceAccount, so only
#      deploy/controller-rbac.yaml's grants), is healthy, and writes the status of a RolloutPlan of a DaemonSet
#      with no request of it refused (401/403 in the sim's audit log).
#
# Needs root (nspawn, rootful podman), kubectl, and the Debian and PyPI registries. Missing tools are installed
# with apt-get; what cannot be had is explained, with exit code 3. Not part of `make test`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/system/lib.sh
source "$ROOT/tests/system/lib.sh"

CACHE=$ROOT/.cache/system
ROOTFS=$CACHE/rootfs
VENV=$ROOT/.venv
PASSED=0
pass() { PASSED=$((PASSED + 1)); ok "$*"; }

[[ $(id -u) -eq 0 ]] || missing "must run as root: systemd-nspawn boots a machine and podman runs rootful (try: sudo make test-system)"
[[ -x $VENV/bin/edgeagent ]] || missing "no $VENV: run 'make venv-demo' (or make demo) first"
need_commands debootstrap systemd-nspawn podman runc nsenter curl jq
command -v kubectl >/dev/null 2>&1 || missing "needs kubectl on PATH (https://kubernetes.io/docs/tasks/tools/): the documented install is kubectl apply -f deploy/"
ensure_rootfs "$ROOTFS"
sync_host_trust "$ROOTFS"

mkdir -p "$CACHE"
RUN=$(mktemp -d "$CACHE/run.XXXXXX")
MACHINE=edgeagent-systest-$$
NSPAWN_PID=
SIM_PID=
CTL_PID=
RBAC_SIM_PID=
PODMAN=(podman --root "$CACHE/podman/storage" --runroot /run/edgeagent-test-system/podman --storage-driver vfs
        --cgroup-manager cgroupfs --events-backend file --runtime "$(command -v runc)")
# podman's defaults (nofile 1048576, nproc 4194304) exceed what runc may set in this sandbox ("error setting
# rlimits … operation not permitted", even for values under `ulimit -H`): ask for modest, explicit ones.
NOFILE=4096
NPROC=4096
ULIMITS=(--ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC")

cleanup() {
    local code=$?
    set +e
    if ((code != 0)) && [[ -n ${LEADER:-} ]] && kill -0 "$LEADER" 2>/dev/null; then
        echo "--- the machine's view of edgeagent.service:" >&2
        in_machine systemctl status --no-pager -n 0 edgeagent >&2
        in_machine journalctl -u edgeagent --no-pager -n 40 -o short-precise >&2
    fi
    if [[ -n $NSPAWN_PID ]] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
        in_machine systemctl poweroff >/dev/null 2>&1 || kill "$NSPAWN_PID"
        for _ in $(seq 1 60); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$NSPAWN_PID" 2>/dev/null
    fi
    "${PODMAN[@]}" rm -f -t 5 ea-systest-agent ea-systest-controller >/dev/null 2>&1
    [[ -n $CTL_PID ]] && kill "$CTL_PID" 2>/dev/null && wait "$CTL_PID" 2>/dev/null
    [[ -n $SIM_PID ]] && kill "$SIM_PID" 2>/dev/null && wait "$SIM_PID" 2>/dev/null
    [[ -n $RBAC_SIM_PID ]] && kill "$RBAC_SIM_PID" 2>/dev/null && wait "$RBAC_SIM_PID" 2>/dev/null
    if ((code != 0)); then
        echo "--- logs kept in $RUN (machine console: console.log; sims: sim.log, rbac-sim.log, rbac-audit.log)" >&2
    else
        rm -rf "$RUN"
    fi
}
trap cleanup EXIT

# A port free now and below the kernel's ephemeral range, so that no port-0 listener or outgoing connection
# of a process running meanwhile can take it before the agent binds it (the machine shares this network).
free_port() {
    "$VENV/bin/python" - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    port = random.randrange(11000, max(low, 12000))
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break
else:
    raise SystemExit("no free port below the ephemeral range")
PY
}

# ------------------------------------------------------------------------------------------ the cluster (host)
say "simulated cluster and controller on the host"
"$VENV/bin/edgeagent" sim --dir "$RUN/sim" --log-format json > "$RUN/sim.log" 2>&1 &
SIM_PID=$!
eventually 30 "sim wrote its kubeconfigs" test -s "$RUN/sim/edge-2.kubeconfig"
API=$(awk '/server:/ {print $2; exit}' "$RUN/sim/admin.kubeconfig")
"$VENV/bin/edgeagent" controller --kubeconfig "$RUN/sim/admin.kubeconfig" --metrics-port 0 --log-format json \
    > "$RUN/controller.log" 2>&1 &
CTL_PID=$!
api() { curl -sf -H 'Content-Type: application/json' "$@"; }
api -X POST "$API/apis/apps/v1/namespaces/default/daemonsets" -d @- >/dev/null <<'EOF'
{"apiVersion": "apps/v1", "kind": "DaemonSet",
 "metadata": {"name": "nginx", "annotations": {"apps.openyurt.io/update-strategy": "OTA"}},
 "spec": {"selector": {"matchLabels": {"app": "nginx"}}, "updateStrategy": {"type": "OnDelete"},
          "template": {"metadata": {"labels": {"app": "nginx"}},
                       "spec": {"containers": [{"name": "nginx", "image": "nginx:1.19.4"}]}}}}
EOF
ok "sim at $API; OTA DaemonSet nginx created"

# ------------------------------------------------------------------------------------------ the machine
say "booting Debian 12 with systemd as PID 1 (systemd-nspawn)"
cp -a "$ROOTFS" "$RUN/machine"
mkdir -p "$RUN/stage/systemd"
"$VENV/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$RUN/stage" "$ROOT" >/dev/null
WHEEL=$(basename "$RUN"/stage/edgeagent-*.whl)
AGENT_PORT=$(free_port)
cp "$ROOT/systemd/edgeagent.service" "$RUN/stage/systemd/"
# "optional; edit as needed": the edit is this node's name as the sim knows it, and a free port.
{ cat "$ROOT/systemd/edgeagent.env.example"; printf 'EDGEAGENT_NODE_NAME=edge-1\nEDGEAGENT_PORT=%s\n' "$AGENT_PORT"; } \
    > "$RUN/stage/systemd/edgeagent.env.example"
cp "$RUN/sim/edge-1.kubeconfig" "$RUN/stage/kubeconfig"

systemd-nspawn --quiet -D "$RUN/machine" --machine="$MACHINE" --boot --register=no --keep-unit \
    --resolv-conf=copy-host --bind-ro="$RUN/stage:/stage" --console=read-only > "$RUN/console.log" 2>&1 &
NSPAWN_PID=$!

# The machine's PID 1, as the host sees it: the nspawn descendant that is PID 1 of its own namespace.
machine_leader() {
    local pid
    for pid in $(ps -e -o pid= --forest | tr -d ' '); do
        [[ -r /proc/$pid/status ]] || continue
        awk -v want="$NSPAWN_PID" '/^NSpid:/ {if ($NF == 1 && NF == 3) found = 1} END {exit !found}' \
            "/proc/$pid/status" 2>/dev/null || continue
        local p=$pid
        while [[ $p -gt 1 ]]; do
            [[ $p -eq $NSPAWN_PID ]] && { echo "$pid"; return 0; }
            p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null) || break
        done
    done
    return 1
}
LEADER=
find_leader() { LEADER=$(machine_leader) && [[ -n $LEADER ]]; }
eventually 60 "the machine's systemd started" find_leader
in_machine() {
    nsenter --target "$LEADER" --mount --uts --ipc --net --pid -- \
        /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb SYSTEMD_PAGER= \
        "$@"
}
booted() { local s; s=$(in_machine systemctl is-system-running 2>/dev/null || true); [[ $s == running || $s == degraded ]]; }
eventually 120 "the machine finished booting" booted
pass "booted: $(in_machine systemctl --version | sed -n 1p), PID 1 = $(in_machine cat /proc/1/comm)"

# The documented install, as written: the sh blocks under "### With pip" and "### Under systemd (agent)".
doc_block() {
    awk -v heading="$1" '
        $0 == heading {inside = 1; next}
        inside && /^```sh$/ {code = 1; next}
        code && /^```$/ {exit}
        code {print}
    ' "$ROOT/docs/operations.md"
}
{
    echo 'set -euxo pipefail'
    echo 'cd /stage'
    doc_block '### With pip' | sed "s#/path/to/edgeagent#/stage/$WHEEL#"
    doc_block '### Under systemd (agent)'
} > "$RUN/stage/install.sh"
[[ $(grep -c . "$RUN/stage/install.sh") -gt 8 ]] || die "could not extract the install commands from docs/operations.md"
say "installing as docs/operations.md says (pip into a venv, then the unit)"
sed 's/^/   | /' "$RUN/stage/install.sh" | grep -v 'set -euxo\|cd /stage'
in_machine bash /stage/install.sh > "$RUN/install.log" 2>&1 || { tail -n 30 "$RUN/install.log" >&2; die "documented install failed"; }
pass "installed $(in_machine edgeagent --version)"

unit() { in_machine systemctl show -p "$1" --value edgeagent; }
[[ $(unit Type) == notify && $(unit ActiveState) == active && $(unit SubState) == running ]] \
    || die "after 'systemctl enable --now' the unit is $(unit ActiveState)/$(unit SubState) (Type=$(unit Type))"
pass "READY: Type=notify unit active/running once 'enable --now' returned; STATUS=$(unit StatusText)"

AGENT=127.0.0.1:$AGENT_PORT
has_pod() { curl -sf "$AGENT/pods" | jq -e '.items | length == 1' >/dev/null; }
eventually 60 "GET /pods lists edge-1's nginx pod" has_pod
POD=$(curl -sf "$AGENT/pods" | jq -r '.items[0].metadata.name')
pass "GET /pods: PodList with default/$POD (agent uid $(in_machine ps -o user= -p "$(unit MainPID)"))"


say "upgrade queued while the link is cut, across a clean stop and start"
# `kubectl set image ds/nginx nginx=nginx:1.19.5`, as a merge patch.
curl -sf -X PATCH -H 'Content-Type: application/merge-patch+json' "$API/apis/apps/v1/namespaces/default/daemonsets/nginx" \
    -d '{"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.19.5"}]}}}}' >/dev/null \
    || die "could not patch the DaemonSet's image on the sim"
needs_upgrade() {
    curl -sf "$AGENT/pods" | jq -e '.items[0].status.conditions[]? | select(.type == "PodNeedUpgrade" and .status == "True")' >/dev/null
}
eventually 60 "PodNeedUpgrade=True reached the agent" needs_upgrade
curl -sf -X POST "$API/sim/v1/nodes/edge-1/disconnect?mode=refuse" >/dev/null
link_down() { curl -sf -H 'Accept: application/json' "$AGENT/v1/readyz" | jq -e '.link.connected == false' >/dev/null; }
eventually 60 "the agent saw the link go down" link_down
code=$(curl -s -o "$RUN/queued.txt" -w '%{http_code}' -X POST "$AGENT/openyurt.io/v1/namespaces/default/pods/$POD/upgrade")
[[ $code == 202 ]] || die "offline upgrade answered $code: $(cat "$RUN/queued.txt")"
ID=$(curl -sf "$AGENT/openyurt.io/v1/upgrades" | jq -r '.items[0].id')
pass "202 queued as $ID: $(cat "$RUN/queued.txt")"

in_machine systemctl stop edgeagent
[[ $(unit Result) == success && $(unit ExecMainStatus) == 0 && $(unit ActiveState) == inactive ]] \
    || die "stop was not clean: Result=$(unit Result) ExecMainStatus=$(unit ExecMainStatus)"
stopped_logged() { in_machine journalctl -u edgeagent -o cat | jq -R 'fromjson? | select(.event == "agent_stopped")'; }
output_has . stopped_logged || die "no 'agent stopped' in the journal"
pass "clean stop: Result=success, exit status 0, 'agent stopped' logged"

in_machine systemctl start edgeagent
queued() { output_has "^$ID .* queued " in_machine edgeagent upgrades --agent "$AGENT"; }
eventually 30 "request $ID still queued after the restart" queued
pass "after the restart: $(in_machine edgeagent upgrades --agent "$AGENT" | sed -n 2p | cut -c1-60)…"

say "watchdog: a stopped (SIGSTOP) agent is killed and restarted by systemd (WatchdogSec=30)"
OLD_PID=$(unit MainPID)
RESTARTS=$(unit NRestarts)
in_machine kill -STOP "$OLD_PID"
restarted() { [[ $(unit NRestarts) -gt $RESTARTS && $(unit MainPID) != "$OLD_PID" && $(unit MainPID) != 0 && $(unit SubState) == running ]]; }
eventually 120 "systemd restarted the wedged agent" restarted
output_has 'Watchdog timeout' in_machine journalctl -u edgeagent -o cat \
    || output_has '[Ww]atchdog timeout' in_machine journalctl -u edgeagent || die "no watchdog timeout in the journal"
pass "watchdog timeout → restarted (NRestarts $RESTARTS → $(unit NRestarts), pid $OLD_PID → $(unit MainPID))"
eventually 30 "request $ID still queued after the watchdog restart" queued

curl -sf -X POST "$API/sim/v1/nodes/edge-1/connect" >/dev/null
succeeded() { output_has "^$ID .* succeeded " in_machine edgeagent upgrades --agent "$AGENT"; }
eventually 60 "the queued upgrade was applied when the link returned" succeeded
pass "link back: request $ID succeeded"
say "the documented journalctl | jq pipelines (docs/operations.md, Logs)"
while IFS= read -r line; do
    out=$(in_machine bash -o pipefail -c "$line" 2>&1) || die "'$line' failed: $out"
    [[ -n $out ]] || die "'$line' printed nothing"
    printf '   | $ %s\n' "$line"; printf '%s\n' "$out" | sed -n '1,3s/^/   |   /p'
done < <(doc_block '## Logs')
pass "every documented journal pipeline prints"
in_machine systemctl stop edgeagent

# ------------------------------------------------------------------------------------------ the image
say "podman: the Dockerfile, unchanged, on a stand-in base image (vfs storage, runc, nofile=$NOFILE, nproc=$NPROC)"
BASE=$(awk '/^FROM / {print $2; exit}' "$ROOT/Dockerfile")
if ! "${PODMAN[@]}" image exists "docker.io/library/$BASE"; then
    tar -C "$ROOTFS" --exclude=./.edgeagent-rootfs-complete -c . \
        | "${PODMAN[@]}" import --quiet --change 'CMD ["python3"]' - "docker.io/library/$BASE" >/dev/null
fi
PYVER=$("${PODMAN[@]}" run --rm --network host "${ULIMITS[@]}" "docker.io/library/$BASE" python --version) \
    || die "the stand-in base image does not run"
[[ $PYVER == "Python 3.11."* ]] || die "the stand-in base image has $PYVER, not Python 3.11"
ok "stand-in base image docker.io/library/$BASE: $PYVER"
"${PODMAN[@]}" build --quiet --format docker --pull=never --network host "${ULIMITS[@]}" \
    -t localhost/edgeagent:systemtest -f "$ROOT/Dockerfile" "$ROOT" > "$RUN/build.log" 2>&1 \
    || { tail -n 30 "$RUN/build.log" >&2; die "podman build failed"; }
HEALTH=$("${PODMAN[@]}" image inspect --format '{{json .Healthcheck.Test}}' localhost/edgeagent:systemtest 2>/dev/null \
         || "${PODMAN[@]}" image inspect --format '{{json .Config.Healthcheck.Test}}' localhost/edgeagent:systemtest)
[[ $HEALTH == *'"edgeagent","healthcheck"'* ]] || die "built image has no HEALTHCHECK (got $HEALTH)"
pass "built with --format docker; HEALTHCHECK kept: $HEALTH"
# Each build leaves the previous image and its builder stage untagged (vfs stores every layer in full, ~700 MB
# a run): prune them so .cache/ stays at the rootfs, the base image and this build.
"${PODMAN[@]}" image prune -f >/dev/null || echo "test-system: warning: could not prune old images under $CACHE/podman" >&2

# This host has no systemd, so podman cannot schedule its healthcheck timers and says so on every `run -d`;
# the check itself is run explicitly below (`podman healthcheck run`), so that complaint is dropped.
podman_run_d() { "${PODMAN[@]}" run -d "$@" 2> >(grep -v 'unable to get systemd connection' >&2); }

# As docs/operations.md ("As a container") says: state dir owned by 10267, kubeconfig readable by 10267.
install -d -m 0700 -o 10267 -g 10267 "$RUN/state"
install -d -m 0755 "$RUN/etc-edgeagent"
install -m 0400 -o 10267 -g 10267 "$RUN/sim/edge-2.kubeconfig" "$RUN/etc-edgeagent/kubeconfig-container"
IMAGE_PORT=$(free_port)
podman_run_d --name ea-systest-agent --network host "${ULIMITS[@]}" \
    -e NODE_NAME=edge-2 -e EDGEAGENT_KUBECONFIG=/etc/edgeagent/kubeconfig \
    -v "$RUN/etc-edgeagent/kubeconfig-container:/etc/edgeagent/kubeconfig:ro" \
    -v "$RUN/state:/var/lib/edgeagent" \
    localhost/edgeagent:systemtest --port "$IMAGE_PORT" >/dev/null
UID_IN=$("${PODMAN[@]}" exec ea-systest-agent id -u)
[[ $UID_IN == 10267 ]] || die "the container runs as uid $UID_IN"
pass "container runs as uid $UID_IN"
image_pods() { curl -sf "127.0.0.1:$IMAGE_PORT/pods" | jq -e '.items | length == 1' >/dev/null; }
eventually 60 "GET /pods from the container lists edge-2's pod" image_pods
pass "GET /pods on --port $IMAGE_PORT: $(curl -sf "127.0.0.1:$IMAGE_PORT/pods" | jq -r '[.kind, .items[0].metadata.name] | join(" ")')"
healthy() { "${PODMAN[@]}" healthcheck run "$1" >/dev/null 2>&1; }
eventually 60 "podman healthcheck run ea-systest-agent" healthy ea-systest-agent
pass "healthcheck healthy on --port $IMAGE_PORT ($("${PODMAN[@]}" exec ea-systest-agent edgeagent healthcheck))"
MODE=$(stat -c '%a %u' "$RUN/state/edgeagent.db")
[[ $MODE == "600 10267" ]] || die "state file is $MODE, want 600 10267"
pass "host state dir: edgeagent.db is mode 600, owner 10267"

# ------------------------------------------------------------------------------------------ deploy/ with RBAC
say "deploy/ as docs/operations.md installs it (kubectl on the host) on a sim with --authorization rbac"
"$VENV/bin/edgeagent" sim --authorization rbac --dir "$RUN/rbac" --audit-log "$RUN/rbac-audit.log" --log-format json \
    > "$RUN/rbac-sim.log" 2>&1 &
RBAC_SIM_PID=$!
kc() { kubectl --kubeconfig "$RUN/rbac/admin.kubeconfig" "$@"; }
eventually 30 "the rbac sim answers kubectl" kc get --raw /readyz
# The kubectl line of "### On Kubernetes: DaemonSet and Deployment" (the image build before it is the podman
# build above), run as written from the repository's root.
APPLY=$(doc_block '### On Kubernetes: DaemonSet and Deployment' | grep '^kubectl ') \
    || die "no kubectl command under '### On Kubernetes: DaemonSet and Deployment' in docs/operations.md"
printf '   | $ %s\n' "$APPLY"
(cd "$ROOT" && KUBECONFIG=$RUN/rbac/admin.kubeconfig bash -euo pipefail -c "$APPLY") > "$RUN/apply.log" 2>&1 \
    || { cat "$RUN/apply.log" >&2; die "'$APPLY' failed"; }
output_has '^customresourcedefinition\.apiextensions\.k8s\.io/rolloutplans\.edgeagent\.io created$' cat "$RUN/apply.log" \
    || { cat "$RUN/apply.log" >&2; die "'$APPLY' did not create the RolloutPlan CRD"; }
kc wait --for condition=established --timeout 60s crd/rolloutplans.edgeagent.io >/dev/null \
    || die "CRD rolloutplans.edgeagent.io not Established"
pass "'$APPLY': $(grep -c ' created$' "$RUN/apply.log") objects created, CRD rolloutplans.edgeagent.io Established"

# The controller's credential is what the Deployment's pod gets: a token of its ServiceAccount, so deploy/'s
# RBAC is all it may do. Its command and args are the applied Deployment's, but for the metrics address
# (the pod's 0.0.0.0:10268; here the default loopback bind and a free port).
TOKEN=$(kc create token edgeagent-controller -n edgeagent-system --duration=1h)
CTL_KUBECONFIG=$RUN/etc-edgeagent/controller-kubeconfig
kc config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > "$RUN/rbac/ca.pem"
kctl() { kubectl --kubeconfig "$CTL_KUBECONFIG" "$@"; }
kctl config set-cluster sim --server "$(kc config view -o jsonpath='{.clusters[0].cluster.server}')" \
    --certificate-authority "$RUN/rbac/ca.pem" --embed-certs >/dev/null
kctl config set-credentials controller --token "$TOKEN" >/dev/null
kctl config set-context sim --cluster sim --user controller >/dev/null
kctl config use-context sim >/dev/null
chown 10267:10267 "$CTL_KUBECONFIG" && chmod 0400 "$CTL_KUBECONFIG"
mapfile -t CTL_ARGS < <(kc get deployment edgeagent-controller -n edgeagent-system -o json \
    | jq -r '.spec.template.spec.containers[0] | (.command[1:] + .args)[] | select(startswith("--metrics-") | not)')
[[ ${CTL_ARGS[0]:-} == controller ]] || die "deploy/controller-deployment.yaml does not run 'edgeagent controller': ${CTL_ARGS[*]}"
CTL_PORT=$(free_port)
podman_run_d --name ea-systest-controller --network host "${ULIMITS[@]}" --entrypoint edgeagent \
    -e EDGEAGENT_IDENTITY=ea-systest-controller -e EDGEAGENT_LOG_FORMAT=json \
    -v "$CTL_KUBECONFIG:/etc/edgeagent/kubeconfig:ro" \
    localhost/edgeagent:systemtest "${CTL_ARGS[@]}" --kubeconfig /etc/edgeagent/kubeconfig --metrics-port "$CTL_PORT" >/dev/null
eventually 60 "podman healthcheck run ea-systest-controller" healthy ea-systest-controller
pass "controller from the same image, '${CTL_ARGS[*]}' as $(kctl auth whoami -o jsonpath='{.status.userInfo.username}'), healthy ($("${PODMAN[@]}" exec ea-systest-controller edgeagent healthcheck))"

# A DaemonSet and its RolloutPlan, made after the controller started: the plan reaches it through its watch.
kc apply -f - >/dev/null <<'EOF'
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: web, namespace: default, annotations: {apps.openyurt.io/update-strategy: OTA}}
spec:
  selector: {matchLabels: {app: web}}
  updateStrategy: {type: OnDelete}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.25"}]}
---
apiVersion: edgeagent.io/v1alpha1
kind: RolloutPlan
metadata: {name: web, namespace: default}
spec: {daemonSet: web, steps: [1, "100%"]}
EOF
# A second template makes the DaemonSet's generation 2 while the plan's stays 1: the check below tells them apart.
kc set image ds/web web=nginx:1.25.1 >/dev/null
# status.observedGeneration is the DaemonSet's generation the status was decided for (not the plan's).
plan_status() { echo "$(kc get ds web -o jsonpath='{.metadata.generation}')" \
                     "$(kc get rp web -o jsonpath='{.status.observedGeneration} {.status.phase}')"; }
status_written() { local gen seen phase; read -r gen seen phase <<<"$(plan_status)" && [[ -n $phase && $seen == "$gen" ]]; }
eventually 60 "the controller wrote RolloutPlan web's status" status_written
# What the credential may do to plans, as the server answers it: read them and write their status, not the plan.
can() { kctl auth can-i "$@" 2>/dev/null || true; }
GRANTS="list=$(can list rolloutplans.edgeagent.io) update-status=$(can update rolloutplans.edgeagent.io --subresource=status) update=$(can update rolloutplans.edgeagent.io)"
[[ $GRANTS == "list=yes update-status=yes update=no" ]] || die "the controller's ServiceAccount may: $GRANTS"
REFUSED=$(jq -c 'select((.userAgent | startswith("edgeagent-controller")) and (.code == 401 or .code == 403)) | [.code, .verb, .path]' \
          "$RUN/rbac-audit.log")
[[ -z $REFUSED ]] || die "requests of the controller refused: $REFUSED"
kc get rolloutplans | sed 's/^/   | /'
pass "RolloutPlan web: status (DaemonSet generation, observedGeneration, phase) = $(plan_status), written by the controller; rolloutplans $GRANTS; none of its requests refused"

echo "test-system: $PASSED passed, 0 failed"
