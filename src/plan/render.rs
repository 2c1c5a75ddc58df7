//! How plans and reports read to a person. JSON output is the serde form of the same types.

use std::fmt::Write;

use super::change::{Action, Change, FileOp, KernelWhy, KubeletOp, Pending, Plan, Report};
use super::step::Step;

/// The kubelet's start or replacement, with what changes from the running container's spec.
fn kubelet(
    op: KubeletOp,
    runtime: &str,
    image: &str,
    hash: &str,
    diff: &[String],
    existing: Option<&str>,
) -> String {
    let existing = existing.unwrap_or("?");
    let mut s = match op {
        KubeletOp::Start => format!("start with {runtime} from {image} (spec {hash})"),
        KubeletOp::ReplaceStale => {
            format!("remove the exited container {existing}, start from {image} (spec {hash})")
        }
        KubeletOp::Replace => {
            format!("replace container {existing} (stop gracefully), start from {image} (spec {hash})")
        }
    }
    .to_lowercase();
    for d in diff {
        let _ = write!(s, "\n      {d}");
    }
    s
}

fn load_module(file: &str, how: &str, params: &str, needed_by: Option<&str>) -> String {
    let mut s = format!("load {file} ({how})");
    if !params.is_empty() {
        let _ = write!(s, " with {params}");
    }
    if let Some(m) = needed_by {
        let _ = write!(s, " (needed by {m})");
    }
    s
}

fn kernel_value(from: Option<&str>, to: &str, why: KernelWhy) -> String {
    let verb = match why {
        KernelWhy::Set => "set",
        KernelWhy::Raise => "raise",
        KernelWhy::Lower => "lower",
    };
    match from {
        Some(from) => format!("{verb} {from} → {to}"),
        None => format!("{verb} → {to} (once its module is loaded)"),
    }
}

/// One change as a short phrase: `directory 0755 root:root`, `mode 0755 → 0750`.
pub(crate) fn describe(action: &Action) -> String {
    match action {
        Action::CreateDir {
            mode,
            owner,
            label,
            parent,
            ..
        } => {
            let mut s = format!("create directory {mode} {owner}");
            if let Some(label) = label {
                let _ = write!(s, " label {label}");
            }
            if *parent {
                s.push_str(" (parent)");
            }
            s
        }
        Action::Chmod { from, to } => format!("mode {from} → {to}"),
        Action::Chown { from, to, .. } => format!("owner {from} → {to}"),
        Action::Relabel { from, to } => format!("label {} → {to}", from.as_deref().unwrap_or("(none)")),
        Action::WriteFile {
            mode,
            owner,
            bytes,
            replaces,
            label,
            ..
        } => {
            let verb = if *replaces { "update" } else { "create" };
            let mut s = format!("{verb} file {mode} {owner} ({bytes} bytes)");
            if let Some(label) = label {
                let _ = write!(s, " label {label}");
            }
            s
        }
        Action::Kubelet {
            op,
            runtime,
            image,
            hash,
            diff,
            existing,
        } => kubelet(*op, runtime, image, hash, diff, existing.as_deref()),
        Action::ReloadNetworkManager => "reload over D-Bus (its drop-in changed)".to_owned(),
        Action::ReloadNetworkd => "reload over D-Bus (its .network file changed)".to_owned(),
        Action::ImportImages { why } => format!("check every blob, then import ({why})"),
        Action::RemoveFile => "remove (no longer wanted)".to_owned(),
        Action::RecoverBundle { pending } => match pending {
            Pending::Forward(n) => {
                format!("finish an interrupted install ({n} operation(s) past its commit point)")
            }
            Pending::Back(n) => {
                format!("roll back an interrupted install ({n} staged file(s))")
            }
        },
        Action::ReloadUnit => {
            "reload (or restart if running) through systemd: its drop-in changed".to_owned()
        }
        Action::InstallBundle { files, .. } => {
            let count = |op| files.iter().filter(|f| f.op == op).count();
            format!(
                "install: {} to create, {} to update, {} to delete (all or nothing)",
                count(FileOp::Create),
                count(FileOp::Update),
                count(FileOp::Delete)
            )
        }
        Action::LoadModule {
            file,
            method,
            params,
            needed_by,
        } => load_module(file, method.how(), params, needed_by.as_deref()),
        Action::SetKernelValue { from, to, why } => kernel_value(from.as_deref(), to, *why),
        Action::MakeShared { from } => format!("make the mount shared, recursively (now {from})"),
        Action::Symlink { target } => format!("link → {target}"),
    }
}

