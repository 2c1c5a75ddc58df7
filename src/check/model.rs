//! What a check is and what it finds: the vocabulary every check and renderer shares.

use std::fmt;

use serde::Serialize;

use super::observe::Observation;
use crate::config::Settings;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    /// Skipped, with the reason in `observed` (nothing to check here, or nothing could be read).
    Skipped,
    /// Listed in the ignore list: shown, never counted.
    Ignored,
    Warn,
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Pass => "pass",
            Status::Skipped => "skipped",
            Status::Ignored => "ignored",
            Status::Warn => "warn",
            Status::Fail => "fail",
        })
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub(crate) name: &'static str,
    pub(crate) status: Status,
    /// What was seen (or, when skipped, why).
    pub(crate) observed: String,
    pub(crate) expected: String,
    /// Why it matters, in one line.
    pub(crate) why: &'static str,
    /// How to fix it: a nodeward step or key, or the host-side action. Empty when passing.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) fix: String,
}

/// A check's fixed parts: name, expectation and why; the decision fills in the rest.
pub struct Check {
    pub(crate) name: &'static str,
    pub(crate) why: &'static str,
    pub(crate) decide: fn(&Observation, &Settings) -> Outcome,
}

/// What a decision found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub(crate) status: Status,
    pub(crate) observed: String,
    pub(crate) expected: String,
    pub(crate) fix: String,
}

impl Outcome {
    pub(crate) fn pass(observed: impl Into<String>, expected: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Pass,
            observed: observed.into(),
            expected: expected.into(),
            fix: String::new(),
        }
    }
    pub(crate) fn skipped(reason: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Skipped,
            observed: reason.into(),
            expected: String::new(),
            fix: String::new(),
        }
    }
    pub(crate) fn warn(
        observed: impl Into<String>,
        expected: impl Into<String>,
        fix: impl Into<String>,
    ) -> Outcome {
        Outcome {
            status: Status::Warn,
            observed: observed.into(),
            expected: expected.into(),
            fix: fix.into(),
        }
    }
    pub(crate) fn fail(
        observed: impl Into<String>,
        expected: impl Into<String>,
        fix: impl Into<String>,
    ) -> Outcome {
        Outcome {
            status: Status::Fail,
            ..Outcome::warn(observed, expected, fix)
        }
    }
}
