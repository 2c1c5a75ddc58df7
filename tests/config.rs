//! Configuration drop-ins through the real binary: precedence, masking, provenance, bad input.

mod common;

use common::Root;

const VENDOR: &str = "usr/lib/nodeward/config.d";
const RUNTIME: &str = "run/nodeward/config.d";
const ADMIN: &str = "etc/nodeward/config.d";

fn effective(root: &Root, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["config", "--output", "json"];
    args.extend_from_slice(extra);
    root.run(&args).ok().json()
}

#[test]
fn later_directories_override_and_files_merge_in_name_order() {
    let root = Root::new();
    root.write(
        &format!("{VENDOR}/10-base.toml"),
        "[node]\nrole = 'controller'\nhostname = 'vendor'\n",
    );
    root.write(
        &format!("{VENDOR}/20-more.toml"),
        "[node]\ntaints = ['a=b:NoSchedule']\n",
    );
    // Same name in /run replaces the vendor file entirely: its hostname is gone, role comes back to
    // the default, then 20-more and the admin file apply on top.
    let run10 = root.write(
        &format!("{RUNTIME}/10-base.toml"),
        "[node]\nhostname = 'runtime'\n",
    );
    let admin = root.write(
        &format!("{ADMIN}/30-admin.toml"),
        "[node.labels]\n'example.com/pool' = 'gpu'\n",
    );

    let doc = effective(&root, &[]);
    let cfg = &doc["config"]["node"];
    assert_eq!(cfg["hostname"], "runtime");
    assert_eq!(
        cfg["role"], "worker",
        "the replaced vendor file's role must not survive"
    );
    assert_eq!(cfg["taints"][0], "a=b:NoSchedule");
    assert_eq!(cfg["labels"]["example.com/pool"], "gpu");
    let files: Vec<&str> = doc["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(
        files[0].ends_with("run/nodeward/config.d/10-base.toml"),
        "{files:?}"
    );
    assert!(
        files[1].ends_with("usr/lib/nodeward/config.d/20-more.toml"),
        "{files:?}"
    );
    assert!(
        files[2].ends_with("etc/nodeward/config.d/30-admin.toml"),
        "{files:?}"
    );

    let sources = &doc["sources"];
    assert_eq!(sources["node.hostname"]["path"], run10.display().to_string());
    assert_eq!(
        sources["node.labels.\"example.com/pool\""]["path"],
        admin.display().to_string()
    );
    assert_eq!(sources["node.role"]["kind"], "default");

    let human = root.run(&["config"]).ok().stdout;
    assert!(
        human.contains(&format!("node.hostname = \"runtime\"  # {}", run10.display())),
        "{human}"
    );
}

#[test]
fn a_symlink_to_dev_null_masks_a_name() {
    let root = Root::new();
    root.write(&format!("{VENDOR}/10-base.toml"), "[node]\nrole = 'controller'\n");
    std::fs::create_dir_all(root.path().join(ADMIN)).expect("mkdir");
    std::os::unix::fs::symlink("/dev/null", root.path().join(ADMIN).join("10-base.toml")).expect("symlink");
    let doc = effective(&root, &[]);
    assert_eq!(doc["config"]["node"]["role"], "worker");
    assert_eq!(doc["files"].as_array().map(Vec::len), Some(0));
}

#[test]
fn the_config_flag_is_applied_last() {
    let root = Root::new();
    root.write(&format!("{ADMIN}/10.toml"), "[node]\nrole = 'worker'\n");
    let extra = root.path().join("../extra-nodeward.toml");
    std::fs::write(&extra, "[node]\nrole = 'controller'\n").expect("write");
    let doc = effective(&root, &["--config", extra.to_str().expect("utf8")]);
    assert_eq!(doc["config"]["node"]["role"], "controller");
    std::fs::remove_file(extra).expect("cleanup");
}

#[test]
fn files_not_ending_in_toml_and_hidden_files_are_ignored() {
    let root = Root::new();
    root.write(&format!("{ADMIN}/10.toml.bak"), "garbage = [");
    root.write(&format!("{ADMIN}/.10.toml.swp"), "garbage = [");
    assert_eq!(effective(&root, &[])["files"].as_array().map(Vec::len), Some(0));
}

