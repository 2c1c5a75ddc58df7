//! The shape of the source tree, checked on every `cargo test`:
//!
//! - imports point down: each top-level module uses only modules of lower layers (`LAYERS`);
//! - no import circle between files, inside a module either;
//! - no function longer than `MAX_FN_LINES` without a comment above it that starts with `Long:`
//!   and says why;
//! - no file longer than `MAX_FILE_LINES`;
//! - and the rules further down (one door for reads, engines' tags in their files, no unbounded
//!   queue, no `Result<_, String>` at a module boundary, …), each with a planted violation.
//!
//! Items marked `#[cfg(test)]` are blanked, each from its attribute to its end (a test helper in
//! the middle of a file exempts itself, not the rest of the file).
//!
//! Run alone with `cargo test --test architecture`. It reads the source as text (paths after
//! `crate::`, `super::`, `self::`, `nodeward::` and child-module names in `use`), which is all the
//! tree needs: no macro builds a path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules from the bottom up. A module may use its own files and anything in a lower
/// layer, nothing in its own layer or above. `cli` is the binary's edge.
const LAYERS: &[&[&str]] = &[
    &[
        "types",
        "glob",
        "failpoint",
        "progress",
        "clock",
        "exit",
        "event",
        "listen",
        "text",
        "jitter",
        "setting",
    ],
    &["root"],
    &["host"],
    &["plan"],
    &["bundle", "fleetlock", "registration", "containerd"],
    // The kubelet owns its settings (input, typed settings, flag and label rules); the node's
    // identity (`registration`) and containerd's files are domains of their own below it, and
    // `config` composes them all, as it composes the bundle's and FleetLock's.
    &["kubelet"],
    // Images shipped with the node: they go into the kubelet's engine and containerd.
    &["images"],
    &["config"],
    &["steps"],
    &["check"],
    &["metrics"],
    &["daemon"],
    &["cli"],
    &["main"],
];

const MAX_FN_LINES: usize = 80;
/// No source file longer than this, its unit tests included: a room that big has several jobs.
const MAX_FILE_LINES: usize = 800;

