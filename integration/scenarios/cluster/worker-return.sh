# The controller's side of the worker's reboot (sourced by the controller's boot1 once the worker
# has read its word, or by its own boot2 where it reboots too): the worker Ready again from its new
# boot, then the two say so to each other. This node stays up until the worker has its word: the
# worker reads it from this API server.
rebooted() { b=$(field "$WORKER" '{.status.nodeInfo.bootID}'); [ -n "$b" ] && [ "$b" != "$(cat /var/lib/nodeward-test/worker-boot-id)" ] && ready "$WORKER"; }
await 1200 "$WORKER Ready after its reboot (a new boot id)" rebooted
show_nodes
k get pods -o wide | sed 's/^/cluster: /'
mark "$WORKER" controller-boot2 done
# (bench-cluster's worker measures before it replies: it says how long to wait.)
await_mark "$(cat $T/reply-wait 2>/dev/null || echo 600)" "the worker's reply" "$WORKER" worker-boot2 done
