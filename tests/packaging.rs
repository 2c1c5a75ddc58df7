//! The Butane configs shipped in packaging/butane: each .ign is what its .bu translates to, every
//! .ign passes the real Ignition's validator, and the nodeward configuration each one delivers is
//! valid for nodeward itself (loaded by the binary from a tree laid out as Ignition would write it).
//!
//! Needs python3 with PyYAML and Debian's `ignition` (`ignition-validate`); `.ci/run` installs
//! them. `NODEWARD_SKIP_PACKAGING_TESTS=1` skips these on a workstation without them, and says so.

use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/butane")
}

fn skipped() -> bool {
    let skip = std::env::var_os("NODEWARD_SKIP_PACKAGING_TESTS").is_some();
    if skip {
        eprintln!("packaging tests skipped (NODEWARD_SKIP_PACKAGING_TESTS)");
    }
    skip
}

fn ign_files() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("packaging/butane")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "ign"))
        .collect();
    out.sort();
    assert!(out.len() >= 6, "controller and worker for three routes: {out:?}");
    out
}

#[test]
fn every_ign_is_what_its_butane_translates_to() {
    if skipped() {
        return;
    }
    let out = Command::new(dir().join("translate"))
        .arg("--check")
        .arg(dir())
        .output()
        .expect("run packaging/butane/translate (python3 with PyYAML)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for ign in ign_files() {
        assert!(ign.with_extension("bu").exists(), "{} has no .bu", ign.display());
    }
    // The control: one hand-edited .ign is caught, by name.
    let t = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(dir()).expect("dir").flatten() {
        std::fs::copy(entry.path(), t.path().join(entry.file_name())).expect("copy");
    }
    let edited = t.path().join("worker-fcos-sysext.ign");
    let text = std::fs::read_to_string(&edited).expect("read");
    std::fs::write(&edited, text.replace("\"enabled\": true", "\"enabled\": false")).expect("edit");
    let out = Command::new(dir().join("translate"))
        .arg("--check")
        .arg(t.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("worker-fcos-sysext.ign"));
}

