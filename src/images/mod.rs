//! Images shipped with the node: archives in `images.dirs` imported into containerd's `k8s.io`
//! namespace (the kubelet's CRI: static pods, the pause image, the CNI) and, for the kubelet's
//! own image, into the engine that runs it — before the kubelet needs them, with no registry.
//!
//! Each archive is checked whole before an engine sees it (`archive`: every blob's digest), fed
//! to each engine's import command (`import`), and recorded (`record`) with the file it was, so a
//! reboot reads nothing. One bad archive is refused by its path; the others are imported.

pub(crate) mod archive;
pub(crate) mod background;
pub(crate) mod decide;
mod import;
pub(crate) mod pullable;
pub(crate) mod record;
pub(crate) mod settings;
mod stream;
mod tar;

use std::path::{Path, PathBuf};

use crate::host::HostError;
use crate::host::read::{self, Kind, ReadError};
use crate::host::state::StateFile;
use crate::root::HostRoot;
use crate::types::AbsPath;

use archive::{ArchiveError, Inspected};
use decide::{CONTAINERD, Targets};
use record::{Fingerprint, Imported, Record};
use settings::{ImagesSettings, MAX_ARCHIVES};
use stream::Compression;

/// Names an archive file may have (any compression is taken by its bytes, not its name).
const SUFFIXES: [&str; 4] = [".tar", ".tar.gz", ".tgz", ".tar.zst"];
/// Entries one archive may have (a layout is a few files per layer).
const MAX_ENTRIES: usize = 100_000;

/// The entries an archive of `size` bytes (as shipped, compressed or not) may have: 1,000, and one
/// more per KiB, up to [`MAX_ENTRIES`]. A real layout's entries are its blobs, mostly large layers;
/// a small compressed file that unpacks into tens of thousands of entries is a bomb, refused
/// as soon as it passes its budget rather than read to its end.
pub(crate) fn entry_budget(size: u64) -> usize {
    usize::try_from(size / 1024)
        .unwrap_or(usize::MAX)
        .saturating_add(1000)
        .min(MAX_ENTRIES)
}
/// containerd's namespace for the CRI (the kubelet's images).
const CRI_NAMESPACE: &str = "k8s.io";

/// Why an archive was not imported.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImagesError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{path}: {source}")]
    Stream {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: refused: {source}")]
    Archive {
        path: String,
        #[source]
        source: ArchiveError,
    },
    #[error("{path}: import into {engine}: {source}")]
    Import {
        path: String,
        engine: String,
        #[source]
        source: import::ImportError,
    },
    #[error("{path}: changed while it was imported (size or modification time); tried again next pass")]
    Changed { path: String },
    #[error("{path}: checked{done}; containerd is not running yet: imported into it once it is")]
    ContainerdNotRunning { path: String, done: String },
    #[error(
        "{path}: no engine on this node takes {images} (the kubelet's image goes to the engine that runs it, podman or docker; the rest to containerd)"
    )]
    NoEngine { path: String, images: String },
    #[error(transparent)]
    Host(#[from] HostError),
}

/// An archive file found in one of the directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) path: AbsPath,
    pub(crate) file: Fingerprint,
}

