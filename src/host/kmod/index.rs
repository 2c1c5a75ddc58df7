//! What a kernel's module tree says: `modules.dep`, `modules.alias`, `modules.builtin`, and the
//! modprobe.d configuration (blacklists, disabling `install` lines, `options`). Parsing is pure and
//! resolution works on the parsed index, so both are tested on fixture trees.

use super::softdep::{self, Origin};
use crate::glob::glob_match;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

mod resolve;

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
    pub(crate) fn kernel_name(self) -> Option<&'static str> {
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
pub(crate) fn module_name(file: &str) -> Option<std::borrow::Cow<'_, str>> {
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
    /// (glob pattern, module name, line), in file order; read on first use.
    aliases: std::cell::OnceCell<Vec<(String, String, usize)>>,
    builtin: BTreeSet<String>,
    /// Modules a modprobe.d file blacklists or disables, with the file that said so.
    blacklisted: BTreeMap<String, PathBuf>,
    /// `options NAME ...` parameters.
    options: BTreeMap<String, String>,
    /// Soft and weak dependencies (modprobe.d first, then the tree's files).
    extra: softdep::Deps,
    /// modprobe.d `alias PATTERN MODULE` lines, looked up before the tree's aliases.
    config_aliases: Vec<(String, String, Origin)>,
    /// Aliases of built-in modules (`modules.builtin.modinfo`), read on first use.
    builtin_aliases: std::cell::OnceCell<Vec<(String, String)>>,
    /// Where each line of `dep_text` starts, built on first use (`explain` quotes line numbers).
    line_starts: std::cell::OnceCell<Vec<usize>>,
    /// The root the files are read in (`None`: plain reads, for fixtures built in memory).
    root: Option<crate::root::HostRoot>,
}

/// Reads a module index file through the one door: below `root` with symlinks resolved inside it;
/// a tree outside the root (the running kernel's, with `--root R --kernel live`) as given.
fn read_below(root: Option<&crate::root::HostRoot>, path: &Path) -> std::io::Result<String> {
    use crate::host::read::{self, Kind, ReadError};
    let bytes = match root {
        Some(r) => read::read_inside_or_given(r, path, Kind::ModuleIndex),
        None => read::read_path(path, Kind::ModuleIndex),
    }
    .map_err(ReadError::into_io)?;
    String::from_utf8(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
}

/// A module to load and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    pub name: String,
    /// Relative to the module tree.
    pub file: String,
    pub(crate) why: Why,
    /// Modules of this resolution that must be loaded before this one (its dependencies, its
    /// pre-softdeps, and the module it is a post-softdep of).
    pub(crate) after: Vec<String>,
}

/// How a module came into a resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Why {
    /// The name asked for (or what its alias names).
    Requested,
    /// A `modules.dep` dependency.
    Dependency,
    /// `softdep OF pre: …`.
    SoftPre { of: String, origin: Origin },
    /// `softdep OF post: …`.
    SoftPost { of: String, origin: Origin },
}

impl Why {
    pub(crate) fn is_soft(&self) -> bool {
        matches!(self, Why::SoftPre { .. } | Why::SoftPost { .. })
    }
}

/// Softdep chains deeper than this are refused (a hostile or looping modprobe.d).
const MAX_SOFT_DEPTH: usize = 64;

