# Host side, sourced by each node's setup (bash, with ROOT, SHARED and COMPONENTS set): what makes a
# Debian VM a Kubernetes node the way Fedora CoreOS is one, with the real components of
# ../../components/build:
# - containerd (the OS's, on Fedora CoreOS): its binaries in /usr/local/bin, upstream's unit, and
#   Debian's runc; the CNI plugins in /opt/cni/bin; the network is Typhoon's flannel (vxlan), run
#   by the bundle's DaemonSet, which writes its CNI config;
# - the real images, served by the registry stand-in (tests/support/registry_server.rs) at
#   127.0.0.1:5000, which containerd reaches as registry.k8s.io, quay.io and docker.io through hosts.toml
#   mirrors and podman through a registries.conf mirror (the controller) or through nodeward's
#   [[containerd.mirrors]] (the worker): both *pull* as on a real node;
# - the cluster's private link: a static address on the NIC QEMU's socket network joins, and
#   every node's name in /etc/hosts (Typhoon's DNS records);
# - /run/systemd/resolve/resolv.conf, the path Typhoon's kubelet.yaml names (Fedora CoreOS runs
#   systemd-resolved; Debian's image does not): a link to /etc/resolv.conf;
# - kubectl from the same build, for the checks.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
top=$(cd "$here/.." && pwd)
# shellcheck source=/dev/null
. <(grep -E '^[A-Z_]+=' "$here/components/versions")
CONTROLLER=controller-1.example.com
CONTROLLER_IP=10.0.5.10
WORKER=worker-1.example.com
WORKER_IP=10.0.5.11
# The conformance scenario's second worker (../conformance).
WORKER2=worker-2.example.com
WORKER2_IP=10.0.5.12
# Typhoon's add-ons (flannel, kube-proxy, CoreDNS) and the workload slice: ADDONS=1 (the
# cluster-addons and conformance scenarios). CI's cluster runs without them: with them it takes
# 2,750 s on TCG instead of about 1,000 (docs/conformance.md), past CI's budget on a cold cache.
export ADDONS=${ADDONS:-0}
store=$("$here/image/cluster-images" "$COMPONENTS")
digest_of() { awk -v n="$1" '$1 == n { print $2 }' "$store/index"; }
KUBELET_DIGEST=$(digest_of "poseidon/kubelet:$KUBERNETES")
KUBELET_NEXT_DIGEST=$(digest_of "poseidon/kubelet:$KUBERNETES_NEXT")
# The real kubelet's upgrade to the next patch release, pulled through the mirror before the refused
# release is tried on top of it: UPGRADE=1 (cluster-addons, cluster-rkt). CI's cluster rolls back a
# refused build of the release it ships instead: the upgrade's pull (137 MiB of binaries under TCG,
# 4 minutes) and the kubelet's restart cost it about 330 s of its 90 minutes.
export UPGRADE=${UPGRADE:-0}
if [ "$UPGRADE" = 1 ]; then
  KUBELET_BROKEN_DIGEST=$(digest_of "poseidon/kubelet:$KUBERNETES_NEXT-broken")
else
  KUBELET_BROKEN_DIGEST=$(digest_of "poseidon/kubelet:$KUBERNETES-broken")
fi

