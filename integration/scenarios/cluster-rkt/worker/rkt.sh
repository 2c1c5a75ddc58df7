# Guest helpers for the cluster-rkt worker (sourced after cluster.sh): the kubelet's pod under the
# real rkt, found by the uuid file nodeward keeps, in place of cluster.sh's podman container.
UUID_FILE=/var/cache/kubelet-pod.uuid
pod_uuid() { cat $UUID_FILE 2>/dev/null; }
# rkt status's KEY=VALUE lines (state, pid, exited…) for the pod the uuid file names.
pod_field() { rkt status "$(pod_uuid)" 2>/dev/null | sed -n "s/^$1=//p"; }
# fly runs the app as the pod's leader: its pid is the kubelet's.
kubelet_pid() { pod_field pid; }
# Every pod rkt knows, in any state (one line each).
pods() { rkt list --no-legend --full 2>/dev/null; }
running_pods() { pods | awk '$0 ~ /running/' | wc -l; }
progress_word() {
  tasks=$(ctr -n k8s.io tasks ls 2>/dev/null | grep -c RUNNING || true)
  last=$(journalctl -b -t kubelet --no-pager -o cat 2>/dev/null | grep '^E' | tail -n1 | cut -c1-220 || true)
  echo "kubelet pod $(pod_uuid) $(pod_field state), $tasks pod containers running; last kubelet error: ${last:-none}"
}
fail() {
  echo "FAIL: $*"
  echo "--- rkt list"; rkt list --full 2>&1 | tail -5
  echo "--- journalctl -u nodeward (last 30)"; journalctl -b -u nodeward --no-pager -o cat 2>&1 | tail -30
  echo "--- journalctl -t kubelet (last 60)"; journalctl -b -t kubelet --no-pager -o cat 2>&1 | grep -v '^I' | tail -60
  echo "--- ctr -n k8s.io tasks"; ctr -n k8s.io tasks ls 2>&1 | tail -12
  echo "--- journalctl -u containerd (last 15)"; journalctl -b -u containerd --no-pager -o cat 2>&1 | tail -15
  echo "--- nodeward status"; nodeward status 2>&1 | head -30
  exit 1
}
# ready_after WHEN: Ready, on a heartbeat posted at or after WHEN (epoch seconds).
ready_after() {
  hb=$(k get node "$WORKER" -o jsonpath='{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')
  [ -n "$hb" ] && [ "$(date -d "$hb" +%s)" -ge "$1" ] && ready "$WORKER"
}
