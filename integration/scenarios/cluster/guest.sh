# Guest helpers for the cluster scenario (POSIX sh, sourced after lib.sh): the API server's view.
CONTROLLER=controller-1.example.com
WORKER=worker-1.example.com
T=/usr/lib/nodeward-test
# The admin's kubectl on the controller; a node's own credentials on the worker.
if [ -f $T/admin.conf ]; then KC=$T/admin.conf; else KC=/var/lib/kubelet/kubeconfig; fi
k() { kubectl --kubeconfig="$KC" --request-timeout=30s "$@"; }
# await SECONDS DESCRIPTION COMMAND...: polls every 2 s (TCG is slow: no busy polling).
await() {
  t=$1; what=$2; shift 2
  end=$(( $(date +%s) + t ))
  while ! "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${t}s waiting for $what"
    sleep 2
  done
  echo "ok: $what after $(cut -d' ' -f1 /proc/uptime | cut -d. -f1)s of uptime"
}
ready() { [ "$(k get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
# The labels a node carries, minus the kubelet's own well-known ones and this test's markers.
labels_of() {
  k get node "$1" -o go-template='{{range $k, $v := .metadata.labels}}{{$k}}={{$v}}{{"\n"}}{{end}}' \
    | grep -v -E '^(kubernetes\.io/(hostname|os|arch)|beta\.kubernetes\.io/(os|arch)|nodeward-test\.example\.com/[^=]*)=' | sort
}
taints_of() {
  k get node "$1" -o go-template='{{range .spec.taints}}{{.key}}={{.value}}:{{.effect}}{{"\n"}}{{end}}' | sort
}
field() { k get node "$1" -o jsonpath="$2"; }
# The API server's node list, as the log shows it.
show_nodes() {
  k get nodes -o go-template='{{range .items}}cluster: node {{.metadata.name}} ready={{range .status.conditions}}{{if eq .type "Ready"}}{{.status}}{{end}}{{end}} version={{.status.nodeInfo.kubeletVersion}} providerID={{.spec.providerID}} labels={{.metadata.labels}} taints={{range .spec.taints}}{{.key}}={{.value}}:{{.effect}} {{end}}{{"\n"}}{{end}}'
}
# expect_set WHAT ACTUAL WANT: two newline-separated lists, equal as sets.
expect_set() {
  a=$(printf '%s\n' "$2" | grep -v '^$' | sort); w=$(printf '%s\n' "$3" | grep -v '^$' | sort)
  [ "$a" = "$w" ] || fail "$1: the API server has [$(echo $a)], configured [$(echo $w)]"
  echo "ok: $1 as configured: $(echo $a)"
}
mark() { k label node "$1" --overwrite "nodeward-test.example.com/$2=$3" >/dev/null; }
marked() { [ "$(k get node "$1" -o jsonpath="{.metadata.labels.nodeward-test\.example\.com/$2}")" = "$3" ]; }
