//! The module index against fixture module trees (kmod's formats, its order, its aliases).

use super::*;

const DEP: &str = "kernel/net/bridge/br_netfilter.ko.xz: kernel/net/bridge/bridge.ko.xz kernel/net/802/stp.ko.xz kernel/net/llc/llc.ko.xz\n\
kernel/net/bridge/bridge.ko.xz: kernel/net/802/stp.ko.xz kernel/net/llc/llc.ko.xz\n\
kernel/net/802/stp.ko.xz: kernel/net/llc/llc.ko.xz\n\
kernel/net/llc/llc.ko.xz:\n\
kernel/net/netfilter/ipvs/ip_vs_rr.ko.zst: kernel/net/netfilter/ipvs/ip_vs.ko.zst kernel/net/netfilter/nf_conntrack.ko.gz\n\
kernel/net/netfilter/ipvs/ip_vs.ko.zst: kernel/net/netfilter/nf_conntrack.ko.gz\n\
kernel/net/netfilter/nf_conntrack.ko.gz:\n\
kernel/fs/overlayfs/overlay.ko:\n";

fn index() -> ModIndex {
    let mut i = ModIndex {
        dir: "/lib/modules/6.1.0-test".into(),
        ..ModIndex::default()
    };
    i.parse_dep(DEP.to_owned());
    i.parse_alias(
        "alias fs-overlay overlay\nalias net-pf-7 bluetooth\nalias nf_conntrack-ipv[46] nf_conntrack\n",
    );
    i.parse_builtin("kernel/net/ipv4/ip_tunnel.ko\n");
    i
}

fn names(r: Resolution) -> Vec<String> {
    match r {
        Resolution::Load(v) => v.into_iter().map(|l| l.name).collect(),
        Resolution::Builtin => vec!["(builtin)".into()],
    }
}

#[test]
fn dependencies_come_first_each_once() {
    let r = index()
        .resolve("br_netfilter", "6.1", &|_| false)
        .expect("resolve");
    assert_eq!(names(r), ["llc", "stp", "bridge", "br_netfilter"]);
    let r = index().resolve("ip_vs_rr", "6.1", &|_| false).expect("resolve");
    assert_eq!(names(r), ["nf_conntrack", "ip_vs", "ip_vs_rr"]);
}

/// A 100,000-deep chain used to overflow the stack (recursive resolution); cycles still stop.
#[test]
fn deep_chains_resolve_without_recursion() {
    const DEPTH: usize = 100_000;
    let mut text = String::new();
    for i in 0..DEPTH {
        text.push_str(&format!("kernel/m{i}.ko:"));
        if i + 1 < DEPTH {
            text.push_str(&format!(" kernel/m{}.ko", i + 1));
        }
        text.push('\n');
    }
    let mut i = ModIndex::default();
    i.parse_dep(text);
    // On a small stack, as a thread the daemon starts might have.
    let order = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || names(i.resolve("m0", "6.1", &|_| false).expect("resolve")))
        .expect("spawn")
        .join()
        .expect("no stack overflow");
    assert_eq!(order.len(), DEPTH);
    assert_eq!(order.first().map(String::as_str), Some("m99999"));
    assert_eq!(order.last().map(String::as_str), Some("m0"));

    let mut c = ModIndex::default();
    c.parse_dep("kernel/a.ko: kernel/b.ko\nkernel/b.ko: kernel/a.ko\n".into());
    assert!(matches!(
        c.resolve("a", "6.1", &|_| false),
        Err(ResolveError::Cycle { .. })
    ));
}

#[test]
fn loaded_and_builtin_count_as_done() {
    let loaded = |n: &str| n == "llc" || n == "stp";
    assert_eq!(
        names(index().resolve("br_netfilter", "6.1", &loaded).expect("r")),
        ["bridge", "br_netfilter"]
    );
    assert_eq!(
        index().resolve("ip_tunnel", "6.1", &|_| false),
        Ok(Resolution::Builtin)
    );
    assert_eq!(
        names(index().resolve("overlay", "6.1", &|n| n == "overlay").expect("r")),
        Vec::<String>::new()
    );
}

#[test]
fn aliases_and_dashes() {
    assert_eq!(
        names(index().resolve("fs-overlay", "6.1", &|_| false).expect("r")),
        ["overlay"]
    );
    assert_eq!(
        names(
            index()
                .resolve("nf_conntrack-ipv4", "6.1", &|_| false)
                .expect("r")
        ),
        ["nf_conntrack"]
    );
    assert_eq!(
        names(index().resolve("ip-vs", "6.1", &|_| false).expect("r")),
        ["nf_conntrack", "ip_vs"]
    );
}

