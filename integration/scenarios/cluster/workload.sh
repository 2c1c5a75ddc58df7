# The workload slice (sourced by the controller's boot1 once both nodes are Ready, in every run of
# the cluster scenario; its objects made earlier, beside the placement checks' pods): a pod on the
# worker doing what Kubernetes' node conformance checks a node for — the paths that go through
# nodeward's kubelet container — and a client on the controller reaching it across the nodes.
# With Typhoon's add-ons (cluster-addons: flannel's vxlan, kube-proxy's ipvs, CoreDNS at
# 10.3.0.10) by DNS name through a ClusterIP Service; without them (CI's cluster) at the pod's
# address, over routes between the nodes' pod subnets that the test lays where flannel would.
# Each positive check has its control; the mount propagation's control, a kubelet run by hand
# without `rshared`, is the worker's last act (its boot2).
W=/usr/lib/nodeward-test/workload
BUSYBOX=registry.k8s.io/e2e-test-images/busybox:1.37.0-1
# workload_apply: the secret, the configMap and both pods, once (the controller's boot1 calls it
# as soon as the default service account exists, so the pods start while the placement checks
# run; the checks below call it in case nothing did).
workload_apply() {
  [ -z "${nonce:-}" ] || return 0
  # What only this run knows, so nothing but the pod's reading it can produce it.
  nonce=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
  # Every call outside an await is retried (kr): an API server on a loaded TCG host answers late.
  # Objects are applied (a retried create would find its first attempt's object), unvalidated by the
  # client (its OpenAPI download alone timed out once).
  apply_file() { kr apply --validate=false -f "$1" >/dev/null; }
  kr create secret generic workload-secret --from-literal=password="$nonce" --dry-run=client -o yaml > /tmp/secret.yaml
  kr create configmap workload-config --from-literal=greeting="hello-$nonce" --dry-run=client -o yaml > /tmp/config.yaml
  apply_file /tmp/secret.yaml
  apply_file /tmp/config.yaml
  # (The pods' image named once, here.)
  for manifest in workload client; do
    sed "s/@BUSYBOX@/$(echo "$BUSYBOX" | sed 's#/#\\/#g')/" $W/$manifest.yaml > /tmp/$manifest.yaml
  done
  apply_file /tmp/workload.yaml
  # The client on the controller (the caller across the nodes, used last) starts while the
  # workload's checks run: its start took a minute after them.
  apply_file /tmp/client.yaml
}
# Sourced with workload_apply_only=1: the objects made, the checks left for the later source.
if [ "${workload_apply_only:-}" = 1 ]; then workload_apply; return 0; fi
if [ -f $T/addons ]; then
  # The add-ons run as Typhoon runs them: flannel and kube-proxy on both nodes, CoreDNS's two replicas.
  ds_ready() { [ "$(k -n kube-system get ds "$1" -o jsonpath='{.status.numberReady}')" = 2 ]; }
  await 900 "flannel running on both nodes (Typhoon's DaemonSet, vxlan)" ds_ready flannel
  await 600 "kube-proxy running on both nodes (Typhoon's DaemonSet, ipvs)" ds_ready kube-proxy
  dns_ready() { [ "$(k -n kube-system get deploy coredns -o jsonpath='{.status.readyReplicas}')" = 2 ]; }
  await 600 "CoreDNS's two replicas ready (Typhoon's Deployment; readiness probed over the pod network)" dns_ready
  kr -n kube-system get pods -o wide | sed 's/^/cluster: /'
fi

