//! What a kernel's module tree says: `modules.dep`, `modules.alias`, `modules.builtin`, and the
//! modprobe.d configuration (blacklists, disabling `install` lines, `options`). Parsing is pure and
//! resolution works on the parsed index, so both are tested on fixture trees.

use crate::glob::glob_match;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A module file's compression, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Xz,
    Zstd,
    Gzip,
}

impl Compression {
    pub fn of(file: &str) -> Compression {
        if file.ends_with(".ko.xz") {
            Compression::Xz
        } else if file.ends_with(".ko.zst") {
            Compression::Zstd
        } else if file.ends_with(".ko.gz") {
            Compression::Gzip
        } else {
            Compression::None
        }
    }

    /// The name `/sys/module/compression` uses for this format.
    pub fn kernel_name(self) -> Option<&'static str> {
        match self {
            Compression::None => None,
            Compression::Xz => Some("xz"),
            Compression::Zstd => Some("zstd"),
            Compression::Gzip => Some("gzip"),
        }
    }
}

/// The module name a file provides: base name without `.ko[.xz|.zst|.gz]`, `-` as `_`
/// (borrowed unless a `-` had to be replaced).
pub fn module_name(file: &str) -> Option<std::borrow::Cow<'_, str>> {
    let base = file.rsplit('/').next()?;
    let stem = [".ko.xz", ".ko.zst", ".ko.gz", ".ko"]
        .iter()
        .find_map(|ext| base.strip_suffix(ext))?;
    if stem.is_empty() {
        return None;
    }
    Some(if stem.contains('-') {
        stem.replace('-', "_").into()
    } else {
        stem.into()
    })
}

/// A kernel's module index.
///
/// Built for the hot path (every converge): `modules.dep` is indexed by module name once,
/// dependency lists are parsed only for the modules resolved, and `modules.alias` (large, and needed
/// only for names that are not module names) is read on first use.
#[derive(Debug, Default)]
pub struct ModIndex {
    /// The module tree, `/lib/modules/VERSION`.
    pub dir: PathBuf,
    dep_text: String,
    /// name → byte range of its line in `dep_text`.
    deps: HashMap<Box<str>, (usize, usize)>,
    /// (glob pattern, module name), in file order; read on first use.
    aliases: std::cell::OnceCell<Vec<(String, String)>>,
    builtin: BTreeSet<String>,
    /// Modules a modprobe.d file blacklists or disables, with the file that said so.
    blacklisted: BTreeMap<String, PathBuf>,
    /// `options NAME ...` parameters.
    options: BTreeMap<String, String>,
}

/// Where a requested module stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Compiled into the kernel.
    Builtin,
    /// Files to load, dependencies first; each entry is (name, file relative to the tree).
    Load(Vec<(String, String)>),
}

/// Why a module cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "module {name}: not found for kernel {version} (not in {dir}/modules.dep, modules.alias or modules.builtin)"
    )]
    NotFound {
        name: String,
        version: String,
        dir: String,
    },
    #[error("module {name}: blacklisted by {}{}", file.display(), via.as_ref().map(|v| format!(" (needed by {v})")).unwrap_or_default())]
    Blacklisted {
        name: String,
        file: PathBuf,
        via: Option<String>,
    },
    #[error("module {name}: dependency cycle through {at}")]
    Cycle { name: String, at: String },
}

