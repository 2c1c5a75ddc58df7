//! How check results read to a person: one line each, then why and the fix for what needs one.

use std::fmt::Write;

use super::model::{Finding, Status};

pub fn findings(found: &[Finding]) -> String {
    let width = found.iter().map(|f| f.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for f in found {
        let result = match f.status {
            Status::Fail => "FAIL".to_owned(),
            Status::Warn => "WARN".to_owned(),
            s => s.to_string(),
        };
        let _ = writeln!(out, "{:width$}  {result:7}  {}", f.name, f.observed);
        if matches!(f.status, Status::Fail | Status::Warn | Status::Ignored) {
            let pad = " ".repeat(width + 11);
            let _ = writeln!(out, "{pad}expected: {}", f.expected);
            let _ = writeln!(out, "{pad}why: {}", f.why);
            let _ = writeln!(out, "{pad}fix: {}", f.fix);
        }
    }
    let count = |s: Status| found.iter().filter(|f| f.status == s).count();
    let _ = writeln!(
        out,
        "{} failed, {} warning(s), {} passed, {} skipped, {} ignored.",
        count(Status::Fail),
        count(Status::Warn),
        count(Status::Pass),
        count(Status::Skipped),
        count(Status::Ignored)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(name: &'static str, status: Status, observed: &str) -> Finding {
        Finding {
            name,
            status,
            observed: observed.into(),
            expected: "off".into(),
            why: "the kubelet refuses to start with swap on",
            fix: "swapoff -a".into(),
        }
    }

    #[test]
    fn failures_carry_why_and_fix() {
        let text = findings(&[
            finding("swap", Status::Fail, "on: /swapfile"),
            finding("hostname", Status::Pass, "worker-0"),
            finding("time-sync", Status::Skipped, "not the running system"),
        ]);
        assert_eq!(
            text,
            "swap       FAIL     on: /swapfile\n\
             \x20                   expected: off\n\
             \x20                   why: the kubelet refuses to start with swap on\n\
             \x20                   fix: swapoff -a\n\
             hostname   pass     worker-0\n\
             time-sync  skipped  not the running system\n\
             1 failed, 0 warning(s), 1 passed, 1 skipped, 0 ignored.\n"
        );
    }
}
