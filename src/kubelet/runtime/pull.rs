//! An image pull's progress, read from what the engine's CLI prints while it pulls.
//!
//! Without a terminal the engines print one line per event, not byte counters: podman (through
//! containers/image) `Copying blob sha256:<digest>` when a layer starts and the same line ending in
//! `done` or `skipped: already exists` when it is in place; docker `<id>: Pulling fs layer` per
//! layer up front, then `<id>: Pull complete` (or `Already exists`). So the progress is counted in
//! layers (started, done, and the total when the engine announces it) and time; the bytes and the
//! rate are known once the pull is over, from the image's size.

use serde::{Deserialize, Serialize};

/// What a pull has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullProgress {
    pub image: String,
    /// Unix time the pull began.
    pub since: u64,
    /// Layers begun (podman) or announced (docker).
    pub layers_started: u32,
    pub layers_done: u32,
    /// Every layer is announced up front (docker), so this is the whole.
    #[serde(default)]
    pub total_known: bool,
}

/// A finished pull: how big and how fast.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullDone {
    pub image: String,
    /// Unix time it finished.
    pub at: u64,
    /// How long it took.
    pub millis: u64,
    pub layers: u32,
    /// The image's size as the engine reports it (`None`: it does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

impl PullDone {
    /// Bytes per second, when the size is known and the pull took time.
    pub fn rate(&self) -> Option<f64> {
        self.bytes
            .filter(|_| self.millis > 0)
            .map(|b| b as f64 * 1000.0 / self.millis as f64)
    }
}

/// The most layer ids a pull's progress keeps.
pub(crate) const MAX_LAYERS: usize = 512;

/// Layer ids seen, each once, whatever order the engine prints them in.
#[derive(Debug, Default)]
pub(crate) struct LayerCount {
    started: std::collections::BTreeSet<String>,
    done: std::collections::BTreeSet<String>,
    total_known: bool,
}

impl LayerCount {
    /// Folds one printed line in; true when it changed the count.
    pub(crate) fn line(&mut self, line: &str) -> bool {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Copying blob ") {
            // podman: `Copying blob sha256:abc…[ done| skipped: already exists]`.
            let mut words = rest.split_whitespace();
            let Some(id) = words.next() else { return false };
            let id = id.trim_start_matches("sha256:").to_owned();
            let finished = rest
                .split_whitespace()
                .any(|w| w == "done" || w == "skipped:" || w == "exists");
            return self.see(id, finished);
        }
        if let Some(rest) = line.strip_prefix("Downloading sha256:") {
            // rkt: `Downloading sha256:2e85c4b2e45 38.4 MB / 144 MB`, again as it goes; a layer
            // is done when both sides read the same.
            let Some((id, sizes)) = rest.split_once(' ') else {
                return false;
            };
            let Some((got, of)) = sizes.split_once(" / ") else {
                return false;
            };
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return false;
            }
            return self.see(id.to_owned(), got.trim() == of.trim());
        }
        // docker: `<12 hex>: <status>`.
        let Some((id, status)) = line.split_once(": ") else {
            return false;
        };
        if id.len() < 12 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return false;
        }
        match status.trim() {
            "Pulling fs layer" | "Waiting" => {
                self.total_known = true;
                self.see(id.to_owned(), false)
            }
            "Pull complete" | "Already exists" => {
                self.total_known = true;
                self.see(id.to_owned(), true)
            }
            _ => false,
        }
    }

    fn see(&mut self, mut id: String, finished: bool) -> bool {
        // An engine's ids are 64 hex digits; whatever else it prints is bounded here, in length and
        // in number (no image has more layers than this).
        if !self.started.contains(&id) && self.started.len() >= MAX_LAYERS {
            return false;
        }
        id.truncate(71);
        let new = self.started.insert(id.clone());
        let done = finished && self.done.insert(id);
        new || done
    }

    /// The counts as a progress record for `image`, begun at `since`.
    pub(crate) fn progress(&self, image: &str, since: u64) -> PullProgress {
        PullProgress {
            image: image.to_owned(),
            since,
            layers_started: self.started.len() as u32,
            layers_done: self.done.len() as u32,
            total_known: self.total_known,
        }
    }

    pub(crate) fn layers(&self) -> u32 {
        self.started.len() as u32
    }
}

/// How a pull in progress reads in STATUS and `nodeward status`: `2 of 5 layers` (docker),
/// `2 layers done, 3 begun` (podman, rkt), with the time it has taken.
pub fn describe(p: &PullProgress, now: u64) -> String {
    let took = crate::text::duration_words(now.saturating_sub(p.since));
    let layers = match (p.total_known, p.layers_started) {
        (_, 0) => "no layer yet".to_owned(),
        (true, total) => format!("{} of {total} layers", p.layers_done),
        (false, begun) => format!("{} layers done, {begun} begun", p.layers_done),
    };
    format!(
        "pulling {} for {took}: {layers}",
        crate::text::printable(&p.image)
    )
}

