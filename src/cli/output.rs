//! What commands print: plans, reports and documents on stdout, as text or JSON.

use clap::ValueEnum;

use super::exit::Outcome;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Human,
    Json,
}

/// Writes text for a person to stdout: whatever it quotes from the host (file names, kernel and
/// engine messages, container ids) has its control and deceptive characters escaped on the way.
pub fn write_stdout(text: std::fmt::Arguments<'_>) {
    let text = text.to_string();
    write_raw(nodeward::text::printable(&text).as_bytes());
}

/// Writes bytes to stdout as they are (JSON: its own escaping is for a parser, and rewriting its
/// strings would change the values); a closed pipe (`nodeward status | head`) ends the process
/// quietly, as other command-line tools do, instead of panicking.
fn write_raw(bytes: &[u8]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(i32::from(Outcome::Ok.code()));
        }
        eprintln!("nodeward: cannot write to stdout: {e}");
        std::process::exit(i32::from(Outcome::Failed.code()));
    }
}

/// A document as pretty JSON on stdout, as serde escaped it.
pub fn write_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    write_raw(format!("{}\n", serde_json::to_string_pretty(value)?).as_bytes());
    Ok(())
}

/// The text form from `human`, or the value as pretty JSON.
pub fn emit<T: serde::Serialize>(
    output: Output,
    value: &T,
    human: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    match output {
        Output::Human => write_stdout(format_args!("{}", human())),
        Output::Json => write_json(value)?,
    }
    Ok(())
}

/// The error and its causes, each said once: nodeward's error types already end their message
/// with their cause's, so a cause whose text is already there is not repeated (`cannot read: No
/// such file or directory (os error 2): No such file or directory (os error 2)`).
pub fn said_once(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    nodeward::text::printable(&out).into_owned()
}