/// A source file and its place in the module tree.
struct File {
    path: PathBuf,
    /// The module path (`["plan", "render"]`); the binary's root `main.rs` is `["main"]` and its
    /// command line `["cli", …]`, so no two files share a path.
    module: Vec<String>,
    /// The code with comments and string literals blanked.
    text: String,
    /// `text` without the items marked `#[cfg(test)]` (blank lines in their place).
    code: String,
    /// `raw` without those items.
    raw_code: String,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn files() -> Vec<File> {
    files_in(&src())
}

/// The `.rs` files below `src` (a fixture tree in the checker's own tests).
fn files_in(src: &Path) -> Vec<File> {
    let mut out = Vec::new();
    let mut test_modules = std::collections::BTreeSet::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).expect("read src");
        for e in entries {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).expect("below src");
                let mut module: Vec<String> = rel
                    .with_extension("")
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if module.last().is_some_and(|m| m == "mod" || m == "lib") {
                    module.pop();
                }
                let raw = std::fs::read_to_string(&p).expect("read");
                let dir = rel.parent().unwrap_or(Path::new(""));
                test_modules.extend(test_module_files(&raw).into_iter().map(|f| dir.join(f)));
                let text = strip_comments_and_strings(&raw);
                let tests = test_item_lines(&text);
                out.push(File {
                    path: rel.to_path_buf(),
                    module,
                    code: blank_lines(&text, &tests),
                    raw_code: blank_lines(&raw, &tests),
                    text,
                });
            }
        }
    }
    // A unit-test module kept in a file of its own is test code whole, as if written inside the
    // `mod tests` that names it.
    for f in out.iter_mut().filter(|f| test_modules.contains(&f.path)) {
        let all = [(0, f.text.lines().count())];
        f.code = blank_lines(&f.text, &all);
        f.raw_code = blank_lines(&f.raw_code, &all);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The files a source file includes as unit-test modules: `#[cfg(test)]` followed by
/// `#[path = "NAME"]` (relative to the including file's directory).
fn test_module_files(raw: &str) -> Vec<PathBuf> {
    const MARK: &str = "#[cfg(test)]";
    const PATH: &str = "#[path = \"";
    raw.match_indices(MARK)
        .filter_map(|(i, _)| {
            let rest = raw[i + MARK.len()..].trim_start().strip_prefix(PATH)?;
            rest.split_once('"').map(|(name, _)| PathBuf::from(name))
        })
        .collect()
}

/// The line ranges (first and last, 0-based) of the items marked `#[cfg(test)]`: each from its
/// attribute to the `;` that ends it or the `}` matching its first `{`, found in code whose comments
/// and strings are blanked. A test-only helper in the middle of a file exempts itself, not the rest
/// of the file.
fn test_item_lines(text: &str) -> Vec<(usize, usize)> {
    const MARK: &str = "#[cfg(test)]";
    let b = text.as_bytes();
    let line = |p: usize| text[..p].matches('\n').count();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(start) = text[from..].find(MARK).map(|i| i + from) {
        let (mut j, mut depth, mut end) = (start + MARK.len(), 0i32, b.len().saturating_sub(1));
        while j < b.len() {
            match b[j] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = j;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        out.push((line(start), line(end)));
        from = end + 1;
    }
    out
}

/// `text` with the lines in `ranges` emptied (line numbers kept).
fn blank_lines(text: &str, ranges: &[(usize, usize)]) -> String {
    text.split('\n')
        .enumerate()
        .map(|(n, l)| {
            if ranges.iter().any(|&(a, b)| (a..=b).contains(&n)) {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text with comments and string/char literals blanked (lines kept), so paths in docs and
/// messages are not taken for imports.
fn strip_comments_and_strings(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == '*' && b[i + 1] == '/') {
                if b[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !prev_is_ident(&b, i) {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == '#' {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                if b[j] == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                if b.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == '\'' && is_char_literal(&b, i) {
            let mut j = i + 1;
            if b.get(j) == Some(&'\\') {
                j += 2;
            } else {
                j += 1;
            }
            while j < b.len() && b[j] != '\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// `'a'`, `'\n'`, `'\''` rather than a lifetime `'a`.
fn is_char_literal(b: &[char], i: usize) -> bool {
    match b.get(i + 1) {
        Some('\\') => true,
        Some(_) => b.get(i + 2) == Some(&'\''),
        None => false,
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A path a file names: its line, how many inline modules (`mod tests { … }`) enclose it, and its
/// segments (`["crate", "plan", "Change"]`).
struct Named {
    line: usize,
    inline: usize,
    segs: Vec<String>,
}

/// Every path a file names, with `use` trees expanded.
fn paths(text: &str) -> Vec<Named> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let line_of = |pos: usize| chars[..pos].iter().filter(|&&c| c == '\n').count() + 1;
    // Brace depth, and the depths at which inline modules opened.
    let mut depth = 0usize;
    let mut inline_at: Vec<usize> = Vec::new();
    let mut mod_pending = false;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '{' => {
                depth += 1;
                if std::mem::take(&mut mod_pending) {
                    inline_at.push(depth);
                }
            }
            '}' => {
                if inline_at.last() == Some(&depth) {
                    inline_at.pop();
                }
                depth = depth.saturating_sub(1);
            }
            ';' => mod_pending = false,
            _ => {}
        }
        if !is_ident(chars[i]) || (i > 0 && (is_ident(chars[i - 1]) || chars[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let inline = inline_at.len();
        // A path starts here; `use` statements are expanded as trees.
        let word: String = chars[i..].iter().take_while(|&&c| is_ident(c)).collect();
        if word == "mod" {
            mod_pending = true;
            i += 3;
            continue;
        }
        if word == "use" {
            let end = chars[i..]
                .iter()
                .position(|&c| c == ';')
                .map_or(chars.len(), |p| i + p);
            let stmt: String = chars[i + 3..end].iter().collect();
            for segs in expand_use(&stmt) {
                out.push(Named {
                    line: line_of(i),
                    inline,
                    segs,
                });
            }
            i = end;
            continue;
        }
        let mut j = i;
        let mut segs = Vec::new();
        loop {
            let seg: String = chars[j..].iter().take_while(|&&c| is_ident(c)).collect();
            if seg.is_empty() {
                break;
            }
            j += seg.chars().count();
            segs.push(seg);
            if chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') {
                j += 2;
            } else {
                break;
            }
        }
        if segs.len() > 1 {
            out.push(Named {
                line: line_of(i),
                inline,
                segs,
            });
        }
        i = j.max(i + 1);
    }
    out
}

/// `crate::{a::{b, c}, d}` → `crate::a::b`, `crate::a::c`, `crate::d`.
fn expand_use(stmt: &str) -> Vec<Vec<String>> {
    // `x as y` renames: drop the ` as y` before the spaces go.
    let mut words: Vec<&str> = stmt.split_whitespace().collect();
    while let Some(k) = words.iter().position(|w| *w == "as") {
        let keep = words
            .get(k + 1)
            .map_or("", |w| w.trim_start_matches(|c: char| is_ident(c)));
        words[k] = "";
        if let Some(w) = words.get_mut(k + 1) {
            *w = keep;
        }
    }
    let s: String = words.concat();
    let s = s.trim_start_matches("pub(crate)").trim_start_matches("pub");
    let mut out = Vec::new();
    expand(s, Vec::new(), &mut out);
    out
}

fn expand(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    for part in split_top(s) {
        if let Some(open) = part.find('{') {
            let head = part[..open].trim_end_matches("::");
            let inner = &part[open + 1..part.len() - 1];
            let mut p = prefix.clone();
            p.extend(head.split("::").filter(|x| !x.is_empty()).map(String::from));
            expand(inner, p, out);
        } else {
            let mut p = prefix.clone();
            p.extend(part.split("::").filter(|x| !x.is_empty()).map(String::from));
            if !p.is_empty() {
                out.push(p);
            }
        }
    }
}

fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The module tree: which module paths are files.
struct Tree {
    modules: BTreeMap<Vec<String>, usize>,
}

impl Tree {
    /// The file a path leads to: the longest prefix of it that is a file module, or `None` for
    /// paths outside the crate (`std::…`, a dependency).
    fn resolve(&self, from: &[String], inline: usize, path: &[String]) -> Option<Vec<String>> {
        let bin = from.first().is_some_and(|m| m == "cli" || m == "main");
        let mut abs: Vec<String> = match path[0].as_str() {
            // The binary's crate root is main.rs: `crate::cli::x` is `cli/x.rs`, and `crate::y`
            // names an item of main.rs itself.
            "crate" if bin => match path.get(1).map(String::as_str) {
                Some("cli") => path[1..].to_vec(),
                _ => vec!["main".to_owned()],
            },
            "crate" | "nodeward" => path[1..].to_vec(),
            "super" | "self" => {
                let mut base = from.to_vec();
                let mut rest = path;
                let mut inline = inline;
                while rest.first().is_some_and(|s| s == "super" || s == "self") {
                    if rest[0] == "super" {
                        // Out of an inline module stays in the file; out of the file's module
                        // (mod.rs counts as the directory) goes to its parent.
                        if inline > 0 {
                            inline -= 1;
                        } else {
                            base.pop();
                        }
                    }
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                base
            }
            first => {
                // A child module named without a prefix (`use runtime::Kind` in kubelet/mod.rs).
                let mut child = from.to_vec();
                child.push(first.to_owned());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                child.extend(path[1..].iter().cloned());
                child
            }
        };
        while !abs.is_empty() && !self.modules.contains_key(&abs) {
            abs.pop();
        }
        (!abs.is_empty()).then_some(abs)
    }
}

fn layer_of(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&top))
}

/// Every file-to-file edge: (from file, to module, line).
fn edges(files: &[File]) -> (Tree, Vec<(usize, Vec<String>, usize)>) {
    let tree = Tree {
        modules: files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect(),
    };
    let mut out = Vec::new();
    for (i, f) in files.iter().enumerate() {
        for n in paths(&f.text) {
            if let Some(to) = tree.resolve(&f.module, n.inline, &n.segs) {
                if to != f.module {
                    out.push((i, to, n.line));
                }
            }
        }
    }
    (tree, out)
}

fn files_over_the_limit(files: &[File]) -> Vec<String> {
    files
        .iter()
        .map(|f| (f, f.text.lines().count()))
        .filter(|(_, n)| *n > MAX_FILE_LINES)
        .map(|(f, n)| format!("src/{}: {n} lines", f.path.display()))
        .collect()
}

#[test]
fn no_file_over_the_limit() {
    let long = files_over_the_limit(&files());
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn a_file_over_the_limit_planted_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    plant(src, "lib.rs", "pub mod host;\n");
    plant(src, "host/mod.rs", &"// a line\n".repeat(MAX_FILE_LINES));
    assert!(files_over_the_limit(&files_in(src)).is_empty(), "at the limit");
    plant(src, "host/mod.rs", &"// a line\n".repeat(MAX_FILE_LINES + 1));
    assert_eq!(
        files_over_the_limit(&files_in(src)),
        [format!("src/host/mod.rs: {} lines", MAX_FILE_LINES + 1)]
    );
}

fn modules_without_a_layer(files: &[File]) -> BTreeSet<String> {
    files
        .iter()
        .filter_map(|f| f.module.first().cloned())
        .filter(|top| layer_of(top).is_none())
        .collect()
}

#[test]
fn every_top_level_module_has_a_layer() {
    let missing = modules_without_a_layer(&files());
    assert!(missing.is_empty(), "modules with no layer in LAYERS: {missing:?}");
}

#[test]
fn a_module_planted_without_a_layer_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    plant(src, "lib.rs", "pub mod host;\n");
    plant(src, "host/mod.rs", "pub fn read() {}\n");
    assert!(
        modules_without_a_layer(&files_in(src)).is_empty(),
        "host has its layer"
    );
    plant(src, "lib.rs", "pub mod host;\npub mod nowhere;\n");
    plant(src, "nowhere.rs", "pub fn f() {}\n");
    assert_eq!(
        modules_without_a_layer(&files_in(src)),
        BTreeSet::from(["nowhere".to_owned()])
    );
}

/// Every import that does not point to a lower layer.
fn imports_not_pointing_down(files: &[File]) -> Vec<String> {
    let (_, edges) = edges(files);
    let mut wrong = Vec::new();
    for (from, to, line) in &edges {
        let f = &files[*from];
        let (Some(a), Some(b)) = (f.module.first(), to.first()) else {
            continue;
        };
        if a == b {
            continue;
        }
        let (la, lb) = (layer_of(a), layer_of(b));
        if la.is_none() || lb.is_none() || lb >= la {
            wrong.push(format!(
                "src/{}:{line}: {a} uses {} (layer {lb:?} is not below {la:?})",
                f.path.display(),
                to.join("::")
            ));
        }
    }
    wrong
}

#[test]
fn imports_point_down() {
    let wrong = imports_not_pointing_down(&files());
    assert!(
        wrong.is_empty(),
        "imports that do not point down:\n{}",
        wrong.join("\n")
    );
}

/// The layer order as it now stands (the kubelet below config, which composes its settings):
/// the kubelet reaching back into config, or the host into the kubelet, is caught.
#[test]
fn an_upward_import_planted_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let write = |rel: &str, text: &str| plant(src, rel, text);
    write("lib.rs", "pub mod config;\npub mod kubelet;\npub mod host;\n");
    write("host/mod.rs", "pub fn read() {}\n");
    write(
        "kubelet/mod.rs",
        "pub mod settings;\npub fn run() { crate::host::read(); }\n",
    );
    write("kubelet/settings.rs", "pub struct KubeletSettings;\n");
    write(
        "config/mod.rs",
        "use crate::kubelet::settings::KubeletSettings;\npub struct Settings { pub kubelet: KubeletSettings }\n",
    );
    assert!(
        imports_not_pointing_down(&files_in(src)).is_empty(),
        "config composing the kubelet's settings, the kubelet using the host: down"
    );
    write(
        "kubelet/spec.rs",
        "use crate::config::Settings;\npub fn build(_s: &Settings) {}\n",
    );
    write(
        "kubelet/mod.rs",
        "pub mod settings;\npub mod spec;\npub fn run() { crate::host::read(); }\n",
    );
    let wrong = imports_not_pointing_down(&files_in(src));
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(
        wrong[0].starts_with("src/kubelet/spec.rs:1: kubelet uses config"),
        "{wrong:?}"
    );
}

#[test]
fn no_import_circle_between_files() {
    let cycles = import_circles(&files());
    assert!(cycles.is_empty(), "import circles:\n{}", cycles.join("\n"));
}

/// Each circle of files that import one another, as `src/a.rs ↔ src/b.rs`.
fn import_circles(files: &[File]) -> Vec<String> {
    let (tree, edges) = edges(files);
    let n = files.len();
    let mut next: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for (from, to, _) in &edges {
        next[*from].insert(tree.modules[to]);
    }
    strongly_connected(&next)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            c.iter()
                .map(|&i| format!("src/{}", files[i].path.display()))
                .collect::<Vec<_>>()
                .join(" ↔ ")
        })
        .collect::<Vec<_>>()
}

/// Tarjan's strongly connected components.
fn strongly_connected(next: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        next: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.counter);
        s.low[v] = s.counter;
        s.counter += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.next[v].iter() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut c = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                c.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(c);
        }
    }
    let n = next.len();
    let mut s = State {
        next,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        counter: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

fn long_functions_without_a_reason(src: &Path, files: &[File]) -> Vec<String> {
    let mut long = Vec::new();
    for f in files {
        let raw = std::fs::read_to_string(src.join(&f.path)).expect("read");
        let raw_lines: Vec<&str> = raw.lines().collect();
        let lines: Vec<&str> = f.text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = fn_name(line) else { continue };
            let Some(len) = body_lines(&lines, i) else {
                continue;
            };
            if len <= MAX_FN_LINES {
                continue;
            }
            // The comment block right above (attributes skipped) must say why.
            let reason = raw_lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim())
                .take_while(|l| l.starts_with("//") || l.starts_with("#["))
                .any(|l| l.trim_start_matches('/').trim_start().starts_with("Long:"));
            if !reason {
                long.push(format!(
                    "src/{}:{}: fn {name}: {len} lines",
                    f.path.display(),
                    i + 1
                ));
            }
        }
    }
    long
}

#[test]
fn no_long_function_without_a_reason() {
    let long = long_functions_without_a_reason(&src(), &files());
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines with no `// Long: why` above them:\n{}",
        long.join("\n")
    );
}

/// A function one line over the limit is caught; at the limit, or with its reason above it, not.
#[test]
fn a_long_function_planted_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let function = |body: usize| format!("pub fn f() {{\n{}}}\n", "    g();\n".repeat(body));
    plant(src, "lib.rs", "pub mod host;\n");
    plant(src, "host/mod.rs", &function(MAX_FN_LINES - 2));
    assert!(
        long_functions_without_a_reason(src, &files_in(src)).is_empty(),
        "at the limit"
    );
    plant(src, "host/mod.rs", &function(MAX_FN_LINES - 1));
    assert_eq!(
        long_functions_without_a_reason(src, &files_in(src)),
        [format!("src/host/mod.rs:1: fn f: {} lines", MAX_FN_LINES + 1)]
    );
    let reasoned = format!(
        "// Long: one table, read top to bottom.\n{}",
        function(MAX_FN_LINES - 1)
    );
    plant(src, "host/mod.rs", &reasoned);
    assert!(
        long_functions_without_a_reason(src, &files_in(src)).is_empty(),
        "with its reason"
    );
}

fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        match w {
            "pub" | "pub(crate)" | "pub(super)" | "async" | "const" | "unsafe" | "extern" => {}
            w if w.starts_with("pub(") => {}
            "fn" => {
                let name: String = words.next()?.chars().take_while(|&c| is_ident(c)).collect();
                return Some(name);
            }
            _ => return None,
        }
    }
    None
}

