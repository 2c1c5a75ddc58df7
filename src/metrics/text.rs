//! The Prometheus text exposition format (version 0.0.4), written by hand: a handful of families,
//! each with HELP and TYPE, label values escaped as the format says. No client library: nodeward
//! keeps its own state and renders it once per change, so a scrape only copies a string.

use std::fmt::Write;

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
}

/// One family: its samples share the name, help and type.
#[derive(Debug, Clone)]
pub(crate) struct Family {
    pub(crate) name: &'static str,
    pub(crate) help: &'static str,
    pub(crate) kind: Kind,
    pub(crate) samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub(crate) labels: Vec<(&'static str, String)>,
    pub(crate) value: f64,
}

impl Family {
    pub(crate) fn new(name: &'static str, kind: Kind, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    /// Adds a sample; returns the family for chaining.
    pub(crate) fn with(mut self, labels: &[(&'static str, &str)], value: f64) -> Family {
        self.samples.push(Sample {
            labels: labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
            value,
        });
        self
    }

    pub(crate) fn push(&mut self, labels: &[(&'static str, &str)], value: f64) {
        self.samples.push(Sample {
            labels: labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
            value,
        });
    }
}

/// A label value as the format wants it: backslash, double quote and newline escaped.
pub(crate) fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The exposition text of the families, in order. Families without samples are left out (their
/// HELP alone would say nothing).
pub(crate) fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        for s in &f.samples {
            out.push_str(f.name);
            if !s.labels.is_empty() {
                let labels: Vec<String> = s
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                let _ = write!(out, "{{{}}}", labels.join(","));
            }
            let _ = writeln!(out, " {}", number(s.value));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden() {
        let text = render(&[
            Family::new(
                "nodeward_ready",
                Kind::Gauge,
                "1 once the node converged and the kubelet runs.",
            )
            .with(&[], 1.0),
            Family::new(
                "nodeward_changes_applied_total",
                Kind::Counter,
                "Changes applied, by step and kind.",
            )
            .with(&[("step", "dirs"), ("kind", "create_dir")], 9.0)
            .with(&[("step", "sysctl"), ("kind", "set_kernel_value")], 2.0),
            Family::new("nodeward_unused", Kind::Gauge, "Never shown."),
            Family::new("nodeward_certificate_expiry_seconds", Kind::Gauge, "notAfter.")
                .with(&[("path", "/etc/a \"b\"\\c"), ("subject", "x\ny")], 1.5),
        ]);
        assert_eq!(
            text,
            "# HELP nodeward_ready 1 once the node converged and the kubelet runs.\n\
             # TYPE nodeward_ready gauge\n\
             nodeward_ready 1\n\
             # HELP nodeward_changes_applied_total Changes applied, by step and kind.\n\
             # TYPE nodeward_changes_applied_total counter\n\
             nodeward_changes_applied_total{step=\"dirs\",kind=\"create_dir\"} 9\n\
             nodeward_changes_applied_total{step=\"sysctl\",kind=\"set_kernel_value\"} 2\n\
             # HELP nodeward_certificate_expiry_seconds notAfter.\n\
             # TYPE nodeward_certificate_expiry_seconds gauge\n\
             nodeward_certificate_expiry_seconds{path=\"/etc/a \\\"b\\\"\\\\c\",subject=\"x\\ny\"} 1.5\n"
        );
    }
}
