# Checks for scenario scripts (POSIX sh, run with -e). Each prints "ok: ..." or fails the boot.
CONTEXT=system_u:object_r:container_file_t:s0
# The CNI profile the scenario declares (node.cni); unset means nodeward's "any".
CNI=${CNI:-any}

fail() { echo "FAIL: $*"; exit 1; }

expect_active() {
  systemctl is-active --quiet "$1" || fail "$1 is $(systemctl is-active "$1")"
  echo "ok: $1 active"
}

# expect_dir PATH MODE [OWNER:GROUP]
expect_dir() {
  [ -d "$1" ] || fail "$1 missing"
  m=$(stat -c %a "$1"); [ "$m" = "$2" ] || fail "$1 mode $m, want $2"
  o=$(stat -c %U:%G "$1"); [ "$o" = "${3:-root:root}" ] || fail "$1 owner $o, want ${3:-root:root}"
  echo "ok: $1 $m $o"
}

# expect_label PATH [CONTEXT]: reads the label through the SELinux kernel interface.
expect_label() {
  l=$(stat -c %C "$1") || fail "cannot read label of $1"
  [ "$l" = "${2:-$CONTEXT}" ] || fail "$1 label $l, want ${2:-$CONTEXT}"
  echo "ok: $1 $l"
}

# Every entry in a tree carries the context.
expect_tree_label() {
  bad=$(find "$1" -xdev ! -context "${2:-$CONTEXT}" | head -5)
  [ -z "$bad" ] || fail "wrong labels under $1: $bad"
  echo "ok: $1/** ${2:-$CONTEXT}"
}

expect_converged() {
  if ! nodeward plan --detailed-exitcode >/tmp/nodeward-plan.txt 2>&1; then
    cat /tmp/nodeward-plan.txt
    fail "nodeward plan: changes pending or a step failed"
  fi
  echo "ok: nodeward plan reports no changes"
}

expect_selinux_permissive() {
  [ "$(cat /sys/fs/selinux/enforce 2>/dev/null)" = 0 ] || fail "SELinux is not enabled+permissive"
  echo "ok: SELinux enabled, permissive"
  # A context the loaded policy does not define is stored "unmapped" and would pass a string
  # comparison: make the kernel validate it.
  printf '%s' "$CONTEXT" > /sys/fs/selinux/context 2>/dev/null || fail "policy does not define $CONTEXT"
  echo "ok: $CONTEXT is valid in the loaded policy"
}

# The directories nodeward creates by default.
expect_default_dirs() {
  expect_dir /etc/kubernetes 755
  expect_dir /etc/kubernetes/manifests 755
  expect_dir /etc/kubernetes/pki 755
  expect_dir /etc/cni/net.d 755
  expect_dir /opt/cni/bin 755
  expect_dir /var/lib/kubelet 750
  expect_dir /var/lib/kubelet/volumeplugins 755
  case $CNI in
    any|calico) expect_dir /var/lib/calico 755 ;;
    *) [ ! -e /var/lib/calico ] || fail "/var/lib/calico created under the $CNI profile"
       echo "ok: no /var/lib/calico under the $CNI profile" ;;
  esac
  expect_dir /var/lib/containerd 711
  expect_dir /var/log/pods 755
  expect_dir /var/log/containers 755
}

expect_default_labels() {
  for t in /etc/kubernetes /var/lib/kubelet /opt/cni/bin /etc/cni/net.d; do
    expect_label "$t"
    expect_tree_label "$t"
  done
}

expect_module() {
  grep -q "^$1 " /proc/modules || fail "module $1 not loaded"
  echo "ok: module $1 loaded"
}

expect_default_modules() {
  for m in br_netfilter bridge stp llc overlay nf_conntrack ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh; do
    expect_module "$m"
  done
}

expect_sysctl() {
  v=$(sysctl -n "$1") || fail "sysctl $1 unreadable"
  [ "$v" = "$2" ] || fail "sysctl $1 = $v, want $2"
  echo "ok: $1 = $v"
}

expect_sysctl_at_least() {
  v=$(sysctl -n "$1") || fail "sysctl $1 unreadable"
  [ "$v" -ge "$2" ] || fail "sysctl $1 = $v, want >= $2"
  echo "ok: $1 = $v >= $2"
}