/// Lines from the `fn` line to its closing brace, or `None` for a declaration without a body.
fn body_lines(lines: &[&str], start: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut opened = false;
    for (k, line) in lines[start..].iter().enumerate() {
        for c in line.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth -= 1,
                ';' if !opened && depth == 0 => return None,
                _ => {}
            }
        }
        if opened && depth == 0 {
            return Some(k + 1);
        }
    }
    None
}

#[test]
fn the_checker_reads_use_trees_and_skips_strings() {
    let text = strip_comments_and_strings(
        "use crate::{plan::{Change, Step}, host::fs as f};\n// crate::daemon::x\nlet s = \"crate::steps::y\";\nsuper::render::describe(a);\n",
    );
    let found: Vec<String> = paths(&text).into_iter().map(|n| n.segs.join("::")).collect();
    assert_eq!(
        found,
        [
            "crate::plan::Change",
            "crate::plan::Step",
            "crate::host::fs",
            "super::render::describe"
        ]
    );
}

/// The checker's own test: a loop planted inside a binary's `cli/` (the place it once could not
/// see, when `main.rs` and `cli/mod.rs` shared a module path) is found, through `super::` and
/// through `crate::cli::`; the same tree without the back edge has none (the control).
#[test]
fn a_loop_planted_inside_cli_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let write = |rel: &str, text: &str| plant(src, rel, text);
    write("main.rs", "mod cli;\nfn main() { cli::main() }\n");
    write("cli/mod.rs", "mod a;\nmod b;\nmod c;\npub fn main() { a::f() }\n");
    write("cli/a.rs", "use super::b;\npub fn f() { b::g() }\n");
    write("cli/c.rs", "pub fn h() {}\n");
    write("cli/b.rs", "pub fn g() { super::c::h() }\n");
    assert!(import_circles(&files_in(src)).is_empty(), "a tree without a loop");
    write("cli/b.rs", "pub fn g() { super::c::h() }\n");
    write("cli/c.rs", "use crate::cli::a;\npub fn h() { a::f() }\n");
    assert_eq!(
        import_circles(&files_in(src)),
        ["src/cli/c.rs ↔ src/cli/b.rs ↔ src/cli/a.rs"]
    );
    let modules: BTreeSet<Vec<String>> = files_in(src).into_iter().map(|f| f.module).collect();
    assert_eq!(modules.len(), 5, "two files share a module path: {modules:?}");
}