fn sigil(action: &Action) -> char {
    match action {
        Action::CreateDir { .. }
        | Action::WriteFile { replaces: false, .. }
        | Action::LoadModule { .. }
        | Action::Symlink { .. } => '+',
        Action::RemoveFile => '-',
        _ => '~',
    }
}

fn change_lines(out: &mut String, changes: &[Change]) {
    let width = changes
        .iter()
        .map(|c| c.subject.chars().count())
        .max()
        .unwrap_or(0);
    for c in changes {
        let _ = writeln!(
            out,
            "  {} {:width$}  {}",
            sigil(&c.action),
            c.subject,
            describe(&c.action)
        );
        if let Action::InstallBundle { files, .. } = &c.action {
            let w = files.iter().map(|f| f.path.len()).max().unwrap_or(0);
            for f in files {
                let (mark, what) = match f.op {
                    FileOp::Create => ('+', "create"),
                    FileOp::Update => ('~', "update"),
                    FileOp::Delete => ('-', "delete"),
                };
                let detail = match (f.mode, &f.owner, f.bytes) {
                    (Some(m), Some(o), Some(b)) => format!(" {m} {o} ({b} bytes)"),
                    _ => String::new(),
                };
                let _ = writeln!(out, "      {mark} {:w$}  {what}{detail}", f.path);
            }
        }
    }
}

/// One step's block: its changes, notes, and the error (`error` when planning, `failed` when
/// applying) or that there was nothing to do.
fn step_block(
    out: &mut String,
    step: Step,
    changes: &[Change],
    notes: &[String],
    error: Option<(&str, &str)>,
) {
    let _ = writeln!(out, "{step}:");
    change_lines(out, changes);
    for note in notes {
        let _ = writeln!(out, "  - {note}");
    }
    if let Some((word, err)) = error {
        let _ = writeln!(out, "  ! {word}: {err}");
    } else if changes.is_empty() {
        let _ = writeln!(out, "  = no changes");
    }
}

/// The plan as `plan` prints it.
pub fn plan(plan: &Plan) -> String {
    let mut out = String::new();
    if let Some(c) = &plan.container {
        let _ = writeln!(out, "In a container: {c}.");
    }
    for s in &plan.steps {
        let problem = s.problem().map(|(e, _)| e);
        let error = problem.as_deref().map(|e| ("error", e));
        step_block(&mut out, s.step, &s.changes, &s.notes, error);
    }
    let n = plan.change_count();
    let failed = plan.failed_steps().count();
    match (n, failed) {
        (0, 0) => out.push_str("No changes: the node is converged.\n"),
        (n, 0) => {
            let _ = writeln!(out, "{n} change(s) to make.");
        }
        (n, f) => {
            let _ = writeln!(out, "{n} change(s) to make; {f} step(s) could not be planned.");
        }
    }
    out
}

/// The report as `apply` prints it.
pub fn report(report: &Report) -> String {
    let mut out = String::new();
    if let Some(c) = &report.container {
        let _ = writeln!(out, "In a container: {c}.");
    }
    for s in &report.steps {
        let error = s.error.as_deref().map(|e| ("failed", e));
        step_block(&mut out, s.step, &s.applied, &s.notes, error);
    }
    let n = report.change_count();
    let failed: Vec<String> = report.failed_steps().map(|s| s.step.to_string()).collect();
    if failed.is_empty() {
        let _ = writeln!(out, "Applied {n} change(s); the node is converged.");
    } else {
        let _ = writeln!(out, "Applied {n} change(s); failed: {}.", failed.join(", "));
    }
    out
}
