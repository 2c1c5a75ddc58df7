//! The daemon's metrics: kept current as converges, checks and the kubelet report in, rendered
//! once per change, and published to the listener and the textfile. Off unless `[metrics]` sets an
//! address or a textfile.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use crate::check::Finding;
use crate::config::metrics::MetricsSettings;
use crate::host::fs::{Meta, write_atomic_creating};
use crate::kubelet::status::KubeletStatus;
use crate::metrics::{Metrics, server};
use crate::plan::Report;
use crate::root::HostRoot;

pub(crate) struct Exporter {
    metrics: Metrics,
    exposition: Option<server::Exposition>,
    textfile: Option<PathBuf>,
    /// Certificates already reported as expiring (once per daemon start each).
    warned: BTreeSet<(String, String)>,
}

impl Exporter {
    /// Starts the listener when an address is configured. A bind failure is logged and the node is
    /// left alone: metrics never stop the agent.
    pub(crate) fn start(cfg: &MetricsSettings, root: &HostRoot) -> Exporter {
        let exposition = cfg.listen.and_then(|addr| {
            let text: server::Exposition = Arc::new(RwLock::new(String::new()));
            match server::spawn(addr, text.clone()) {
                Ok(bound) => {
                    tracing::info!(address = %bound, "serving metrics on http://{bound}/metrics");
                    Some(text)
                }
                Err(e) => {
                    tracing::error!(address = %addr, error = %e, "metrics listener not started");
                    None
                }
            }
        });
        let textfile = cfg.textfile.as_ref().and_then(|p| root.resolve(p).ok());
        Exporter {
            metrics: Metrics::default(),
            exposition,
            textfile,
            warned: BTreeSet::new(),
        }
    }

    fn enabled(&self) -> bool {
        self.exposition.is_some() || self.textfile.is_some()
    }

    /// The checks after a converge, and where each image the node needs came from.
    pub(crate) fn checked(&mut self, checks: &[Finding], images: &[crate::check::ImageSource]) {
        self.metrics.record_checks(checks);
        self.metrics.images = images.to_vec();
        self.publish();
    }

    /// A converge finished.
    pub(crate) fn converged(&mut self, report: &Report, seconds: f64, certs: crate::host::cert::CertScan) {
        let now = crate::clock::now();
        self.metrics.record_converge(report, seconds, now);
        for c in &certs.certs {
            let days = (c.not_after - now as i64).div_euclid(86_400);
            if days < crate::host::cert::EXPIRY_WARNING_DAYS
                && self.warned.insert((c.path.clone(), c.subject.clone()))
            {
                tracing::warn!(message_id = crate::event::CERT_EXPIRING, path = %c.path, subject = %c.subject, days,
                    "certificate {} ({}) expires in {days} days", c.path, c.subject);
            }
        }
        self.metrics.certs = certs.certs;
        self.metrics.certs_not_scanned = certs.not_scanned;
        if certs.not_scanned > 0 {
            tracing::warn!(
                not_scanned = certs.not_scanned,
                "certificate trees hold more than a scan reads: {} entries not scanned (at most {} per directory, {} files)",
                certs.not_scanned,
                crate::host::cert::MAX_ENTRIES_PER_DIR,
                crate::host::cert::MAX_FILES
            );
        }
        self.publish();
    }

    /// The kubelet's status or the readiness changed.
    pub(crate) fn kubelet(&mut self, status: Option<KubeletStatus>, ready: bool) {
        if self.metrics.ready == ready && self.metrics.kubelet == status {
            return;
        }
        self.metrics.kubelet = status;
        self.metrics.ready = ready;
        self.publish();
    }

    fn publish(&self) {
        if !self.enabled() {
            return;
        }
        let text = self.metrics.render(crate::clock::now());
        if let Some(path) = &self.textfile {
            let meta = Meta {
                mode: 0o644,
                uid: 0,
                gid: 0,
                label: None,
            };
            if let Err(e) = write_atomic_creating(path, text.as_bytes(), &meta, 0o755) {
                tracing::warn!(path = %path.display(), error = %e, "metrics textfile not written");
            }
        }
        if let Some(shared) = &self.exposition
            && let Ok(mut t) = shared.write()
        {
            *t = text;
        }
    }
}

/// The certificates in the configured trees, named by their host paths (read every pass: the
/// journal warns of expiry whether or not metrics are served).
pub(crate) fn certificates(cfg: &MetricsSettings, root: &HostRoot) -> crate::host::cert::CertScan {
    crate::host::cert::on_node(&cfg.certificates, root)
}