/// Writes a source file below a planted tree (the checkers' own tests).
fn plant(src: &Path, rel: &str, text: &str) {
    let p = src.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

/// The one door for reads (`src/host/read.rs`): no other file opens a file to read it. Unit tests
/// (each item marked `#[cfg(test)]`, from its attribute to its end, wherever it stands in the file)
/// read their fixtures as they like.
const READ_DOOR: &str = "host/read.rs";
const READ_CALLS: &[&str] = &["fs::read(", "fs::read_to_string(", "File::open(", "read_capped("];

fn reads_outside_the_door(files: &[File]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files.iter().filter(|f| f.path != Path::new(READ_DOOR)) {
        for (n, line) in f.code.lines().enumerate() {
            let squeezed: String = line.split_whitespace().collect();
            if let Some(call) = READ_CALLS.iter().find(|c| squeezed.contains(*c)) {
                out.push(format!("src/{}:{}: {call}", f.path.display(), n + 1));
            }
        }
    }
    out
}

#[test]
fn every_read_goes_through_the_one_door() {
    let found = reads_outside_the_door(&files());
    assert!(
        found.is_empty(),
        "files read outside src/{READ_DOOR} (use crate::host::read: inside the root, non-blocking, bounded):\n{}",
        found.join("\n")
    );
}

/// A unit-test module kept in a file of its own (`#[cfg(test)] #[path = "x_tests.rs"] mod tests;`)
/// is test code whole; the same file not named so, or named without `#[cfg(test)]`, is code.
#[test]
fn a_test_module_file_is_test_code_only_when_included_as_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let write = |rel: &str, text: &str| plant(src, rel, text);
    let reads = "use super::*;\nfn t() { let _ = std::fs::read_to_string(\"fixture\"); }\n";
    write(
        "steps/x.rs",
        "pub fn f() {}\n#[cfg(test)]\n#[path = \"x_tests.rs\"]\nmod tests;\n",
    );
    write("steps/x_tests.rs", reads);
    assert!(
        reads_outside_the_door(&files_in(src)).is_empty(),
        "a test module's file may read"
    );
    // Control: named without `#[cfg(test)]`, and not named at all.
    write(
        "steps/y.rs",
        "pub fn g() {}\n#[path = \"y_more.rs\"]\nmod more;\n",
    );
    write("steps/y_more.rs", reads);
    write("steps/z_tests.rs", reads);
    assert_eq!(
        reads_outside_the_door(&files_in(src)),
        [
            "src/steps/y_more.rs:2: fs::read_to_string(",
            "src/steps/z_tests.rs:2: fs::read_to_string("
        ]
    );
}

