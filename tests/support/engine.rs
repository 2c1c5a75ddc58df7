//! Builds the stand-in container engine (fake_runtime.rs) once per test binary and lays out a
//! directory of engine programs (`podman`, `docker`, `rkt`) with their state.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub fn fake_runtime() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build("fake_runtime.rs", "fake-runtime"))
}

/// The FleetLock servers (fleetlock_server.rs: strict, and poseidon/fleetlock's model).
pub fn fleetlock_server() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build("fleetlock_server.rs", "fleetlock-server"))
}

/// The registry and bundle server of a simulated fleet (fleet_server.rs).
pub fn fleet_server() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build("fleet_server.rs", "fleet-server"))
}

/// The read-only registry stand-in (registry_server.rs: the OCI distribution API's pulls).
pub fn registry_server() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build("registry_server.rs", "registry-server"))
}

/// Builds `tests/support/SOURCE` (std only) with `rustc` into the target's temporary directory.
fn build(source: &str, name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let out = dir.join(name);
    let tmp = dir.join(format!("{name}.{}", std::process::id()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(source);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let status = std::process::Command::new(rustc)
        .args(["--edition", "2024", "-O", "-o"])
        .arg(&tmp)
        .arg(&src)
        .status()
        .expect("run rustc");
    assert!(status.success(), "building {source} failed");
    std::fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("install {name}: {e}"));
    out
}

/// The fake engine as the program `at`: a file of its own (a hard link, else a copy), not a
/// symlink, so each test's engine is a program of its own as nodeward resolves it (a podman
/// container's monitor names its podman, and nodeward tells podmans apart by that path).
pub fn install_fake_runtime(at: &Path) {
    if std::fs::hard_link(fake_runtime(), at).is_err() {
        std::fs::copy(fake_runtime(), at).expect("copy the fake engine");
    }
}

/// A `bin/` directory holding `program` (the fake engine) and its `state/`.
pub fn engine_dir(parent: &Path, program: &str, images: &[&str]) -> PathBuf {
    let bin = parent.join("bin");
    std::fs::create_dir_all(bin.join("state")).expect("mkdir");
    install_fake_runtime(&bin.join(program));
    std::fs::write(bin.join("state/images"), images.join("\n") + "\n").expect("images");
    bin
}

pub fn log(bin: &Path, name: &str) -> Vec<String> {
    std::fs::read_to_string(bin.join("state").join(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The pid of the running kubelet process of the container `name`.
pub fn kubelet_pid(bin: &Path, name: &str) -> Option<i32> {
    let dir = bin.join("state/c").join(name);
    if dir.join("exit").exists() {
        return None;
    }
    std::fs::read_to_string(dir.join("pid")).ok()?.trim().parse().ok()
}

/// The stand-in kubelet (kubelet_standin.rs): parses its flags and configuration files as the
/// real kubelet does and prints the node it would register.
pub fn kubelet_standin() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build("kubelet_standin.rs", "kubelet-standin"))
}
