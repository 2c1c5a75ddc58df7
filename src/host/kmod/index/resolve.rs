//! Resolving a requested module (or alias) on the parsed index: what must be loaded, in an order
//! that works (dependencies and pre-softdeps first, post-softdeps after), blacklists refused and
//! softdep chains bounded, each module once, on an explicit stack.

use super::*;

impl ModIndex {
    /// Resolves a requested name (module or alias) to what must be loaded, dependencies first.
    /// `loaded` says whether a module is already in the kernel; loaded ones are left out.
    /// Unlike modprobe, a blacklisted module is refused even when asked for by name or needed as a
    /// dependency: the admin said no, and a clear error beats a silent load.
    pub fn resolve(
        &self,
        requested: &str,
        version: &str,
        loaded: &dyn Fn(&str) -> bool,
    ) -> Result<Resolution, ResolveError> {
        let name = requested.replace('-', "_");
        let target = if self.deps.contains_key(name.as_str()) || self.builtin.contains(&name) {
            name.clone()
        } else if let Some((_, m, _)) = self.aliases().iter().find(|(p, _, _)| glob_match(p, &name)) {
            m.clone()
        } else {
            return Err(ResolveError::NotFound {
                name,
                version: version.to_owned(),
                dir: self.dir.display().to_string(),
            });
        };
        if let Some(file) = self.blacklisted.get(&target) {
            return Err(ResolveError::Blacklisted {
                name: target,
                file: file.clone(),
                via: None,
            });
        }
        if self.builtin.contains(&target) {
            return Ok(Resolution::Builtin);
        }
        let mut probe = Probe {
            loaded,
            done: BTreeSet::new(),
            out: Vec::new(),
            skipped: Vec::new(),
        };
        self.probe(&target, &target, Why::Requested, None, &mut probe, 0)?;
        for s in &probe.skipped {
            tracing::debug!(module = %target, "{s}");
        }
        Ok(Resolution::Load(probe.out))
    }

    /// [`resolve`](Self::resolve), plus the soft dependencies that were skipped and why.
    pub(crate) fn resolve_explained(
        &self,
        requested: &str,
        version: &str,
    ) -> Result<(Resolution, Vec<String>), ResolveError> {
        let resolution = self.resolve(requested, version, &|_| false)?;
        let mut probe = Probe {
            loaded: &|_| false,
            done: BTreeSet::new(),
            out: Vec::new(),
            skipped: Vec::new(),
        };
        if let Resolution::Load(loads) = &resolution {
            if let Some(last) = loads.iter().rfind(|l| l.why == Why::Requested) {
                self.probe(&last.name, &last.name, Why::Requested, None, &mut probe, 0)?;
            }
        }
        Ok((resolution, probe.skipped))
    }

    /// kmod's probe list for one module: for each of its `modules.dep` dependencies and then for
    /// itself, the pre-softdeps (each probed the same way), the module, the post-softdeps. Each
    /// module once; softdeps that are missing, blacklisted or unloadable are skipped, as modprobe
    /// skips them, and noted.
    fn probe(
        &self,
        root: &str,
        name: &str,
        why: Why,
        after_extra: Option<&str>,
        p: &mut Probe<'_>,
        depth: usize,
    ) -> Result<(), ResolveError> {
        if depth > MAX_SOFT_DEPTH {
            return Err(ResolveError::Cycle {
                name: root.to_owned(),
                at: format!("{name} (softdep chain deeper than {MAX_SOFT_DEPTH})"),
            });
        }
        if p.done.contains(name) || self.builtin.contains(name) || (p.loaded)(name) {
            return Ok(());
        }
        let mut order = Vec::new();
        let mut state = HashMap::new();
        let loaded = |n: &str| (p.loaded)(n);
        self.visit(root, name, &loaded, &mut state, &mut order)?;
        let last = order.len().saturating_sub(1);
        for (i, (m, file)) in order.into_iter().enumerate() {
            let (why, extra) = if i == last {
                (why.clone(), after_extra)
            } else {
                (Why::Dependency, None)
            };
            self.fill(root, &m, &file, why, extra, p, depth)?;
        }
        Ok(())
    }