#[test]
fn a_read_planted_outside_the_door_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let write = |rel: &str, text: &str| plant(src, rel, text);
    write(
        "host/read.rs",
        "pub fn read(p: &str) -> Vec<u8> { std::fs::read(p).unwrap_or_default() }\n",
    );
    write(
        "steps/x.rs",
        "pub fn f() -> String { crate::host::read::read(\"/etc/x\") }\n#[cfg(test)]\nmod tests { fn t() { std::fs::read_to_string(\"fixture\"); } }\n",
    );
    assert!(
        reads_outside_the_door(&files_in(src)).is_empty(),
        "the door itself and unit tests may read"
    );
    write(
        "steps/y.rs",
        "pub fn g() -> String {\n    std::fs::read_to_string(\"/run/metadata/afterburn\").unwrap_or_default()\n}\n",
    );
    write(
        "steps/z.rs",
        "pub fn h() { let _ = std::fs::File::open(\"/run/nodeward/state.json\"); }\n",
    );
    assert_eq!(
        reads_outside_the_door(&files_in(src)),
        [
            "src/steps/y.rs:2: fs::read_to_string(",
            "src/steps/z.rs:1: File::open("
        ]
    );
}

#[test]
fn a_violation_after_a_mid_file_test_helper_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    // A test-only helper in the middle of the file: only it is exempt, not what follows.
    plant(
        src,
        "host/kmod/index.rs",
        "pub fn a() {}\n#[cfg(test)]\nfn fixture() -> String {\n    std::fs::read_to_string(\"x\").unwrap_or_default()\n}\n#[cfg(test)]\nuse std::fs::File;\npub fn b() {\n    let _ = std::fs::File::open(\"/lib/modules\");\n}\n#[cfg(test)]\nmod tests {\n    fn t() { let _ = std::fs::read(\"y\"); }\n}\n",
    );
    assert_eq!(
        reads_outside_the_door(&files_in(src)),
        ["src/host/kmod/index.rs:9: File::open("]
    );
}

/// The engines are rooms: nothing outside `kubelet/runtime/` asks which engine runs the kubelet
/// (it asks the engine what it does: `restarts_in_place`, `takes`, `lists_images`, …). An engine
/// is named by its file's `KIND`; no list of engines is kept here (or anywhere but the registry).
const ENGINES_DIR: &str = "kubelet/runtime/";
const ENGINE_KINDS: &[&str] = &["::KIND", "runtime.kind", "runtime::Kind"];

fn engine_branching_outside_the_engines(files: &[File]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files.iter().filter(|f| !f.path.starts_with(ENGINES_DIR)) {
        let code = &f.code;
        // Container detection (host/container.rs) has kinds of its own (the host's engine).
        if f.path == Path::new("host/container.rs") {
            continue;
        }
        for (n, line) in code.lines().enumerate() {
            if let Some(k) = ENGINE_KINDS.iter().find(|k| line.contains(*k)) {
                out.push(format!("src/{}:{}: {k}", f.path.display(), n + 1));
            }
        }
    }
    out
}

#[test]
fn nothing_outside_the_engines_branches_on_the_engine() {
    let found = engine_branching_outside_the_engines(&files());
    assert!(
        found.is_empty(),
        "the engine's kind asked outside src/{ENGINES_DIR}:\n{}",
        found.join("\n")
    );
}

