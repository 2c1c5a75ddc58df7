//! `nodeward bundle verify|list|install|recover`: a bundle file worked with directly.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Subcommand, ValueEnum};

use nodeward::bundle::pipeline::{self, Intent, Verified};
use nodeward::bundle::settings::Layout;
use nodeward::bundle::{fetch, install};
use nodeward::config::Settings;
use nodeward::host::lock::{FileLock, ONE_SHOT_WAIT as LOCK_WAIT};
use nodeward::plan::{StepPlan, render};
use nodeward::steps::{self, Step, bundle as step};

use super::env::Env;
use super::exit::Outcome;
use super::output::{Doc, Output, emit, write_stdout};

#[derive(Subcommand)]
pub enum BundleCommand {
    /// Parse a bundle and check that the layout places every entry (and its sha256, if given).
    Verify {
        file: PathBuf,
        #[arg(long, value_parser = sha256_arg)]
        sha256: Option<String>,
        #[arg(long, value_enum)]
        layout: Option<LayoutArg>,
    },
    /// List a bundle's entries with their sizes and destinations (never their contents).
    List {
        file: PathBuf,
        #[arg(long, value_enum)]
        layout: Option<LayoutArg>,
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// Install a bundle file now: the same code path as `apply`'s bundle step (honours --root).
    /// Pinned by `--sha256` (else by bundle.sha256, if configured), it may remove files an
    /// earlier bundle installed.
    Install {
        file: PathBuf,
        #[arg(long, value_parser = sha256_arg)]
        sha256: Option<String>,
        #[arg(long, value_enum)]
        layout: Option<LayoutArg>,
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// Finish or undo an install that was interrupted (done automatically by every install).
    Recover,
}

/// `--sha256`: 64 hex digits, checked before anything is read (a typo or `0000` is a usage error).
fn sha256_arg(s: &str) -> Result<String, String> {
    if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(format!("{s:?} is not a sha256 (64 hex digits)"))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    Controller,
    Worker,
    Custom,
}

pub fn run(env: &Env, cmd: BundleCommand) -> anyhow::Result<Outcome> {
    let mut settings = env.load()?.settings;
    match cmd {
        BundleCommand::Verify { file, sha256, layout } => {
            set_layout(&mut settings, layout)?;
            verify(&settings, &file, sha256.as_deref()).map_err(|e| layout_hint(e, &settings, layout))
        }
        BundleCommand::List { file, layout, output } => {
            set_layout(&mut settings, layout)?;
            list(&settings, &file, output).map_err(|e| layout_hint(e, &settings, layout))
        }
        BundleCommand::Install {
            file,
            sha256,
            layout,
            output,
        } => {
            set_layout(&mut settings, layout)?;
            install_file(env, &settings, &file, sha256.as_deref(), output)
        }
        BundleCommand::Recover => recover(env),
    }
}

/// An entry no rule places, with no `--layout` given: say which layout was used and how to name
/// another (a controller's bundle checked on a worker, say).
fn layout_hint(e: anyhow::Error, settings: &Settings, given: Option<LayoutArg>) -> anyhow::Error {
    if given.is_some() || !e.to_string().contains("no layout rule matches it") {
        return e;
    }
    let layout = settings.bundle.layout.name();
    let used = if settings.bundle.layout_from_role {
        format!("{layout} (from node.role)")
    } else {
        layout.to_owned()
    };
    anyhow::anyhow!(
        "{} (checked with the {used} layout; for another node's bundle, name its layout: --layout controller, worker or custom)",
        super::output::said_once(&e)
    )
}

fn set_layout(settings: &mut Settings, layout: Option<LayoutArg>) -> anyhow::Result<()> {
    if let Some(l) = layout {
        let layout = match l {
            LayoutArg::Controller => Layout::Controller,
            LayoutArg::Worker => Layout::Worker,
            LayoutArg::Custom => Layout::Custom,
        };
        settings
            .bundle
            .relayout(layout, false)
            .map_err(|e| anyhow::anyhow!("--layout {}: {e}", layout.name()))?;
    }
    Ok(())
}

fn read(settings: &Settings, file: &Path) -> anyhow::Result<Vec<u8>> {
    Ok(fetch::read_file(
        file,
        &file.display().to_string(),
        settings.bundle.max_bytes,
    )?)
}

fn recover(env: &Env) -> anyhow::Result<Outcome> {
    let _lock = FileLock::writer(env.root())?;
    let found = install::recover(env.root())?;
    let said = if found {
        "finished an interrupted install"
    } else {
        "nothing to recover"
    };
    write_stdout(format_args!("{said}\n"));
    Ok(Outcome::Ok)
}

fn verify(settings: &Settings, file: &Path, sha256: Option<&str>) -> anyhow::Result<Outcome> {
    let name = file.display().to_string();
    let verified = pipeline::verify(
        &settings.bundle,
        read(settings, file)?,
        &name,
        Intent::Install { pin: sha256 },
    )?;
    write_stdout(format_args!(
        "{name}: ok: {} entries, {} bytes, all placed by the layout\n",
        verified.bundle.entries.len(),
        verified.size
    ));
    Ok(Outcome::Ok)
}

fn list(settings: &Settings, file: &Path, output: Output) -> anyhow::Result<Outcome> {
    let name = file.display().to_string();
    let Verified {
        bundle,
        rules,
        placements,
        ..
    } = pipeline::verify(&settings.bundle, read(settings, file)?, &name, Intent::Look)?;
    let rows: Vec<serde_json::Value> = bundle
        .entries
        .iter()
        .map(|e| {
            let p = placements.iter().find(|p| p.entry == e.path);
            let r = p.map(|p| &rules[p.rule]);
            serde_json::json!({
                "entry": e.path.to_string(),
                "bytes": e.content.len(),
                "sha256": install::sha256_hex(&e.content),
                "dest": p.map(|p| p.dest.to_string()),
                "mode": r.map(|r| r.mode.to_string()),
                "owner": r.map(|r| format!("{}:{}", r.owner, r.group)),
            })
        })
        .collect();
    emit(output, Doc::BundleList, &rows, || render_list(&rows))?;
    // Listed all the same (that is what a look is for), but said, and the exit code says so.
    if let Some(why) = bundle.cut_short() {
        eprintln!(
            "nodeward: warning: {}: looks cut short: {}",
            nodeward::text::printable(&name),
            nodeward::text::printable(&why)
        );
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Ok)
}

/// `bundle list` for a person: entry, size, and where it goes.
fn render_list(rows: &[serde_json::Value]) -> String {
    let mut out = String::new();
    for r in rows {
        let dest = match (r["dest"].as_str(), r["mode"].as_str(), r["owner"].as_str()) {
            (Some(d), Some(m), Some(o)) => format!("→ {d} {m} {o}"),
            _ => "(no layout rule)".to_owned(),
        };
        // The size as a number: a JSON value's Display would ignore the width.
        out.push_str(&format!(
            "{:50} {:>8}  {dest}\n",
            r["entry"].as_str().unwrap_or(""),
            r["bytes"].as_u64().unwrap_or(0)
        ));
    }
    out
}

/// `apply --only bundle` with the bundle's bytes taken from `file`: the same lock, recovery, plan,
/// refusals and transaction.
fn install_file(
    env: &Env,
    settings: &Settings,
    file: &Path,
    sha256: Option<&str>,
    output: Output,
) -> anyhow::Result<Outcome> {
    let bytes = read(settings, file)?;
    let ctx = env.context(settings).context("observing the host")?;
    let name = file.display().to_string();
    let pin = sha256.or(settings.bundle.sha256.as_ref().map(|h| h.as_str()));
    // The closure runs once, for the bundle step; the bytes move into its plan.
    let mut bytes = Some(bytes);
    let report = steps::apply_with(&ctx, &[Step::Bundle], LOCK_WAIT, |ctx, s| {
        let bytes = bytes.take().unwrap_or_default();
        step::plan_bytes(ctx, bytes, &name, pin)
            .unwrap_or_else(|e| StepPlan::failed(s, step::failure_kind(&e), e))
    })?;
    emit(output, Doc::Report, &report, || render::report(&report))?;
    Ok(Outcome::of_steps(report.failure(), false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_rows_read_as_entry_size_destination() {
        let rows = vec![
            serde_json::json!({"entry": "tls/ca.crt", "bytes": 1147, "dest": "/etc/kubernetes/pki/ca.crt", "mode": "0644", "owner": "root:root"}),
            serde_json::json!({"entry": "extra/readme", "bytes": 3, "dest": null, "mode": null, "owner": null}),
        ];
        assert_eq!(
            render_list(&rows),
            format!(
                "{:50} {:>8}  → /etc/kubernetes/pki/ca.crt 0644 root:root\n{:50} {:>8}  (no layout rule)\n",
                "tls/ca.crt", 1147, "extra/readme", 3
            )
        );
    }
}
