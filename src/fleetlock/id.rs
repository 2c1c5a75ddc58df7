//! FleetLock client ids: systemd's app-specific machine ids (`sd_id128_get_machine_app_specific`:
//! HMAC-SHA256 keyed by the 16-byte machine id over the 16-byte application id, the first 16 bytes
//! made a version-4 UUID), as Zincati derives its own and as poseidon/fleetlock maps ids back to
//! Kubernetes nodes (docs/fleet.md).

use sha2::{Digest, Sha256};

/// Zincati's application id (coreos/zincati `src/identity/mod.rs`).
pub(crate) const ZINCATI_APP_ID: &str = "de35106b6ec24688b63afddaa156679b";
/// nodeward's own application id: never change it, a lock held under it would be orphaned.
pub(crate) const NODEWARD_APP_ID: &str = "1dd5d29af35a44a3af69cdd16159a80c";

/// The app-specific id of `machine_id` (32 hex digits) for `app_id`, as 32 lowercase hex digits;
/// `None` when either is not 32 hex digits.
pub(crate) fn app_specific(machine_id: &str, app_id: &str) -> Option<String> {
    let key = id128(machine_id.trim())?;
    let msg = id128(app_id)?;
    let mut sum = hmac_sha256(&key, &msg);
    sum[6] = (sum[6] & 0x0f) | 0x40;
    sum[8] = (sum[8] & 0x3f) | 0x80;
    Some(hex::encode(&sum[..16]))
}

fn id128(text: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    (text.len() == 32).then_some(())?;
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// RFC 2104 HMAC with SHA-256 (a 16-byte key is shorter than the block: padded, never hashed).
fn hmac_sha256(key: &[u8; 16], msg: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    block[..16].copy_from_slice(key);
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(msg).finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    outer.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_systemd_and_poseidon_fleetlock() {
        // Computed independently (Python's hmac over the two 16-byte ids, then the UUID v4 bits),
        // the algorithm poseidon/fleetlock uses to find the node of a Zincati id.
        let machine = "b34fc2b3c9a24a3a8f3f5a4f0e8a7c11";
        assert_eq!(
            app_specific(machine, ZINCATI_APP_ID).as_deref(),
            Some("db59ceec4a634caa946cf36fb4d2dc6c")
        );
        assert_eq!(
            app_specific(machine, NODEWARD_APP_ID).as_deref(),
            Some("be6e871c95194b438889a5efd59ead5b")
        );
    }

    #[test]
    fn ids_are_uuid_v4_shaped_distinct_per_app_and_stable() {
        let machine = "b34fc2b3c9a24a3a8f3f5a4f0e8a7c11";
        let zincati = app_specific(machine, ZINCATI_APP_ID).expect("id");
        let ours = app_specific(machine, NODEWARD_APP_ID).expect("id");
        assert_ne!(zincati, ours);
        assert_eq!(
            app_specific(&format!("{machine}\n"), ZINCATI_APP_ID).as_deref(),
            Some(zincati.as_str())
        );
        for id in [&zincati, &ours] {
            assert_eq!(id.len(), 32);
            assert_eq!(&id[12..13], "4", "{id}");
            assert!(matches!(&id[16..17], "8" | "9" | "a" | "b"), "{id}");
        }
        assert!(app_specific("uninitialized", ZINCATI_APP_ID).is_none());
        assert!(app_specific("", ZINCATI_APP_ID).is_none());
    }
}
