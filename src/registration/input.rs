//! `[node]` as operators write it: who the node is to the API server, and the CNI the host
//! settings follow.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::node_ip::NodeIp;
use crate::types::{AbsPath, Cni, Hostname, LabelKey, LabelValue, Role, Taint};

/// What this node is in the cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct NodeInput {
    /// `worker` or `controller`: the kubelet's role label and taint (Typhoon's), and the bundle's layout with `bundle.layout = "auto"`.
    pub(crate) role: Role,
    /// The cluster's CNI; decides the CNI-dependent defaults (`any`: safe under every one).
    pub(crate) cni: Cni,
    /// Overrides the node name the kubelet registers (`--hostname-override`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hostname: Option<Hostname>,
    /// The node name from a cloud metadata variable (DigitalOcean names nodes by private IPv4:
    /// `AFTERBURN_DIGITALOCEAN_IPV4_PRIVATE_0`). `node.hostname` still wins. Was
    /// `kubelet.node_name_from` (still read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name_from: Option<String>,
    /// `--provider-id`, with `${NAME}` taken from the cloud metadata file (Typhoon on AWS:
    /// `aws:///${AFTERBURN_AWS_AVAILABILITY_ZONE}/${AFTERBURN_AWS_INSTANCE_ID}`). Was
    /// `kubelet.provider_id` (still read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) provider_id: Option<String>,
    /// afterburn's `KEY=value` metadata file; default: the first of `/run/metadata/afterburn`,
    /// `/run/metadata/coreos`, `/run/metadata/flatcar` that exists. The kubelet waits for it when
    /// a setting needs it. Was `kubelet.metadata_file` (still read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) metadata_file: Option<AbsPath>,
    /// The address the node registers (`--node-ip`): one address, or an IPv4 and an IPv6 one
    /// (`"10.0.0.5,fd00::5"`); unset: the kubelet picks the default route's (a multi-NIC node
    /// may want another).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ip: Option<NodeIp>,
    /// Extra node labels (`--node-labels`), as Typhoon's `worker_node_labels`.
    pub(crate) labels: BTreeMap<LabelKey, LabelValue>,
    /// Taints registered with the node (`--register-with-taints`), `key=value:Effect`.
    pub(crate) taints: Vec<Taint>,
}

impl Default for NodeInput {
    fn default() -> Self {
        NodeInput {
            role: Role::Worker,
            cni: Cni::Any,
            hostname: None,
            name_from: None,
            provider_id: None,
            metadata_file: None,
            ip: None,
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }
}

/// The identity keys still read under their 0.1 names in `[kubelet]`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Legacy {
    /// `kubelet.provider_id`.
    pub(crate) provider_id: Option<String>,
    /// `kubelet.node_name_from`.
    pub(crate) node_name_from: Option<String>,
    /// `kubelet.metadata_file`.
    pub(crate) metadata_file: Option<AbsPath>,
}
