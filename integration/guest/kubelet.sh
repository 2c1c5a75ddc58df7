# Helpers for the kubelet scenarios (POSIX sh, sourced after lib.sh).
cid() { podman inspect -f '{{.Id}}' kubelet 2>/dev/null || true; }
kpid() { podman inspect -f '{{.State.Pid}}' kubelet 2>/dev/null || echo 0; }
running() { [ "$(podman inspect -f '{{.State.Running}}' kubelet 2>/dev/null)" = true ]; }
# The body of GET /healthz (busybox's static wget crashes in its resolver, nc does not resolve).
healthz() { printf 'GET /healthz HTTP/1.0\r\n\r\n' | busybox nc -w 2 127.0.0.1 10248 2>/dev/null | tail -n1; }
# Containers named kubelet, running or not: never more than one.
kubelets() { podman ps -a -q --filter name='^kubelet$' | wc -l; }
argv_lines() { wc -l < /var/log/kubelet-standin.log; }
state_has() { grep -q "$1" /run/nodeward/state.json; }

# wait_for SECONDS DESCRIPTION COMMAND...: polls every second; checks there is never a second
# kubelet. (Each poll is a podman call or two, about a second of a vCPU under TCG: polled every
# 0.2 s, a wait kept one of the guest's two vCPUs busy, beside another VM, for what it waited on.)
wait_for() {
  t=$1; what=$2; shift 2
  end=$(( $(date +%s) + t ))
  while ! "$@"; do
    [ "$(kubelets)" -le 1 ] || fail "two kubelet containers while waiting for $what"
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${t}s waiting for $what"
    sleep 1
  done
}

healthy() { state_has '"health": "healthy"' && running; }
# The stand-in's line on a SIGTERM, in this boot's journal (a SIGKILL leaves none).
sigterms() { journalctl -b -t kubelet --no-pager -o cat | grep -c '^kubelet stand-in: got SIGTERM' || true; }
replaced() { c=$(cid); [ -n "$c" ] && [ "$c" != "$old" ] && running; }
# After an exit podman starts the same container again: a new kubelet process ($oldpid was the last).
restarted() { p=$(kpid); [ "$p" != 0 ] && [ "$p" != "$oldpid" ] && running; }

# The host state both shipped shapes boot to, a Typhoon snippet merged over Typhoon's worker config
# and a standalone config: Typhoon's kubelet units masked, nodeward enabled and running the kubelet
# with /healthz probed, ca.crt from the kubeconfig, the kubelet's output under its journal
# identifier, and no failed unit.
expect_typhoon_node() {
  for u in kubelet.service kubelet.path wait-for-dns.service; do
    [ "$(systemctl is-enabled "$u" 2>/dev/null)" = masked ] || fail "$u is $(systemctl is-enabled "$u" 2>&1), not masked"
  done
  [ "$(systemctl is-enabled nodeward.service)" = enabled ] || fail "nodeward is not enabled"
  expect_active nodeward.service
  wait_for 60 "a healthy kubelet" healthy
  [ "$(healthz)" = ok ] || fail "/healthz does not answer"
  expect_ca_from_kubeconfig
  journalctl -b -t kubelet --no-pager -o cat | grep -q 'kubelet stand-in: started; serving /healthz' \
    || fail "the kubelet's output is not under journalctl -t kubelet"
  failed=$(systemctl list-units --failed --no-legend --plain | awk '{print $1}')
  [ -z "$failed" ] || fail "failed units: $failed"
  echo "ok: the node a shipped config makes: Typhoon's kubelet units masked, nodeward running the kubelet with /healthz probed, ca.crt from the kubeconfig, its output under journalctl -t kubelet, no failed unit"
}
