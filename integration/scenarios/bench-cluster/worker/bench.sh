# bench-cluster, sourced by the worker's boot2 once its checks have passed (POSIX sh, with lib.sh
# and cluster.sh): the real kubelet under nodeward against Typhoon's own kubelet.service running
# the same container (the command nodeward created it with, in the foreground: the same image,
# flags, mounts and containerd), in this VM, alternated so that drift hits both alike.
# Two figures, each the API server's view:
#   start: the kubelet's first start on this provisioned node (no client certificate, so TLS
#          bootstrap again; its image present), from the unit's start;
#   kill:  SIGKILL of the running kubelet;
# each until the API server holds a Ready heartbeat posted by the new kubelet. Beside the start, its
# mechanism: from `systemctl start` to the kubelet container's creation (podman's own clock, in
# milliseconds), the part each side controls before the kubelet's own start. The time is that
# heartbeat's own timestamp minus the event's second (whole seconds, the API's resolution), so the
# poll's latency is not in it.
BT=/var/lib/nodeward-test/bench
mkdir -p $BT
runs=5
# The checks' credentials, apart from the kubelet's (each start removes those).
cp -L /var/lib/kubelet/pki/kubelet-client-current.pem $BT/client.pem
sed "s#/var/lib/kubelet/pki/kubelet-client-current.pem#$BT/client.pem#g" /var/lib/kubelet/kubeconfig > $BT/kubeconfig
KC=$BT/kubeconfig
k get node "$WORKER" > /dev/null || fail "bench: the checks' own credentials do not work"
# Each kill a first failure for nodeward's supervisor (no backoff from the one before).
# Metrics on: each start's pass, step by step (nodeward_step_duration_seconds), is printed.
printf '[kubelet]\nhealthy_reset_seconds = 20\n[metrics]\nlisten = "127.0.0.1:9101"\n' > /etc/nodeward/config.d/95-bench.toml
systemctl restart nodeward
image=$(podman inspect -f '{{.ImageName}}' kubelet)
# The unit Typhoon's worker has, its podman run being nodeward's own command (guest.sh).
typhoon_unit $BT

