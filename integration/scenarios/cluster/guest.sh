# Guest helpers for the cluster scenario (POSIX sh, sourced after lib.sh): the API server's view.
CONTROLLER=controller-1.example.com
WORKER=worker-1.example.com
T=/usr/lib/nodeward-test
# The admin's kubectl on the controller; a node's own credentials on the worker.
if [ -f $T/admin.conf ]; then KC=$T/admin.conf; else KC=/var/lib/kubelet/kubeconfig; fi
k() { kubectl --kubeconfig="$KC" --request-timeout=30s "$@"; }
# kr: k, tried up to 5 times 3 s apart. The boot scripts run under `sh -e`: outside an await, one
# call an API server on a loaded host answers late would end the boot with no word of why.
kr() { n=1; until k "$@"; do [ "$n" -lt 5 ] || return 1; n=$((n + 1)); sleep 3; done; }
# await SECONDS DESCRIPTION COMMAND...: polls every 2 s for a minute, then every 6 s. Under TCG
# one kubectl call costs about a second of a vCPU (a Go program's start, 20-odd times slower than
# on the host), and the cluster's two VMs keep both host cores busy: a long wait polled every 2 s
# took half a vCPU from the checks it was waiting on. (Waits for the other node's word: await_mark.)
await() {
  t=$1; what=$2; shift 2
  start=$(date +%s); end=$(( start + t )); next_word=$(( start + 60 ))
  while ! "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${t}s waiting for $what"
    # A long wait says where it stands once a minute, so a slow run can be read while it runs.
    if [ "$(date +%s)" -ge "$next_word" ]; then
      next_word=$(( $(date +%s) + 60 ))
      echo "... still waiting for $what: $(progress_word)"
    fi
    if [ $(( $(date +%s) - start )) -lt 60 ]; then sleep 2; else sleep 6; fi
  done
  echo "ok: $what after $(cut -d' ' -f1 /proc/uptime | cut -d. -f1)s of uptime"
}
# await_mark SECONDS DESCRIPTION NODE KEY VALUE: waits for the other node's word (a label on NODE,
# see mark) on one watch of the Node instead of a kubectl call every few seconds: these waits last
# the other node's whole part (10 to 25 minutes under TCG). The watch is started again when it
# ends (an API server restarting, a dropped connection); what it printed is read locally.
await_mark() {
  t=$1; what=$2; node=$3; key=$4; value=$5
  end=$(( $(date +%s) + t )); next_word=$(( $(date +%s) + 60 ))
  seen=$(mktemp)
  while :; do
    kubectl --kubeconfig="$KC" get node "$node" --watch \
      -o jsonpath="{.metadata.labels.nodeward-test\.example\.com/$key}{\"\n\"}" > "$seen" 2>&1 &
    watch=$!
    while kill -0 "$watch" 2>/dev/null && ! grep -qx "$value" "$seen"; do
      [ "$(date +%s)" -lt "$end" ] || { kill "$watch" 2>/dev/null; fail "timed out after ${t}s waiting for $what (the watch saw: $(sort -u "$seen" | tr '\n' ' ' | cut -c1-200))"; }
      if [ "$(date +%s)" -ge "$next_word" ]; then
        next_word=$(( $(date +%s) + 60 ))
        echo "... still waiting for $what"
      fi
      sleep 2
    done
    kill "$watch" 2>/dev/null || true
    wait "$watch" 2>/dev/null || true
    grep -qx "$value" "$seen" && break
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${t}s waiting for $what (the watch ended: $(tail -n1 "$seen" | cut -c1-200))"
    sleep 5
  done
  rm -f "$seen"
  echo "ok: $what after $(cut -d' ' -f1 /proc/uptime | cut -d. -f1)s of uptime"
}
# WATCH_POD=NAME: the word is that pod's phase, state and last event instead.
progress_word() {
  if [ -n "${WATCH_POD:-}" ]; then
    echo "pod $WATCH_POD: $(k get pod "$WATCH_POD" -o jsonpath='{.status.phase} {.status.containerStatuses[*].state}' 2>&1 | cut -c1-200);" \
      "last event: $(k get events --field-selector involvedObject.name="$WATCH_POD" -o jsonpath='{.items[-1:].message}' 2>&1 | cut -c1-200)"
    return
  fi
  tasks=$(ctr -n k8s.io tasks ls 2>/dev/null | grep -c RUNNING || true)
  last=$(journalctl -b -t kubelet --no-pager -o cat 2>/dev/null | grep '^E' | tail -n1 | cut -c1-220 || true)
  echo "kubelet $(podman inspect -f '{{.State.Status}}' kubelet 2>/dev/null || echo none), $tasks pod containers running; last kubelet error: ${last:-none}"
}
ready() { [ "$(k get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
# The labels a node carries, minus the kubelet's own well-known ones and this test's markers.
labels_of() {
  kr get node "$1" -o go-template='{{range $k, $v := .metadata.labels}}{{$k}}={{$v}}{{"\n"}}{{end}}' \
    | grep -v -E '^(kubernetes\.io/(hostname|os|arch)|beta\.kubernetes\.io/(os|arch)|nodeward-test\.example\.com/[^=]*)=' | sort
}
taints_of() {
  kr get node "$1" -o go-template='{{range .spec.taints}}{{.key}}={{if .value}}{{.value}}{{end}}:{{.effect}}{{"\n"}}{{end}}' | sort
}
field() { kr get node "$1" -o jsonpath="$2"; }
kubelet_pid() { podman inspect -f '{{.State.Pid}}' kubelet 2>/dev/null; }
# What the running containerd said (its main process: not a start before a restart).
containerd_log() { journalctl -b _PID="$(systemctl show -p MainPID --value containerd.service)" -o cat --no-pager; }
# The API server's node list, as the log shows it.
show_nodes() {
  kr get nodes -o go-template='{{range .items}}cluster: node {{.metadata.name}} ready={{range .status.conditions}}{{if eq .type "Ready"}}{{.status}}{{end}}{{end}} version={{.status.nodeInfo.kubeletVersion}} providerID={{if .spec.providerID}}{{.spec.providerID}}{{end}} labels={{.metadata.labels}} taints={{range .spec.taints}}{{.key}}={{if .value}}{{.value}}{{end}}:{{.effect}} {{end}}{{"\n"}}{{end}}'
}
# expect_set WHAT ACTUAL WANT: two newline-separated lists, equal as sets.
expect_set() {
  a=$(printf '%s\n' "$2" | grep -v '^$' | sort); w=$(printf '%s\n' "$3" | grep -v '^$' | sort)
  [ "$a" = "$w" ] || fail "$1: the API server has [$(echo $a)], configured [$(echo $w)]"
  echo "ok: $1 as configured: $(echo $a)"
}
# The conformance suite's test images pulled into containerd before it starts (as e2e_node's
# --prepull-images does): on TCG the first pull of agnhost took longer than the specs' 4-5 minute
# pod timeouts, so the first specs on each node failed on the pull, not on the node.
prepull_test_images() {
  for name in $(awk '$1 ~ /^e2e-test-images\// { print $1 }' /var/lib/nodeward-test/registry/index); do
    ctr -n k8s.io images pull --hosts-dir /etc/containerd/certs.d "registry.k8s.io/$name" >/dev/null 2>&1 \
      || fail "could not pull registry.k8s.io/$name into containerd"
  done
  echo "ok: the suite's test images in containerd ($(awk '$1 ~ /^e2e-test-images\// { n++ } END { print n }' /var/lib/nodeward-test/registry/index) of them)"
}
mark() { kr label node "$1" --overwrite "nodeward-test.example.com/$2=$3" >/dev/null || fail "could not label $1 $2=$3"; }
marked() { [ "$(k get node "$1" -o jsonpath="{.metadata.labels.nodeward-test\.example\.com/$2}")" = "$3" ]; }
# await_controller_reboot: where the controller reboots too (it said so: cluster-addons,
# cluster-rkt), the worker's end of boot 1 waits for its API server to go and come back, so the
# two boots do not share the host's cores (cluster/worker/boot1 says why).
await_controller_reboot() {
  marked "$WORKER" controller-reboots yes || return 0
  api_down() { ! k --request-timeout=5s get --raw /readyz; }
  await 900 "the controller's API server gone for its reboot" api_down
  await 1500 "the controller's API server back after its reboot" k get --raw /readyz
}
# A failed check says what the cluster looked like: the kubelet's last words, the pods containerd
# runs, containerd's and etcd's journals.
fail() {
  echo "FAIL: $*"
  echo "--- podman ps -a"; podman ps -a 2>&1 | tail -5
  echo "--- journalctl -t kubelet (last 60)"; journalctl -b -t kubelet --no-pager -o cat 2>&1 | grep -v '^I' | tail -60
  echo "--- ctr -n k8s.io containers / tasks"; ctr -n k8s.io containers ls 2>&1 | tail -12; ctr -n k8s.io tasks ls 2>&1 | tail -12
  echo "--- journalctl -u containerd (last 25)"; journalctl -b -u containerd --no-pager -o cat 2>&1 | tail -25
  echo "--- journalctl -u etcd-member (last 10)"; journalctl -b -u etcd-member --no-pager -o cat 2>&1 | tail -10
  echo "--- nodeward status"; nodeward status 2>&1 | head -30
  exit 1
}
# typhoon_unit DIR: kubelet-typhoon.service, the unit Typhoon's Fedora CoreOS nodes have (its
# ExecStartPre, Restart and Delegate lines), its podman run being nodeward's own command for this
# node's kubelet (read from the running container; in the foreground: Typhoon's unit has neither
# --detach nor --replace, its ExecStartPre removes the old container). bench-cluster times it
# against nodeward; the conformance scenario can run the suite under it.
typhoon_unit() {
  podman inspect -f '{{range .Config.CreateCommand}}{{.}}{{"\n"}}{{end}}' kubelet > "$1/create"
  grep -qx -- --detach "$1/create" || fail "nodeward's create command has no --detach: $(tr '\n' ' ' < "$1/create")"
  ! grep -q "'" "$1/create" || fail "a quote in nodeward's create command"
  # Typhoon's mounts: nodeward's /tmp (a hostPath subPath under it, docs/kubelet.md) left out.
  { printf 'exec'; grep -vx -e --detach -e --replace "$1/create" | awk 'held && p == "--volume" && $0 == "/tmp:/tmp" { held = 0; next } held { print p } { p = $0; held = 1 } END { if (held) print p }' \
      | sed "s/.*/ '&'/" | tr -d '\n'; echo; } > "$1/kubelet-run"
  ! grep -q "'/tmp:/tmp'" "$1/kubelet-run" || fail "Typhoon's unit would mount /tmp: $(cat "$1/kubelet-run")"
  cat > /run/systemd/system/kubelet-typhoon.service <<UNIT
[Unit]
Description=Kubelet (System Container), as Typhoon's kubelet.service runs it
[Service]
ExecStartPre=/bin/mkdir -p /etc/cni/net.d
ExecStartPre=/bin/mkdir -p /etc/kubernetes/manifests
ExecStartPre=-/usr/bin/podman rm kubelet
ExecStart=/bin/sh $1/kubelet-run
ExecStop=-/usr/bin/podman stop kubelet
Delegate=yes
Restart=always
RestartSec=10
UNIT
  systemctl daemon-reload
}
# to_typhoon_unit: this node's kubelet handed from nodeward to kubelet-typhoon.service (the same
# container; nodeward stopped, its host setup left in place; the pods keep running in containerd).
to_typhoon_unit() {
  mkdir -p /var/lib/nodeward-test/typhoon-unit
  typhoon_unit /var/lib/nodeward-test/typhoon-unit
  systemctl stop nodeward.service
  podman stop -t 10 kubelet > /dev/null 2>&1 || true
  systemctl start kubelet-typhoon.service
  systemctl is-active --quiet kubelet-typhoon.service || fail "kubelet-typhoon.service did not start"
}
