//! What commands print: plans, reports and documents on stdout, as text or JSON.

use clap::ValueEnum;

use super::exit::Outcome;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Human,
    Json,
}

/// Writes to stdout; a closed pipe (`nodeward status | head`) ends the process quietly, as other
/// command-line tools do, instead of panicking.
pub fn write_stdout(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(text) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(i32::from(Outcome::Ok.code()));
        }
        eprintln!("nodeward: cannot write to stdout: {e}");
        std::process::exit(i32::from(Outcome::Failed.code()));
    }
}

/// The text form from `human`, or the value as pretty JSON.
pub fn emit<T: serde::Serialize>(
    output: Output,
    value: &T,
    human: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    match output {
        Output::Human => write_stdout(format_args!("{}", human())),
        Output::Json => write_stdout(format_args!("{}\n", serde_json::to_string_pretty(value)?)),
    }
    Ok(())
}
