//! Where logs go: the journal, with structured fields, when systemd connected stderr to it
//! (`$JOURNAL_STREAM`); otherwise stderr as text. stdout carries plans and reports. Either way every
//! field is escaped (`text::printable`) where it is written, so no call site can forget it.

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
        // Fields keep their names (MESSAGE_ID, STEP, CHECK…) rather than a prefix, so
        // `journalctl MESSAGE_ID=…` and the catalog's @STEP@ work.
        if let Ok(journal) = super::journal::Journal::to(super::journal::SOCKET) {
            tracing_subscriber::registry().with(filter).with(journal).init();
            return;
        }
    }
    use tracing_subscriber::field::MakeExt;
    let fields = tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let text = nodeward::text::printable(&text);
        if field.name() == "message" {
            write!(w, "{text}")
        } else {
            write!(w, "{}={text}", field.name())
        }
    })
    .delimited(" ");
    tracing_subscriber::fmt()
        .with_max_level(level)
        .fmt_fields(fields)
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, and never when NO_COLOR is set (no-color.org).
        .with_ansi(
            std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .init();
}