/// A bad fragment: exit 3, message names file, line and key, and nothing on disk changes.
fn assert_rejected(body: &str, needles: &[&str]) {
    let root = Root::new();
    let file = root.write(&format!("{ADMIN}/50-bad.toml"), body);
    let before = root.snapshot();
    for cmd in [&["apply"][..], &["plan"], &["config"]] {
        let run = root.run(cmd);
        assert_eq!(run.code, 3, "{cmd:?} stderr:\n{}", run.stderr);
        assert!(
            run.stderr.contains(&file.display().to_string()),
            "no file name:\n{}",
            run.stderr
        );
        for n in needles {
            assert!(run.stderr.contains(n), "missing {n:?}:\n{}", run.stderr);
        }
    }
    assert_eq!(
        before,
        root.snapshot(),
        "nothing may be applied with a bad configuration"
    );
}

#[test]
fn unknown_key_is_rejected_with_file_line_and_key() {
    assert_rejected(
        "[node]\nrole = 'worker'\nrolee = 'controller'\n",
        &["line 3", "rolee"],
    );
    assert_rejected("[dirs.'/var/lib/x']\nmdoe = '0700'\n", &["line 2", "mdoe"]);
    assert_rejected("[sysctls]\nx = 1\n", &["line 1", "sysctls"]);
}

#[test]
fn wrong_type_is_rejected_with_file_line_and_key() {
    assert_rejected("[node]\nrole = 1\n", &["line 2", "role"]);
    // Decimal modes are a classic trap (755 ≠ 0o755): only octal strings are accepted.
    assert_rejected("[dirs.'/var/lib/x']\nmode = 755\n", &["line 2", "mode"]);
    assert_rejected("[dirs.'/var/lib/x']\nmode = '0855'\n", &["line 2", "octal mode"]);
    assert_rejected(
        "[dirs.'relative/x']\nmode = '0755'\n",
        &["line 1", "not an absolute path"],
    );
    assert_rejected("[node]\ntaints = ['a=b:Sometimes']\n", &["line 2", "taints"]);
}

#[test]
fn bad_toml_is_rejected_with_file_and_line() {
    assert_rejected("[node\nrole = 'worker'\n", &["line 1"]);
    assert_rejected("[node]\nrole = 'worker\n", &["line 2"]);
}

#[test]
fn cross_key_rules_name_the_file() {
    assert_rejected(
        "[selinux]\nrelabel = ['/etc/kubernetes', '/']\n",
        &["50-bad.toml:2: selinux.relabel", "whole filesystem"],
    );
}

/// A rule spanning keys blames the file and line that set the value it names — here a URL source
/// set in one drop-in while the other drop-ins (and the defaults) set no pin — and a sysctl entry
/// its own line however the key was spelled, never the `[sysctl]` header or "(built-in defaults)".
#[test]
fn rules_name_the_file_and_line_that_set_the_value() {
    let root = Root::new();
    root.write(&format!("{ADMIN}/10-role.toml"), "[node]\nrole = 'controller'\n");
    let source = root.write(
        &format!("{ADMIN}/20-bundle.toml"),
        "# the assets\n[bundle]\nlayout = 'auto'\nsource = 'https://assets.example/b'\n",
    );
    let run = root.run(&["config"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "{}:4: bundle.source: a URL needs bundle.sha256",
            source.display()
        )),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("built-in defaults"), "{}", run.stderr);

    // A rule about a key no file set blames the line that turned its section on.
    let root = Root::new();
    let file = root.write(
        &format!("{ADMIN}/40-fleet.toml"),
        "\n[fleet_lock]\nenabled = true\n",
    );
    let run = root.run(&["config"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("{}:3: fleet_lock.base_url: not set", file.display())),
        "{}",
        run.stderr
    );

    let root = Root::new();
    let file = root.write(
        &format!("{ADMIN}/30-sysctl.toml"),
        "[sysctl]\n'vm.swappiness' = 10\n\n[sysctl.net.ipv4]\nip_forward = { min = 5, max = 2 }\n",
    );
    let run = root.run(&["config"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "{}:5: sysctl.\"net.ipv4.ip_forward\": min 5 is above max 2",
            file.display()
        )),
        "{}",
        run.stderr
    );
}

