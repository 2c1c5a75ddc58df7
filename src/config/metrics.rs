//! `[metrics]`: where nodeward's Prometheus metrics go and which certificates they watch.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::setting::KeyError;
use crate::types::AbsPath;

/// `[metrics]`: Prometheus metrics, off unless an address or a textfile is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsInput {
    /// Where to serve `GET /metrics` (`127.0.0.1:9101`; a node IP for in-cluster scraping).
    pub(crate) listen: Option<SocketAddr>,
    /// A node-exporter textfile collector file (`…/nodeward.prom`), rewritten atomically.
    pub(crate) textfile: Option<AbsPath>,
    /// Trees whose certificates (`*.crt`, `*.pem`, kubeconfigs) get an expiry metric.
    pub(crate) certificates: Vec<AbsPath>,
}

impl Default for MetricsInput {
    fn default() -> Self {
        MetricsInput {
            listen: None,
            textfile: None,
            certificates: vec![
                crate::abs_path!("/etc/kubernetes"),
                crate::abs_path!("/etc/ssl/etcd"),
                crate::abs_path!("/var/lib/kubelet/pki"),
            ],
        }
    }
}

/// The metrics' validated settings.
#[derive(Debug, Clone)]
pub(crate) struct MetricsSettings {
    pub(crate) listen: Option<SocketAddr>,
    pub(crate) textfile: Option<AbsPath>,
    pub(crate) certificates: Vec<AbsPath>,
}

impl MetricsSettings {
    /// Validates `[metrics]`; errors name the key to blame.
    pub(crate) fn from_input(input: MetricsInput) -> Result<MetricsSettings, KeyError> {
        if input.listen.is_some_and(|a| a.port() == 0) {
            return Err(KeyError::new(
                "metrics.listen",
                "port 0 would listen on a random port no scraper knows",
            ));
        }
        if let Some(t) = input.textfile.as_ref().filter(|t| !t.as_str().ends_with(".prom")) {
            return Err(KeyError::new(
                "metrics.textfile",
                format!("{t}: node-exporter's textfile collector reads only *.prom files"),
            ));
        }
        Ok(MetricsSettings {
            listen: input.listen,
            textfile: input.textfile,
            certificates: input.certificates,
        })
    }
}
