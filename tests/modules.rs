//! Module resolution and decompression on a fixture `/lib/modules/<ver>` tree (every compression,
//! aliases, builtins, blacklists, options), through the library and through the binary. Real
//! loading into a kernel is exercised in the VM test bed.

mod common;

use std::path::{Path, PathBuf};

use common::Root;
use nodeward::host::kmod::index::{Compression, ModIndex, Resolution};
use nodeward::host::kmod::load::{Method, decompress, method_for};

const VERSION: &str = "6.1.0-fixture";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/modroot")
}

fn index() -> ModIndex {
    ModIndex::load(&fixture().join("lib/modules").join(VERSION), &fixture()).expect("load index")
}

fn load_list(r: Resolution) -> Vec<(String, String)> {
    match r {
        Resolution::Load(v) => v.into_iter().map(|l| (l.name, l.file)).collect(),
        Resolution::Builtin => panic!("unexpected builtin"),
    }
}

#[test]
fn every_compression_decompresses_to_the_module_image() {
    let index = index();
    for module in ["llc", "stp", "bridge", "br_netfilter", "ip_vs_wrr", "ip_vs_sh"] {
        for (name, file) in load_list(index.resolve(module, VERSION, &|_| false).expect("resolve")) {
            let bytes = decompress(&index.dir.join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(
                bytes,
                format!("\x7fELF fixture module {name}\n").as_bytes(),
                "{file}"
            );
        }
    }
}

#[test]
fn dependency_order_aliases_builtins_and_options() {
    let index = index();
    let chain: Vec<String> = load_list(index.resolve("br_netfilter", VERSION, &|_| false).expect("r"))
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(chain, ["llc", "stp", "bridge", "br_netfilter"]);
    let chain: Vec<String> = load_list(
        index
            .resolve("ip_vs_rr", VERSION, &|n| n == "libcrc32c")
            .expect("r"),
    )
    .into_iter()
    .map(|(n, _)| n)
    .collect();
    assert_eq!(
        chain,
        ["nf_conntrack", "ip_vs", "ip_vs_rr"],
        "loaded modules are skipped"
    );
    let alias = load_list(index.resolve("fs-overlay", VERSION, &|_| false).expect("alias"));
    assert_eq!(alias[0].1, "kernel/fs/overlayfs/overlay.ko.xz");
    assert_eq!(
        index.resolve("loop", VERSION, &|_| false),
        Ok(Resolution::Builtin)
    );
    assert_eq!(index.options_for("nf_conntrack"), "hashsize=4096");
}

#[test]
fn blacklisted_and_missing_modules_are_clear_errors() {
    let index = index();
    let err = index
        .resolve("nf_tables", VERSION, &|_| false)
        .expect_err("blacklisted")
        .to_string();
    assert!(
        err.contains("nf_tables: blacklisted by") && err.contains("etc/modprobe.d/fixture.conf"),
        "{err}"
    );
    let err = index
        .resolve("nfnetlink-subsys-10", VERSION, &|_| false)
        .expect_err("alias to blacklisted")
        .to_string();
    assert!(err.contains("blacklisted"), "{err}");
    let err = index
        .resolve("floppy", VERSION, &|_| false)
        .expect_err("missing")
        .to_string();
    assert!(err.contains("not found for kernel 6.1.0-fixture"), "{err}");
}

#[test]
fn load_method_follows_kernel_decompression() {
    assert_eq!(
        method_for(Compression::of("a.ko.xz"), Some("xz")),
        Method::FinitCompressed
    );
    assert_eq!(
        method_for(Compression::of("a.ko.zst"), Some("xz")),
        Method::Userspace
    );
    assert_eq!(method_for(Compression::of("a.ko"), None), Method::Finit);
}

#[test]
fn a_corrupt_module_file_is_refused_before_the_kernel_sees_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.ko.xz");
    std::fs::write(&bad, b"not xz at all").expect("write");
    let err = decompress(&bad).expect_err("corrupt").to_string();
    assert!(
        err.contains("bad.ko.xz") && err.contains("cannot decompress"),
        "{err}"
    );
}

/// A copy of the fixture as an image root.
fn image_root() -> Root {
    let root = Root::new();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", fixture().display()))
        .arg(root.path())
        .status()
        .expect("cp");
    assert!(status.success());
    root
}

