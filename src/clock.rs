//! Wall-clock time as the state files and status record it: whole seconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in seconds since the Unix epoch (0 if the clock is before it).
/// Unix time in milliseconds (0 before 1970, as [`now`]).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