#[test]
fn not_found_and_blacklisted() {
    let err = index()
        .resolve("nosuch", "6.1.0-test", &|_| false)
        .expect_err("missing");
    assert!(
        err.to_string().contains("not found for kernel 6.1.0-test"),
        "{err}"
    );
    let mut i = index();
    i.parse_modprobe_conf(Path::new("/etc/modprobe.d/no-llc.conf"), "blacklist llc\n");
    let err = i
        .resolve("br_netfilter", "6.1", &|_| false)
        .expect_err("dep blacklisted");
    assert_eq!(
        err.to_string(),
        "module llc: blacklisted by /etc/modprobe.d/no-llc.conf (needed by br_netfilter)"
    );
    i.parse_modprobe_conf(
        Path::new("/etc/modprobe.d/ipvs.conf"),
        "install ip_vs /bin/false # no IPVS here\n",
    );
    assert!(matches!(
        i.resolve("ip_vs", "6.1", &|_| false),
        Err(ResolveError::Blacklisted { .. })
    ));
}

#[test]
fn options_accumulate() {
    let mut i = index();
    i.parse_modprobe_conf(
        Path::new("/x.conf"),
        "options nf_conntrack hashsize=32768\noptions nf-conntrack expect_hashsize=1\n",
    );
    assert_eq!(i.options_for("nf_conntrack"), "hashsize=32768 expect_hashsize=1");
}

#[test]
fn names_and_compression() {
    assert_eq!(
        module_name("kernel/net/ipv4/ip-tunnel.ko.zst").as_deref(),
        Some("ip_tunnel")
    );
    assert_eq!(module_name("README"), None);
    assert_eq!(Compression::of("a.ko.xz"), Compression::Xz);
    assert_eq!(Compression::of("a.ko.gz"), Compression::Gzip);
    assert_eq!(Compression::of("a.ko"), Compression::None);
}

/// A tree shaped like Debian's for the softdep cases (names from the real one).
fn soft_index(modprobe_d: &str) -> ModIndex {
    let mut i = ModIndex {
        dir: "/lib/modules/6.1.0-test".into(),
        ..ModIndex::default()
    };
    i.parse_dep(
        "kernel/net/netfilter/nf_conntrack.ko: kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko kernel/lib/libcrc32c.ko\n\
         kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko:\n\
         kernel/lib/libcrc32c.ko:\n\
         kernel/arch/x86/crypto/crc32c-intel.ko:\n\
         kernel/crypto/ecb.ko:\n\
         kernel/crypto/xts.ko:\n\
         kernel/crypto/post_one.ko:\n\
         kernel/crypto/loop_a.ko:\n\
         kernel/crypto/loop_b.ko:\n"
            .into(),
    );
    i.parse_alias("alias crypto-crc32c crc32c_intel\nalias crc32c crc32c_intel\nalias crypto-ecb ecb\n");
    i.parse_builtin("kernel/crypto/crc32c_generic.ko\n");
    let local = Path::new("/etc/modprobe.d/00-local.conf");
    i.parse_modprobe_conf(local, modprobe_d);
    let files = in_kmod_order(vec![
        (
            PathBuf::from("/lib/modules/6.1.0-test/modules.softdep"),
            "softdep libcrc32c pre: crc32c\nsoftdep xts pre: ecb post: post_one\nsoftdep xts pre: never-used\n\
             softdep loop_a pre: loop_b\nsoftdep loop_b pre: loop_a\nsoftdep ecb pre: missing-thing\n"
                .into(),
        ),
        (local.to_path_buf(), modprobe_d.to_owned()),
        (PathBuf::from("/etc/modprobe.d/zz-late.conf"), "softdep xts pre: never-either\n".into()),
    ]);
    for (f, t) in files {
        i.parse_softdeps(&f, &t);
    }
    i
}

fn loads(i: &ModIndex, name: &str) -> Vec<(String, bool)> {
    match i.resolve(name, "6.1", &|_| false).expect("resolve") {
        Resolution::Load(v) => v.into_iter().map(|l| (l.name, l.why.is_soft())).collect(),
        Resolution::Builtin => Vec::new(),
    }
}

