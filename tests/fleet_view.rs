//! The fleet view shipped in `packaging/`: Prometheus alert rules (checked and unit-tested by
//! Prometheus' own `promtool`, each rule with a firing and a non-firing case) and a Grafana
//! dashboard (valid JSON; every metric its queries name is one nodeward exports).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging")
}

fn promtool(args: &[&str]) -> Option<String> {
    if std::env::var_os("NODEWARD_SKIP_PROMTOOL").is_some() {
        return None;
    }
    let out = Command::new("promtool")
        .args(args)
        .current_dir(packaging().join("prometheus"))
        .output()
        .expect("promtool (Debian's prometheus package; NODEWARD_SKIP_PROMTOOL=1 skips this)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    Some(text)
}

/// The metric names nodeward exports, read from the exposition's source (each family is named
/// once there).
fn exported() -> BTreeSet<String> {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/metrics/mod.rs"))
        .expect("metrics source");
    let mut names = BTreeSet::new();
    for piece in src.split('"').skip(1).step_by(2) {
        if piece.starts_with("nodeward_") && piece.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            names.insert(piece.to_owned());
        }
    }
    assert!(names.len() >= 10, "{names:?}");
    names
}

/// The `nodeward_*` names in a PromQL expression.
fn metrics_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("nodeward_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        out.push(expr[start..end].to_owned());
        i = end;
    }
    out
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    if let Some(out) = promtool(&["check", "rules", "nodeward-alerts.yaml"]) {
        assert!(out.contains("SUCCESS"), "{out}");
    }
    if let Some(out) = promtool(&["test", "rules", "nodeward-alerts.test.yaml"]) {
        assert!(out.contains("SUCCESS"), "{out}");
    }
}

#[test]
fn every_alert_has_a_firing_and_a_non_firing_case_and_names_exported_metrics() {
    let rules = std::fs::read_to_string(packaging().join("prometheus/nodeward-alerts.yaml")).expect("rules");
    let tests =
        std::fs::read_to_string(packaging().join("prometheus/nodeward-alerts.test.yaml")).expect("tests");
    let exported = exported();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 8, "{alerts:?}");
    for alert in &alerts {
        // Each `alertname:` block in the tests is followed by its expectations.
        let cases: Vec<&str> = tests
            .split("- eval_time:")
            .filter(|c| c.contains(&format!("alertname: {alert}\n")))
            .collect();
        assert!(
            cases.iter().any(|c| c.contains("exp_labels")),
            "{alert}: no firing case"
        );
        assert!(
            cases.iter().any(|c| c.contains("exp_alerts: []")),
            "{alert}: no non-firing case"
        );
    }
    for line in rules.lines().filter_map(|l| l.trim().strip_prefix("expr: ")) {
        for m in metrics_in(line) {
            assert!(
                exported.contains(&m),
                "{line}: {m} is not a metric nodeward exports"
            );
        }
    }
}

#[test]
fn the_dashboard_is_valid_json_and_queries_only_exported_metrics() {
    let text = std::fs::read_to_string(packaging().join("grafana/nodeward-fleet.json")).expect("dashboard");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let exported = exported();
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8);
    let mut seen = BTreeSet::new();
    for p in panels {
        for t in p["targets"].as_array().expect("targets") {
            let expr = t["expr"].as_str().expect("expr");
            let names = metrics_in(expr);
            assert!(!names.is_empty() || expr.contains("up{"), "{expr}");
            for m in names {
                assert!(
                    exported.contains(&m),
                    "{expr}: {m} is not a metric nodeward exports"
                );
                seen.insert(m);
            }
        }
    }
    for needed in [
        "nodeward_step_up",
        "nodeward_kubelet_healthy",
        "nodeward_certificate_expiry_seconds",
        "nodeward_ready",
    ] {
        assert!(seen.contains(needed), "the dashboard does not show {needed}");
    }
}

/// The checks above can fail: a planted name that nodeward does not export is caught.
#[test]
fn a_planted_unknown_metric_is_caught() {
    let exported = exported();
    let planted = "sum(nodeward_kubelet_rollbacks_totl)";
    assert!(metrics_in(planted).iter().any(|m| !exported.contains(m)));
}