#[test]
fn an_engine_branch_planted_outside_the_engines_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let write = |rel: &str, text: &str| plant(src, rel, text);
    write(
        "kubelet/runtime/podman.rs",
        "pub fn k() -> Kind { Kind::Podman }\n",
    );
    write(
        "kubelet/supervisor.rs",
        "fn f(r: &Runtime) -> bool { r.restarts_in_place() }\n",
    );
    assert!(engine_branching_outside_the_engines(&files_in(src)).is_empty());
    write(
        "kubelet/executor.rs",
        "fn g(r: &Runtime) -> bool {\n    r.kind() != rkt::KIND\n}\n",
    );
    assert_eq!(
        engine_branching_outside_the_engines(&files_in(src)),
        ["src/kubelet/executor.rs:2: ::KIND"]
    );
}

/// Each engine's own mounts, tagged `.only(Only::Engine(…))`: declared only in an engine's own file (one
/// that declares its `KIND`), never in the shared table.
const ENGINE_MOUNT_TAG: &str = ".only(Only::Engine(";

fn engine_mounts_outside_their_engine(files: &[File]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        let an_engine = f.path.starts_with(ENGINES_DIR) && f.code.contains("const KIND: Kind");
        for (n, line) in f.code.lines().enumerate() {
            if line.contains(ENGINE_MOUNT_TAG) && !an_engine {
                out.push(format!("src/{}:{}: {ENGINE_MOUNT_TAG}", f.path.display(), n + 1));
            }
        }
    }
    out
}

#[test]
fn each_engines_own_mounts_are_declared_in_its_file() {
    let found = engine_mounts_outside_their_engine(&files());
    assert!(
        found.is_empty(),
        "an engine's own mount outside its file:\n{}",
        found.join("\n")
    );
}

#[test]
fn an_engine_mount_planted_in_the_shared_table_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    plant(
        src,
        "kubelet/runtime/podman.rs",
        "pub(crate) const KIND: Kind = Kind::new(\"podman\");\nfn own() -> Mount { Mount::new(\"/etc/selinux\").only(Only::Engine(KIND)) }\n",
    );
    assert!(engine_mounts_outside_their_engine(&files_in(src)).is_empty());
    plant(
        src,
        "kubelet/container.rs",
        "fn shared() -> Vec<Mount> {\n    vec![Mount::new(\"/etc/ssl/certs\").only(Only::Engine(rkt::KIND))]\n}\n",
    );
    assert_eq!(
        engine_mounts_outside_their_engine(&files_in(src)),
        ["src/kubelet/container.rs:2: .only(Only::Engine("]
    );
}

/// `cargo test --test architecture print_edges -- --ignored --nocapture`: every file-to-file edge.
#[test]
#[ignore]
fn print_edges() {
    let files = files();
    let (_, edges) = edges(&files);
    for (from, to, line) in edges {
        println!("src/{}:{line} -> {}", files[from].path.display(), to.join("::"));
    }
}

/// nodeward's own state has one owner (`src/host/state.rs`): no other code names a file under
/// `/run/nodeward` or `/var/lib/nodeward`, so none can write one but through it (whole, atomically,
/// with its mode). Comments and unit tests may name them; the drop-in directory
/// `/run/nodeward/config.d` is configuration, read by `config/dropins.rs`; the man page's FILES
/// section (`cli/docs.rs`) names them for operators.
const STATE_OWNER: &str = "host/state.rs";
const STATE_NAMED_FOR_OPERATORS: &str = "cli/docs.rs";
const STATE_DIRS: &[&str] = &["/run/nodeward", "/var/lib/nodeward"];

fn state_named_outside_its_owner(files: &[File]) -> Vec<String> {
    let mut out = Vec::new();
    let skipped = [Path::new(STATE_OWNER), Path::new(STATE_NAMED_FOR_OPERATORS)];
    for f in files.iter().filter(|f| !skipped.contains(&f.path.as_path())) {
        for (n, line) in f.raw_code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            if let Some(dir) = STATE_DIRS
                .iter()
                .find(|d| line.replace("/run/nodeward/config.d", "").contains(*d))
            {
                out.push(format!("src/{}:{}: {dir}", f.path.display(), n + 1));
            }
        }
    }
    out
}