/// `modprobe --show-depends nf_conntrack` on Debian 6.1: crc32c-intel, libcrc32c,
/// nf_defrag_ipv4, …, nf_conntrack (libcrc32c's pre-softdep through the `crc32c` alias).
#[test]
fn pre_softdeps_through_aliases_come_before_their_module() {
    let i = soft_index("");
    assert_eq!(
        loads(&i, "nf_conntrack"),
        [
            ("crc32c_intel".into(), true),
            ("libcrc32c".into(), false),
            ("nf_defrag_ipv4".into(), false),
            ("nf_conntrack".into(), false),
        ]
    );
    let Resolution::Load(v) = i.resolve("nf_conntrack", "6.1", &|_| false).expect("resolve") else {
        panic!("loads")
    };
    let libcrc = v.iter().find(|l| l.name == "libcrc32c").expect("libcrc32c");
    assert!(
        libcrc.after.contains(&"crc32c_intel".to_owned()),
        "{:?}",
        libcrc.after
    );
    let Why::SoftPre { of, origin } = &v[0].why else {
        panic!("{:?}", v[0].why)
    };
    assert_eq!(of, "libcrc32c");
    assert_eq!(origin.to_string(), "/lib/modules/6.1.0-test/modules.softdep:1");
}

/// Pre before, post after; only the first softdep line of a module counts; a softdep nothing
/// provides is skipped, not an error.
#[test]
fn post_softdeps_follow_and_missing_ones_are_skipped() {
    let i = soft_index("");
    assert_eq!(
        loads(&i, "xts"),
        [
            ("ecb".into(), true),
            ("xts".into(), false),
            ("post_one".into(), true)
        ]
    );
    let Resolution::Load(v) = i.resolve("xts", "6.1", &|_| false).expect("resolve") else {
        panic!("loads")
    };
    assert!(
        v[2].after.contains(&"xts".to_owned()),
        "a post-softdep waits for its module"
    );
    let (_, skipped) = i.resolve_explained("xts", "6.1").expect("explain");
    assert!(
        skipped
            .iter()
            .any(|s| s.contains("missing_thing") && s.contains("nothing provides it")),
        "{skipped:?}"
    );
}

/// A softdep cycle ends (each module once); a modprobe.d file named before `modules.softdep`
/// overrides it (`zz-late.conf` does not); a blacklisted softdep is skipped, while a
/// blacklisted hard dependency still refuses.
#[test]
fn cycles_overrides_and_blacklists() {
    let i = soft_index("");
    assert_eq!(
        loads(&i, "loop_a"),
        [("loop_b".into(), true), ("loop_a".into(), false)]
    );

    let i = soft_index("softdep libcrc32c pre: crypto-ecb\n");
    assert_eq!(
        loads(&i, "libcrc32c"),
        [("ecb".into(), true), ("libcrc32c".into(), false)]
    );

    let i = soft_index("blacklist crc32c_intel\n");
    assert_eq!(loads(&i, "libcrc32c"), [("libcrc32c".into(), false)]);
    let (_, skipped) = i.resolve_explained("libcrc32c", "6.1").expect("explain");
    assert!(
        skipped
            .iter()
            .any(|s| s.contains("blacklisted by /etc/modprobe.d/00-local.conf")),
        "{skipped:?}"
    );

    let i = soft_index("blacklist nf_defrag_ipv4\n");
    assert!(matches!(
        i.resolve("nf_conntrack", "6.1", &|_| false),
        Err(ResolveError::Blacklisted { .. })
    ));
    // A softdep only on something built in loads nothing.
    let i = soft_index("softdep xts pre: crc32c_generic\n");
    assert_eq!(loads(&i, "xts"), [("xts".into(), false)]);
}

/// `explain` quotes each module's line of modules.dep: right for the first, a middle and the last
/// line, and none for a module the file does not list.
#[test]
fn dep_lines_are_numbered_from_one() {
    let mut i = ModIndex::default();
    let text: String = (0..50)
        .map(|n| format!("kernel/m{n}.ko: kernel/m{}.ko\n", n + 1))
        .collect();
    i.parse_dep(text);
    assert_eq!(i.dep_line("m0"), Some(1));
    assert_eq!(i.dep_line("m17"), Some(18));
    assert_eq!(i.dep_line("m49"), Some(50));
    assert_eq!(i.dep_line("m50"), None);
}

