# One run of a Kubernetes e2e suite under ginkgo (sourced by the conformance scenarios' boot1, POSIX
# sh, after lib.sh and cluster.sh): its JUnit report under e2e-report/LABEL, its lines tagged with
# LABEL, its counts, each failure's first line and the report itself printed for
# integration/conformance-report. The caller sets E (the suite's directory), focus, skip, procs,
# minutes and seed.
#   run_suite LABEL PROGRAM [ARGS…]   (ARGS go to PROGRAM after ginkgo's --)
run_suite() {
  label=$1; program=$2; shift 2
  out=/var/lib/nodeward-test/e2e-report/$label
  mkdir -p $out
  t0=$(date +%s)
  echo "conformance[$label]: $(basename "$program"), $procs processes, at most $minutes minutes, seed $seed; focus '$focus'; skip '$skip'"
  rc=0
  addon_watch "$label" $out/addon-restarts &
  watch_pid=$!
  (cd $out && $E/ginkgo --procs="$procs" --timeout="${minutes}m" --seed="$seed" --junit-report=junit.xml \
    --output-dir=$out --focus="$focus" --skip="$skip" --no-color --succinct \
    "$program" -- "$@" --report-dir=$out) > $out/ginkgo.log 2>&1 || rc=$?
  wall=$(( $(date +%s) - t0 ))
  kill $watch_pid 2>/dev/null || true
  j=$out/junit.xml
  # After ginkgo's own --timeout the merged report came out empty (session 39: "open
  # …/usr_lib_nodeward-test_e2e_junit.xml: no such file"); the one suite's report holds every spec.
  if ! grep -q '<testcase' $j 2>/dev/null && [ -s $out/junit_01.xml ]; then j=$out/junit_01.xml; fi
  [ -s $j ] || { tail -40 $out/ginkgo.log; fail "the suite wrote no JUnit report (ginkgo exit $rc)"; }
  # The JUnit report's counts, of its specs (the `[It]` cases; the suite's own before/after nodes
  # are cases too): run = passed + failed; skipped includes every spec outside the focus.
  set -- $(awk '/<testcase /{ it = ($0 ~ /name="\[It\]/); if (it) n++ } it && /<skipped/ { s++; it = 0 } it && /<failure/ { f++; it = 0 } END { printf "%d %d %d %d\n", n, n - s - f, f, s }' $j)
  echo "conformance[$label]: ginkgo exit $rc after ${wall}s: $1 specs in the report, $2 passed, $3 failed, $4 skipped"
  # A suite whose set-up failed reports every spec skipped: its own before-suite node says why.
  awk -v l="$label" '/<testcase / { match($0, /name="[^"]*"/); name = substr($0, RSTART + 6, RLENGTH - 7) }
       /<failure/ { match($0, /message="[^"]*"/); print "conformance[" l "]: FAILED " name " — " substr($0, RSTART + 9, 200) }' $j | head -100
  tail -5 $out/ginkgo.log | sed "s/^/conformance[$label]: ginkgo: /"
  # The report, for docs/conformance.md: gzip, base64, one line each (integration/conformance-report).
  gzip -9c $j | base64 -w 200 | sed "s/^/conformance-junit[$label]: /"
}

# addon_watch LABEL FILE: while the suite runs, each restart of a kube-system pod (the add-ons, the
# control plane) as it happens: how its container last ended, the pod's latest events (the
# kubelet's "Unhealthy"/"Killing" name a failed probe and its answer) and the end of its previous
# log. Events live an hour: read at the time, not after the run. (Session 39: the worker's
# kube-proxy restarted 18 times during sig-network's specs, its log ending with no error.)
addon_watch() {
  : > "$2"
  while sleep 30; do
    k -n kube-system get pods -o go-template='{{range .items}}{{.metadata.name}} {{.spec.nodeName}}{{range .status.containerStatuses}} {{.restartCount}}{{with .lastState.terminated}} {{.reason}} exit={{.exitCode}} started={{.startedAt}} finished={{.finishedAt}}{{end}}{{end}}{{"\n"}}{{end}}' 2>/dev/null |
    while read -r pod node restarts last; do
      [ "${restarts:-0}" -gt 0 ] 2>/dev/null && ! grep -qx "$pod $restarts" "$2" || continue
      echo "$pod $restarts" >> "$2"
      echo "conformance[$1-watch]: $pod on $node restarted (count $restarts): $last"
      k -n kube-system get events --field-selector "involvedObject.name=$pod" \
        -o go-template='{{range .items}}{{.lastTimestamp}} {{.reason}} x{{.count}}: {{.message}}{{"\n"}}{{end}}' 2>/dev/null |
        tail -4 | cut -c1-300 | sed "s/^/conformance[$1-watch]:   event /"
      k -n kube-system logs "$pod" --previous --tail=3 2>/dev/null | cut -c1-300 | sed "s/^/conformance[$1-watch]:   log /"
    done
  done
}
