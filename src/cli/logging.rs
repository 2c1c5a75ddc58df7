//! Where logs go: the journal, with structured fields, when systemd connected stderr to it
//! (`$JOURNAL_STREAM`); otherwise stderr as text. stdout carries plans and reports.

use std::io::IsTerminal;

/// The daemon logs at INFO by default (each repair is worth a line); one-shot commands at WARN.
pub fn init(verbose: u8, quiet: u8, daemon: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let base = if daemon { 1 } else { 0 };
    let level = match (verbose + base, quiet) {
        (_, q) if q > 0 => tracing::Level::ERROR,
        (0, _) => tracing::Level::WARN,
        (1, _) => tracing::Level::INFO,
        (2, _) => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let filter = tracing_subscriber::filter::LevelFilter::from_level(level);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        // Fields keep their names (MESSAGE_ID, STEP, CHECK…) rather than journald's F_ prefix, so
        // `journalctl MESSAGE_ID=…` and the catalog's @STEP@ work.
        if let Ok(journald) = tracing_journald::layer().map(|l| l.with_field_prefix(None)) {
            tracing_subscriber::registry().with(filter).with(journald).init();
            return;
        }
    }
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