/// `load` on a module tree on disk (the mutation run found it untested by the library's own
/// tests): each index file read and used, an absent optional one skipped, an unreadable one an
/// error naming it rather than an empty index.
#[test]
fn load_reads_every_index_file_and_names_the_one_it_cannot() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path();
    let dir = root.join("lib/modules/6.1.0-test");
    let write = |rel: &str, body: &[u8]| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, body).expect("write");
    };
    write("lib/modules/6.1.0-test/modules.dep", DEP.as_bytes());
    write(
        "lib/modules/6.1.0-test/modules.softdep",
        b"softdep ip_vs pre: ecb post: xts\n",
    );
    write("lib/modules/6.1.0-test/modules.weakdep", b"weakdep overlay llc\n");
    write(
        "lib/modules/6.1.0-test/modules.builtin.modinfo",
        b"ip_tunnel.alias=ipip-tunnel\0ip_tunnel.license=GPL\0",
    );
    write("etc/modprobe.d/10-local.conf", b"softdep bridge pre: llc\n");
    // No modules.builtin: optional.
    let i = ModIndex::load(&dir, root).expect("load");
    assert_eq!(i.dir, dir);
    assert!(i.root.is_some(), "reads go through the root");
    assert_eq!(i.deps_of("bridge"), ["stp", "llc"]);
    assert!(i.deps_of("no_such").is_empty());
    assert_eq!(i.dep_line("stp"), Some(3));
    assert_eq!(i.softdep_names("ip_vs"), ["ecb", "xts"]);
    assert_eq!(i.softdep_names("bridge"), ["llc"], "modprobe.d is read too");
    assert_eq!(
        i.weakdeps_of("overlay").map(|(w, _)| w.clone()),
        Some(vec!["llc".to_owned()])
    );
    assert!(i.is_builtin_alias("ipip-tunnel"));
    assert!(!i.is_builtin_alias("gpl"));
    assert_eq!(
        parse_builtin_modinfo(b"ip_tunnel.alias=ipip-tunnel\0x.license=GPL\0"),
        [("ipip_tunnel".to_owned(), "ip_tunnel".to_owned())],
        "names normalised (dashes read as underscores, as kmod does)"
    );
    for unreadable in ["modules.builtin", "modules.softdep"] {
        let p = dir.join(unreadable);
        let _ = std::fs::remove_file(&p);
        std::fs::create_dir(&p).expect("a directory in its place");
        let e = ModIndex::load(&dir, root).expect_err(unreadable);
        assert!(e.to_string().contains(unreadable), "{e}");
        std::fs::remove_dir(&p).expect("rmdir");
    }
}

/// A tree with one chain of pre-softdeps `c0 pre: c1`, `c1 pre: c2`, … `c{len-1} pre: c{len}`.
fn softdep_chain(len: usize) -> ModIndex {
    let mut i = ModIndex {
        dir: "/lib/modules/6.1.0-test".into(),
        ..ModIndex::default()
    };
    i.parse_dep((0..=len).map(|k| format!("kernel/c{k}.ko:\n")).collect());
    let soft: String = (0..len)
        .map(|k| format!("softdep c{k} pre: c{}\n", k + 1))
        .collect();
    i.parse_softdeps(Path::new("/lib/modules/6.1.0-test/modules.softdep"), &soft);
    i
}

/// The softdep depth bound at its edge: a chain exactly as deep as it loads whole, deepest first;
/// one level more, and the module past the bound is skipped (as a softdep modprobe cannot load is)
/// with the reason noted.
#[test]
fn a_softdep_chain_as_deep_as_the_bound_resolves_and_one_deeper_is_cut() {
    let names = |i: &ModIndex| -> Vec<String> { loads(i, "c0").into_iter().map(|(n, _)| n).collect() };
    let whole = names(&softdep_chain(MAX_SOFT_DEPTH));
    assert_eq!(whole.len(), MAX_SOFT_DEPTH + 1);
    assert_eq!(whole.first(), Some(&format!("c{MAX_SOFT_DEPTH}")));
    assert_eq!(whole.last().map(String::as_str), Some("c0"));
    let deeper = softdep_chain(MAX_SOFT_DEPTH + 1);
    let cut = names(&deeper);
    assert_eq!(cut, whole, "the level past the bound is left out, the rest kept");
    let (_, skipped) = deeper.resolve_explained("c0", "6.1").expect("explain");
    assert!(
        skipped
            .iter()
            .any(|s| s.contains(&format!("c{}", MAX_SOFT_DEPTH + 1)) && s.contains("deeper than")),
        "{skipped:?}"
    );
}

/// A softdep on a module built into the kernel, or one already loaded, adds nothing to the list
/// (modprobe skips both), and neither hides the module itself.
#[test]
fn a_softdep_that_is_builtin_or_loaded_adds_nothing() {
    let mut i = softdep_chain(2);
    i.parse_builtin("kernel/c2.ko\n");
    let names = |i: &ModIndex, loaded: &dyn Fn(&str) -> bool| -> Vec<String> {
        match i.resolve("c0", "6.1", loaded).expect("resolve") {
            Resolution::Load(v) => v.into_iter().map(|l| l.name).collect(),
            Resolution::Builtin => Vec::new(),
        }
    };
    assert_eq!(
        names(&i, &|_| false),
        ["c1", "c0"],
        "the builtin c2 is not loaded"
    );
    assert_eq!(
        names(&i, &|n| n == "c1"),
        ["c0"],
        "a loaded c1 is not loaded again"
    );
    let j = softdep_chain(2);
    assert_eq!(
        names(&j, &|_| false),
        ["c2", "c1", "c0"],
        "control: without either, all three"
    );
}