/// The archives in `settings.dirs`, by name within each directory. A directory that is not there
/// is no error (the baked one is absent from most images); an entry that cannot be an archive
/// (a FIFO, a device, another user's file, one over the cap) is one error naming it.
pub(crate) fn find(root: &HostRoot, settings: &ImagesSettings) -> (Vec<Found>, Vec<ImagesError>) {
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for dir in &settings.dirs {
        let names = match list(root, dir) {
            Ok(names) => names,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        for name in names {
            let path = AbsPath::from_checked(format!("{}/{name}", dir.as_str().trim_end_matches('/')));
            match open(root, &path, settings) {
                Ok((_, file)) => found.push(Found { path, file }),
                Err(e) => errors.push(e),
            }
        }
    }
    (found, errors)
}

/// The archive names in one directory, sorted; none when it does not exist.
fn list(root: &HostRoot, dir: &AbsPath) -> Result<Vec<String>, ImagesError> {
    let real = match root.resolve(dir) {
        Ok(real) => real,
        Err(e) => {
            return Err(HostError::Resolve {
                path: dir.to_path_buf(),
                source: e,
            }
            .into());
        }
    };
    let entries = match std::fs::read_dir(&real) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(HostError::io(dir.to_path_buf(), "list image archives")(e).into()),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') && SUFFIXES.iter().any(|s| n.ends_with(s)))
        .filter(|n| format!("/{n}").parse::<AbsPath>().is_ok())
        .collect();
    names.sort();
    if names.len() > MAX_ARCHIVES {
        return Err(
            HostError::io(dir.to_path_buf(), "list image archives")(std::io::Error::other(format!(
                "{} archives, at most {MAX_ARCHIVES}",
                names.len()
            )))
            .into(),
        );
    }
    Ok(names)
}

/// Opens an archive through the one door (a regular file, root's, within the cap) and takes its
/// fingerprint from the open descriptor.
fn open(
    root: &HostRoot,
    path: &AbsPath,
    settings: &ImagesSettings,
) -> Result<(std::fs::File, Fingerprint), ImagesError> {
    use std::os::unix::fs::MetadataExt;
    let file = read::open(root, path, Kind::ImageArchive(settings.max_archive_bytes))?;
    let meta = file.metadata().map_err(|source| ImagesError::Stream {
        path: path.to_string(),
        source,
    })?;
    let print = Fingerprint {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    };
    Ok((file, print))
}

/// The record of earlier imports, and a note when one was there but had to be set aside.
pub(crate) fn read_record(root: &HostRoot) -> (Record, Option<String>) {
    let path = StateFile::ImageImports.path();
    match StateFile::ImageImports.read(root) {
        Ok(bytes) => match Record::parse(&bytes) {
            Ok(record) => (record, None),
            Err(why) => (
                Record::default(),
                Some(format!(
                    "{path}: set aside ({why}); every archive is checked again"
                )),
            ),
        },
        Err(e) if e.is_missing() => (Record::default(), None),
        Err(e) => (
            Record::default(),
            Some(format!("{e}; every archive is checked again")),
        ),
    }
}

/// Why the record of imports cannot be written, when something that is not a regular file stands
/// at its path (a FIFO, a directory, a symlink): every archive would be imported again at every
/// pass, and each import would fail after the engine took it.
pub(crate) fn record_blocked(root: &HostRoot) -> Option<String> {
    let path = StateFile::ImageImports.resolve(root).ok()?;
    let meta = std::fs::symlink_metadata(&path).ok()?;
    let kind = meta.file_type();
    let what = if kind.is_file() {
        return None;
    } else if kind.is_symlink() {
        "a symlink"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "a special file"
    };
    Some(format!(
        "{}: {what}, not the record of imports: nothing is imported until it is removed (each import would be repeated at every pass)",
        StateFile::ImageImports.path()
    ))
}

/// Where the engines are, for an import.
#[derive(Debug, Clone)]
pub(crate) struct Engines {
    pub(crate) targets: Targets,
    /// containerd's `ctr`, when it is installed.
    pub(crate) ctr: Option<PathBuf>,
    /// containerd's socket is there (it runs).
    pub(crate) containerd_running: bool,
    /// Its socket, below the root (`ctr --address`).
    pub(crate) containerd_socket: PathBuf,
    /// The kubelet engine's load command.
    pub(crate) kubelet_load: Option<(PathBuf, &'static [&'static str])>,
}

/// What one import did.
#[derive(Debug, Clone)]
pub(crate) struct Done {
    pub(crate) inspected: Inspected,
    pub(crate) into: Vec<String>,
    pub(crate) compression: Compression,
}

/// Checks the archive at `found`, imports it into every engine it goes to that does not hold it
/// yet (`already`: the engines the record and the engines agree hold it), and records it.
pub(crate) fn import_archive(
    root: &HostRoot,
    settings: &ImagesSettings,
    engines: &Engines,
    found: &Found,
    already: &[String],
) -> Result<Done, ImagesError> {
    import_archive_then(root, settings, engines, found, already, |_| {})
}

/// [`import_archive`], telling `checked` what the archive holds once it is checked, before any
/// engine gets it (the background importer says then whether the kubelet waits for it).
pub(crate) fn import_archive_then(
    root: &HostRoot,
    settings: &ImagesSettings,
    engines: &Engines,
    found: &Found,
    already: &[String],
    checked: impl FnOnce(&[archive::ShippedImage]),
) -> Result<Done, ImagesError> {
    let path = found.path.to_string();
    let (inspected, compression, print) = check(root, settings, found)?;
    checked(&inspected.images);
    let wanted = engines.targets.for_images(&inspected.images);
    if wanted.is_empty() {
        let named: Vec<&str> = inspected
            .images
            .iter()
            .filter_map(|i| i.name.as_deref())
            .collect();
        return Err(ImagesError::NoEngine {
            path,
            images: named.join(", "),
        });
    }
    let mut into: Vec<String> = Vec::new();
    let mut containerd_waits = false;
    for engine in &wanted {
        if already.contains(engine) {
            into.push(engine.clone());
            continue;
        }
        match import_command(engines, engine) {
            Some(Ok((program, args))) => {
                feed_engine(root, settings, found, engine, (program, &args), print)?;
            }
            Some(Err(Waits)) => {
                containerd_waits = true;
                continue;
            }
            None => continue,
        }
        into.push(engine.clone());
    }
    remember(
        root,
        &path,
        Imported {
            file: print,
            format: inspected.format,
            images: inspected.images.clone(),
            into: into.clone(),
        },
    )?;
    if containerd_waits {
        let done = if into.is_empty() {
            String::new()
        } else {
            format!(" and imported into {}", into.join(", "))
        };
        return Err(ImagesError::ContainerdNotRunning { path, done });
    }
    Ok(Done {
        inspected,
        into,
        compression,
    })
}

