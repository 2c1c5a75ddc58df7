//! Prometheus metrics: what the daemon has done and sees, rendered once per change into the text
//! exposition format and served by a small read-only listener (`server`), or written as a
//! node-exporter textfile. Nothing here blocks the converge loop: the daemon updates [`Metrics`]
//! and stores the rendered text; a scrape only copies it.

pub(crate) mod server;
pub(crate) mod text;

use std::collections::BTreeMap;

use crate::check::{Finding, Status};
use crate::kubelet::status::{KubeletState, KubeletStatus};
use crate::plan::{FailureKind, Report};
use text::{Family, Kind};

/// What the daemon has done since it started, and what it sees now.
#[derive(Debug, Clone, Default)]
pub(crate) struct Metrics {
    pub(crate) converges: u64,
    pub(crate) last_converge_seconds: f64,
    /// Per step: its last duration, whether it succeeded last, failures so far.
    pub(crate) steps: BTreeMap<String, StepMetrics>,
    /// Changes applied so far, by (step, kind of change).
    pub(crate) changes: BTreeMap<(String, &'static str), u64>,
    pub(crate) last_success: Option<u64>,
    pub(crate) ready: bool,
    pub(crate) kubelet: Option<KubeletStatus>,
    pub(crate) checks: Vec<(&'static str, Status)>,
    /// Where each image the node needs came from (with the checks).
    pub(crate) images: Vec<crate::check::ImageSource>,
    pub(crate) certs: Vec<crate::host::cert::CertInfo>,
    /// Entries of the certificate trees over the scan's bounds.
    pub(crate) certs_not_scanned: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct StepMetrics {
    pub(crate) last_seconds: f64,
    pub(crate) ok: bool,
    /// Failed passes by kind of failure (waiting, transient, permanent).
    pub(crate) failures: std::collections::BTreeMap<FailureKind, u64>,
}

impl Metrics {
    /// Takes one converge in.
    pub(crate) fn record_converge(&mut self, report: &Report, seconds: f64, now: u64) {
        self.converges += 1;
        self.last_converge_seconds = seconds;
        for s in &report.steps {
            let m = self.steps.entry(s.step.to_string()).or_default();
            m.last_seconds = s.seconds;
            m.ok = s.error.is_none();
            if s.error.is_some() {
                *m.failures
                    .entry(s.failure.unwrap_or(FailureKind::Transient))
                    .or_default() += 1;
            }
            for c in &s.applied {
                *self
                    .changes
                    .entry((s.step.to_string(), c.action.kind()))
                    .or_default() += 1;
            }
        }
        if report.failed_steps().next().is_none() {
            self.last_success = Some(now);
        }
    }

    pub(crate) fn record_checks(&mut self, found: &[Finding]) {
        self.checks = found.iter().map(|f| (f.name, f.status)).collect();
    }

    /// The exposition text. `now` is Unix time, for the kubelet's uptime.
    // Long: one family after another, in the order a reader meets them; nothing to factor.
    pub(crate) fn render(&self, now: u64) -> String {
        let mut f = Vec::new();
        f.push(
            Family::new(
                "nodeward_converge_runs_total",
                Kind::Counter,
                "Converge passes since the daemon started.",
            )
            .with(&[], self.converges as f64),
        );
        f.push(
            Family::new(
                "nodeward_converge_duration_seconds",
                Kind::Gauge,
                "Wall time of the last converge pass.",
            )
            .with(&[], self.last_converge_seconds),
        );
        let mut step_seconds = Family::new(
            "nodeward_step_duration_seconds",
            Kind::Gauge,
            "Wall time of each step in the last pass (planning and applying).",
        );
        let mut step_up = Family::new(
            "nodeward_step_up",
            Kind::Gauge,
            "1 when the step succeeded in the last pass.",
        );
        let mut step_failures = Family::new(
            "nodeward_step_failures_total",
            Kind::Counter,
            "Passes in which the step failed, by kind: waiting (for something to arrive), transient (may pass), permanent (needs a change).",
        );
        for (step, m) in &self.steps {
            step_seconds.push(&[("step", step)], m.last_seconds);
            step_up.push(&[("step", step)], f64::from(u8::from(m.ok)));
            for (kind, n) in &m.failures {
                step_failures.push(&[("step", step), ("kind", kind.name())], *n as f64);
            }
        }
        f.extend([step_seconds, step_up, step_failures]);
        let mut changes = Family::new(
            "nodeward_changes_applied_total",
            Kind::Counter,
            "Changes applied (first converge and drift repairs), by step and kind.",
        );
        for ((step, kind), n) in &self.changes {
            changes.push(&[("step", step), ("kind", kind)], *n as f64);
        }
        f.push(changes);
        if let Some(t) = self.last_success {
            f.push(
                Family::new(
                    "nodeward_last_success_timestamp_seconds",
                    Kind::Gauge,
                    "Unix time of the last pass in which every step succeeded.",
                )
                .with(&[], t as f64),
            );
        }
        f.push(
            Family::new(
                "nodeward_ready",
                Kind::Gauge,
                "1 once the node converged and the kubelet (if nodeward runs it) is up.",
            )
            .with(&[], f64::from(u8::from(self.ready))),
        );
        if let Some(k) = &self.kubelet {
            f.extend(kubelet_families(k, now));
        }
        let mut checks = Family::new(
            "nodeward_check",
            Kind::Gauge,
            "Preflight checks: 1 for the result each check has now.",
        );
        for (name, status) in &self.checks {
            checks.push(&[("check", name), ("result", &status.to_string())], 1.0);
        }
        f.push(checks);
        let mut images = Family::new(
            "nodeward_image_source",
            Kind::Gauge,
            "1 for where each image the node needs came from: shipped (an archive the node carries), registry or mirror (nodeward's own pull of the kubelet's image), pulled (by its engine, from a registry or a mirror), pullable, missing or unknown.",
        );
        for i in &self.images {
            images.push(
                &[("role", i.role), ("image", &i.reference), ("source", i.source)],
                1.0,
            );
        }
        f.push(images);
        let mut certs = Family::new(
            "nodeward_certificate_expiry_seconds",
            Kind::Gauge,
            "notAfter (Unix time) of each certificate in the node's TLS trees and kubeconfigs.",
        );
        for c in &self.certs {
            certs.push(&[("path", &c.path), ("subject", &c.subject)], c.not_after as f64);
        }
        f.push(certs);
        let mut skipped = Family::new(
            "nodeward_certificate_files_not_scanned",
            Kind::Gauge,
            "Entries of the certificate trees past the scan's bounds (256 a directory, 2048 files), not read.",
        );
        skipped.push(&[], self.certs_not_scanned as f64);
        f.push(skipped);
        text::render(&f)
    }
}

fn kubelet_families(k: &KubeletStatus, now: u64) -> Vec<Family> {
    let up = k.state == KubeletState::Running;
    let mut out = vec![
        Family::new(
            "nodeward_kubelet_up",
            Kind::Gauge,
            "1 while the kubelet container runs.",
        )
        .with(&[], f64::from(u8::from(up))),
        Family::new(
            "nodeward_kubelet_healthy",
            Kind::Gauge,
            "1 while the kubelet answers its health endpoint.",
        )
        .with(&[], f64::from(u8::from(up && k.health == "healthy"))),
        Family::new(
            "nodeward_kubelet_restarts_total",
            Kind::Counter,
            "Kubelet restarts after an exit or failed health since the daemon started.",
        )
        .with(&[], k.restarts as f64),
    ];
    out.extend(rollout_families(k));
    if let Some(code) = k.last_exit.as_ref().and_then(|e| e.code) {
        out.push(
            Family::new(
                "nodeward_kubelet_last_exit_code",
                Kind::Gauge,
                "Exit code of the kubelet's last exit.",
            )
            .with(&[], f64::from(code)),
        );
    }
    if let (true, Some(since)) = (up, k.since) {
        out.push(
            Family::new(
                "nodeward_kubelet_uptime_seconds",
                Kind::Gauge,
                "Seconds since the current kubelet container was started or adopted.",
            )
            .with(&[], now.saturating_sub(since) as f64),
        );
    }
    out
}

/// The rollout's families: rollbacks, the spec held back, and this node's FleetLock slot.
fn rollout_families(k: &KubeletStatus) -> [Family; 5] {
    let fleet = k.fleet_lock.as_ref();
    [
        Family::new(
            "nodeward_kubelet_rollbacks_total",
            Kind::Counter,
            "New kubelet specs rolled back to the last healthy one since the daemon started.",
        )
        .with(&[], k.rollbacks as f64),
        Family::new(
            "nodeward_kubelet_rolled_back",
            Kind::Gauge,
            "1 while the configuration's kubelet spec is held back by a rollback.",
        )
        .with(&[], f64::from(u8::from(k.rolled_back.is_some()))),
        Family::new(
            "nodeward_fleetlock_held",
            Kind::Gauge,
            "1 while this node holds a FleetLock slot.",
        )
        .with(&[], f64::from(u8::from(fleet.is_some_and(|f| f.held)))),
        Family::new(
            "nodeward_fleetlock_rollout_halted",
            Kind::Gauge,
            "1 while this node keeps its FleetLock slot after a rollback (the rollout halts here).",
        )
        .with(&[], f64::from(u8::from(fleet.is_some_and(|f| f.halted)))),
        Family::new(
            "nodeward_fleetlock_waiting",
            Kind::Gauge,
            "1 while a kubelet change waits for a FleetLock slot.",
        )
        .with(
            &[],
            f64::from(u8::from(fleet.is_some_and(|f| f.waiting.is_some()))),
        ),
    ]
}
