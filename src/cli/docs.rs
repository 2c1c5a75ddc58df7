//! `nodeward completions SHELL` and `nodeward manpage`: generated from the command line's own
//! definition (clap), so they never drift from what the binary accepts.

use std::io::Write;

use super::exit::Outcome;

pub fn completions(mut cmd: clap::Command, shell: clap_complete::Shell) -> anyhow::Result<Outcome> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "nodeward", &mut out);
    std::io::stdout().write_all(&out)?;
    Ok(Outcome::Ok)
}

pub fn manpage(cmd: clap::Command) -> anyhow::Result<Outcome> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut out)?;
    // The page's own section on exit codes and files, after clap's synopsis and options.
    out.extend_from_slice(EXTRA.as_bytes());
    std::io::stdout().write_all(&out)?;
    Ok(Outcome::Ok)
}

const EXTRA: &str = r#".SH "EXIT STATUS"
0 success (apply: converged); 1 a step failed permanently, or a request was refused; 2 usage;
3 invalid configuration; 4 changes pending (plan \-\-detailed\-exitcode, status); 5 check: warnings;
6 check: failures; 7 a step failed, none permanently (it waits or may pass: run again later).
.SH FILES
.TP
/usr/lib/nodeward/config.d, /run/nodeward/config.d, /etc/nodeward/config.d
configuration fragments (*.toml), later directories overriding earlier ones
.TP
/run/nodeward/state.json
the daemon's state (nodeward status, nodeward wait)
.TP
/var/lib/nodeward
the bundle's install journal, the last healthy kubelet spec, the FleetLock record
.SH "SEE ALSO"
The manual in /usr/share/doc/nodeward/docs (configuration.md, operations.md, fleet.md, troubleshooting.md).
"#;