/// Values that parsed but later panicked or corrupted a command line are refused at load, with
/// exit 3, the key and the file named.
#[test]
fn values_that_used_to_break_later_are_refused_at_load() {
    for (body, needles) in [
        // Validated, then `run` panicked after READY on `now + interval` (a restart loop).
        (
            "[daemon]\ninterval_seconds = 9223372036854775807\n",
            &["daemon.interval_seconds", "from 1 to 86400"][..],
        ),
        (
            "[daemon]\nboot_spread_seconds = 3601\n",
            &["daemon.boot_spread_seconds", "from 0 to 3600"][..],
        ),
        (
            "[kubelet]\nstop_timeout_seconds = 9223372036854775807\n",
            &["kubelet.stop_timeout_seconds", "more than 86400"][..],
        ),
        // `-v SRC:DST:OPTS`: a ':' or ',' in a path changed the mount's meaning.
        (
            "[kubelet]\nextra_mounts = [{ source = \"/srv/a:/etc\" }]\n",
            &["kubelet.extra_mounts", "/srv/a:/etc"][..],
        ),
        (
            "[kubelet]\nextra_mounts = [{ source = \"/srv/a\", target = \"/x,ro\" }]\n",
            &["kubelet.extra_mounts", "/x,ro"][..],
        ),
        // A ',' separates NetworkManager specs: one entry would have become two.
        (
            "[networkmanager]\nunmanaged = [\"interface-name:eth0,interface-name:eth1\"]\n",
            &["networkmanager.unmanaged", "not a device spec"][..],
        ),
    ] {
        let root = Root::new();
        let f = root.write(&format!("{ADMIN}/50-bad.toml"), body);
        let run = root.run(&["plan"]);
        assert_eq!(run.code, 3, "{body}: {}\n{}", run.stdout, run.stderr);
        let all = format!("{}{}", run.stdout, run.stderr);
        for n in needles.iter().chain([&f.display().to_string().as_str()]) {
            assert!(all.contains(n), "{body}: missing {n:?} in {all}");
        }
    }
}

/// Under `--root`, a fragment that is a symlink to an absolute path is read inside the root (as
/// the image will see it), never from the machine running nodeward. Control: the same absolute
/// path on this machine says otherwise.
#[test]
fn a_fragment_symlink_is_resolved_inside_the_root() {
    let root = Root::new();
    let outside = tempfile::tempdir().expect("tempdir");
    let target = outside.path().join("fragment.toml");
    std::fs::write(&target, "[node]\nhostname = 'from-the-build-machine'\n").expect("write");
    root.write(
        target.to_str().expect("utf-8"),
        "[node]\nhostname = 'from-the-image'\n",
    );
    let link = root.path().join(ADMIN).join("10-link.toml");
    std::fs::create_dir_all(link.parent().expect("parent")).expect("mkdir");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let doc = effective(&root, &[]);
    assert_eq!(doc["config"]["node"]["hostname"], "from-the-image", "{doc}");
}

/// Like sshd's StrictModes: a configuration directory or fragment that others could write is
/// refused with the reason, naming it. Control: the same files 0644 in a 0755 directory load.
#[test]
fn configuration_others_could_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &std::path::Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod")
    };
    let root = Root::new();
    let file = root.write(&format!("{ADMIN}/10-x.toml"), "[node]\nhostname = 'x'\n");
    let dir = file.parent().expect("dir").to_path_buf();
    set(&file, 0o644);
    set(&dir, 0o755);
    assert_eq!(effective(&root, &[])["config"]["node"]["hostname"], "x");

    set(&file, 0o666);
    let out = root.run(&["config"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr
            .contains("10-x.toml: refused: mode 0666 lets anyone write it"),
        "{}",
        out.stderr
    );
    set(&file, 0o644);
    set(&dir, 0o775);
    let out = root.run(&["config"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr
            .contains("config.d: refused: mode 0775 lets its group write it"),
        "{}",
        out.stderr
    );
    // Up the tree, as sshd checks a key file's parents: /etc at 0777, or /etc/nodeward owned by
    // someone else, lets that someone swap config.d itself. The root directory is not checked.
    set(&dir, 0o755);
    let etc = root.path().join("etc");
    set(&etc, 0o777);
    let out = root.run(&["config"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr
            .contains("/etc: refused: mode 0777 lets anyone write it"),
        "{}",
        out.stderr
    );
    set(&etc, 0o755);
    let nodeward_dir = root.path().join("etc/nodeward");
    std::os::unix::fs::chown(&nodeward_dir, Some(1000), None).expect("chown");
    let out = root.run(&["config"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("/etc/nodeward: refused: owned by uid 1000"),
        "{}",
        out.stderr
    );
    std::os::unix::fs::chown(&nodeward_dir, Some(0), None).expect("chown");
    set(root.path(), 0o777);
    assert_eq!(
        effective(&root, &[])["config"]["node"]["hostname"],
        "x",
        "the root itself is not checked"
    );
}

/// Under umask 000, what nodeward creates without a mode of its own (its run directory, itself a
/// configuration source) still comes out 0755, not 0777.
#[test]
fn the_callers_umask_does_not_loosen_what_nodeward_creates() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let root = Root::new();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nodeward"));
    cmd.args(["apply", "--only", "dirs", "--root"]).arg(root.path());
    // SAFETY: umask is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let out = cmd.output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for dir in ["run/nodeward", "etc/kubernetes", "var/lib/kubelet"] {
        let mode = std::fs::metadata(root.path().join(dir))
            .expect(dir)
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode & 0o022, 0, "{dir} is {mode:04o}");
    }
}