# cluster_node NAME IP MAC [MIRRORS]: MIRRORS "nodeward" leaves containerd's hosts.toml to
# nodeward's [[containerd.mirrors]] (the test writes them otherwise). Each node's pod subnet is the
# controller manager's to give (10.2.N.0/24 of Typhoon's 10.2.0.0/16), flannel's to route.
cluster_node() {
  local name=$1 ip=$2 mac=$3 mirrors=${4:-test}
  echo "$name" > "$ROOT/etc/hostname"
  echo "$KUBERNETES" > "$ROOT/usr/lib/nodeward-test/version"
  echo "$KUBERNETES_NEXT" > "$ROOT/usr/lib/nodeward-test/next-version"
  # The release the worker's kubelet runs once its boot 1 is done.
  if [ "$UPGRADE" = 1 ]; then
    touch "$ROOT/usr/lib/nodeward-test/upgrade"
    echo "$KUBERNETES_NEXT" > "$ROOT/usr/lib/nodeward-test/final-version"
  else
    echo "$KUBERNETES" > "$ROOT/usr/lib/nodeward-test/final-version"
  fi
  echo "$ETCD" > "$ROOT/usr/lib/nodeward-test/etcd-version"
  # (localhost is in /etc/hosts from integration/run's preparation: containerd's port-forward dials
  # localhost:PORT in the pod's network namespace, seen failing `lookup localhost on …:53`.)
  printf '%s %s\n%s %s\n%s %s\n' "$CONTROLLER_IP" "$CONTROLLER" "$WORKER_IP" "$WORKER" "$WORKER2_IP" "$WORKER2" >> "$ROOT/etc/hosts"
  install -D -m 0600 /dev/stdin "$ROOT/etc/NetworkManager/system-connections/cluster.nmconnection" <<EOF
[connection]
id=cluster
type=ethernet
autoconnect=true
[ethernet]
mac-address=$mac
[ipv4]
method=manual
address1=$ip/24,10.0.5.1
dns=10.0.5.1;
[ipv6]
method=disabled
EOF
  # containerd, as the OS ships it.
  install -m 0755 "$COMPONENTS/containerd-$CONTAINERD"/* "$ROOT/usr/local/bin/"
  install -D -m 0644 /dev/stdin "$ROOT/etc/systemd/system/containerd.service" <<'UNIT'
[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target local-fs.target dbus.service
[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999
[Install]
WantedBy=multi-user.target
UNIT
  # The harness's stand-in socket would hold containerd's path.
  rm -f "$ROOT/etc/systemd/system/containerd-standin."* "$ROOT/etc/systemd/system/sockets.target.wants/containerd-standin.socket"
  # The OS's CNI plugins. With ADDONS=1 (the cluster-addons and conformance scenarios) the
  # network's config is flannel's, written by its DaemonSet's install-cni (Typhoon's): until then
  # the node is not Ready. Without (the cluster scenario in CI, bench-cluster), the plugins' bridge
  # on cni0, as flannel's config makes it, without the overlay, written here.
  install -d "$ROOT/opt/cni/bin" "$ROOT/etc/cni/net.d"
  install -m 0755 "$COMPONENTS/cni-$CNI_PLUGINS"/* "$ROOT/opt/cni/bin/"
  rm -f "$ROOT/etc/cni/net.d/87-podman-bridge.conflist"
  if [ "$ADDONS" = 1 ]; then
    touch "$ROOT/usr/lib/nodeward-test/addons"
  else
    local subnet=10.2.0.0/24
    [ "$name" = "$CONTROLLER" ] || subnet=10.2.1.0/24
    cat > "$ROOT/etc/cni/net.d/10-cluster.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isDefaultGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "$subnet" }]] }
    }
  ]
}
EOF
  fi
  install -d "$ROOT/usr/lib/nodeward-test/workload"
  install -m 0644 "$here/scenarios/cluster/workload"/*.yaml "$ROOT/usr/lib/nodeward-test/workload/"
  install -m 0755 "$COMPONENTS/k8s-$KUBERNETES/kubectl" "$ROOT/usr/local/bin/kubectl"
  # The registry stand-in and its store.
  rustc --edition 2024 -O -C target-feature=+crt-static -o "$ROOT/usr/lib/nodeward-test/registry-server" \
    "$top/tests/support/registry_server.rs"
  mkdir -p "$ROOT/var/lib/nodeward-test"
  cp -a "$store" "$ROOT/var/lib/nodeward-test/registry"
  cat > "$ROOT/etc/systemd/system/registry-test.service" <<'UNIT'
[Unit]
Description=Container registry (test stand-in for quay.io and registry.k8s.io, read-only)
Before=nodeward.service containerd.service etcd-member.service
[Service]
ExecStart=/usr/lib/nodeward-test/registry-server --listen 127.0.0.1:5000 --dir /var/lib/nodeward-test/registry --log /var/lib/nodeward-test/registry.log
[Install]
WantedBy=multi-user.target
UNIT
  ln -sf /etc/systemd/system/registry-test.service "$ROOT/etc/systemd/system/multi-user.target.wants/registry-test.service"
  local reg
  [ "$mirrors" = nodeward ] || for reg in registry.k8s.io quay.io docker.io; do
    local server=https://$reg
    [ "$reg" != docker.io ] || server=https://registry-1.docker.io
    install -D -m 0644 /dev/stdin "$ROOT/etc/containerd/certs.d/$reg/hosts.toml" <<EOF
server = "$server"
[host."http://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]
EOF
  done
  # podman's own mirror, for the node whose mirrors the test writes; the other's podman pulls the
  # kubelet's image through nodeward's [[containerd.mirrors]] alone.
  [ "$mirrors" = nodeward ] || install -D -m 0644 /dev/stdin "$ROOT/etc/containers/registries.conf.d/50-nodeward-test.conf" <<'CONF'
[[registry]]
prefix = "quay.io"
location = "quay.io"
[[registry.mirror]]
location = "127.0.0.1:5000"
insecure = true
CONF
  install -D -m 0644 /dev/stdin "$ROOT/etc/tmpfiles.d/nodeward-test-resolved.conf" <<'CONF'
d /run/systemd/resolve 0755 root root -
L /run/systemd/resolve/resolv.conf - - - - /etc/resolv.conf
CONF
}

# After Ignition wrote containerd's config.toml (Typhoon's, version 2): the mirrors' directory named
# explicitly, as an operator with mirrors writes it. Needed: containerd 2.2's default pull path (the
# transfer service) takes `config_path` whole (internal/cri/server/images/image_pull.go:311 →
# core/transfer/registry/registry.go:128, HostDirFromRoot), so its built-in default
# "/etc/containerd/certs.d:/etc/docker/certs.d" (plugins/cri/images/plugin.go:70) is read as one
# directory that does not exist, and no hosts.toml is ever found (seen: the pause image asked of
# registry.k8s.io itself, never of the mirror).
containerd_mirrors_dir() {
  printf '[plugins."io.containerd.grpc.v1.cri".registry]\nconfig_path = "/etc/containerd/certs.d"\n' \
    >> "$ROOT/etc/containerd/config.toml"
}