#[test]
fn nodewards_own_state_is_named_only_by_its_owner() {
    let found = state_named_outside_its_owner(&files());
    assert!(
        found.is_empty(),
        "nodeward's state named outside src/{STATE_OWNER} (use crate::host::state::StateFile):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_state_path_planted_outside_its_owner_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let write = |rel: &str, text: &str| plant(src, rel, text);
    write("host/state.rs", "pub const RUN_DIR: &str = \"/run/nodeward\";\n");
    write(
        "config/dropins.rs",
        "const DIRS: [&str; 1] = [\"/run/nodeward/config.d\"];\n// writes \"/var/lib/nodeward/x\" never\n",
    );
    write(
        "kubelet/x.rs",
        "pub fn f() {}\n#[cfg(test)]\nmod tests { const P: &str = \"/run/nodeward/kubelet.pid\"; }\n",
    );
    assert!(
        state_named_outside_its_owner(&files_in(src)).is_empty(),
        "the owner, the drop-in directory, comments and unit tests may name them"
    );
    write(
        "kubelet/y.rs",
        "pub fn g() {\n    let _ = std::fs::write(\"/var/lib/nodeward/kubelet-rollout.json\", b\"{}\");\n}\n",
    );
    write(
        "daemon/z.rs",
        "const STATE: &str = \"/run/nodeward/state.json\";\n",
    );
    assert_eq!(
        state_named_outside_its_owner(&files_in(src)),
        [
            "src/daemon/z.rs:1: /run/nodeward",
            "src/kubelet/y.rs:2: /var/lib/nodeward"
        ]
    );
}

/// The library's public modules, from `lib.rs` down through each public module's `mod.rs`.
fn public_modules(src: &Path) -> Vec<String> {
    fn walk(file: &Path, prefix: &str, out: &mut Vec<String>) {
        let Ok(text) = std::fs::read_to_string(file) else {
            return;
        };
        for line in text.lines() {
            let Some(name) = line.strip_prefix("pub mod ").and_then(|l| l.strip_suffix(';')) else {
                continue;
            };
            let path = format!("{prefix}{name}");
            out.push(path.clone());
            let dir = file.parent().expect("parent").join(name);
            walk(&dir.join("mod.rs"), &format!("{path}::"), out);
        }
    }
    let mut out = Vec::new();
    walk(&src.join("lib.rs"), "", &mut out);
    out.sort();
    out
}

/// The face docs/development.md lists (`face: a, b::c, …`, wrapped over lines).
fn documented_face(doc: &str) -> Vec<String> {
    let start = doc
        .find("\nface: ")
        .expect("a `face:` list in docs/development.md")
        + 7;
    let end = doc[start..].find("\n\n").map_or(doc.len(), |e| start + e);
    let mut out: Vec<String> = doc[start..end]
        .split([',', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    out.sort();
    out
}

#[test]
fn the_public_face_is_the_documented_one() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/development.md"))
        .expect("docs/development.md");
    assert_eq!(public_modules(&src()), documented_face(&doc));
}

#[test]
fn a_module_made_public_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    plant(src, "lib.rs", "pub mod host;\npub(crate) mod glob;\n");
    plant(src, "host/mod.rs", "pub mod fs;\npub(crate) mod read;\n");
    let doc = "x\n\nface: host,\nhost::fs\n\nmore";
    assert_eq!(public_modules(src), documented_face(doc));
    plant(src, "host/mod.rs", "pub mod fs;\npub mod read;\n");
    assert_ne!(public_modules(src), documented_face(doc));
}

/// One HTTP client (`src/host/http.rs`): no other file names reqwest, so none can send a request
/// or read a response body but through its capped reader, deadlines and redirect policy.
const HTTP_CLIENT: &str = "host/http.rs";

fn http_outside_the_client(files: &[File]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files.iter().filter(|f| f.path != Path::new(HTTP_CLIENT)) {
        for (n, line) in f.code.lines().enumerate() {
            if line.contains("reqwest") {
                out.push(format!("src/{}:{}: reqwest", f.path.display(), n + 1));
            }
        }
    }
    out
}

#[test]
fn every_request_goes_through_the_one_http_client() {
    let found = http_outside_the_client(&files());
    assert!(
        found.is_empty(),
        "reqwest used outside src/{HTTP_CLIENT} (use crate::host::http: capped bodies, deadlines):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_response_read_planted_outside_the_client_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let write = |rel: &str, text: &str| plant(src, rel, text);
    write(
        HTTP_CLIENT,
        "pub fn get(u: &str) { let _ = reqwest::blocking::get(u); }\n",
    );
    write(
        "fleetlock/client.rs",
        "pub fn f() {}\n// reqwest's text() reads a body whole: not here.\n#[cfg(test)]\nmod tests { fn t() { let _ = reqwest::blocking::get(\"x\"); } }\n",
    );
    assert!(http_outside_the_client(&files_in(src)).is_empty());
    write(
        "fleetlock/lock.rs",
        "pub fn g(r: reqwest::blocking::Response) -> String {\n    r.text().unwrap_or_default()\n}\n",
    );
    assert_eq!(
        http_outside_the_client(&files_in(src)),
        ["src/fleetlock/lock.rs:1: reqwest"]
    );
}

/// No queue without a bound: std's `mpsc::channel` and tokio's `unbounded_channel` grow with
/// whatever their senders do. Use `sync_channel(N)` / `mpsc::channel(N)`, a coalesced flag, or a
/// `watch`. The allow-list names each exception and why its producer is bounded.
const UNBOUNDED: &[&str] = &["mpsc::channel", "unbounded_channel"];
const UNBOUNDED_ALLOWED: &[(&str, &str)] = &[(
    "daemon/supervised.rs",
    "the supervisor's commands: sent only by the daemon's loop, one set per converge pass and one per \
     control request (the control socket answers `busy` past its bound)",
)];

fn unbounded_channels(files: &[File]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files
        .iter()
        .filter(|f| !UNBOUNDED_ALLOWED.iter().any(|(p, _)| f.path == Path::new(p)))
    {
        for (n, line) in f.code.lines().enumerate() {
            let squeezed: String = line.split_whitespace().collect();
            if let Some(c) = UNBOUNDED.iter().find(|c| called_without_bound(&squeezed, c)) {
                out.push(format!("src/{}:{}: {c}()", f.path.display(), n + 1));
            }
        }
    }
    out
}

/// `name()` or `name::<T>()` in `line` (white space removed): a constructor given no bound.
/// tokio's bounded `mpsc::channel(64)` takes one, std's `mpsc::channel()` cannot.
fn called_without_bound(line: &str, name: &str) -> bool {
    line.match_indices(name).any(|(i, _)| {
        let rest = &line[i + name.len()..];
        let rest = match rest.strip_prefix("::<") {
            Some(generic) => generic.find(">(").map_or("", |j| &generic[j + 1..]),
            None => rest,
        };
        rest.starts_with("()")
    })
}

#[test]
fn no_queue_is_unbounded() {
    let found = unbounded_channels(&files());
    assert!(found.is_empty(), "unbounded channels:\n{}", found.join("\n"));
}

#[test]
fn an_unbounded_channel_planted_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let write = |rel: &str, text: &str| plant(src, rel, text);
    write(
        "bundle/background.rs",
        "pub fn f() { let (_tx, _rx) = std::sync::mpsc::sync_channel::<()>(1); }\n#[cfg(test)]\nmod tests { fn t() { let (_t, _r) = std::sync::mpsc::channel::<()>(); } }\n",
    );
    assert!(
        unbounded_channels(&files_in(src)).is_empty(),
        "bounded, or in a unit test"
    );
    write(
        "kubelet/supervisor/mod.rs",
        "pub fn g() {\n    let (_tx, _rx) = tokio::sync::mpsc::unbounded_channel::<u8>();\n}\n",
    );
    write(
        "daemon/control.rs",
        "pub fn h() { let (_t, _r) = std::sync::mpsc::channel(); }\n",
    );
    assert_eq!(
        unbounded_channels(&files_in(src)),
        [
            "src/daemon/control.rs:1: mpsc::channel()",
            "src/kubelet/supervisor/mod.rs:2: unbounded_channel()"
        ]
    );
}

/// docs/hostile-input.md's table of input surfaces states each bound as the code has it: every
/// constant it quotes is read from its source file and must say the same number.
const BOUNDS: &[(&str, &str, &str)] = &[
    // (file, the constant as the code writes it, the words the table uses for it)
    ("host/http.rs", "max_body: 4096", "4 KiB for a lock server"),
    ("daemon/notes.rs", "EVENT_QUEUE: usize = 64", "64 events"),
    (
        "kubelet/runtime/process.rs",
        "MAX_LINE: usize = 4096",
        "lines of at most 4 KiB",
    ),
    (
        "kubelet/runtime/pull.rs",
        "MAX_LAYERS: usize = 512",
        "at most 512 layer ids",
    ),
    (
        "config/lines.rs",
        "MAX_KEY_PATH: usize = 512",
        "keys of at most 512 bytes",
    ),
    (
        "config/lines.rs",
        "MAX_KEYS: usize = 10_000",
        "10,000 keys a fragment",
    ),
    ("config/error.rs", "MAX_MESSAGE: usize = 2048", "cut at 2 KiB"),
    ("config/error.rs", "MAX_LINE: usize = 240", "lines at 240 bytes"),
    (
        "types/path.rs",
        "MAX_PATH_BYTES: usize = 4095",
        "at most 4,095 bytes",
    ),
    (
        "types/path.rs",
        "MAX_NAME_BYTES: usize = 255",
        "each name at most 255",
    ),
];

fn bound_mismatches(table: &str, bounds: &[(&str, &str, &str)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (file, constant, words) in bounds {
        let code = std::fs::read_to_string(src().join(file)).expect("source");
        if !code.contains(constant) {
            wrong.push(format!("src/{file} no longer says `{constant}`"));
        }
        if !table.contains(words) {
            wrong.push(format!("docs/hostile-input.md does not say \"{words}\""));
        }
        let name = file.rsplit('/').next().unwrap_or(file);
        if !table.contains(name) {
            wrong.push(format!("docs/hostile-input.md does not name {file}"));
        }
    }
    wrong
}

#[test]
fn the_hostile_input_bounds_are_the_codes() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/hostile-input.md"))
        .expect("doc");
    let table = doc
        .split("## Every other input surface, and its bound")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("the surfaces table");
    let wrong = bound_mismatches(table, BOUNDS);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Control: a bound the code does not have, and words the table does not use, are caught.
    let planted = [(
        "kubelet/runtime/process.rs",
        "MAX_LINE: usize = 8192",
        "lines of at most 8 KiB",
    )];
    assert_eq!(bound_mismatches(table, &planted).len(), 2);
}

/// A function other modules can call returns a typed error (thiserror), never `Result<_, String>`:
/// a caller can then tell a refusal from a failure by its type, and the error carries its path or
/// key as a field. Private helpers may build a message as they like.
fn string_errors_at_boundaries(files: &[File]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        let lines: Vec<&str> = f.code.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            let visible = t.starts_with("pub ") || t.starts_with("pub(");
            if !visible || !t.contains("fn ") {
                continue;
            }
            let mut sig = String::new();
            for l in &lines[n..] {
                sig.push_str(l);
                if l.contains('{') || l.trim_end().ends_with(';') {
                    break;
                }
            }
            let head = sig.split('{').next().unwrap_or("");
            let ret: String = head
                .split_once("->")
                .map(|(_, r)| r)
                .unwrap_or("")
                .split(" where ")
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            if ret.starts_with("Result<") && ret.ends_with(",String>") {
                out.push(format!("src/{}:{}: {}", f.path.display(), n + 1, t.trim_end()));
            }
        }
    }
    out
}

#[test]
fn no_string_error_at_a_module_boundary() {
    let found = string_errors_at_boundaries(&files());
    assert!(
        found.is_empty(),
        "module-visible functions returning Result<_, String> (give them a thiserror type):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_string_error_planted_at_a_boundary_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    plant(
        src,
        "kubelet/x.rs",
        "fn private() -> Result<(), String> { Ok(()) }\npub(crate) fn typed() -> Result<(), Refused> { Ok(()) }\n#[cfg(test)]\nmod tests { pub fn t() -> Result<(), String> { Ok(()) } }\n",
    );
    assert!(
        string_errors_at_boundaries(&files_in(src)).is_empty(),
        "private helpers and tests may"
    );
    plant(
        src,
        "kubelet/y.rs",
        "pub(crate) fn check(\n    a: &str,\n    b: u32,\n) -> Result<Vec<u8>, String> {\n    Ok(Vec::new())\n}\n",
    );
    assert_eq!(
        string_errors_at_boundaries(&files_in(src)),
        ["src/kubelet/y.rs:1: pub(crate) fn check("]
    );
}
