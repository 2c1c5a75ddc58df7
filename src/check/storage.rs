//! The filesystem under the container runtime's root: overlay needs directory entry types (xfs
//! `ftype=1`), a loop device under it is the devicemapper-on-loopback trap (weeks later: xfs
//! corruption, stalls), and too little space or too few inodes evicts pods.

use super::model::{Check, Outcome};
use super::observe::Observation;
use crate::config::Settings;

/// The kubelet's default hard eviction thresholds: `imagefs.available<15%`,
/// `nodefs.inodesFree<5%`.
const MIN_FREE_PERCENT: u64 = 15;
const MIN_INODES_FREE_PERCENT: u64 = 5;

pub(crate) const RUNTIME_STORAGE: Check = Check {
    name: "runtime-storage",
    why: "overlay needs d_type; loopback storage corrupts and stalls; low space or inodes evicts pods",
    decide: runtime_storage,
};

fn runtime_storage(obs: &Observation, _: &Settings) -> Outcome {
    if !obs.live {
        return Outcome::skipped("not the running system (--root without --kernel live)");
    }
    if obs.storage.is_empty() {
        return Outcome::skipped(
            "no runtime root yet (/var/lib/containers, /var/lib/containerd, /var/lib/docker)",
        );
    }
    let expected = format!(
        "a d_type filesystem on a real device, ≥ {MIN_FREE_PERCENT}% space and ≥ {MIN_INODES_FREE_PERCENT}% inodes free"
    );
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    for r in &obs.storage {
        let on = format!("{} ({} on {})", r.path, r.fs_type, r.source);
        if r.d_type == Some(false) {
            problems.push(format!("{on}: no d_type"));
            fixes.push(format!(
                "put {} on a filesystem with entry types (xfs: mkfs.xfs -n ftype=1; ext4 has them)",
                r.path
            ));
        }
        if r.source.starts_with("/dev/loop") {
            problems.push(format!("{on}: a loop device"));
            fixes.push(format!(
                "put {} on a real block device, not a file behind a loop device",
                r.path
            ));
        }
        if let Some(free) = r.free_percent.filter(|f| *f < MIN_FREE_PERCENT) {
            problems.push(format!("{on}: {free}% space free"));
            fixes.push(format!("free space under {}", r.path));
        }
        if let Some(free) = r.inodes_free_percent.filter(|f| *f < MIN_INODES_FREE_PERCENT) {
            problems.push(format!("{on}: {free}% inodes free"));
            fixes.push(format!("free inodes under {}", r.path));
        }
    }
    if problems.is_empty() {
        let seen: Vec<String> = obs
            .storage
            .iter()
            .map(|r| format!("{} ({} on {})", r.path, r.fs_type, r.source))
            .collect();
        Outcome::pass(seen.join(", "), expected)
    } else {
        Outcome::fail(problems.join("; "), expected, fixes.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::Status;
    use super::super::observe::RuntimeRoot;
    use super::super::observe::tests::{observation, settings};
    use super::*;

    fn root(fs: &str, source: &str, d_type: bool, free: u64, inodes: u64) -> RuntimeRoot {
        RuntimeRoot {
            path: "/var/lib/containers".into(),
            fs_type: fs.into(),
            source: source.into(),
            d_type: Some(d_type),
            free_percent: Some(free),
            inodes_free_percent: Some(inodes),
        }
    }

    #[test]
    fn a_healthy_root_passes() {
        let mut o = observation();
        o.storage = vec![root("ext4", "/dev/vda1", true, 60, 90)];
        let out = runtime_storage(&o, &settings());
        assert_eq!(out.status, Status::Pass);
        assert_eq!(out.observed, "/var/lib/containers (ext4 on /dev/vda1)");
    }

    #[test]
    fn each_trap_is_named_with_its_fix() {
        let mut o = observation();
        o.storage = vec![root("xfs", "/dev/loop0", false, 10, 3)];
        let out = runtime_storage(&o, &settings());
        assert_eq!(out.status, Status::Fail);
        for want in ["no d_type", "a loop device", "10% space free", "3% inodes free"] {
            assert!(out.observed.contains(want), "{want}: {}", out.observed);
        }
        assert!(out.fix.contains("mkfs.xfs -n ftype=1") && out.fix.contains("real block device"));
    }

    #[test]
    fn no_runtime_yet_is_skipped() {
        let mut o = observation();
        o.storage.clear();
        assert_eq!(runtime_storage(&o, &settings()).status, Status::Skipped);
    }
}