    /// One module with its soft dependencies around it.
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &self,
        root: &str,
        name: &str,
        file: &str,
        why: Why,
        after_extra: Option<&str>,
        p: &mut Probe<'_>,
        depth: usize,
    ) -> Result<(), ResolveError> {
        if p.done.contains(name) {
            return Ok(());
        }
        // Marked first: a softdep cycle back to this module ends here.
        p.done.insert(name.to_owned());
        let mut after = self.deps_of(name);
        after.extend(after_extra.map(str::to_owned));
        let Some(soft) = self.extra.soft.get(name) else {
            p.out.push(Load {
                name: name.to_owned(),
                file: file.to_owned(),
                why,
                after,
            });
            return Ok(());
        };
        for dep in &soft.pre {
            for m in self.soft_targets(name, dep, p) {
                let why = Why::SoftPre {
                    of: name.to_owned(),
                    origin: soft.origin.clone(),
                };
                match self.probe(root, &m, why, None, p, depth + 1) {
                    Ok(()) => after.push(m),
                    Err(e) => p
                        .skipped
                        .push(format!("softdep {name} pre: {dep}: skipped ({e})")),
                }
            }
        }
        p.out.push(Load {
            name: name.to_owned(),
            file: file.to_owned(),
            why,
            after,
        });
        for dep in &soft.post {
            for m in self.soft_targets(name, dep, p) {
                let why = Why::SoftPost {
                    of: name.to_owned(),
                    origin: soft.origin.clone(),
                };
                if let Err(e) = self.probe(root, &m, why, Some(name), p, depth + 1) {
                    p.skipped
                        .push(format!("softdep {name} post: {dep}: skipped ({e})"));
                }
            }
        }
        Ok(())
    }

    /// The modules a softdep name stands for, as `modprobe NAME` looks it up: a modprobe.d alias,
    /// else a module of that name, else every matching `modules.alias` entry. Built-in and
    /// blacklisted ones (modprobe ignores blacklisted aliases) and names nothing provides are
    /// dropped with a note.
    fn soft_targets(&self, of: &str, dep: &str, p: &mut Probe<'_>) -> Vec<String> {
        let found = self.lookup(dep);
        if found.is_empty() {
            let why = if self.is_builtin_alias(dep) {
                "built into the kernel"
            } else {
                "nothing provides it"
            };
            p.skipped.push(format!("softdep {of}: {dep}: {why}"));
        }
        found
            .into_iter()
            .filter(|(m, _)| {
                if self.builtin.contains(m) {
                    return false;
                }
                if let Some(file) = self.blacklisted.get(m) {
                    p.skipped.push(format!(
                        "softdep {of}: {dep} → {m}: blacklisted by {}",
                        file.display()
                    ));
                    return false;
                }
                true
            })
            .map(|(m, _)| m)
            .collect()
    }

    /// Depth-first, dependencies before dependants (post-order), each module once. The stack is
    /// explicit: a modules.dep chain 100,000 deep (hostile or broken) must not overflow the thread.
    fn visit(
        &self,
        root: &str,
        start: &str,
        loaded: &dyn Fn(&str) -> bool,
        state: &mut HashMap<String, bool>,
        order: &mut Vec<(String, String)>,
    ) -> Result<(), ResolveError> {
        let mut stack: Vec<Frame<'_>> = Vec::new();
        stack.extend(self.enter(root, start, loaded, state)?);
        while let Some(top) = stack.last_mut() {
            if let Some(dep) = top.deps.get(top.next) {
                let dep = dep.to_string();
                top.next += 1;
                stack.extend(self.enter(root, &dep, loaded, state)?);
            } else if let Some(done) = stack.pop() {
                state.insert(done.name.clone(), true);
                order.push((done.name, done.file.to_owned()));
            }
        }
        Ok(())
    }

    /// Starts visiting `name`: `None` when it needs nothing (done, built in, loaded), a cycle or a
    /// blacklisted or missing module as an error.
    fn enter(
        &self,
        root: &str,
        name: &str,
        loaded: &dyn Fn(&str) -> bool,
        state: &mut HashMap<String, bool>,
    ) -> Result<Option<Frame<'_>>, ResolveError> {
        match state.get(name) {
            Some(true) => return Ok(None),
            Some(false) => {
                return Err(ResolveError::Cycle {
                    name: root.to_owned(),
                    at: name.to_owned(),
                });
            }
            None => {}
        }
        if self.builtin.contains(name) || loaded(name) {
            state.insert(name.to_owned(), true);
            return Ok(None);
        }
        if let Some(file) = self.blacklisted.get(name) {
            return Err(ResolveError::Blacklisted {
                name: name.to_owned(),
                file: file.clone(),
                via: Some(root.to_owned()),
            });
        }
        let Some((file, mut deps)) = self.dep_entry(name) else {
            return Err(ResolveError::NotFound {
                name: name.to_owned(),
                version: String::new(),
                dir: self.dir.display().to_string(),
            });
        };
        // modules.dep lists the whole closure, dependants before their dependencies; kmod walks it
        // backwards, and so do we, so the order matches `modprobe --show-depends`.
        deps.reverse();
        state.insert(name.to_owned(), false);
        Ok(Some(Frame {
            name: name.to_owned(),
            file,
            deps,
            next: 0,
        }))
    }
}

/// The state of one resolution.
struct Probe<'a> {
    loaded: &'a dyn Fn(&str) -> bool,
    /// Modules placed (or being placed) in `out`.
    done: BTreeSet<String>,
    out: Vec<Load>,
    skipped: Vec<String>,
}

/// A module being visited: its dependencies and how many of them are done.
struct Frame<'a> {
    name: String,
    file: &'a str,
    deps: Vec<std::borrow::Cow<'a, str>>,
    next: usize,
}

#[cfg(test)]
mod tests {
    //! Resolution against fixture module trees (kmod's order, its aliases, softdeps, blacklists).

    use super::super::tests::index;
    use super::*;

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
}