# The defaults on a 2-CPU VM (conntrack: kube-proxy's max(131072, 32768 x CPUs)).
expect_default_sysctls() {
  case $CNI in
    calico)
      expect_sysctl net.ipv4.conf.all.rp_filter 1
      expect_sysctl net.ipv4.conf.default.rp_filter 1 ;;
    *)
      # Debian's 50-default.conf sets default and `*` to 2 (loose): lo shows the glob's effect.
      expect_sysctl net.ipv4.conf.all.rp_filter 0
      expect_sysctl net.ipv4.conf.default.rp_filter 0
      expect_sysctl net.ipv4.conf.lo.rp_filter 0 ;;
  esac
  expect_sysctl net.bridge.bridge-nf-call-iptables 1
  expect_sysctl net.bridge.bridge-nf-call-ip6tables 1
  expect_sysctl net.ipv4.ip_forward 1
  expect_sysctl_at_least net.netfilter.nf_conntrack_max 131072
  expect_sysctl_at_least fs.inotify.max_user_watches 524288
  expect_sysctl_at_least fs.inotify.max_user_instances 8192
  expect_sysctl vm.overcommit_memory 1
  expect_sysctl vm.panic_on_oom 0
  expect_sysctl kernel.panic 10
  expect_sysctl kernel.panic_on_oops 1
  expect_sysctl kernel.keys.root_maxkeys 1000000
  expect_sysctl kernel.keys.root_maxbytes 25000000
}

# expect_file PATH MODE OWNER:GROUP [CONTENT]
expect_file() {
  [ -f "$1" ] || fail "$1 missing"
  m=$(stat -c %a "$1"); [ "$m" = "$2" ] || fail "$1 mode $m, want $2"
  o=$(stat -c %U:%G "$1"); [ "$o" = "$3" ] || fail "$1 owner $o, want $3"
  if [ -n "${4:-}" ]; then [ "$(cat "$1")" = "$4" ] || fail "$1 content differs"; fi
  echo "ok: $1 $m $o"
}

# Typhoon's controller layout, as nodeward installs it (see docs/node.md: The assets bundle).
expect_controller_bundle() {
  for f in peer-ca.crt peer.crt peer.key server-ca.crt server.crt server.key; do
    expect_file "/etc/ssl/etcd/etcd/$f" 400 etcd:etcd "content of tls/etcd/$f"
  done
  expect_dir /etc/ssl/etcd/etcd 500 etcd:etcd
  for f in etcd-client-ca.crt etcd-client.crt etcd-client.key; do
    expect_file "/etc/kubernetes/pki/$f" 640 root:nogroup "content of tls/etcd/$f"
  done
  expect_file /etc/kubernetes/pki/admin.conf 640 root:nogroup "content of auth/admin.conf"
  for f in ca.crt ca.key apiserver.crt apiserver.key service-account.pub service-account.key; do
    expect_file "/etc/kubernetes/pki/$f" 640 root:nogroup "content of tls/k8s/$f"
    expect_label "/etc/kubernetes/pki/$f"
  done
  for f in kube-apiserver kube-controller-manager kube-scheduler; do
    expect_file "/etc/kubernetes/manifests/$f.yaml" 644 root:root "content of static-manifests/$f.yaml"
  done
  expect_file /opt/bootstrap/assets/manifests/network/calico.yaml 644 root:root "content of manifests/network/calico.yaml"
  [ ! -e /var/lib/nodeward/bundle/journal.json ] || fail "a bundle journal was left behind"
  echo "ok: controller bundle installed"
}

# nodeward's NetworkManager reloads in this boot's journal.
nm_reloads() {
  journalctl -b -u nodeward --no-pager | grep -c "applied: nm NetworkManager reload" || true
}

# NetworkManager really leaves the CNI's interfaces alone: a device named like the CNI's is
# unmanaged (Calico: cali*, Cilium: lxc*).
expect_nm_ignores_cni() {
  case $CNI in
    cilium) spec='interface-name:cilium_\*;interface-name:lxc\*'; dev=lxc0test ;;
    *) spec='interface-name:cali\*'; dev=cali0test ;;
  esac
  NetworkManager --print-config 2>/dev/null | grep -q "unmanaged-devices=$spec" \
    || fail "NetworkManager's merged config lacks nodeward's unmanaged-devices ($spec)"
  # NetworkManager leaves a software link made by someone else alone until it carries an address
  # (then it takes it over, "connected (externally)"): both links get one, as a CNI's do, so the
  # control link shows what NetworkManager does to a link nodeward's pattern does not match.
  ip link add $dev type dummy && ip link set $dev up && ip addr add 192.0.2.1/32 dev $dev
  ip link add ctl0test type dummy && ip link set ctl0test up && ip addr add 192.0.2.2/32 dev ctl0test
  n=0
  until nmcli -t -f DEVICE,STATE device | grep -q '^ctl0test:connected'; do
    n=$((n + 1))
    [ $n -lt 60 ] || { nmcli device; fail "control: NetworkManager did not take over ctl0test (an address, no pattern)"; }
    sleep 0.5
  done
  states=$(nmcli -t -f DEVICE,STATE device)
  echo "$states" | grep -qx "$dev:unmanaged" || { echo "$states"; fail "NetworkManager manages $dev"; }
  echo "ok: NetworkManager leaves $dev unmanaged (control: $(echo "$states" | grep '^ctl0test:'))"
  ip link del $dev; ip link del ctl0test
}

