//! Every `--output json` document says its `schema_version` and `kind`, and matches its schema in
//! `docs/schemas/KIND.v1.json`: checked on the real output of each command, on a fixture root.
//! The validator reads the JSON Schema keywords those files use (`type`, `required`,
//! `properties`, `items`, `enum`, `const`); a planted mismatch shows it discriminates.

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn schema(kind: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/schemas/{kind}.v1.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("schema file")).expect("schema is JSON")
}

fn type_ok(want: &str, v: &Value) -> bool {
    match want {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

/// Every place `value` departs from `schema`, as `path: what`.
fn violations(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !types.iter().any(|t| type_ok(t, value)) {
            out.push(format!("{path}: {value} is not {types:?}"));
            return;
        }
    }
    if let Some(c) = schema.get("const") {
        if c != value {
            out.push(format!("{path}: {value} is not {c}"));
        }
    }
    if let Some(Value::Array(e)) = schema.get("enum") {
        if !e.contains(value) {
            out.push(format!("{path}: {value} is not one of {e:?}"));
        }
    }
    if let (Some(Value::Array(req)), Some(obj)) = (schema.get("required"), value.as_object()) {
        for r in req.iter().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                out.push(format!("{path}: no {r}"));
            }
        }
    }
    if let (Some(Value::Object(props)), Some(obj)) = (schema.get("properties"), value.as_object()) {
        for (k, s) in props {
            if let Some(v) = obj.get(k) {
                violations(s, v, &format!("{path}.{k}"), out);
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), value.as_array()) {
        for (i, v) in arr.iter().enumerate() {
            violations(items, v, &format!("{path}[{i}]"), out);
        }
    }
}

fn check(kind: &str, doc: &Value) {
    let mut out = Vec::new();
    violations(&schema(kind), doc, "$", &mut out);
    assert!(out.is_empty(), "{kind}: {out:#?}\n{doc:#}");
}

/// Runs nodeward on `root` and parses its stdout (whatever the exit code: a refusal is a document too).
fn json(root: &Path, args: &[&str]) -> Value {
    let out = Command::new(common::BIN)
        .args(args)
        .arg("--root")
        .arg(root)
        .args(["--output", "json"])
        .output()
        .expect("run nodeward");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn every_json_output_matches_its_schema() {
    let root = tempfile::tempdir().expect("root");
    let r = root.path();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config.d/10-demo.toml");
    let demo = demo.to_str().expect("utf-8");
    // A module tree, and a bundle file.
    let tree = r.join("lib/modules/6.1.0-test");
    std::fs::create_dir_all(tree.join("kernel")).expect("mkdir");
    std::fs::write(tree.join("modules.dep"), "kernel/overlay.ko:\n").expect("dep");
    std::fs::write(tree.join("kernel/overlay.ko"), "x").expect("ko");
    let bundle = r.join("assets");
    std::fs::write(&bundle, "##### kubeconfig\napiVersion: v1\n").expect("bundle");
    let bundle = bundle.to_str().expect("utf-8");
    let docs = [
        ("plan", json(r, &["plan", "--config", demo])),
        ("report", json(r, &["apply", "--config", demo])),
        ("status", json(r, &["status"])),
        ("check", json(r, &["check"])),
        ("config", json(r, &["config"])),
        ("bundle-list", json(r, &["bundle", "list", bundle])),
        (
            "modules-explain",
            json(r, &["modules", "explain", "overlay", "missing"]),
        ),
        ("answer", json(r, &["converge"])),
        ("answer", json(r, &["kubelet", "retry"])),
        ("kubelet-show", json(r, &["kubelet", "show"])),
    ];
    for (kind, doc) in &docs {
        assert_eq!(doc["kind"], *kind, "{doc:#}");
        assert_eq!(doc["schema_version"], 1);
        check(kind, doc);
    }
    // Every schema file is one a command emits, and the other way round.
    let files: std::collections::BTreeSet<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schemas"))
            .expect("docs/schemas")
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".v1.json")
                    .map(str::to_owned)
            })
            .collect();
    let emitted: std::collections::BTreeSet<String> = docs.iter().map(|(k, _)| (*k).to_owned()).collect();
    assert_eq!(files, emitted);
}

#[test]
fn a_planted_mismatch_is_caught() {
    let doc = serde_json::json!({
        "schema_version": 1, "kind": "check", "result": "pass",
        "checks": [{"name": "swap", "status": "pass", "observed": "off", "expected": "off", "why": "w"}]
    });
    check("check", &doc);
    let mut out = Vec::new();
    let mut bad = doc.clone();
    bad["checks"][0]["status"] = "maybe".into();
    bad["result"] = Value::Null;
    bad.as_object_mut().expect("object").remove("schema_version");
    violations(&schema("check"), &bad, "$", &mut out);
    assert_eq!(
        out,
        [
            "$: no schema_version",
            "$.checks[0].status: \"maybe\" is not one of [String(\"pass\"), String(\"warn\"), String(\"fail\"), String(\"skipped\"), String(\"ignored\")]",
            "$.result: null is not [\"string\"]",
        ]
    );
}
