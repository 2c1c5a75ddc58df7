//! Wall-clock time as the state files and status record it: whole seconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in seconds since the Unix epoch (0 if the clock is before it).
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