/// Journals a finished import.
pub(crate) fn log_imported(found: &Found, done: &Done) {
    let (format, compression, into, names) = (
        format!("{:?}", done.inspected.format).to_lowercase(),
        format!("{:?}", done.compression).to_lowercase(),
        done.into.join(", "),
        names(&done.inspected.images),
    );
    tracing::info!(
        archive = %found.path, %format, %compression, %into, images = %names,
        "imported an image archive shipped with the node: {} ({format}, compression {compression}) into {into}: {names}",
        found.path
    );
}

/// The names of an archive's images, for a line.
pub(crate) fn names(list: &[archive::ShippedImage]) -> String {
    let named: Vec<&str> = list.iter().filter_map(|i| i.name.as_deref()).collect();
    if named.is_empty() {
        "unnamed images".to_owned()
    } else {
        named.join(", ")
    }
}

/// containerd is installed but not running yet.
struct Waits;

/// The program and arguments that import into `engine`; `None` when there is none.
fn import_command<'a>(engines: &'a Engines, engine: &str) -> Option<Result<(&'a Path, Vec<&'a str>), Waits>> {
    if engine != CONTAINERD {
        let (program, args) = engines.kubelet_load.as_ref()?;
        return Some(Ok((program.as_path(), args.to_vec())));
    }
    let ctr = engines.ctr.as_deref()?;
    // Asked again here: a background job carries the engines seen when it was queued, and an
    // import queued while containerd (re)started ran minutes later behind the kubelet's archive
    // (measured on a slow TCG worker: queued at 70 s, run at 255 s, containerd up since 71 s).
    if !engines.containerd_running && !engines.containerd_socket.exists() {
        return Some(Err(Waits));
    }
    let socket = engines.containerd_socket.to_str().unwrap_or_default();
    Some(Ok((
        ctr,
        vec!["--address", socket, "-n", CRI_NAMESPACE, "images", "import", "-"],
    )))
}

/// First pass: the whole archive checked, nothing fed to any engine; a refusal is recorded, so
/// a corrupt archive costs one read, not one per pass.
fn check(
    root: &HostRoot,
    settings: &ImagesSettings,
    found: &Found,
) -> Result<(Inspected, Compression, Fingerprint), ImagesError> {
    let path = found.path.to_string();
    let (file, print) = open(root, &found.path, settings)?;
    let (tar, compression) =
        stream::tar_stream(file, settings.max_archive_bytes).map_err(|source| ImagesError::Stream {
            path: path.clone(),
            source,
        })?;
    match archive::inspect(tar, entry_budget(print.size)) {
        Ok(inspected) => Ok((inspected, compression, print)),
        Err(source) => {
            let refused = ImagesError::Archive {
                path: path.clone(),
                source,
            };
            remember_refused(root, &path, print, &refused)?;
            Err(refused)
        }
    }
}

/// Second pass: the archive fed to one engine, and checked to be the file the first pass
/// inspected (`inspected`: its fingerprint then) before and after the engine has it.
fn feed_engine(
    root: &HostRoot,
    settings: &ImagesSettings,
    found: &Found,
    engine: &str,
    (program, args): (&Path, &[&str]),
    inspected: Fingerprint,
) -> Result<(), ImagesError> {
    let path = found.path.to_string();
    let changed = || ImagesError::Changed { path: path.clone() };
    let (file, before) = open(root, &found.path, settings)?;
    if before != inspected {
        return Err(changed());
    }
    let (tar, _) =
        stream::tar_stream(file, settings.max_archive_bytes).map_err(|source| ImagesError::Stream {
            path: path.clone(),
            source,
        })?;
    import::feed(program, args, tar, settings.import_timeout).map_err(|source| ImagesError::Import {
        path: path.clone(),
        engine: engine.to_owned(),
        source,
    })?;
    let (_, after) = open(root, &found.path, settings)?;
    if after != inspected {
        return Err(changed());
    }
    Ok(())
}

