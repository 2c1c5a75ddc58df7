//! The kubelet: its spec, its configuration file, the runtimes that run it and the supervisor that
//! keeps it running.

pub(crate) mod backoff;
pub(crate) mod config_check;
pub(crate) mod config_file;
pub(crate) mod container;
pub mod decide;
pub(crate) mod executor;
pub(crate) mod handoff;
pub(crate) mod healthz;
pub mod oneshot;
pub(crate) mod pull_source;
pub mod rollout;
pub mod runtime;
pub(crate) mod settings;
pub mod spec;
pub(crate) mod spec_record;
pub mod status;
pub mod supervisor;

/// The first 12 characters of a container id, as the engines print it. An id comes from the
/// engine's output, so it is cut on a character boundary, never in the middle of one.
pub fn short_id(id: &str) -> &str {
    id.char_indices().nth(12).map_or(id, |(i, _)| &id[..i])
}

/// Runs a future to completion on a small runtime of its own (for the one-shot commands).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(future),
        // Building a current-thread runtime only fails when the process is out of resources.
        Err(e) => panic!("cannot build a tokio runtime: {e}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn short_ids_never_split_a_character() {
        assert_eq!(super::short_id("0123456789abcdef"), "0123456789ab");
        assert_eq!(super::short_id("abc"), "abc");
        // 11 ASCII bytes then a 2-byte character across byte 12: slicing bytes would panic.
        assert_eq!(super::short_id("0123456789aé-rest"), "0123456789aé");
        assert_eq!(super::short_id("ééééééééééééé"), "éééééééééééé");
    }
}