/// What a finished pull came to: `pulled IMAGE: 3 layers, 412.0 MiB in 38 s (10.8 MiB/s)`.
pub fn describe_done(d: &PullDone) -> String {
    let mib = |b: f64| b / f64::from(1 << 20);
    let took = crate::text::duration_words((d.millis + 500) / 1000);
    let size = match (d.bytes, d.rate()) {
        (Some(b), Some(r)) => format!(", {:.1} MiB in {took} ({:.1} MiB/s)", mib(b as f64), mib(r)),
        (Some(b), None) => format!(", {:.1} MiB in {took}", mib(b as f64)),
        (None, _) => format!(" in {took}"),
    };
    format!(
        "pulled {}: {} layers{size}",
        crate::text::printable(&d.image),
        d.layers
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// podman 4/5 without a terminal (containers/image's progress in line mode).
    const PODMAN: &str = "Trying to pull quay.io/poseidon/kubelet@sha256:0123…\n\
Getting image source signatures\n\
Copying blob sha256:2e6e20c8e2e69fa5c3fcc310f419975cef5fbeb6f7f2fe1374071141281b6a06\n\
Copying blob sha256:9ac1d4c6b2e1a4f7a3e2c1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0\n\
Copying blob sha256:2e6e20c8e2e69fa5c3fcc310f419975cef5fbeb6f7f2fe1374071141281b6a06 done   | \n\
Copying blob sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef skipped: already exists\n\
Copying config sha256:aaaa done   | \n\
Writing manifest to image destination\n";

    /// docker without a terminal.
    const DOCKER: &str = "v1.34.1: Pulling from poseidon/kubelet\n\
2e6e20c8e2e6: Pulling fs layer\n\
9ac1d4c6b2e1: Pulling fs layer\n\
5f70bf18a086: Already exists\n\
9ac1d4c6b2e1: Waiting\n\
2e6e20c8e2e6: Verifying Checksum\n\
2e6e20c8e2e6: Download complete\n\
2e6e20c8e2e6: Pull complete\n\
Digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n";

    fn count(text: &str) -> PullProgress {
        let mut c = LayerCount::default();
        for l in text.lines() {
            c.line(l);
        }
        c.progress("img", 100)
    }

    #[test]
    fn podmans_lines_count_layers_begun_and_done_config_not_a_layer() {
        let p = count(PODMAN);
        assert_eq!((p.layers_started, p.layers_done, p.total_known), (3, 2, false));
        assert_eq!(describe(&p, 172), "pulling img for 1m12s: 2 layers done, 3 begun");
    }

    #[test]
    fn dockers_lines_announce_the_total() {
        let p = count(DOCKER);
        assert_eq!((p.layers_started, p.layers_done, p.total_known), (3, 2, true));
        assert_eq!(describe(&p, 105), "pulling img for 5s: 2 of 3 layers");
    }

    /// As the real rkt v1.30.0 printed them fetching the test cluster's kubelet image.
    #[test]
    fn rkts_lines_count_a_layer_done_when_its_sizes_meet() {
        let p = count(
            "Downloading sha256:2e85c4b2e45 93.7 MB / 93.7 MB\n\
             Downloading sha256:c75ce81f239 38.4 MB / 144 MB\n\
             Downloading sha256:2e85c4b2e45 93.7 MB / 93.7 MB\n",
        );
        assert_eq!((p.layers_started, p.layers_done), (2, 1));
        let p = count("Downloading sha256:c75ce81f239 144 MB / 144 MB\n");
        assert_eq!((p.layers_started, p.layers_done), (1, 1));
    }

    #[test]
    fn ids_kept_are_capped() {
        let mut c = LayerCount::default();
        for i in 0..MAX_LAYERS + 100 {
            c.line(&format!("Copying blob sha256:{i:064x} done"));
        }
        assert_eq!(c.progress("i", 0).layers_started, MAX_LAYERS as u32);
        assert!(
            !c.line(&format!("Copying blob sha256:{:064x}", MAX_LAYERS + 5)),
            "a new id past the cap"
        );
    }

    #[test]
    fn other_lines_change_nothing() {
        let mut c = LayerCount::default();
        for l in [
            "Trying to pull x",
            "Digest: sha256:00",
            "abc: Pull complete",
            "Copying blob",
            "",
        ] {
            assert!(!c.line(l), "{l:?}");
        }
        assert_eq!(c.layers(), 0);
        assert_eq!(describe(&c.progress("x", 0), 0), "pulling x for 0s: no layer yet");
    }

    #[test]
    fn the_rate_needs_a_size_and_time() {
        let done = PullDone {
            image: "x".into(),
            at: 0,
            millis: 4000,
            layers: 3,
            bytes: Some(400_000_000),
        };
        assert_eq!(done.rate(), Some(100_000_000.0));
        assert_eq!(
            describe_done(&done),
            "pulled x: 3 layers, 381.5 MiB in 4s (95.4 MiB/s)"
        );
        assert_eq!(
            PullDone {
                bytes: None,
                ..done.clone()
            }
            .rate(),
            None
        );
        assert_eq!(PullDone { millis: 0, ..done }.rate(), None);
    }
}
