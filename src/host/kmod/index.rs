//! What a kernel's module tree says: `modules.dep`, `modules.alias`, `modules.builtin`, and the
//! modprobe.d configuration (blacklists, disabling `install` lines, `options`). Parsing is pure and
//! resolution works on the parsed index, so both are tested on fixture trees.

use super::softdep::{self, Origin};
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
}

/// A module to load and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    pub name: String,
    /// Relative to the module tree.
    pub file: String,
    pub why: Why,
    /// Modules of this resolution that must be loaded before this one (its dependencies, its
    /// pre-softdeps, and the module it is a post-softdep of).
    pub after: Vec<String>,
}

/// How a module came into a resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
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
    pub fn is_soft(&self) -> bool {
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
        let mut configs = modprobe_d(modprobe_root)?;
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

    fn aliases(&self) -> &[(String, String, usize)] {
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
    /// Softdep and weakdep lines of one file. Call in [`in_kmod_order`]: the first line for a
    /// module wins.
    pub fn parse_softdeps(&mut self, file: &Path, text: &str) {
        self.extra.parse(file, text);
    }

    pub fn parse_modprobe_conf(&mut self, file: &Path, text: &str) {
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
    pub fn resolve_explained(
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

    /// `modprobe NAME`'s lookup: modprobe.d aliases, a module name, then `modules.alias` (all
    /// matches, in file order). Each result says where it came from.
    pub fn lookup(&self, name: &str) -> Vec<(String, String)> {
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
                std::fs::read(self.dir.join("modules.builtin.modinfo"))
                    .map(|b| parse_builtin_modinfo(&b))
                    .unwrap_or_default()
            })
            .iter()
            .any(|(pat, _)| glob_match(pat, &name))
    }

    /// The names a module's softdep line asks for (pre, then post).
    pub fn softdep_names(&self, name: &str) -> Vec<String> {
        self.extra
            .soft
            .get(name)
            .map(|s| s.pre.iter().chain(&s.post).cloned().collect())
            .unwrap_or_default()
    }

    /// The weak dependencies of a module (never loaded; shown by `explain`).
    pub fn weakdeps_of(&self, name: &str) -> Option<&(Vec<String>, Origin)> {
        self.extra.weak.get(name)
    }

    /// The line of `modules.dep` that lists a module, 1-based.
    pub fn dep_line(&self, name: &str) -> Option<usize> {
        let &(start, _) = self.deps.get(name)?;
        Some(self.dep_text[..start].matches('\n').count() + 1)
    }

    /// The modprobe.d file that blacklists a module, if one does.
    pub fn blacklisted_by(&self, name: &str) -> Option<&Path> {
        self.blacklisted.get(name).map(PathBuf::as_path)
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

/// A module being visited: its dependencies and how many of them are done.
struct Frame<'a> {
    name: String,
    file: &'a str,
    deps: Vec<std::borrow::Cow<'a, str>>,
    next: usize,
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
pub fn in_kmod_order(mut files: Vec<(PathBuf, String)>) -> Vec<(PathBuf, String)> {
    files.sort_by(|a, b| a.0.file_name().cmp(&b.0.file_name()));
    files
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
}
