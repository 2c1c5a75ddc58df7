//! What kind of failure a host error is, for the steps that meet one.

use crate::host::HostError;
use crate::plan::FailureKind;

/// A path of the wrong type, a value that does not parse or an account that does not exist stays
/// so until someone changes it; I/O may pass.
pub(crate) fn host_kind(e: &HostError) -> FailureKind {
    match e {
        HostError::NotADirectory { .. }
        | HostError::NotAFile { .. }
        | HostError::Invalid { .. }
        | HostError::UnknownAccount { .. } => FailureKind::Permanent,
        HostError::Context { source, .. } => host_kind(source),
        // A FIFO, a device, an oversize file: only someone fixing the file helps.
        HostError::Read(r) if !r.is_missing() && !matches!(r, crate::host::read::ReadError::Io { .. }) => {
            FailureKind::Permanent
        }
        _ => FailureKind::Transient,
    }
}
