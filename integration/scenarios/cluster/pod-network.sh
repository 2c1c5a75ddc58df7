# The pod network's own measure, before a suite (sourced by the conformance scenario's boot1, POSIX
# sh, after lib.sh and cluster.sh): what crosses flannel's vxlan between the nodes, each timed
# from this controller's host, beside the same to a pod on this node (no vxlan: the control for
# "the path" against "the load"). Session 40's "Proxy through a service and a pod" failed only on
# its https paths (the API server's 10 s TLS handshake to the pod ran out) while its http paths
# answered: a network dropping full-size packets (a TLS server's first flight is the one reply
# larger than a packet) or a controller too busy? Measured in session 41: the network (MTUs,
# a handshake, 1 MiB intact) — the load (docs/conformance.md, Results).
#   pod_network_probe WORKER   → `pod-network:` lines; fails only if the pods never get ready.
AGNHOST=registry.k8s.io/e2e-test-images/agnhost:2.63.0
NET_BUSYBOX=registry.k8s.io/e2e-test-images/busybox:1.37.0-1
# ms: milliseconds since the epoch.
ms() { echo $(( $(date +%s%N) / 1000000 )); }
# netcheck_pods WORKER: a porter (http :80, https :443 with agnhost's own localhost certificate,
# the one the Proxy spec's pod serves) on each node, and a 1 MiB file served over http on WORKER.
netcheck_pods() {
  for where in "$1" "$CONTROLLER"; do
    name=netcheck-$(echo "$where" | cut -d. -f1)
    cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: {name: $name, labels: {app: netcheck}}
spec:
  nodeSelector: {kubernetes.io/hostname: $where}
  tolerations: [{operator: Exists}]
  terminationGracePeriodSeconds: 1
  containers:
  - name: porter
    image: $AGNHOST
    args: [porter]
    env: [{name: SERVE_PORT_80, value: plain}, {name: SERVE_TLS_PORT_443, value: tls}]
    # Ready once it listens: Running alone came before the listener once (session 41).
    readinessProbe: {tcpSocket: {port: 443}, periodSeconds: 2, timeoutSeconds: 10}
EOF
  done
  cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: {name: netcheck-big, labels: {app: netcheck}}
spec:
  nodeSelector: {kubernetes.io/hostname: $1}
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: $NET_BUSYBOX
    command: [sh, -c, 'mkdir -p /www && head -c 1048576 /dev/urandom > /www/big && sha256sum /www/big | cut -c1-64 > /www/big.sha && exec httpd -f -p 8080 -h /www']
    readinessProbe: {httpGet: {path: /big.sha, port: 8080}, periodSeconds: 2, timeoutSeconds: 10}
EOF
}
# fetch IP PORT PATH: the response to an HTTP/1.0 GET, headers and all (callers cut the body by
# its known length or last line), bounded.
fetch() { printf 'GET %s HTTP/1.0\r\n\r\n' "$3" | timeout 120 busybox nc "$1" "$2"; }
pod_network_probe() {
  worker=$1
  netcheck_pods "$worker" > /tmp/netcheck.yaml
  kr apply --validate=false -f /tmp/netcheck.yaml >/dev/null || fail "could not make the pod-network check's pods"
  all_ready() { [ "$(k get pods -l app=netcheck -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$')" = 3 ]; }
  await 600 "the pod-network check's three pods ready (listening)" all_ready
  ip_of() { k get pod "$1" -o jsonpath='{.status.podIP}'; }
  echo "pod-network: MTU on $CONTROLLER: $(for l in ens3 flannel.1 cni0; do printf '%s %s ' "$l" "$(cat /sys/class/net/$l/mtu 2>/dev/null)"; done)"
  echo "pod-network: the worker's pods' eth0 MTU: $(kr exec netcheck-big -- cat /sys/class/net/eth0/mtu 2>&1 | head -n1)"
  for pod in netcheck-$(echo "$worker" | cut -d. -f1) netcheck-$(echo "$CONTROLLER" | cut -d. -f1); do
    ip=$(ip_of "$pod")
    t=$(ms); body=$(fetch "$ip" 80 / 2>&1 | tail -n1); d=$(( $(ms) - t ))
    echo "pod-network: $pod ($ip) http :80 from the host: '$body' in ${d} ms"
    t=$(ms)
    out=$(timeout 60 openssl s_client -connect "$ip:443" -brief </dev/null 2>&1); rc=$?
    d=$(( $(ms) - t ))
    if printf '%s' "$out" | grep -q 'CONNECTION ESTABLISHED'; then v=established; else v="failed: $(printf '%s' "$out" | tail -n1 | cut -c1-100)"; fi
    echo "pod-network: $pod ($ip) TLS handshake :443 from the host (openssl s_client): $v (rc $rc) in ${d} ms"
    t=$(ms); body=$(k get --raw "/api/v1/namespaces/default/pods/https:$pod:443/proxy/" 2>&1 | tail -n1 | cut -c1-120); d=$(( $(ms) - t ))
    echo "pod-network: $pod https :443 through the API server's proxy: '$body' in ${d} ms"
  done
  ip=$(ip_of netcheck-big)
  want=$(fetch "$ip" 8080 /big.sha 2>/dev/null | tail -n1)
  t=$(ms); got=$(fetch "$ip" 8080 /big 2>/dev/null | tail -c 1048576 | sha256sum | cut -c1-64); d=$(( $(ms) - t ))
  if [ -n "$want" ] && [ "$got" = "$want" ]; then verdict=intact; else verdict="NOT intact (want '$want', got '$got')"; fi
  echo "pod-network: 1 MiB over http from the worker's pod ($ip) to the host: $verdict in ${d} ms"
  echo "pod-network: the host's route to it: $(ip route get "$ip" | head -n1); flannel.1 tx_dropped/tx_errors/rx_dropped/rx_errors: $(cd /sys/class/net/flannel.1/statistics 2>/dev/null && cat tx_dropped tx_errors rx_dropped rx_errors | tr '\n' / )"
  kr delete pod -l app=netcheck --wait=false >/dev/null 2>&1 || true
}
