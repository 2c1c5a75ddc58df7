//! Kubelet changes that roll back: the last spec that was healthy is kept on disk
//! (`/var/lib/nodeward/kubelet-rollout.json`, so it survives a reboot); a new spec that is not
//! healthy within its grace period is replaced by it, and is not tried again until the
//! configuration changes or an operator asks (`nodeward kubelet retry`).
//!
//! This file is the decision and the record; the supervisor carries the decisions out.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::spec::Desired;
use crate::host::state::StateFile;
use crate::root::HostRoot;

/// A spec that was rolled back, and to what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolledBack {
    /// The spec hash that was not healthy in time.
    pub bad: String,
    /// Its image (the first of its list), for people.
    pub bad_image: String,
    /// The spec hash running instead (the last healthy one).
    pub to: String,
    /// Unix time of the rollback.
    pub at: u64,
    /// Why, in a phrase ("not healthy within 120 s of its start: exited (code 1) 4 times").
    pub reason: String,
}

/// What is kept across restarts and reboots.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The last spec that was healthy on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_healthy: Option<Desired>,
    /// The spec held back, while the configuration still wants it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rolled_back: Option<RolledBack>,
}

/// Why a rollout record read back is refused: the spec in it that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub(crate) struct RecordRefused {
    field: &'static str,
    #[source]
    why: crate::kubelet::spec::RefusedSpec,
}

impl Record {
    /// What a restored spec must satisfy before it is run: the same rules as a configured one
    /// ([`Desired::check`]). The record is nodeward's own state, read owner- and mode-checked; this
    /// is the second line, against a record that is well-formed but not one nodeward would write.
    pub(crate) fn check(&self) -> Result<(), RecordRefused> {
        match &self.last_healthy {
            Some(d) => d.check().map_err(|e| RecordRefused {
                field: "last_healthy",
                why: e,
            }),
            None => Ok(()),
        }
    }
}

/// A new spec on trial: healthy within the grace period, or rolled back.
#[derive(Debug, Clone)]
pub(crate) struct Trial {
    pub(crate) hash: String,
    /// When the grace period began: the end of the first start attempt (the image pulled and
    /// the container started, or the attempt failed).
    pub(crate) clock: Option<Instant>,
    /// Exits and failed starts seen during the trial, for the reason.
    pub(crate) failures: u32,
    pub(crate) last_failure: Option<String>,
}

impl Trial {
    /// Past its grace period at `now`?
    pub(crate) fn expired(&self, now: Instant, grace: Duration) -> bool {
        self.clock.is_some_and(|c| now.duration_since(c) >= grace)
    }

    pub(crate) fn reason(&self, grace: Duration) -> String {
        let mut why = format!("not healthy within {} s of its start", grace.as_secs());
        if self.failures > 0 {
            why.push_str(&format!(
                ": {} failure(s), the last {}",
                self.failures,
                self.last_failure.as_deref().unwrap_or("unknown")
            ));
        }
        why
    }
}

/// The rollout state of one node's kubelet.
#[derive(Debug)]
pub(crate) struct Rollout {
    record: Record,
    /// Where the record is kept; `None` in memory only (unit tests).
    root: Option<HostRoot>,
    pub(crate) trial: Option<Trial>,
}

impl Rollout {
    /// Loads the record below `root` (none, unreadable or of another shape: a fresh start, said once).
    pub(crate) fn load(root: &HostRoot) -> Rollout {
        let record = match StateFile::KubeletRollout.read(root) {
            Ok(bytes) => serde_json::from_slice::<Record>(&bytes)
                .map_err(|e| e.to_string())
                .and_then(|r| r.check().map(|()| r).map_err(|e| e.to_string()))
                .map_err(|e| tracing::warn!(path = %StateFile::KubeletRollout.path(), error = %e, "kubelet rollout record refused; starting without one"))
                .ok(),
            Err(e) if e.is_missing() => None,
            Err(e) => {
                tracing::warn!(error = %e, "kubelet rollout record unreadable; starting without one");
                None
            }
        }
        .unwrap_or_default();
        Rollout {
            record,
            root: Some(root.clone()),
            trial: None,
        }
    }

    #[cfg(test)]
    fn in_memory(record: Record) -> Rollout {
        Rollout {
            record,
            root: None,
            trial: None,
        }
    }

    #[cfg(test)]
    pub(crate) fn last_healthy(&self) -> Option<&Desired> {
        self.record.last_healthy.as_ref()
    }

    pub(crate) fn rolled_back(&self) -> Option<&RolledBack> {
        self.record.rolled_back.as_ref()
    }

    /// The rollback holding `wanted` back, if one does (and there is a healthy spec to run).
    pub(crate) fn holding_back(&self, wanted: &str) -> Option<&RolledBack> {
        self.record
            .rolled_back
            .as_ref()
            .filter(|rb| rb.bad == wanted && self.record.last_healthy.is_some())
    }

