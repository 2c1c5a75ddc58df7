# The controller's first boot up to a running control plane (sourced by the cluster and
# conformance scenarios' controller boot1): Typhoon's SSH step hands nodeward the bundle, etcd
# healthy over TLS, the static control plane ready, bootstrap.service applying the manifests.
pki=/etc/kubernetes/pki
version=$(cat $T/version)
expect_active nodeward.service
expect_active containerd.service
# Typhoon's SSH step (ssh.tf): the assets copied to the core user's home, /opt/bootstrap/layout run
# there (the snippet's: nodeward bundle install).
install -m 0600 -o 1000 -g 1000 $T/assets /home/core/assets
(cd /home/core && /opt/bootstrap/layout) > /tmp/layout.txt 2>&1 || { cat /tmp/layout.txt; fail "the SSH step's layout failed"; }
echo "ok: Typhoon's SSH step: nodeward installed the whole bundle"
systemctl restart etcd-member.service
etcd_health() {
  etcdctl --endpoints="https://$CONTROLLER:2379" --cacert=$pki/etcd-client-ca.crt --cert=$pki/etcd-client.crt \
    --key=$pki/etcd-client.key --dial-timeout=3s --command-timeout=5s endpoint health
}
await 300 "etcd ($(cat $T/etcd-version 2>/dev/null)) healthy over TLS on nodeward's certificates" etcd_health
await 900 "the real kube-apiserver (a static pod of the real kubelet, through containerd) ready" k get --raw /readyz
systemctl start bootstrap.service || { journalctl -b -u bootstrap --no-pager | tail -30; fail "bootstrap.service failed"; }
journalctl -b -u bootstrap --no-pager -o cat | grep -q 'bootstrap-token' \
  || { journalctl -b -u bootstrap --no-pager | tail -20; fail "bootstrap.service did not apply the token"; }
echo "ok: Typhoon's bootstrap.service applied the bundle's manifests with the real kubectl"