#[test]
fn a_word_for_an_integer_sysctl_is_rejected_naming_key_and_file() {
    // systemd-sysctl would fail on it at every boot if it reached sysctl.d.
    assert_rejected(
        "[sysctl]\n\"net.ipv4.ip_forward\" = \"yes\"\n",
        &[
            "50-bad.toml:2: sysctl.\"net.ipv4.ip_forward\"",
            "\"yes\" is not one integer",
        ],
    );
}

#[test]
fn an_unmanaged_list_of_every_interface_is_rejected() {
    assert_rejected(
        "[networkd]\nunmanaged = [\"*\"]\n",
        &["networkd.unmanaged", "matches every interface, the uplink too"],
    );
    assert_rejected(
        "[networkmanager]\nunmanaged = [\"interface-name:*\"]\n",
        &["networkmanager.unmanaged", "matches every interface"],
    );
}

/// `--version` names the commit and its date: which build runs on a node.
#[test]
fn the_version_names_the_commit_and_date() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeward"))
        .arg("--version")
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (name_version, stamp) = text.split_once(" (").expect("a stamp");
    assert_eq!(name_version, concat!("nodeward ", env!("CARGO_PKG_VERSION")));
    let (commit, date) = stamp
        .trim_end_matches(')')
        .split_once(' ')
        .expect("commit and date");
    assert!(
        commit == "unknown" || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{text}"
    );
    assert!(
        date == "unknown" || date.len() == 10 || date.starts_with('@'),
        "{text}"
    );
}

/// Round 5's blame bomb: a megabyte sysctl name is refused by its start and length (it was taken,
/// and ~7 MB a key held in the blame); 257 fragments are refused by their count. Controls: a
/// 4,086-byte key of 255-byte names is taken; 256 fragments are read.
#[test]
fn a_megabyte_sysctl_name_and_a_pile_of_fragments_are_refused_by_their_bounds() {
    let long = format!("[sysctl]\n\"net.core.{}\" = 1\n", "a".repeat(1 << 20));
    assert_rejected(&long, &["1048585 bytes", "longer than any /proc/sys path"]);
    let root = Root::new();
    let names = vec!["b".repeat(255); 15].join(".");
    let key = format!("net.{}.{}", "c".repeat(255), &names[..4086 - 4 - 256]);
    assert_eq!(key.len(), 4086);
    root.write(
        &format!("{ADMIN}/50-long.toml"),
        &format!("[sysctl]\n\"{key}\" = 1\n"),
    );
    let run = root.run(&["config"]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    let root = Root::new();
    for i in 0..256 {
        root.write(&format!("{ADMIN}/{i:03}.toml"), "# empty\n");
    }
    assert_eq!(root.run(&["config"]).code, 0);
    root.write(&format!("{ADMIN}/256.toml"), "# one more\n");
    let run = root.run(&["config"]);
    assert_eq!(run.code, 3);
    assert!(
        run.stderr.contains("257 configuration fragments, at most 256"),
        "{}",
        run.stderr
    );
}
