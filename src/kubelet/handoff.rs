//! What a converge pass resolved about the kubelet, handed from the kubelet step to the daemon's
//! supervisor: the wanted kubelet and the engine that runs it, worked out once per pass.

use super::runtime::Runtime;
use super::spec::Desired;

#[derive(Debug, Clone)]
pub(crate) struct Handoff {
    /// The kubelet wanted (`None`: not managed, or containers not live).
    pub(crate) desired: Option<Desired>,
    /// The engine, found once a kubelet is wanted.
    pub(crate) runtime: Option<Runtime>,
}
