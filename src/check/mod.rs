//! `nodeward check`: preflight checks that name the far-away failures before the kubelet starts.
//!
//! Each check is a pure decision over one [`Observation`] of the node (gathered once, see
//! `observe`) and the settings: what was seen, what is expected, why it matters and the fix,
//! either a nodeward step that repairs it or what the host's admin must do. As kubeadm's preflight
//! checks, each has a name that `--ignore` (or `[check] ignore`) accepts.

pub(crate) mod credentials;
pub(crate) mod identity;
pub(crate) mod image_sources;
pub(crate) mod images;
pub(crate) mod kernel;
pub(crate) mod model;
pub(crate) mod node;
pub(crate) mod observe;
pub mod render;
pub(crate) mod storage;

use crate::config::Settings;
pub use image_sources::{ImageSource, Needed, needed as images_needed};
pub use model::{Check, Finding, Outcome, Status};
pub use observe::Observation;

/// Every check, in the order they are shown.
pub(crate) const CHECKS: &[Check] = &[
    kernel::VERSION,
    kernel::CONFIG,
    kernel::MODULES,
    node::CGROUPS,
    node::CGROUP_DRIVER,
    node::SWAP,
    node::SYSCTLS,
    storage::RUNTIME_STORAGE,
    node::SELINUX,
    identity::HOSTNAME,
    identity::MACHINE_ID,
    identity::PRODUCT_UUID,
    identity::LOCALHOST,
    node::PORTS,
    node::TIME_SYNC,
    node::CONTAINER_HOST,
    node::KUBE_PROXY_CONNTRACK,
    node::CNI,
    node::CRI,
    images::IMAGES,
    node::KUBELET,
    credentials::CERTIFICATES,
];

/// Asks the registries whether they serve each image the node needs and neither holds nor ships
/// (`nodeward check` only: the daemon never asks).
pub fn ask_registries(obs: &mut Observation) {
    if let Some(list) = obs.images.as_mut() {
        image_sources::probe(list);
    }
}

/// Where each image the node needs came from (the daemon's metric).
pub fn image_sources(obs: &Observation) -> Vec<ImageSource> {
    let last_pull = obs
        .kubelet
        .as_ref()
        .and_then(|k| k.as_ref().ok())
        .and_then(|k| k.last_pull.as_ref())
        .map(|p| p.image.as_str());
    obs.images
        .as_deref()
        .map(|list| image_sources::sources(list, last_pull))
        .unwrap_or_default()
}

/// The names `--ignore` and `[check] ignore` accept.
pub fn names() -> impl Iterator<Item = &'static str> {
    CHECKS.iter().map(|c| c.name)
}

/// Runs every check against one observation. A failing or warning check named in `ignore` is
/// `ignored`.
pub fn run(obs: &Observation, settings: &Settings, ignore: &[String]) -> Vec<Finding> {
    CHECKS
        .iter()
        .map(|c| {
            let o = (c.decide)(obs, settings);
            let ignored = ignore.iter().any(|i| i == c.name);
            let status = match o.status {
                Status::Warn | Status::Fail if ignored => Status::Ignored,
                s => s,
            };
            Finding {
                name: c.name,
                status,
                observed: o.observed,
                expected: o.expected,
                why: c.why,
                fix: o.fix,
            }
        })
        .collect()
}

/// The worst result that counts (ignored and skipped checks do not).
pub fn worst(findings: &[Finding]) -> Status {
    findings
        .iter()
        .map(|f| f.status)
        .filter(|s| matches!(s, Status::Warn | Status::Fail))
        .max()
        .unwrap_or(Status::Pass)
}

/// The failing checks' names, for a one-line status.
pub fn failing(findings: &[Finding]) -> Vec<&'static str> {
    findings
        .iter()
        .filter(|f| f.status == Status::Fail)
        .map(|f| f.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_knows_every_check_by_name() {
        assert_eq!(names().collect::<Vec<_>>(), crate::config::input::CHECK_NAMES);
    }

    #[test]
    fn ignored_failures_do_not_count_and_the_worst_wins() {
        let s = observe::tests::settings();
        let mut o = observe::tests::observation();
        o.swaps = Ok(vec!["/swapfile".into()]);
        o.clock_synced = Ok(false);
        let found = run(&o, &s, &[]);
        assert_eq!(worst(&found), Status::Fail);
        assert_eq!(failing(&found), vec!["swap"]);
        let found = run(&o, &s, &["swap".to_owned()]);
        assert_eq!(worst(&found), Status::Warn, "time-sync still warns");
        assert!(
            found
                .iter()
                .any(|f| f.name == "swap" && f.status == Status::Ignored)
        );
        let healthy = run(&observe::tests::observation(), &s, &[]);
        assert_eq!(worst(&healthy), Status::Pass, "{healthy:#?}");
    }
}