# /etc/kubernetes/ca.crt holds exactly the CA in the kubeconfig's certificate-authority-data.
expect_ca_from_kubeconfig() {
  want=$(grep certificate-authority-data /etc/kubernetes/kubeconfig | awk '{print $2}' | base64 -d)
  [ -n "$want" ] || fail "the kubeconfig has no CA"
  expect_file /etc/kubernetes/ca.crt 644 root:root "$want"
  echo "ok: /etc/kubernetes/ca.crt matches the kubeconfig's CA"
}

# logind really uses the kubelet's grace period (its default is 5 s).
expect_logind_inhibit_delay() {
  v=$(busctl get-property org.freedesktop.login1 /org/freedesktop/login1 \
        org.freedesktop.login1.Manager InhibitDelayMaxUSec) || fail "cannot ask logind"
  [ "$v" = "t $(($1 * 1000000))" ] || fail "logind InhibitDelayMaxUSec is $v, want $1 s"
  echo "ok: logind InhibitDelayMaxUSec = $v"
}

expect_second_instance_refused() {
  if out=$(timeout 20 nodeward run 2>&1); then fail "a second daemon ran"; fi
  echo "$out" | grep -q "another nodeward daemon is running (pid $(systemctl show -p MainPID --value nodeward)" \
    || fail "second instance: $out"
  echo "ok: a second nodeward run is refused"
}

# `nodeward check` on a healthy node: every check passes, is skipped with its reason, or is ignored
# by the configuration; exit 0.
expect_checks_pass() {
  if ! nodeward check > /tmp/nodeward-check.txt 2>&1; then
    cat /tmp/nodeward-check.txt
    fail "nodeward check: not all pass"
  fi
  grep -E '^[a-z-]+ +(skipped|ignored) ' /tmp/nodeward-check.txt | sed 's/^/  /' || true
  echo "ok: nodeward check: $(tail -n1 /tmp/nodeward-check.txt)"
}

# nodeward's systemd-networkd reloads in this boot's journal.
networkd_reloads() {
  journalctl -b -u nodeward --no-pager | grep -c "applied: networkd systemd-networkd reload" || true
}

# systemd-networkd really leaves the CNI's interfaces alone: the VM's virtio NIC is managed under
# its own name (the control: networkd's catch-all takes it), and unmanaged once it is named like
# the CNI's (Cilium: lxc*), then managed again under a neutral name.
expect_networkd_ignores_cni() {
  grep -qx 'Unmanaged=yes' /etc/systemd/network/05-nodeward-cni.network || fail "no nodeward .network file"
  nic=
  for d in /sys/class/net/*; do
    [ "$(cat "$d/device/vendor" 2>/dev/null)" = 0x1af4 ] && nic=$(basename "$d") && break
  done
  [ -n "$nic" ] || fail "the VM has no virtio NIC"
  setup_state() { networkctl list --no-legend --no-pager "$1" 2>/dev/null | awk '{print $NF}'; }
  await_state() {
    i=0
    while [ "$(setup_state "$1")" != "$2" ]; do
      i=$((i + 1))
      [ $i -lt 300 ] || { networkctl list --no-pager; fail "$1 is $(setup_state "$1"), not $2, after 60 s"; }
      sleep 0.2
    done
  }
  await_state "$nic" configured
  echo "ok: control: systemd-networkd manages the virtio NIC $nic ($(setup_state "$nic"), through its catch-all)"
  ip link set dev "$nic" down && ip link set dev "$nic" name lxc0nic && ip link set dev lxc0nic up
  await_state lxc0nic unmanaged
  echo "ok: the same NIC named lxc0nic (Cilium's endpoint name): systemd-networkd leaves it unmanaged"
  # Back under a neutral name (not its old one: udev keeps that as an alternative name).
  ip link set dev lxc0nic down && ip link set dev lxc0nic name nic0test && ip link set dev nic0test up
  await_state nic0test configured
  echo "ok: named nic0test, it is managed again"
}
