//! Process exit codes, documented in docs/operations.md. A configuration error has its own code so the unit
//! can stop systemd from restarting the agent in a loop on it (`RestartPreventExitStatus=3`).

/// Converged (apply), or the command did what was asked.
pub const OK: u8 = 0;
/// One or more steps failed, at least one permanently (only a change to the configuration or the
/// host fixes it); details are printed per step.
pub const FAILED: u8 = 1;
/// One or more steps failed, none permanently: each waits for something to arrive (a kubeconfig,
/// the runtime's socket, a download) or may pass (a server, the bus). Running again later helps.
pub const RETRY: u8 = 7;
/// Command-line usage error (as clap reports it).
pub const USAGE: u8 = 2;
/// The configuration is invalid; retrying without fixing it will not help.
pub const CONFIG: u8 = 3;
/// `plan --detailed-exitcode` or `status`: changes are pending.
pub const PENDING: u8 = 4;
/// `check`: every check passed or was skipped, but some warn.
pub const CHECK_WARNINGS: u8 = 5;
/// `check`: one or more checks failed.
pub const CHECK_FAILED: u8 = 6;