/// Where a requested module stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Compiled into the kernel.
    Builtin,
    /// Modules to load, in an order that works (dependencies and pre-softdeps first).
    Load(Vec<Load>),
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
        let root = crate::root::HostRoot::at(modprobe_root);
        let read = |name: &str| -> std::io::Result<String> {
            read_below(Some(&root), &dir.join(name))
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.join(name).display())))
        };
        let mut index = ModIndex {
            dir: dir.to_path_buf(),
            root: Some(root.clone()),
            ..ModIndex::default()
        };
        index.parse_dep(read("modules.dep")?);
        match read("modules.builtin") {
            Ok(text) => index.parse_builtin(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut configs = modprobe_d(&root)?;
        for (file, text) in &configs {
            index.parse_modprobe_conf(file, text);
        }
        for name in ["modules.softdep", "modules.weakdep"] {
            match read(name) {
                Ok(text) => configs.push((dir.join(name), text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        for (file, text) in in_kmod_order(configs) {
            index.parse_softdeps(&file, &text);
        }
        Ok(index)
    }

    /// Takes `modules.dep`'s text and indexes its lines by module name.
    pub(crate) fn parse_dep(&mut self, text: String) {
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
    pub(crate) fn deps_of(&self, name: &str) -> Vec<String> {
        self.dep_entry(name)
            .map(|(_, deps)| deps.into_iter().map(|d| d.into_owned()).collect())
            .unwrap_or_default()
    }

    /// Sets the aliases from `modules.alias` text (otherwise read from the tree on first use).
    #[cfg(test)]
    pub(crate) fn parse_alias(&mut self, text: &str) {
        self.aliases = std::cell::OnceCell::from(parse_alias_text(text));
    }

    fn aliases(&self) -> &[(String, String, usize)] {
        self.aliases.get_or_init(|| {
            read_below(self.root.as_ref(), &self.dir.join("modules.alias"))
                .map(|t| parse_alias_text(&t))
                .unwrap_or_default()
        })
    }

    pub(crate) fn parse_builtin(&mut self, text: &str) {
        self.builtin.extend(
            text.lines()
                .filter_map(|l| module_name(l.trim()))
                .map(|n| n.into_owned()),
        );
    }

    /// `blacklist NAME`, `install NAME /bin/false` (or `/bin/true`: the usual way to disable a
    /// module), and `options NAME PARAMS`.
    /// Softdep and weakdep lines of one file. Call in [`in_kmod_order`]: the first line for a
    /// module wins.
    pub(crate) fn parse_softdeps(&mut self, file: &Path, text: &str) {
        self.extra.parse(file, text);
    }

    pub(crate) fn parse_modprobe_conf(&mut self, file: &Path, text: &str) {
        for (i, line) in text.lines().enumerate() {
            let words: Vec<&str> = line.split('#').next().unwrap_or("").split_whitespace().collect();
            if let ["alias", pattern, module] = words.as_slice() {
                self.config_aliases.push((
                    softdep::normalise(pattern),
                    softdep::normalise(module),
                    Origin {
                        file: file.to_path_buf(),
                        line: i + 1,
                    },
                ));
            }
        }
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

    /// `modprobe NAME`'s lookup: modprobe.d aliases, a module name, then `modules.alias` (all
    /// matches, in file order). Each result says where it came from.
    pub(crate) fn lookup(&self, name: &str) -> Vec<(String, String)> {
        let name = softdep::normalise(name);
        let config: Vec<(String, String)> = self
            .config_aliases
            .iter()
            .filter(|(pat, _, _)| glob_match(pat, &name))
            .map(|(_, m, o)| (m.clone(), format!("alias in {o}")))
            .collect();
        if !config.is_empty() {
            return config;
        }
        if self.deps.contains_key(name.as_str()) {
            return vec![(name, "module".into())];
        }
        // kmod looks at modules.alias before the built-in names: `crc32` is built in on Debian, but
        // its aliases name crc32_pclmul and crc32_generic, and those are what modprobe loads.
        let dir = self.dir.display().to_string();
        let aliased: Vec<(String, String)> = self
            .aliases()
            .iter()
            .filter(|(pat, _, _)| glob_match(pat, &name))
            .map(|(pat, m, line)| (m.clone(), format!("alias {pat} in {dir}/modules.alias:{line}")))
            .collect();
        if aliased.is_empty() && self.builtin.contains(&name) {
            return vec![(name, "built in".into())];
        }
        aliased
    }

    /// Whether a built-in module answers to this alias (`modules.builtin.modinfo`).
    fn is_builtin_alias(&self, name: &str) -> bool {
        let name = softdep::normalise(name);
        self.builtin_aliases
            .get_or_init(|| {
                let path = self.dir.join("modules.builtin.modinfo");
                let kind = crate::host::read::Kind::ModuleIndex;
                match &self.root {
                    Some(root) => crate::host::read::read_inside_or_given(root, &path, kind),
                    None => crate::host::read::read_path(&path, kind),
                }
                .map(|b| parse_builtin_modinfo(&b))
                .unwrap_or_default()
            })
            .iter()
            .any(|(pat, _)| glob_match(pat, &name))
    }

    /// The names a module's softdep line asks for (pre, then post).
    pub(crate) fn softdep_names(&self, name: &str) -> Vec<String> {
        self.extra
            .soft
            .get(name)
            .map(|s| s.pre.iter().chain(&s.post).cloned().collect())
            .unwrap_or_default()
    }

    /// The weak dependencies of a module (never loaded; shown by `explain`).
    pub(crate) fn weakdeps_of(&self, name: &str) -> Option<&(Vec<String>, Origin)> {
        self.extra.weak.get(name)
    }

    /// The line of `modules.dep` that lists a module, 1-based.
    pub(crate) fn dep_line(&self, name: &str) -> Option<usize> {
        let &(start, _) = self.deps.get(name)?;
        // A binary search in the line starts, counted once: counting newlines up to each module
        // made `explain` of a long chain quadratic.
        let starts = self.line_starts.get_or_init(|| {
            std::iter::once(0)
                .chain(self.dep_text.match_indices('\n').map(|(i, _)| i + 1))
                .collect()
        });
        Some(starts.partition_point(|&s| s <= start))
    }
}

/// `alias` entries of built-in modules: `modules.builtin.modinfo` is NUL-separated
/// `module.key=value` records.
fn parse_builtin_modinfo(bytes: &[u8]) -> Vec<(String, String)> {
    bytes
        .split(|&b| b == 0)
        .filter_map(|rec| std::str::from_utf8(rec).ok())
        .filter_map(|rec| {
            let (module, rest) = rec.split_once('.')?;
            let alias = rest.strip_prefix("alias=")?;
            Some((softdep::normalise(alias), softdep::normalise(module)))
        })
        .collect()
}

fn parse_alias_text(text: &str) -> Vec<(String, String, usize)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let mut f = line.split_whitespace();
            match (f.next(), f.next(), f.next()) {
                (Some("alias"), Some(pattern), Some(module)) => {
                    Some((pattern.replace('-', "_"), module.replace('-', "_"), i + 1))
                }
                _ => None,
            }
        })
        .collect()
}

/// The order kmod reads softdeps in: every configuration file *and* the tree's `modules.softdep`
/// (and `modules.weakdep`) sorted together by base name. So `/etc/modprobe.d/00-local.conf`
/// overrides the tree's softdep for a module, and `zz-local.conf` does not (checked against
/// `modprobe --show-depends`).
pub(crate) fn in_kmod_order(mut files: Vec<(PathBuf, String)>) -> Vec<(PathBuf, String)> {
    files.sort_by(|a, b| a.0.file_name().cmp(&b.0.file_name()));
    files
}

/// `*.conf` files of the modprobe.d directories, systemd-style: a name in an earlier directory
/// overrides the same name in a later one (`/etc` beats `/run` beats `/lib`).
fn modprobe_d(root: &crate::root::HostRoot) -> std::io::Result<Vec<(PathBuf, String)>> {
    let mut by_name: BTreeMap<String, PathBuf> = BTreeMap::new();
    for dir in [
        "usr/lib/modprobe.d",
        "lib/modprobe.d",
        "run/modprobe.d",
        "etc/modprobe.d",
    ] {
        let Ok(dir) = format!("/{dir}").parse().map(|d| root.resolve(&d)) else {
            continue;
        };
        let Ok(dir) = dir else { continue };
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
        .map(|p| {
            // Named in the error: which of the modprobe.d files could not be read.
            let named = |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", p.display()));
            crate::host::read::read_inside_or_given(root, &p, crate::host::read::Kind::System)
                .map_err(crate::host::read::ReadError::into_io)
                .and_then(|b| {
                    String::from_utf8(b)
                        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
                })
                .map_err(named)
                .map(|t| (p, t))
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    //! Parsing a module tree's index files and modprobe.d (kmod's formats and order); the fixture
    //! index the resolution's tests share.

    use super::*;

    const DEP: &str = "kernel/net/bridge/br_netfilter.ko.xz: kernel/net/bridge/bridge.ko.xz kernel/net/802/stp.ko.xz kernel/net/llc/llc.ko.xz\n\
    kernel/net/bridge/bridge.ko.xz: kernel/net/802/stp.ko.xz kernel/net/llc/llc.ko.xz\n\
    kernel/net/802/stp.ko.xz: kernel/net/llc/llc.ko.xz\n\
    kernel/net/llc/llc.ko.xz:\n\
    kernel/net/netfilter/ipvs/ip_vs_rr.ko.zst: kernel/net/netfilter/ipvs/ip_vs.ko.zst kernel/net/netfilter/nf_conntrack.ko.gz\n\
    kernel/net/netfilter/ipvs/ip_vs.ko.zst: kernel/net/netfilter/nf_conntrack.ko.gz\n\
    kernel/net/netfilter/nf_conntrack.ko.gz:\n\
    kernel/fs/overlayfs/overlay.ko:\n";

    pub(crate) fn index() -> ModIndex {
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
}
