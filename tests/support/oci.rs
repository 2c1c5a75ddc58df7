//! One-image OCI layout tars for tests (GNU tar over a directory), named as `ctr export` names
//! them (containerd's `io.containerd.image.name`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Writes a one-image OCI layout tar named `name` (GNU tar from a directory) and returns its path.
pub fn oci_archive(dir: &Path, file: &str, name: &str, layer: &[u8]) -> PathBuf {
    let layout = dir.join(format!("{file}.d"));
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    let blob = |bytes: &[u8]| {
        std::fs::write(layout.join("blobs/sha256").join(sha(bytes)), bytes).unwrap();
        format!("\"digest\":\"sha256:{}\",\"size\":{}", sha(bytes), bytes.len())
    };
    let config = br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#;
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json",{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar",{}}}]}}"#,
        blob(config),
        blob(layer)
    );
    let index = format!(
        r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json",{},"annotations":{{"io.containerd.image.name":"{name}"}}}}]}}"#,
        blob(manifest.as_bytes())
    );
    std::fs::write(layout.join("index.json"), index).unwrap();
    std::fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let out = dir.join(file);
    let ok = Command::new("tar")
        .args(["--owner=0", "--group=0", "-C"])
        .arg(&layout)
        .arg("-cf")
        .arg(&out)
        .args(["oci-layout", "index.json", "blobs"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "tar");
    out
}