/// Adds one archive to the record (read again under the step's write lock: other entries kept).
fn remember(root: &HostRoot, path: &str, imported: Imported) -> Result<(), HostError> {
    let (mut record, _) = read_record(root);
    record.version = record::VERSION;
    record.refused.remove(path);
    record.archives.insert(path.to_owned(), imported);
    StateFile::ImageImports.write(root, &record.to_json())?;
    Ok(())
}

fn remember_refused(
    root: &HostRoot,
    path: &str,
    file: Fingerprint,
    error: &ImagesError,
) -> Result<(), HostError> {
    let (mut record, _) = read_record(root);
    record.version = record::VERSION;
    record.archives.remove(path);
    record.refused.insert(
        path.to_owned(),
        record::Refused {
            file,
            error: error.to_string(),
        },
    );
    StateFile::ImageImports.write(root, &record.to_json())?;
    Ok(())
}

/// The images containerd's CRI namespace holds with their manifest digests (`ctr -n k8s.io
/// images ls`: `REF TYPE DIGEST …`); `None` when it cannot say.
pub(crate) fn containerd_listing(
    ctr: &Path,
    socket: &Path,
    limit: std::time::Duration,
) -> Option<Vec<(String, String)>> {
    let out = import::feed(
        ctr,
        &["--address", socket.to_str()?, "-n", CRI_NAMESPACE, "images", "ls"],
        Box::new(std::io::empty()),
        limit,
    )
    .ok()?;
    Some(parse_listing(&out))
}

/// `ctr images ls`' table: each row's name and digest (the header skipped).
pub(crate) fn parse_listing(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let (name, _, digest) = (cols.next()?, cols.next()?, cols.next()?);
            (name != "REF" && digest.starts_with("sha256:")).then(|| (name.to_owned(), digest.to_owned()))
        })
        .collect()
}

/// Whether a listing holds `wanted`: by its name, or for a reference pinned by digest, an image
/// of its repository with that digest.
pub(crate) fn held(listing: &[(String, String)], wanted: &str) -> bool {
    let wanted = archive::normalize(wanted);
    let pin = wanted.split_once('@').map(|(_, d)| d);
    listing.iter().any(|(name, digest)| {
        *name == wanted
            || pin.is_some_and(|p| p == digest && decide::repository(name) == decide::repository(&wanted))
    })
}

/// The images containerd's CRI namespace holds, by name (`ctr -n k8s.io images ls -q`); `None`
/// when it cannot say (the step then imports what the record does not prove).
pub(crate) fn containerd_images(
    ctr: &Path,
    socket: &Path,
    limit: std::time::Duration,
) -> Option<Vec<String>> {
    let out = import::feed(
        ctr,
        &[
            "--address",
            socket.to_str()?,
            "-n",
            CRI_NAMESPACE,
            "images",
            "ls",
            "-q",
        ],
        Box::new(std::io::empty()),
        limit,
    )
    .ok()?;
    Some(
        out.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ctr -n k8s.io images ls` as containerd 2.2 prints it.
    const LISTING: &str = "\
REF                                                       TYPE                                    DIGEST                                                                  SIZE      PLATFORMS   LABELS
registry.k8s.io/pause:3.10.1                              application/vnd.oci.image.index.v1+json sha256:278fb9dbcca9518083ad1e11276933a2e96f23de604a3a08cc3c80002767d24c 318.0 KiB linux/amd64 io.cri-containerd.image=managed
quay.io/poseidon/kubelet@sha256:7c49aa                    application/vnd.oci.image.index.v1+json sha256:7c49aa                                                          80.1 MiB  linux/amd64 io.cri-containerd.image=managed
";

    #[test]
    fn an_archive_may_have_a_thousand_entries_and_one_more_per_kib() {
        assert_eq!(entry_budget(0), 1000);
        assert_eq!(
            entry_budget(7 << 20),
            1000 + 7168,
            "the 7.5 MB name bomb's 20,000 entries refused"
        );
        assert_eq!(entry_budget(u64::MAX), MAX_ENTRIES);
    }

    #[test]
    fn the_listing_is_read_by_name_and_by_pinned_digest() {
        let l = parse_listing(LISTING);
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(held(&l, "registry.k8s.io/pause:3.10.1"));
        assert!(!held(&l, "registry.k8s.io/pause:3.10"), "another tag");
        assert!(
            held(&l, "quay.io/poseidon/kubelet:v1.36.1@sha256:7c49aa"),
            "the pin, whatever the tag"
        );
        assert!(
            !held(&l, "quay.io/poseidon/kubelet@sha256:0000"),
            "another digest"
        );
        assert!(
            !held(&l, "docker.io/other/kubelet@sha256:7c49aa"),
            "another repository"
        );
        assert!(parse_listing("REF TYPE DIGEST SIZE PLATFORMS LABELS\n").is_empty());
    }
}