workload_apply
pod_ready() {  # pod_ready NAME: Ready as its probes say
  [ "$(k get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
# A long wait says where the pod stands (guest.sh's progress_word).
WATCH_POD=workload
await 600 "the workload pod Ready on $WORKER (its httpGet readiness probe passing)" pod_ready workload
[ "$(kr get pod workload -o jsonpath='{.spec.nodeName}')" = "$WORKER" ] || fail "the workload pod is not on $WORKER"
ex() { kr exec workload -c web -- "$@"; }

# Logs: the line the container printed after reading its secret, through the kubelet's log API.
kr logs workload -c web > /tmp/workload-log.txt 2>&1 || true
grep -qx "workload: read secret $nonce" /tmp/workload-log.txt || { cat /tmp/workload-log.txt; fail "kubectl logs does not show the pod's line"; }
echo "ok: kubectl logs: $(head -n1 /tmp/workload-log.txt | sed "s/$nonce/<nonce>/")"
# Exec, and the volumes: the secret and the configMap (tmpfs and a directory the kubelet writes),
# the emptyDir in memory (a tmpfs the kubelet mounts: the pod sees it only through the rshared
# /var/lib/kubelet), the hostPath by its subPath (the kubelet's bind under volume-subpaths).
# (One exec for all five readings: each kubectl exec took ~15 s on a loaded TCG host.)
reading=$(ex sh -c 'echo "secret=$(cat /etc/secret/password)"
echo "config=$(cat /etc/config/greeting)"
echo "scratch=$(grep " /scratch " /proc/mounts | cut -d" " -f3)"
echo "host-data=$(cat /host-data/from-host)"
if test -e /host-data/sub; then echo "mounted=whole"; else echo "mounted=sub"; fi' 2>&1)
read_as() { printf '%s\n' "$reading" | sed -n "s/^$1=//p"; }
[ "$(read_as secret)" = "$nonce" ] || fail "the pod reads another secret: $reading"
[ "$(read_as config)" = "hello-$nonce" ] || fail "the pod reads another configMap: $reading"
[ "$(read_as scratch)" = tmpfs ] || fail "the emptyDir with medium Memory is '$(read_as scratch)' in the pod, not tmpfs"
[ "$(read_as host-data)" = "written on $WORKER" ] || fail "the hostPath subPath shows: $(ex ls -la /host-data)"
[ "$(read_as mounted)" = sub ] || fail "the hostPath is mounted whole, not by its subPath: $(ex ls -la /host-data)"
echo "ok: kubectl exec: the pod reads its secret and configMap, /scratch is tmpfs (emptyDir, medium Memory), /host-data is the hostPath's subPath (the worker's file, not the directory above it)"
# The node's /tmp by a subPath: what the pod writes through it is in the node's /tmp, as the same
# hostPath mounted whole shows. Without the kubelet container's /tmp mount the kubelet made the
# subPath in its container's own /tmp and the write never reached the node (the nonce is this
# run's: nothing else put it there).
# (Written through the subPath, read back through the whole mount, in one exec.)
[ "$(ex sh -c "echo $nonce > /node-tmp-sub/nonce && cat /node-tmp/nodeward-workload/nonce" 2>&1)" = "$nonce" ] || fail "a write through the subPath of hostPath /tmp is not in the node's /tmp: $(ex ls -la /node-tmp/nodeward-workload 2>&1 | head -n3)"
echo "ok: kubectl exec: hostPath /tmp by its subPath writes to the node's /tmp (the kubelet container's /tmp mount)"
# The control: a hostPath outside the kubelet container's mounts (kubelet.extra_mounts gave it the
# workload's) fails the kubelet's type check, though the directory is on the node.
unseen() { k get events --field-selector involvedObject.name=hostpath-unseen -o go-template='{{range .items}}{{.message}}{{"\n"}}{{end}}' | grep -o 'hostPath type check failed.*' | head -n1; }
await 300 "control: the pod whose hostPath the kubelet container cannot see refused by the kubelet" unseen
echo "ok: control: a hostPath the kubelet container does not see: $(unseen | cut -c1-160)"
kr delete pod hostpath-unseen --wait=false --ignore-not-found >/dev/null
# The projected service-account token is the API server's: a TokenReview names the pod's account.
token=$(ex cat /var/run/secrets/kubernetes.io/serviceaccount/token)
printf '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"%s"}}' "$token" > /tmp/review.json
kr create --validate=false -f /tmp/review.json -o json > /tmp/review.out
grep -q '"authenticated": true' /tmp/review.out && grep -q '"username": "system:serviceaccount:default:default"' /tmp/review.out \
  && grep -A1 '"authentication.kubernetes.io/pod-name"' /tmp/review.out | grep -q '"workload"' \
  || { cat /tmp/review.out; fail "the pod's token does not review as the workload pod's service account"; }
printf '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"%s"}}' "${token}x" > /tmp/review.json
[ "$(kr create --validate=false -f /tmp/review.json -o jsonpath='{.status.authenticated}')" != true ] || fail "control: an altered token authenticated"
echo "ok: the projected service-account token authenticates as system:serviceaccount:default:default (pod workload); control: the token altered does not"

# Probes: readiness (httpGet /ready) withdrawn and restored; liveness (exec test -f) failed once →
# the container restarted by the kubelet, Ready again.
ex rm -f /www/ready
not_ready() { ! pod_ready workload; }
await 300 "the workload pod not Ready once its readiness path is gone (httpGet probe failing)" not_ready
ex touch /www/ready
await 300 "the workload pod Ready again" pod_ready workload
restarts() { kr get pod workload -o jsonpath='{.status.containerStatuses[0].restartCount}'; }
r0=$(restarts)
ex rm -f /scratch/alive
restarted() { [ "$(restarts)" = $((r0 + 1)) ] && pod_ready workload; }
await 300 "the workload container restarted by its exec liveness probe, Ready again" restarted
echo "ok: probes: readiness withdrawn and restored, liveness failed once → restart count $r0 → $((r0 + 1))"

# port-forward, from the controller through the API server and the kubelet's streaming server.
k port-forward pod/workload 18080:8080 > /tmp/port-forward.txt 2>&1 &
pf=$!
# (Not wget: Debian's busybox-static 1.35 wget segfaults on its -T option; nc's -w is sound.)
forwarded() { printf 'GET / HTTP/1.0\r\n\r\n' | busybox nc -w 5 127.0.0.1 18080 > /tmp/pf.html && grep -q "secret=$nonce" /tmp/pf.html; }
await 120 "the workload page through kubectl port-forward" forwarded
kill $pf 2>/dev/null || true
echo "ok: kubectl port-forward: $(tail -n1 /tmp/pf.html | sed "s/$nonce/<nonce>/g")"

# The client on the controller, the caller across the nodes (applied with the workload).
WATCH_POD=client
await 600 "the client pod running on $CONTROLLER" pod_ready client
WATCH_POD=workload
[ "$(kr get pod client -o jsonpath='{.spec.nodeName}')" = "$CONTROLLER" ] || fail "the client pod is not on $CONTROLLER"
if [ -f $T/addons ]; then
  # The Service, by DNS name: CoreDNS (on the worker) answers through 10.3.0.10, kube-proxy's ipvs
  # sends the request to the pod on the worker over flannel's vxlan.
  kr expose pod workload --name workload --port 80 --target-port 8080 --dry-run=client -o yaml > /tmp/service.yaml
  apply_file /tmp/service.yaml
  target=http://workload.default.svc.cluster.local/
  target_is="a ClusterIP Service by its DNS name"
else
  # No add-ons: the worker's pod subnet routed through the worker's address (flannel's part, laid
  # by the test; the worker routes the controller's likewise, its boot1), the pod at its own IP.
  ip route replace 10.2.1.0/24 via 10.0.5.11
  target=http://$(kr get pod workload -o jsonpath='{.status.podIP}'):8080/
  target_is="the pod's address"
fi
# (timeout, not wget -T: that option segfaults in Debian's busybox-static 1.35.)
reached() { k exec client -- timeout 10 wget -q -O - "$target" 2>&1 | grep -q "secret=$nonce"; }
await 300 "$target from the client on $CONTROLLER (across the nodes)" reached
if [ -f $T/addons ]; then
  ip=$(kr exec client -- nslookup workload.default.svc.cluster.local 10.3.0.10 2>/dev/null | awk '/^Address/ { a = $NF } END { print a }')
  [ "$ip" = "$(kr get svc workload -o jsonpath='{.spec.clusterIP}')" ] || fail "CoreDNS answers $ip for the Service"
  echo "ok: a ClusterIP Service by its DNS name ($ip) from $CONTROLLER's pod to $WORKER's, through CoreDNS, kube-proxy and flannel"
else
  echo "ok: the pod on $WORKER at its address ($target) from $CONTROLLER's pod, through both nodes' forwarding"
fi
# Control: the node without nodeward's ip_forward (the pod's packets are routed from cni0 to the
# link) reaches nothing; nodeward's converge puts it back, and the pod answers again.
# (The answer is the pod's own word: an exec that failed for another reason is not taken for it.)
reach() { kr exec client -- sh -c "timeout 10 wget -q -O - $target > /tmp/out 2>&1 && echo reached || { echo unreachable; tail -n1 /tmp/out; }"; }
# Something may turn ip_forward back on meanwhile — the running daemon's converge (a retry, an
# inotify wake on /etc/kubernetes or /run/containerd), or the CNI bridge plugin, which enables
# forwarding on every pod's ADD — and in a CI run (stop 67) the pod answered. An attempt counts
# only if ip_forward was still off once the pod had answered; nothing but this test turns it off,
# so off after means off throughout.
for attempt in 1 2 3 4 5; do
  sysctl -qw net.ipv4.ip_forward=0
  reach > /tmp/no-forward.txt 2>&1 || true
  [ "$(sysctl -n net.ipv4.ip_forward)" = 1 ] || break
  echo "cluster: control attempt $attempt void: ip_forward turned on meanwhile (nodeward's journal names it $(journalctl -u nodeward --since -2min -o cat | grep -c 'ip_forward') times in 2 min)"
  [ "$attempt" != 5 ] || fail "control: ip_forward was restored during each of 5 attempts, so the check cannot tell"
done
[ "$(head -n1 /tmp/no-forward.txt)" = unreachable ] \
  || { cat /tmp/no-forward.txt; fail "control: $target_is answered with ip_forward off, so the check cannot tell"; }
nodeward converge > /tmp/converge-forward.txt 2>&1 || true
[ "$(sysctl -n net.ipv4.ip_forward)" = 1 ] || { cat /tmp/converge-forward.txt; fail "nodeward converge did not restore ip_forward"; }
await 120 "$target_is again once nodeward restored ip_forward" reached
echo "ok: control: ip_forward off on $CONTROLLER: $target_is unreachable ($(tail -n1 /tmp/no-forward.txt | cut -c1-80)); nodeward converge restored it and it answers"
kr get pods -o wide | sed 's/^/cluster: /'
# Gone once checked: busybox's httpd as a container's PID 1 ignores SIGTERM, so a pod left running
# held each node's shutdown for systemd's 90 s (and the worker's reboot restarted it).
kr delete pod workload client --wait=false --ignore-not-found >/dev/null
WATCH_POD=