    /// What to run for the configuration's `wanted` spec: the last healthy one while `wanted` is
    /// the spec rolled back; `wanted` otherwise (a configuration that changed since the rollback
    /// clears it).
    pub(crate) fn effective(&mut self, wanted: &Desired) -> Desired {
        match (&self.record.rolled_back, &self.record.last_healthy) {
            (Some(rb), Some(good)) if rb.bad == wanted.hash => return good.clone(),
            (Some(rb), _) => {
                tracing::info!(bad = %rb.bad, new = %wanted.hash, "the kubelet's configuration changed since its rollback: trying the new spec");
                self.record.rolled_back = None;
                self.save();
            }
            (None, _) => {}
        }
        wanted.clone()
    }

    /// Whether starting `d` begins a trial: there is a healthy spec to go back to, and it is another.
    pub(crate) fn begins_trial(&self, d: &Desired) -> bool {
        self.record
            .last_healthy
            .as_ref()
            .is_some_and(|good| good.hash != d.hash)
            && self.trial.as_ref().is_none_or(|t| t.hash != d.hash)
    }

    /// `d` was seen healthy: it is the spec to come back to from now on. Returns whether it ended
    /// a trial.
    pub(crate) fn healthy(&mut self, d: &Desired) -> bool {
        let ended = self.trial.take_if(|t| t.hash == d.hash).is_some();
        if self.record.last_healthy.as_ref() != Some(d) {
            self.record.last_healthy = Some(d.clone());
            self.save();
        }
        ended
    }

    /// The trial failed: holds its spec back, returning the record of it and the spec to run.
    pub(crate) fn roll_back(
        &mut self,
        bad: &Desired,
        reason: String,
        at: u64,
    ) -> Option<(RolledBack, Desired)> {
        let good = self.record.last_healthy.clone()?;
        self.trial = None;
        let rb = RolledBack {
            bad: bad.hash.clone(),
            bad_image: bad.spec.images.first().cloned().unwrap_or_default(),
            to: good.hash.clone(),
            at,
            reason,
        };
        self.record.rolled_back = Some(rb.clone());
        self.save();
        Some((rb, good))
    }

    /// An operator asked to try the held-back spec again.
    pub(crate) fn retry(&mut self) -> Option<RolledBack> {
        let rb = self.record.rolled_back.take()?;
        self.save();
        Some(rb)
    }

