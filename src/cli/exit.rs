//! The one mapping from how a command ended to its exit code.

use nodeward::config::ConfigError;
use nodeward::daemon::DaemonError;
use nodeward::exit;
use nodeward::plan::FailureKind;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the node is converged (or nothing was asked of it).
    Ok,
    /// Changes are pending (`plan --detailed-exitcode`, `status`).
    Pending,
    /// Something failed: a step permanently, a module, the command itself.
    Failed,
    /// Steps failed, none permanently: running again later helps.
    Retry,
    /// The configuration is wrong: retrying will not help.
    Config,
    /// The command line is wrong.
    Usage,
    /// `check`: warnings, no failures.
    CheckWarnings,
    /// `check`: failures.
    CheckFailed,
}

impl Outcome {
    pub fn code(self) -> u8 {
        match self {
            Outcome::Ok => exit::OK,
            Outcome::Pending => exit::PENDING,
            Outcome::Failed => exit::FAILED,
            Outcome::Retry => exit::RETRY,
            Outcome::Config => exit::CONFIG,
            Outcome::Usage => exit::USAGE,
            Outcome::CheckWarnings => exit::CHECK_WARNINGS,
            Outcome::CheckFailed => exit::CHECK_FAILED,
        }
    }

    /// After a plan or report: failed steps first, then pending changes when they count.
    pub fn of(failed: bool, pending: bool) -> Outcome {
        match (failed, pending) {
            (true, _) => Outcome::Failed,
            (false, true) => Outcome::Pending,
            (false, false) => Outcome::Ok,
        }
    }

    /// After steps ran or were planned: a permanent failure, or only failures that retrying can
    /// fix, then pending changes when they count.
    pub fn of_steps(failure: Option<FailureKind>, pending: bool) -> Outcome {
        match failure {
            Some(FailureKind::Permanent) => Outcome::Failed,
            Some(FailureKind::Waiting | FailureKind::Transient) => Outcome::Retry,
            None => Outcome::of(false, pending),
        }
    }

    /// For an error that ended the command: configuration errors are permanent and say so.
    pub fn of_error(e: &anyhow::Error) -> Outcome {
        let config = e
            .chain()
            .any(|c| c.is::<ConfigError>() || matches!(c.downcast_ref(), Some(DaemonError::Config(_))));
        if config { Outcome::Config } else { Outcome::Failed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_wins_over_pending_and_pending_over_ok() {
        assert_eq!(Outcome::of(true, true), Outcome::Failed);
        assert_eq!(Outcome::of(false, true), Outcome::Pending);
        assert_eq!(Outcome::of(false, false), Outcome::Ok);
        assert_eq!(
            Outcome::of_steps(Some(FailureKind::Permanent), true),
            Outcome::Failed
        );
        assert_eq!(
            Outcome::of_steps(Some(FailureKind::Waiting), false),
            Outcome::Retry
        );
        assert_eq!(Outcome::of_steps(Some(FailureKind::Transient), false).code(), 7);
        assert_eq!(Outcome::of_steps(None, true), Outcome::Pending);
        assert_eq!(Outcome::Pending.code(), 4);
    }

    #[test]
    fn a_config_error_anywhere_in_the_chain_is_a_config_outcome() {
        let e = anyhow::Error::new(ConfigError::Invalid {
            path: "/etc/nodeward/config.toml".into(),
            message: "bad".into(),
        })
        .context("loading configuration");
        assert_eq!(Outcome::of_error(&e), Outcome::Config);
        assert_eq!(Outcome::of_error(&anyhow::anyhow!("other")), Outcome::Failed);
    }
}
