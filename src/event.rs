//! Stable journal `MESSAGE_ID`s for what an operator alerts on. Each is logged as the
//! `message_id` field (journald: `MESSAGE_ID`), and explained in the systemd catalog shipped in the
//! packages (`packaging/catalog/nodeward.catalog`, `journalctl -x`). Never change an ID: alerts
//! and saved searches match on it.

/// A change was applied: the first converge, or drift repaired.
pub(crate) const CHANGE_APPLIED: &str = "4d6b223ea6c0471ca754d2f0e84db449";
/// A step started failing.
pub(crate) const STEP_FAILING: &str = "f64512ad2b204c5da4872a0391fde6f8";
/// A step that was failing succeeded again.
pub(crate) const STEP_RECOVERED: &str = "77dfa543b28844378ac44bb8d464c413";
/// The kubelet container exited and is restarted after its backoff.
pub(crate) const KUBELET_EXITED: &str = "afc73a1486164c91849a4e0e4c0733b4";
/// The kubelet stopped answering its health endpoint and is restarted.
pub(crate) const KUBELET_UNHEALTHY: &str = "5222cd29a6384f6998630f8cc600f6d4";
/// The kubelet container was replaced because its spec changed.
pub(crate) const KUBELET_REPLACED: &str = "91033c8baa5b41c486193c045e64276b";
/// A new kubelet spec was not healthy within its grace period and was rolled back.
pub(crate) const KUBELET_ROLLED_BACK: &str = "54c0782dd83043d8a83bef2939d082a3";
/// nodeward took or gave back a FleetLock slot, or kept one after a rollback (rollout halted).
pub(crate) const FLEET_LOCK: &str = "f91d971ac0724355b16f44bbd9af6284";
/// A certificate nodeward watches expires within the warning window.
pub(crate) const CERT_EXPIRING: &str = "b35dd2704eb2455c82a2069fd961c97e";
/// A preflight check started failing.
pub(crate) const CHECK_FAILING: &str = "799555a19e0c449599edc2975dba609d";
/// A preflight check that was failing passes again.
pub(crate) const CHECK_PASSING: &str = "b69f0c5e888c4a089d67961bbeb1fc94";

/// Every step succeeded and the kubelet runs when wanted (after being degraded, or at start).
pub(crate) const NODE_CONVERGED: &str = "31ab1434add2423ba591715b26732485";
/// The node stopped being converged: a step fails or the wanted kubelet does not run.
pub(crate) const NODE_DEGRADED: &str = "11bed48152bb4b02b5e9bd29266b7a16";

/// Every MESSAGE_ID, for the test that keeps them equal to the catalog.
#[cfg(test)]
const ALL: [&str; 13] = [
    CHANGE_APPLIED,
    STEP_FAILING,
    STEP_RECOVERED,
    KUBELET_EXITED,
    KUBELET_UNHEALTHY,
    KUBELET_REPLACED,
    KUBELET_ROLLED_BACK,
    FLEET_LOCK,
    CERT_EXPIRING,
    CHECK_FAILING,
    CHECK_PASSING,
    NODE_CONVERGED,
    NODE_DEGRADED,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_128_bit_hex_and_each_has_a_catalog_entry() {
        let catalog = include_str!("../packaging/catalog/nodeward.catalog");
        let mut seen = std::collections::BTreeSet::new();
        for id in ALL {
            assert!(
                id.len() == 32
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
                "{id}"
            );
            assert!(seen.insert(id), "{id} twice");
            assert!(
                catalog.contains(&format!("-- {id}\n")),
                "{id} has no catalog entry"
            );
        }
        let entries = catalog.lines().filter(|l| l.starts_with("-- ")).count();
        assert_eq!(entries, ALL.len(), "catalog entries without an ID here");
    }
}