    fn save(&self) {
        let Some(root) = &self.root else { return };
        let Ok(json) = serde_json::to_vec_pretty(&self.record) else {
            return;
        };
        if let Err(e) = StateFile::KubeletRollout.write(root, &json) {
            tracing::warn!(error = %e, "cannot keep the kubelet rollout record");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::spec::KubeletSpec;

    fn spec(image: &str) -> Desired {
        let spec = KubeletSpec {
            name: "kubelet".into(),
            images: vec![image.into()],
            ..KubeletSpec::default()
        };
        Desired {
            hash: spec.hash(),
            spec,
            healthz: Some(("127.0.0.1".into(), 10248)),
            pull_from: Vec::new(),
        }
    }

    #[test]
    fn a_first_spec_is_no_trial_and_a_new_one_after_a_healthy_one_is() {
        let mut r = Rollout::in_memory(Record::default());
        let (v1, v2) = (spec("k:1"), spec("k:2"));
        assert!(!r.begins_trial(&v1), "nothing to go back to");
        assert!(!r.healthy(&v1));
        assert!(!r.begins_trial(&v1), "the healthy spec itself");
        assert!(r.begins_trial(&v2));
    }

    #[test]
    fn a_rolled_back_spec_stays_held_until_the_configuration_changes_or_a_retry() {
        let mut r = Rollout::in_memory(Record::default());
        let (v1, v2, v3) = (spec("k:1"), spec("k:2"), spec("k:3"));
        r.healthy(&v1);
        let (rb, to) = r.roll_back(&v2, "not healthy".into(), 7).expect("rolled back");
        assert_eq!(
            (rb.bad.as_str(), rb.to.as_str(), rb.bad_image.as_str()),
            (v2.hash.as_str(), v1.hash.as_str(), "k:2")
        );
        assert_eq!(to, v1);
        // The same configuration again: the healthy spec runs.
        assert_eq!(r.effective(&v2), v1);
        assert_eq!(r.effective(&v2), v1);
        // An operator's retry: the wanted spec runs, on trial again.
        assert!(r.retry().is_some());
        assert_eq!(r.effective(&v2), v2);
        r.roll_back(&v2, "again".into(), 8);
        // The configuration moved on: the new spec is tried, the hold is gone.
        assert_eq!(r.effective(&v3), v3);
        assert!(r.rolled_back().is_none());
        assert_eq!(r.effective(&v2), v2);
    }

    #[test]
    fn without_a_healthy_spec_there_is_nothing_to_roll_back_to() {
        let mut r = Rollout::in_memory(Record::default());
        assert!(r.roll_back(&spec("k:2"), "x".into(), 1).is_none());
        assert!(r.rolled_back().is_none());
    }

    #[test]
    fn a_trial_expires_only_after_its_clock_started_and_the_grace_passed() {
        let now = Instant::now();
        let mut t = Trial {
            hash: "h".into(),
            clock: None,
            failures: 0,
            last_failure: None,
        };
        let grace = Duration::from_secs(60);
        assert!(!t.expired(now + Duration::from_secs(3600), grace));
        t.clock = Some(now);
        assert!(!t.expired(now + Duration::from_secs(59), grace));
        assert!(t.expired(now + Duration::from_secs(60), grace));
        t.failures = 3;
        t.last_failure = Some("exited (code 1)".into());
        assert_eq!(
            t.reason(grace),
            "not healthy within 60 s of its start: 3 failure(s), the last exited (code 1)"
        );
    }

    #[test]
    fn the_record_survives_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(dir.path());
        let (v1, v2) = (spec("k:1"), spec("k:2"));
        let mut r = Rollout::load(&root);
        r.healthy(&v1);
        r.roll_back(&v2, "not healthy".into(), 9);
        let mut again = Rollout::load(&root);
        assert_eq!(again.last_healthy(), Some(&v1));
        assert_eq!(
            again.rolled_back().map(|rb| rb.bad.clone()),
            Some(v2.hash.clone())
        );
        assert_eq!(again.effective(&v2), v1);
        assert!(dir.path().join("var/lib/nodeward/kubelet-rollout.json").is_file());
    }

    /// A record someone planted (well-formed, and owned as nodeward's state would be) that asks
    /// for an image and a mount nodeward would never write is refused: the node starts without it.
    #[test]
    fn a_tampered_record_is_refused_with_its_reason() {
        use crate::kubelet::spec::default_mounts;
        let mut good = spec("quay.io/poseidon/kubelet:v1.36.1");
        good.spec.mounts = default_mounts();
        good.spec.args = vec!["--config=/etc/kubernetes/kubelet.yaml".into()];
        good.hash = good.spec.hash();
        let record = |d: &Desired| Record {
            last_healthy: Some(d.clone()),
            rolled_back: None,
        };
        let refusal = |d: &Desired| record(d).check().map_err(|e| e.to_string()).expect_err("refused");
        assert_eq!(record(&good).check(), Ok(()), "what nodeward writes passes");

        let mut evil = good.clone();
        let mut root_mount = default_mounts().remove(1);
        root_mount.source = "/".into();
        root_mount.target = "/host-root".into();
        evil.spec.mounts.push(root_mount);
        evil.hash = evil.spec.hash();
        let e = refusal(&evil);
        assert!(e.contains("mount /:/host-root asks for relabelling"), "{e}");

        let mut forged = good.clone();
        forged.spec.images = vec!["quay.io/poseidon/kubelet:v6.6.6-evil".into()];
        assert!(refusal(&forged).contains("is not its spec's"));

        let mut bad_arg = good.clone();
        bad_arg.spec.args.push("-v /:/x".into());
        bad_arg.hash = bad_arg.spec.hash();
        assert!(refusal(&bad_arg).contains("is not a flag"));

        // A pull source is an image reference too (never an option to the engine), its CA a path.
        let mut option = good.clone();
        option.pull_from = vec![crate::kubelet::pull_source::PullSource {
            reference: "--tls-verify=false".into(),
            transport: crate::kubelet::pull_source::Transport::Https,
            mirror: Some("http://m".into()),
        }];
        assert!(refusal(&option).contains("not an image reference"));
        let mut relative = good.clone();
        relative.pull_from = vec![crate::kubelet::pull_source::PullSource {
            reference: "m:5000/poseidon/kubelet:v1".into(),
            transport: crate::kubelet::pull_source::Transport::Ca("etc/ca.pem".into()),
            mirror: Some("https://m:5000".into()),
        }];
        assert!(refusal(&relative).contains("the CA of"));
        relative.pull_from[0].transport = crate::kubelet::pull_source::Transport::Ca("/etc/ca.pem".into());
        assert_eq!(record(&relative).check(), Ok(()), "the control: an absolute CA");

        // On disk: loaded as no record at all.
        let dir = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(dir.path());
        StateFile::KubeletRollout
            .write(&root, &serde_json::to_vec(&record(&evil)).expect("json"))
            .expect("write");
        assert_eq!(Rollout::load(&root).last_healthy(), None);
        StateFile::KubeletRollout
            .write(&root, &serde_json::to_vec(&record(&good)).expect("json"))
            .expect("write");
        assert_eq!(Rollout::load(&root).last_healthy(), Some(&good), "control");
    }

    /// The record owned by another user, or writable by others, is not read at all.
    #[test]
    fn a_record_others_could_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(dir.path());
        let mut good = spec("k:1");
        good.hash = good.spec.hash();
        let mut r = Rollout::load(&root);
        r.healthy(&good);
        let path = dir.path().join("var/lib/nodeward/kubelet-rollout.json");
        assert_eq!(Rollout::load(&root).last_healthy(), Some(&good), "control");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let e = StateFile::KubeletRollout.read(&root).expect_err("0666");
        assert!(e.to_string().contains("mode 0666 lets others write it"), "{e}");
        assert_eq!(Rollout::load(&root).last_healthy(), None);
    }
}