#[test]
fn the_translator_refuses_what_it_does_not_know() {
    if skipped() {
        return;
    }
    let t = tempfile::tempdir().expect("tempdir");
    let bu = t.path().join("x.bu");
    std::fs::write(&bu, "variant: fcos\nversion: 1.4.0\nstorage:\n  filez: []\n").expect("write");
    let out = Command::new(dir().join("translate"))
        .arg(&bu)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("storage: unsupported key(s) filez"));
    // Butane 1.5.0 is Ignition 3.4.0, which Ignition 2.14 rejects: refused here too.
    std::fs::write(&bu, "variant: fcos\nversion: 1.5.0\n").expect("write");
    let out = Command::new(dir().join("translate"))
        .arg(&bu)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn ignition_validate_accepts_every_shipped_config() {
    if skipped() {
        return;
    }
    for ign in ign_files() {
        let out = Command::new("ignition-validate")
            .arg(&ign)
            .output()
            .expect("run ignition-validate (Debian's ignition package)");
        assert!(
            out.status.success(),
            "{}: {}{}",
            ign.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The control: the validator is not a rubber stamp.
    let t = tempfile::tempdir().expect("tempdir");
    let bad = t.path().join("bad.ign");
    std::fs::write(
        &bad,
        r#"{"ignition":{"version":"3.3.0"},"storage":{"files":[{"path":"relative"}]}}"#,
    )
    .expect("write");
    assert!(
        !Command::new("ignition-validate")
            .arg(&bad)
            .status()
            .expect("run")
            .success()
    );
}

/// RFC 2397 `data:,` with percent-encoding, as the translator writes inline contents.
fn data_url(source: &str) -> Option<Vec<u8>> {
    let text = source.strip_prefix("data:,")?.as_bytes();
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'%' {
            let hex = std::str::from_utf8(text.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    Some(out)
}

#[test]
fn the_configuration_each_config_delivers_is_valid_for_nodeward() {
    if skipped() {
        return;
    }
    for ign in ign_files() {
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&ign).expect("read")).expect("json");
        let root = tempfile::tempdir().expect("tempdir");
        let mut fragments = 0;
        for f in doc["storage"]["files"].as_array().expect("files") {
            let path = f["path"].as_str().expect("path");
            if !path.starts_with("/etc/nodeward/config.d/") {
                continue;
            }
            let bytes = data_url(f["contents"]["source"].as_str().expect("source")).expect("a data URL");
            let dest = root.path().join(path.trim_start_matches('/'));
            std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
            std::fs::write(dest, bytes).expect("write");
            fragments += 1;
        }
        let name = ign
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let cloud = name.starts_with("cloud-");
        assert_eq!(
            fragments,
            if cloud { 1 } else { 2 },
            "{name}: the node's file and this node's own (a cloud snippet: its one)"
        );
        let out = Command::new(env!("CARGO_BIN_EXE_nodeward"))
            .args(["config", "--output", "json", "--root"])
            .arg(root.path())
            .output()
            .expect("run nodeward");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cfg: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let units = doc["systemd"]["units"].as_array().expect("units");
        let unit = |n: &str| units.iter().find(|u| u["name"] == n).cloned().unwrap_or_default();
        if cloud {
            cloud_snippet(&name, &cfg, &unit("nodeward.service"));
            continue;
        }
        let file = |p: &str| {
            doc["storage"]["files"]
                .as_array()
                .expect("files")
                .iter()
                .find(|f| f["path"] == p)
                .cloned()
        };
        let role = if name.contains("controller") {
            "controller"
        } else {
            "worker"
        };
        let snippet = name.starts_with("typhoon-");
        assert_eq!(cfg["config"]["node"]["role"], role, "{name}");
        assert_eq!(
            cfg["config"]["node"]["labels"]["example.com/pool"], "gpu",
            "{name}"
        );
        assert!(
            cfg["config"]["kubelet"]["image"]
                .as_str()
                .is_some_and(|i| i.contains("@sha256:")),
            "{name}: the kubelet image is pinned by digest"
        );
        // Typhoon's kubelet units are masked and out of the preset in both shapes.
        for u in ["kubelet.service", "kubelet.path", "wait-for-dns.service"] {
            assert_eq!(
                (&unit(u)["mask"], &unit(u)["enabled"]),
                (&true.into(), &false.into()),
                "{name}: {u}"
            );
        }
        let bundle = &cfg["config"]["bundle"]["source"];
        if snippet {
            // Writes nothing Typhoon delivers: Ignition's merge would replace Typhoon's.
            for typhoons in [
                "/etc/kubernetes/kubeconfig",
                "/etc/kubernetes/kubelet.yaml",
                "/etc/containerd/config.toml",
            ] {
                assert!(
                    file(typhoons).is_none(),
                    "{name}: a snippet must not write {typhoons}"
                );
            }
            assert!(bundle.is_null(), "{name}: Typhoon's SSH step delivers the bundle");
            assert!(doc["passwd"].is_null(), "{name}: Typhoon's accounts stay");
            let layout = file("/opt/bootstrap/layout");
            assert_eq!(
                layout.is_some(),
                role == "controller",
                "{name}: the SSH layout goes through nodeward"
            );
        } else {
            let kubeconfig =
                file("/etc/kubernetes/kubeconfig").unwrap_or_else(|| panic!("{name}: no kubeconfig"));
            assert_eq!(kubeconfig["mode"], 0o600, "{name}: the kubeconfig holds a token");
            let text =
                data_url(kubeconfig["contents"]["source"].as_str().unwrap_or_default()).unwrap_or_default();
            assert!(
                String::from_utf8_lossy(&text).starts_with("REPLACE"),
                "{name}: the placeholder says so"
            );
            assert_eq!(
                unit("containerd.service")["enabled"],
                true,
                "{name}: containerd enabled"
            );
            if role == "controller" {
                assert_eq!(bundle, "/var/lib/nodeward/assets", "{name}");
                let delivered = file("/var/lib/nodeward/assets").expect("the bundle is delivered");
                assert_eq!(delivered["mode"], 0o600, "{name}: the bundle is a secret");
                let users = doc["passwd"]["users"].as_array().expect("users");
                assert!(
                    users.iter().any(|u| u["name"] == "etcd" && u["uid"] == 232),
                    "{name}"
                );
                assert_eq!(unit("etcd-member.service")["enabled"], true, "{name}: etcd");
                assert!(file("/etc/etcd/etcd.env").is_some(), "{name}: etcd's settings");
                // Typhoon's controller pieces: the one-time bootstrap (present, never enabled: it
                // is started on one controller), its script, accounting, a bare-metal host name.
                let bootstrap = unit("bootstrap.service");
                let contents = bootstrap["contents"].as_str().unwrap_or_default();
                assert!(
                    contents.contains("ConditionPathExists=!/opt/bootstrap/bootstrap.done")
                        && contents.contains("--entrypoint=/apply")
                        && contents.contains("ExecStartPost=/bin/touch /opt/bootstrap/bootstrap.done"),
                    "{name}: bootstrap.service as Typhoon's: {contents}"
                );
                assert!(
                    bootstrap["enabled"].is_null(),
                    "{name}: bootstrap is started by hand, once"
                );
                let apply = file("/opt/bootstrap/apply").expect("/opt/bootstrap/apply");
                assert_eq!(apply["mode"], 0o544, "{name}");
                let script = String::from_utf8_lossy(
                    &data_url(apply["contents"]["source"].as_str().unwrap_or_default()).unwrap_or_default(),
                )
                .into_owned();
                assert!(
                    script.contains("kubectl apply -f /assets/manifests -R"),
                    "{name}: {script}"
                );
                assert!(
                    file("/etc/systemd/system.conf.d/accounting.conf").is_some(),
                    "{name}: accounting"
                );
                assert!(
                    file("/etc/hostname").is_some(),
                    "{name}: the bare-metal host name"
                );
            } else {
                assert!(bundle.is_null(), "{name}: workers get no bundle");
            }
        }
        let preset = units
            .iter()
            .any(|u| u["name"] == "nodeward.service" && u["enabled"] == true);
        let link = doc["storage"]["links"].as_array().is_some_and(|links| {
            links.iter().any(|l| {
                l["path"] == "/etc/systemd/system/multi-user.target.wants/nodeward.service"
                    && l["target"] == "/usr/lib/systemd/system/nodeward.service"
            })
        });
        if name.contains("sysext") {
            // Presets apply on the first boot before systemd-sysext merges the extension, when
            // nodeward.service does not exist yet: a link enables it, and the merge's drop-in
            // starts the default target again so that it joins the same boot.
            assert!(link && !preset, "{name}: enabled by a link, not a preset");
            let dropin = units
                .iter()
                .find(|u| u["name"] == "systemd-sysext.service")
                .and_then(|u| u["dropins"][0]["contents"].as_str())
                .unwrap_or_default();
            assert!(
                dropin.contains("daemon-reload") && dropin.contains("start multi-user.target"),
                "{name}: {dropin}"
            );
        } else {
            assert!(preset && !link, "{name}: enabled by Ignition's preset");
        }
    }
}

/// A cloud snippet: the identity it gives the kubelet, and the metadata unit it starts.
fn cloud_snippet(name: &str, cfg: &serde_json::Value, nodeward: &serde_json::Value) {
    let k = &cfg["config"]["node"];
    let (prefix, unit) = if name.contains("flatcar") {
        assert_eq!(
            k["metadata_file"], "/run/metadata/coreos",
            "{name}: Typhoon's Flatcar path"
        );
        ("COREOS_", "coreos-metadata.service")
    } else {
        ("AFTERBURN_", "afterburn.service")
    };
    let setting = if name.contains("aws") {
        k["provider_id"].as_str().unwrap_or_default()
    } else {
        k["name_from"].as_str().unwrap_or_default()
    };
    assert!(setting.contains(prefix), "{name}: {setting}");
    let dropin = nodeward["dropins"][0]["contents"].as_str().unwrap_or_default();
    assert!(dropin.contains(&format!("Wants={unit}")), "{name}: {dropin}");
    assert!(
        !dropin.contains("After="),
        "{name}: nodeward's start never waits for metadata"
    );
}

/// Every sysext the shipped configs download is this release's (`nodeward-VERSION.raw`, the
/// version Cargo.toml's), and the sysext build names the same version in its extension-release.
/// Control: the configs that install the RPM download no sysext at all.
#[test]
fn the_sysext_configs_and_the_image_name_this_release() {
    let want = format!("nodeward-{}.raw", env!("CARGO_PKG_VERSION"));
    let mut sysext_configs = 0;
    for f in ign_files() {
        let text = std::fs::read_to_string(&f).expect("read");
        let name = f
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let sources: Vec<&str> = text
            .split("\"source\": \"")
            .skip(1)
            .filter_map(|s| s.split('"').next())
            .filter(|s| s.ends_with(".raw"))
            .collect();
        if name.contains("sysext") {
            sysext_configs += 1;
            assert!(!sources.is_empty(), "{name}: no sysext download");
            for s in &sources {
                assert!(s.ends_with(&format!("/{want}")), "{name}: {s} is not {want}");
            }
        } else {
            assert!(sources.is_empty(), "{name}: {sources:?}");
        }
    }
    assert!(sysext_configs >= 6, "{sysext_configs} sysext configs");
    let build = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/sysext/build"))
        .expect("packaging/sysext/build");
    assert!(
        build.contains("SYSEXT_VERSION_ID=") && build.contains("Cargo.toml"),
        "the sysext's extension-release does not take Cargo.toml's version"
    );
    // And the image it builds says so, where mksquashfs is there to build it (the VM tier
    // installs it; on a machine without, the check above stands alone).
    if Command::new("mksquashfs").arg("-version").output().is_ok() {
        let out = tempfile::tempdir().expect("tempdir");
        let built = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/sysext/build"))
            .arg(out.path())
            .env("NODEWARD_SYSEXT_BIN", env!("CARGO_BIN_EXE_nodeward"))
            .output()
            .expect("run the sysext build");
        if built.status.success() {
            let image = out.path().join("nodeward.raw");
            let listing = Command::new("unsquashfs")
                .args(["-cat"])
                .arg(&image)
                .arg("usr/lib/extension-release.d/extension-release.nodeward")
                .output()
                .expect("unsquashfs");
            let text = String::from_utf8_lossy(&listing.stdout);
            assert!(
                text.contains(&format!("SYSEXT_VERSION_ID={}", env!("CARGO_PKG_VERSION"))),
                "{text}"
            );
        }
    }
}