impl ModIndex {
    /// Reads the index files of `dir` (`/lib/modules/VERSION`) and the modprobe.d directories
    /// below `modprobe_root` (the root the configuration lives in).
    pub fn load(dir: &Path, modprobe_root: &Path) -> std::io::Result<ModIndex> {
        let read = |name: &str| -> std::io::Result<String> {
            std::fs::read_to_string(dir.join(name))
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.join(name).display())))
        };
        let mut index = ModIndex {
            dir: dir.to_path_buf(),
            ..ModIndex::default()
        };
        index.parse_dep(read("modules.dep")?);
        match read("modules.builtin") {
            Ok(text) => index.parse_builtin(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        for (file, text) in modprobe_d(modprobe_root)? {
            index.parse_modprobe_conf(&file, &text);
        }
        Ok(index)
    }

    /// Takes `modules.dep`'s text and indexes its lines by module name.
    pub fn parse_dep(&mut self, text: String) {
        let mut start = 0;
        for line in text.split_inclusive('\n') {
            let end = start + line.len();
            if let Some((file, _)) = line.split_once(':') {
                if let Some(name) = module_name(file.trim()) {
                    self.deps.insert(name.into_owned().into_boxed_str(), (start, end));
                }
            }
            start = end;
        }
        self.dep_text = text;
    }

    /// A module's file and direct dependencies, parsed from its `modules.dep` line.
    fn dep_entry(&self, name: &str) -> Option<(&str, Vec<std::borrow::Cow<'_, str>>)> {
        let &(start, end) = self.deps.get(name)?;
        let (file, deps) = self.dep_text[start..end].split_once(':')?;
        Some((
            file.trim(),
            deps.split_whitespace().filter_map(module_name).collect(),
        ))
    }

    /// A module's direct dependencies by name (empty for unknown modules).
    pub fn deps_of(&self, name: &str) -> Vec<String> {
        self.dep_entry(name)
            .map(|(_, deps)| deps.into_iter().map(|d| d.into_owned()).collect())
            .unwrap_or_default()
    }

    /// Sets the aliases from `modules.alias` text (otherwise read from the tree on first use).
    pub fn parse_alias(&mut self, text: &str) {
        self.aliases = std::cell::OnceCell::from(parse_alias_text(text));
    }

    fn aliases(&self) -> &[(String, String)] {
        self.aliases.get_or_init(|| {
            std::fs::read_to_string(self.dir.join("modules.alias"))
                .map(|t| parse_alias_text(&t))
                .unwrap_or_default()
        })
    }

    pub fn parse_builtin(&mut self, text: &str) {
        self.builtin.extend(
            text.lines()
                .filter_map(|l| module_name(l.trim()))
                .map(|n| n.into_owned()),
        );
    }

    /// `blacklist NAME`, `install NAME /bin/false` (or `/bin/true`: the usual way to disable a
    /// module), and `options NAME PARAMS`.
    pub fn parse_modprobe_conf(&mut self, file: &Path, text: &str) {
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let mut f = line.split_whitespace();
            match (f.next(), f.next()) {
                (Some("blacklist"), Some(name)) => {
                    self.blacklisted
                        .insert(name.replace('-', "_"), file.to_path_buf());
                }
                (Some("install"), Some(name)) => {
                    let cmd: Vec<&str> = f.collect();
                    if matches!(
                        cmd.as_slice(),
                        ["/bin/false"] | ["/bin/true"] | ["/usr/bin/false"] | ["/usr/bin/true"]
                    ) {
                        self.blacklisted
                            .insert(name.replace('-', "_"), file.to_path_buf());
                    }
                }
                (Some("options"), Some(name)) => {
                    let params: Vec<&str> = f.collect();
                    let entry = self.options.entry(name.replace('-', "_")).or_default();
                    for p in params {
                        if !entry.is_empty() {
                            entry.push(' ');
                        }
                        entry.push_str(p);
                    }
                }
                _ => {}
            }
        }
    }

    /// Parameters modprobe.d gives a module (`options`), space-separated.
    pub fn options_for(&self, name: &str) -> &str {
        self.options.get(name).map_or("", String::as_str)
    }

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
        } else if let Some((_, m)) = self.aliases().iter().find(|(p, _)| glob_match(p, &name)) {
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
        let mut order = Vec::new();
        let mut state = HashMap::new();
        self.visit(&target, &target, loaded, &mut state, &mut order)?;
        Ok(Resolution::Load(order))
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
        let Some((file, deps)) = self.dep_entry(name) else {
            return Err(ResolveError::NotFound {
                name: name.to_owned(),
                version: String::new(),
                dir: self.dir.display().to_string(),
            });
        };
        state.insert(name.to_owned(), false);
        Ok(Some(Frame {
            name: name.to_owned(),
            file,
            deps,
            next: 0,
        }))
    }
}

/// A module being visited: its dependencies and how many of them are done.
struct Frame<'a> {
    name: String,
    file: &'a str,
    deps: Vec<std::borrow::Cow<'a, str>>,
    next: usize,
}

fn parse_alias_text(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            match (f.next(), f.next(), f.next()) {
                (Some("alias"), Some(pattern), Some(module)) => {
                    Some((pattern.replace('-', "_"), module.replace('-', "_")))
                }
                _ => None,
            }
        })
        .collect()
}

/// `*.conf` files of the modprobe.d directories, systemd-style: a name in an earlier directory
/// overrides the same name in a later one (`/etc` beats `/run` beats `/lib`).
fn modprobe_d(root: &Path) -> std::io::Result<Vec<(PathBuf, String)>> {
    let mut by_name: BTreeMap<String, PathBuf> = BTreeMap::new();
    for dir in [
        "usr/lib/modprobe.d",
        "lib/modprobe.d",
        "run/modprobe.d",
        "etc/modprobe.d",
    ] {
        let dir = root.join(dir);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".conf") {
                by_name.insert(name, e.path());
            }
        }
    }
    by_name
        .into_values()
        .map(|p| std::fs::read_to_string(&p).map(|t| (p, t)))
        .collect()
}

#[cfg(test)]
mod tests {
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
            Resolution::Load(v) => v.into_iter().map(|(n, _)| n).collect(),
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
}
