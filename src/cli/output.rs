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

/// The version of every `--output json` document's shape. Documents say it (`schema_version`)
/// with their `kind`; each kind's schema is `docs/schemas/KIND.v1.json`, checked against real
/// output by `cargo test --test json_schemas`. Adding a field keeps the version; removing or
/// changing one makes it 2.
pub const SCHEMA_VERSION: u64 = 1;

/// What a JSON document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doc {
    /// `plan`
    Plan,
    /// `apply`, `bundle install`
    Report,
    /// `status`
    Status,
    /// `check`
    Check,
    /// `config`
    Config,
    /// `bundle list`: its rows under `entries`
    BundleList,
    /// `modules explain`: one per module asked, under `modules`
    ModulesExplain,
    /// `converge`, `kubelet restart|stop|start|retry|release`
    Answer,
    /// `kubelet show`
    KubeletShow,
}

impl Doc {
    #[cfg(test)]
    pub const ALL: [Doc; 9] = [
        Doc::Plan,
        Doc::Report,
        Doc::Status,
        Doc::Check,
        Doc::Config,
        Doc::BundleList,
        Doc::ModulesExplain,
        Doc::Answer,
        Doc::KubeletShow,
    ];

    pub fn kind(self) -> &'static str {
        match self {
            Doc::Plan => "plan",
            Doc::Report => "report",
            Doc::Status => "status",
            Doc::Check => "check",
            Doc::Config => "config",
            Doc::BundleList => "bundle-list",
            Doc::ModulesExplain => "modules-explain",
            Doc::Answer => "answer",
            Doc::KubeletShow => "kubelet-show",
        }
    }

    /// Where a document that is a list keeps it.
    fn items(self) -> &'static str {
        match self {
            Doc::ModulesExplain => "modules",
            _ => "entries",
        }
    }
}

/// A document as pretty JSON on stdout, as serde escaped it, with its `schema_version` and `kind`.
pub fn write_json<T: serde::Serialize + ?Sized>(doc: Doc, value: &T) -> anyhow::Result<()> {
    let mut map = match serde_json::to_value(value)? {
        serde_json::Value::Object(map) => map,
        other => serde_json::Map::from_iter([(doc.items().to_owned(), other)]),
    };
    map.insert("schema_version".into(), SCHEMA_VERSION.into());
    map.insert("kind".into(), doc.kind().into());
    write_raw(format!("{}\n", serde_json::to_string_pretty(&map)?).as_bytes());
    Ok(())
}

/// The text form from `human`, or the value as pretty JSON.
pub fn emit<T: serde::Serialize>(
    output: Output,
    doc: Doc,
    value: &T,
    human: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    match output {
        Output::Human => write_stdout(format_args!("{}", human())),
        Output::Json => write_json(doc, value)?,
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

#[cfg(test)]
mod tests {
    #[test]
    fn every_kind_has_its_schema_in_the_manual() {
        for doc in super::Doc::ALL {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("docs/schemas/{}.v1.json", doc.kind()));
            assert!(path.is_file(), "{} has no schema", path.display());
        }
    }
}
