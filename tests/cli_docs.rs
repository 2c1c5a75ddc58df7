//! Shell completions and the man page are generated from the command line's own definition: every
//! subcommand `nodeward --help` lists is in each, and the page is valid roff (groff, when present).

mod common;

use std::process::Command;

fn run(args: &[&str]) -> String {
    let out = Command::new(common::BIN)
        .args(args)
        .output()
        .expect("run nodeward");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The subcommands `--help` lists (the lines under "Commands:").
fn subcommands() -> Vec<String> {
    let help = run(&["--help"]);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn completions_know_every_subcommand() {
    let commands = subcommands();
    assert!(commands.len() >= 12, "{commands:?}");
    for shell in ["bash", "zsh", "fish"] {
        let script = run(&["completions", shell]);
        for c in &commands {
            assert!(script.contains(c.as_str()), "{shell} completion lacks {c}");
        }
    }
    // And the kubelet's own subcommands, the newest included.
    let bash = run(&["completions", "bash"]);
    for c in ["retry", "release", "show"] {
        assert!(bash.contains(c), "bash completion lacks kubelet {c}");
    }
}

#[test]
fn the_man_page_names_every_subcommand_and_is_valid_roff() {
    let page = run(&["manpage"]);
    assert!(
        page.contains(".TH nodeward 1"),
        "{}",
        &page[..200.min(page.len())]
    );
    // Each subcommand's own SEE ALSO entry, `nodeward\-NAME(1)`: a plain word would be found in
    // any page.
    for c in subcommands() {
        assert!(
            page.contains(&format!("nodeward\\-{c}(1)")),
            "man page lacks nodeward-{c}(1)"
        );
    }
    assert!(
        !page.contains("nodeward\\-invented(1)"),
        "control: a name the page lacks is not found"
    );
    assert!(page.contains(".SH \"EXIT STATUS\""));
    let Ok(mut groff) = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        // Said loudly: CI installs groff (.ci/run); a workstation may skip it knowingly.
        assert!(
            std::env::var_os("NODEWARD_SKIP_GROFF").is_some(),
            "groff is not installed: the man page's roff cannot be checked (install groff-base, or set NODEWARD_SKIP_GROFF=1 to skip knowingly)"
        );
        eprintln!("NODEWARD_SKIP_GROFF: groff not installed: roff NOT checked");
        return;
    };
    std::io::Write::write_all(groff.stdin.as_mut().expect("stdin"), page.as_bytes()).expect("write");
    let out = groff.wait_with_output().expect("groff");
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "groff warns: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