now() { date +%s; }
# ready_since SECOND: the Ready condition is True and its heartbeat is later than SECOND.
ready_since() {
  set -- "$1" $(k get node "$WORKER" -o jsonpath='{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime} {.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)
  [ "${3:-}" = True ] && [ "$(date -d "$2" +%s)" -gt "$1" ]
}
# took SECOND WHAT: waits (10 min at most) for a Ready heartbeat after SECOND; its delay in $t
# (not printed: a failure inside a command substitution would be captured, not reported).
took() {
  end=$(( $(now) + 600 ))
  until ready_since "$1"; do
    [ "$(now)" -lt "$end" ] || fail "bench: no Ready heartbeat within 600 s of $2"
    sleep 1
  done
  hb=$(k get node "$WORKER" -o jsonpath='{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')
  t=$(( $(date -d "$hb" +%s) - $1 ))
}
# Nothing runs a kubelet, and the kubelet's client identity is gone (TLS bootstrap on its start).
clear_kubelet() {
  systemctl stop nodeward kubelet-typhoon
  podman stop -t 2 kubelet > /dev/null 2>&1 || true
  podman rm -f kubelet > /dev/null 2>&1 || true
  rm -f /var/lib/kubelet/kubeconfig /var/lib/kubelet/pki/kubelet-client-*
  sleep 5
}
start_with() {
  clear_kubelet
  t0=$(now)
  t0ns=$(date +%s%N)
  systemctl start --no-block "$1"
  took "$t0" "starting $1"
  created=$(podman inspect -f '{{.Created.UnixNano}}' kubelet)
  m=$(( (created - t0ns) / 1000000 ))
}
# The first pass of the nodeward start just measured, step by step (from its metrics).
pass_steps() {
  busybox wget -q -O - http://127.0.0.1:9101/metrics | awk '/^nodeward_step_duration_seconds/ { sub(/.*step="/, ""); sub(/"}/, ""); printf " %s=%.2f", $1, $2 }'
}
kill_kubelet() {
  pid=$(kubelet_pid)
  [ -n "$pid" ] && [ "$pid" != 0 ] || fail "bench: no kubelet to kill"
  t0=$(now)
  kill -KILL "$pid"
  took "$t0" "the kill of $1's kubelet"
}
settle() { sleep 25; }
same_image() { [ "$(podman inspect -f '{{.ImageName}}' kubelet)" = "$image" ] || fail "bench: $1 runs $(podman inspect -f '{{.ImageName}}' kubelet), not $image"; }
median() { echo "$@" | tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk "BEGIN { printf \"%.2f\", $1 / ($2 > 0 ? $2 : 1) }"; }

# A start before the measured ones, not counted: the first TLS bootstrap after the node's own
# took 93 and 111 s in two runs (whichever side went first), every later one 13-19 s.
start_with nodeward.service; settle
s_nw=""; s_ty=""; k_nw=""; k_ty=""; m_nw=""; m_ty=""
i=0
while [ $i -lt $runs ]; do
  i=$((i + 1))
  start_with nodeward.service; s_nw="$s_nw $t"; m_nw="$m_nw $m"; same_image nodeward
  echo "... bench run $i: nodeward's pass before the kubelet, step by step (s):$(pass_steps)"
  # Where the rest of the start went: nodeward's own lines from the start to the container's
  # creation, each with its offset from `systemctl start` (ms).
  [ "$i" != 1 ] || journalctl -u nodeward --since "@$t0" -o short-unix --no-pager 2>/dev/null \
    | awk -v t0="$t0ns" -v c="$created" '{ split($1, a, "."); ns = a[1] * 1000000000 + substr(a[2] "000000000", 1, 9); if (ns > c + 2000000000) exit; $1 = ""; printf "... bench start: +%d ms%s\n", (ns - t0) / 1000000, substr($0, 1, 200) }' | head -40
  settle
  kill_kubelet nodeward; k_nw="$k_nw $t"; settle
  start_with kubelet-typhoon.service; s_ty="$s_ty $t"; m_ty="$m_ty $m"; same_image "Typhoon's unit"; settle
  ! systemctl is-active --quiet nodeward || fail "bench: nodeward runs beside Typhoon's unit"
  kill_kubelet "Typhoon's unit"; k_ty="$k_ty $t"; settle
  echo "... bench run $i of $runs: start nodeward$s_nw, unit$s_ty; kill nodeward$k_nw, unit$k_ty; start to the container's creation (ms) nodeward$m_nw, unit$m_ty"
done
# Back to nodeward for the rest of the boot.
start_with nodeward.service
version=$(field "$WORKER" '{.status.nodeInfo.kubeletVersion}')
sm_nw=$(median $s_nw); sm_ty=$(median $s_ty); km_nw=$(median $k_nw); km_ty=$(median $k_ty); mm_nw=$(median $m_nw); mm_ty=$(median $m_ty)
echo "bench: the real kubelet $version, first start (TLS bootstrap, image present) -> Ready as the API server sees it (s): nodeward$s_nw -> median $sm_nw; Typhoon's kubelet.service$s_ty -> median $sm_ty; nodeward / unit = $(ratio "$sm_nw" "$sm_ty")"
echo "bench: the real kubelet $version, SIGKILL -> Ready again as the API server sees it (s): nodeward$k_nw -> median $km_nw; Typhoon's kubelet.service (Restart=always, RestartSec=10)$k_ty -> median $km_ty; nodeward / unit = $(ratio "$km_nw" "$km_ty")"
echo "bench: systemctl start -> the kubelet container created, podman's clock (ms): nodeward$m_nw -> median $mm_nw; Typhoon's kubelet.service (ExecStartPre, podman rm, podman run)$m_ty -> median $mm_ty; nodeward / unit = $(ratio "$mm_nw" "$mm_ty")"
echo "ok: benchmark done ($runs runs each, alternated; TCG-emulated CPU: the ratios are what count)"