#[test]
fn image_builds_check_modules_against_the_roots_kernel() {
    let root = image_root();
    let plan = root.run(&["plan", "--only", "modules"]).ok();
    assert!(
        plan.stdout.contains("+ /etc/modules-load.d/nodeward.conf"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains("br_netfilter: loaded at boot (llc → stp → bridge → br_netfilter)"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("ip_vs_rr: loaded at boot (ip_vs_rr)"),
        "deps already counted: {}",
        plan.stdout
    );
    root.run(&["apply", "--only", "modules"]).ok();
    let conf = std::fs::read_to_string(root.path().join("etc/modules-load.d/nodeward.conf")).expect("conf");
    let listed: Vec<&str> = conf.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        listed,
        [
            "br_netfilter",
            "overlay",
            "nf_conntrack",
            "ip_vs",
            "ip_vs_rr",
            "ip_vs_wrr",
            "ip_vs_sh"
        ]
    );
    assert_eq!(
        root.run(&["plan", "--only", "modules", "--detailed-exitcode"])
            .code,
        0
    );
}

#[test]
fn image_builds_fail_on_a_module_the_kernel_lacks_or_the_admin_blacklisted_and_keep_the_rest() {
    let root = image_root();
    root.write(
        "etc/nodeward/config.d/20.toml",
        "[modules]\nload = [\"br_netfilter\", \"nf_tables\", \"floppy\"]\n",
    );
    let run = root.run(&["apply", "--only", "modules"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stdout.contains("2 items failed"), "{}", run.stdout);
    assert!(
        run.stdout.contains("module nf_tables: blacklisted by"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("module floppy: not found for kernel 6.1.0-fixture"),
        "{}",
        run.stdout
    );
    // Each module stands alone: the file lists what resolves, never what would fail at boot.
    let listed =
        std::fs::read_to_string(root.path().join("etc/modules-load.d/nodeward.conf")).expect("written");
    let names: Vec<&str> = listed.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(names, ["br_netfilter"]);
}

#[test]
fn an_unsafe_kernel_version_is_a_config_error() {
    let root = image_root();
    root.write(
        "etc/nodeward/config.d/20.toml",
        "[modules]\nkernel_version = \"../../etc\"\n",
    );
    let run = root.run(&["plan"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(run.stderr.contains("modules.kernel_version"), "{}", run.stderr);
}

/// `nodeward modules explain` on a fixture tree: the load order with where each step came from,
/// and a softdep from modprobe.d through an alias.
#[test]
fn explain_shows_the_resolution_and_its_sources() {
    let root = tempfile::tempdir().expect("tempdir");
    let copy = std::process::Command::new("cp")
        .args(["-a", "--"])
        .arg(fixture().join("lib"))
        .arg(root.path())
        .status()
        .expect("cp");
    assert!(copy.success());
    let conf = root.path().join("etc/modprobe.d");
    std::fs::create_dir_all(&conf).expect("mkdir");
    std::fs::write(
        conf.join("00-test.conf"),
        "softdep br_netfilter pre: fs-overlay\n",
    )
    .expect("write");
    let tree = root.path().join("lib/modules").join(VERSION);
    let aliases = std::fs::read_to_string(tree.join("modules.alias")).unwrap_or_default();
    std::fs::write(
        tree.join("modules.alias"),
        format!("{aliases}alias fs-overlay overlay\n"),
    )
    .expect("alias");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeward"))
        .args(["modules", "explain", "br_netfilter", "--output", "json", "--root"])
        .arg(root.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let loads: Vec<(&str, bool)> = doc["modules"][0]["loads"]
        .as_array()
        .expect("loads")
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap_or(""),
                l["soft"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        loads,
        [
            ("llc", false),
            ("stp", false),
            ("bridge", false),
            ("overlay", true),
            ("br_netfilter", false)
        ]
    );
    let why = doc["modules"][0]["loads"][3]["why"].as_str().unwrap_or("");
    assert!(
        why.contains("soft pre-dependency of br_netfilter")
            && why.contains("00-test.conf:1")
            && why.contains("modules.alias"),
        "{why}"
    );
    assert!(
        doc["modules"][0]["loads"][0]["why"]
            .as_str()
            .unwrap_or("")
            .contains("modules.dep:"),
        "{doc}"
    );

    // `plan` marks the soft dependency in the chain it notes for an image root.
    std::fs::create_dir_all(root.path().join("etc/nodeward/config.d")).expect("mkdir");
    std::fs::write(
        root.path().join("etc/nodeward/config.d/10.toml"),
        "[modules]\nload = ['br_netfilter']\n",
    )
    .expect("config");
    let plan = std::process::Command::new(env!("CARGO_BIN_EXE_nodeward"))
        .args(["plan", "--only", "modules", "--root"])
        .arg(root.path())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&plan.stdout);
    assert!(
        text.contains(
            "br_netfilter: loaded at boot (llc → stp → bridge → overlay (soft, pre) → br_netfilter)"
        ),
        "{text}"
    );
}

/// Under `--root`, index files and modprobe.d fragments that are symlinks to absolute paths are read
/// inside the root: a blacklist planted on the build machine at the link's target changes nothing,
/// the image's file at that path does.
#[test]
fn module_files_symlinked_to_absolute_paths_are_read_inside_the_root() {
    let root = image_root();
    let outside = tempfile::tempdir().expect("tempdir");
    let target = outside.path().join("blacklist.conf");
    std::fs::write(&target, "blacklist overlay\n").expect("write");
    let conf = root.path().join("etc/modprobe.d");
    std::fs::create_dir_all(&conf).expect("mkdir");
    std::os::unix::fs::symlink(&target, conf.join("50-link.conf")).expect("symlink");
    let explain = |root: &Root| {
        std::process::Command::new(env!("CARGO_BIN_EXE_nodeward"))
            .args(["modules", "explain", "overlay", "--output", "json", "--root"])
            .arg(root.path())
            .output()
            .expect("run")
    };
    let out = explain(&root);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("blacklist"),
        "the build machine's file was read: {text}"
    );
    // Control: the image's own file at that absolute path is what counts.
    root.write(target.to_str().expect("utf-8"), "blacklist overlay\n");
    let out = explain(&root);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("blacklist"), "{text}");
}
