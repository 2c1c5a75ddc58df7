//! `nodeward modules explain`.

use std::fmt::Write;

use anyhow::Context as _;
use nodeward::steps::modules::Explained;

use super::env::Env;
use super::exit::Outcome;
use super::output::{Doc, Output, emit};

pub fn explain(env: &Env, names: &[String], output: Output) -> anyhow::Result<Outcome> {
    let loaded = env.load()?;
    let ctx = env.context(&loaded.settings).context("observing the host")?;
    let explained = nodeward::steps::modules::explain(&ctx, names)?;
    emit(output, Doc::ModulesExplain, &explained, || render(&explained))?;
    Ok(Outcome::of(explained.iter().any(|e| e.error.is_some()), false))
}

/// The explanation, for a person.
pub fn render(all: &[Explained]) -> String {
    let mut out = String::new();
    for e in all {
        let _ = writeln!(out, "{} (kernel {}):", e.requested, e.kernel);
        if let Some(err) = &e.error {
            let _ = writeln!(out, "  ! {err}");
            continue;
        }
        if e.builtin {
            let _ = writeln!(out, "  built into the kernel: nothing to load");
        }
        for (i, l) in e.loads.iter().enumerate() {
            let _ = writeln!(out, "  {}. {} {}", i + 1, l.name, l.file);
            let _ = writeln!(out, "     {}", l.why);
            if !l.options.is_empty() {
                let _ = writeln!(out, "     options: {}", l.options);
            }
        }
        for s in &e.skipped {
            let _ = writeln!(out, "  - skipped: {s}");
        }
        for w in &e.weak {
            let _ = writeln!(out, "  - not loaded: {w}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeward::steps::modules::ExplainedLoad;

    #[test]
    fn a_chain_with_a_soft_dependency_and_an_error() {
        let ok = Explained {
            requested: "libcrc32c".into(),
            kernel: "6.1.0-13-amd64".into(),
            builtin: false,
            loads: vec![
                ExplainedLoad {
                    name: "crc32c_generic".into(),
                    file: "kernel/crypto/crc32c_generic.ko.xz".into(),
                    soft: true,
                    why: "soft pre-dependency of libcrc32c (modules.softdep:3)".into(),
                    options: String::new(),
                },
                ExplainedLoad {
                    name: "libcrc32c".into(),
                    file: "kernel/lib/libcrc32c.ko.xz".into(),
                    soft: false,
                    why: "requested".into(),
                    options: "debug=1".into(),
                },
            ],
            skipped: vec!["crc32c_intel: not in this kernel".into()],
            weak: vec![],
            error: None,
        };
        let missing = Explained {
            requested: "nope".into(),
            kernel: "6.1.0-13-amd64".into(),
            builtin: false,
            loads: vec![],
            skipped: vec![],
            weak: vec![],
            error: Some("module nope not found".into()),
        };
        assert_eq!(
            render(&[ok, missing]),
            "libcrc32c (kernel 6.1.0-13-amd64):\n\
             \x20 1. crc32c_generic kernel/crypto/crc32c_generic.ko.xz\n\
             \x20    soft pre-dependency of libcrc32c (modules.softdep:3)\n\
             \x20 2. libcrc32c kernel/lib/libcrc32c.ko.xz\n\
             \x20    requested\n\
             \x20    options: debug=1\n\
             \x20 - skipped: crc32c_intel: not in this kernel\n\
             nope (kernel 6.1.0-13-amd64):\n\
             \x20 ! module nope not found\n"
        );
    }
}
