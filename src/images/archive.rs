//! What an image archive holds, checked before any engine sees it: an OCI image layout (`podman
//! save --format oci-archive`, `ctr export`, `docker save` since Docker 25) or a Docker archive
//! (`docker save` before 25, `podman save`'s default), plain or gzip/zstd-compressed.
//!
//! Every file of the archive is hashed as it streams past; then:
//! - **OCI**: each descriptor reachable from `index.json` (the manifests, their configs and
//!   layers) names a blob `blobs/sha256/HEX` that must be there, with that SHA-256 and that size.
//!   An image's manifest digest is the top-level descriptor's: what a reference pinned by digest
//!   (`repo@sha256:…`) names, and what a registry would serve for it. A multi-platform index may
//!   leave out other platforms' manifests; at least one must be there.
//! - **Docker**: `manifest.json` names each image's config and layers, but no manifest (a Docker
//!   archive has none: it cannot satisfy a reference pinned by digest). The config's SHA-256 must
//!   match its file name when the name carries one (the image ID), and each layer's SHA-256 must be
//!   the config's `rootfs.diff_ids` entry for it (Docker archives keep layers uncompressed).
//!
//! A missing, short or altered blob, or JSON that does not parse, refuses the whole archive.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::tar::{Reader, TarError};

/// Files kept whole for parsing (index, manifests, configs): each at most this big.
const MAX_METADATA_FILE: u64 = 4 << 20;
/// And all of them together.
const MAX_METADATA_TOTAL: u64 = 64 << 20;
/// Images (or descriptors) an archive may list.
const MAX_IMAGES: usize = 1000;
/// The entries' names together (each is kept until the check ends): an image layout's are a few
/// KiB; 20,000 names of 64 KiB took 1.28 GB before this bound.
const MAX_NAMES_TOTAL: usize = 4 << 20;
const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Why an archive was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArchiveError {
    #[error(transparent)]
    Tar(#[from] TarError),
    #[error("neither an OCI image layout (index.json and oci-layout) nor a Docker archive (manifest.json)")]
    NotAnImageArchive,
    #[error("{0}")]
    Corrupt(String),
    #[error("{what}: not valid JSON: {why}")]
    Json { what: String, why: String },
}

/// The archive's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Format {
    Oci,
    Docker,
}

/// One image an archive holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ShippedImage {
    /// The reference it is stored under (`registry.k8s.io/pause:3.10.1`), normalized; `None` when
    /// the archive names it not at all.
    pub(crate) name: Option<String>,
    /// `sha256:…` of its manifest (OCI only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) manifest: Option<String>,
}

/// What a checked archive holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inspected {
    pub(crate) format: Format,
    pub(crate) images: Vec<ShippedImage>,
}

/// One file of the archive.
#[derive(Debug)]
struct Blob {
    sha256: String,
    size: u64,
    /// Kept when small enough to be metadata.
    bytes: Option<Vec<u8>>,
}

/// Reads the (decompressed) tar stream through, hashing every file, and checks what it holds.
pub(crate) fn inspect(stream: impl Read, max_entries: usize) -> Result<Inspected, ArchiveError> {
    let files = hash_all(stream, max_entries)?;
    if files.contains_key("index.json") && files.contains_key("oci-layout") {
        return oci(&files);
    }
    if files.contains_key("manifest.json") {
        return docker(&files);
    }
    Err(ArchiveError::NotAnImageArchive)
}

fn hash_all(stream: impl Read, max_entries: usize) -> Result<BTreeMap<String, Blob>, ArchiveError> {
    let mut reader = Reader::new(stream, max_entries);
    let mut files = BTreeMap::new();
    let (mut kept, mut names) = (0u64, 0usize);
    let mut buf = vec![0u8; 64 << 10];
    while let Some(entry) = reader.next_entry()? {
        if entry.is_dir {
            continue;
        }
        names += entry.name.len();
        if names > MAX_NAMES_TOTAL {
            return Err(ArchiveError::Corrupt(format!(
                "the entries' names total over {MAX_NAMES_TOTAL} bytes (at {})",
                crate::text::printable(&entry.name.chars().take(80).collect::<String>())
            )));
        }
        let keep = entry.size <= MAX_METADATA_FILE && kept + entry.size <= MAX_METADATA_TOTAL;
        let mut bytes = keep.then(|| Vec::with_capacity(entry.size as usize));
        let mut hasher = Sha256::new();
        let mut body = reader.body();
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(TarError::Io(e).into()),
            };
            hasher.update(&buf[..n]);
            if let Some(b) = bytes.as_mut() {
                b.extend_from_slice(&buf[..n]);
            }
        }
        if keep {
            kept += entry.size;
        }
        let blob = Blob {
            sha256: hex::encode(hasher.finalize()),
            size: entry.size,
            bytes,
        };
        if files.insert(entry.name.clone(), blob).is_some() {
            return Err(ArchiveError::Corrupt(format!(
                "{}: twice in the archive",
                entry.name
            )));
        }
    }
    Ok(files)
}

fn json(files: &BTreeMap<String, Blob>, path: &str, what: &str) -> Result<Value, ArchiveError> {
    let blob = files
        .get(path)
        .ok_or_else(|| ArchiveError::Corrupt(format!("{what} ({path}) is missing")))?;
    let bytes = blob
        .bytes
        .as_deref()
        .ok_or_else(|| ArchiveError::Corrupt(format!("{what} ({path}): over {MAX_METADATA_FILE} bytes")))?;
    serde_json::from_slice(bytes).map_err(|e| ArchiveError::Json {
        what: format!("{what} ({path})"),
        why: e.to_string(),
    })
}

/// The blob a descriptor names, checked against its digest and size.
fn blob<'a>(files: &'a BTreeMap<String, Blob>, desc: &Value, what: &str) -> Result<&'a Blob, ArchiveError> {
    let digest = desc["digest"].as_str().unwrap_or("");
    let hex = sha256_hex(digest)
        .ok_or_else(|| ArchiveError::Corrupt(format!("{what}: digest {digest:?} is not sha256:<64 hex>")))?;
    let path = format!("blobs/sha256/{hex}");
    let found = files
        .get(&path)
        .ok_or_else(|| ArchiveError::Corrupt(format!("{what} {digest}: blob {path} is missing")))?;
    if found.sha256 != hex {
        return Err(ArchiveError::Corrupt(format!(
            "{what} {digest}: blob {path} has sha256:{} (altered or damaged)",
            found.sha256
        )));
    }
    if let Some(size) = desc["size"].as_u64() {
        if size != found.size {
            return Err(ArchiveError::Corrupt(format!(
                "{what} {digest}: blob {path} is {} bytes, the descriptor says {size}",
                found.size
            )));
        }
    }
    Ok(found)
}

fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(hex)
}

fn parse_blob(blob: &Blob, what: &str) -> Result<Value, ArchiveError> {
    let bytes = blob
        .bytes
        .as_deref()
        .ok_or_else(|| ArchiveError::Corrupt(format!("{what}: over {MAX_METADATA_FILE} bytes")))?;
    serde_json::from_slice(bytes).map_err(|e| ArchiveError::Json {
        what: what.to_owned(),
        why: e.to_string(),
    })
}

fn descriptors<'a>(list: &'a Value, key: &str, what: &str) -> Result<&'a Vec<Value>, ArchiveError> {
    let items = list[key]
        .as_array()
        .ok_or_else(|| ArchiveError::Corrupt(format!("{what}: no {key} list")))?;
    if items.len() > MAX_IMAGES {
        return Err(ArchiveError::Corrupt(format!(
            "{what}: {} {key}, at most {MAX_IMAGES}",
            items.len()
        )));
    }
    Ok(items)
}

fn oci(files: &BTreeMap<String, Blob>) -> Result<Inspected, ArchiveError> {
    let mut walk = OciWalk {
        files,
        checked: BTreeSet::new(),
        parsed: 0,
    };
    let images = walk.images()?;
    Ok(Inspected {
        format: Format::Oci,
        images,
    })
}

/// The walk of an OCI layout from `index.json`. Each distinct blob (a nested index, a manifest) is
/// parsed and checked once, however many descriptors name it: the check is linear in the
/// archive's size (a nested index named by each of 1,000 descriptors, each naming 1,000 manifests,
/// was 10⁹ checks from 558 KB when every reference was checked again).
struct OciWalk<'a> {
    files: &'a BTreeMap<String, Blob>,
    /// Digests of the nested indexes and manifests already checked whole.
    checked: BTreeSet<&'a str>,
    /// JSON documents parsed (the tests count them).
    parsed: usize,
}

impl<'a> OciWalk<'a> {
    fn images(&mut self) -> Result<Vec<ShippedImage>, ArchiveError> {
        let index = json(self.files, "index.json", "the index")?;
        self.parsed += 1;
        let mut images = Vec::new();
        for (i, desc) in descriptors(&index, "manifests", "index.json")?.iter().enumerate() {
            let what = format!("index.json manifests[{i}]");
            let top = blob(self.files, desc, &what)?;
            let media = desc["mediaType"].as_str().unwrap_or("");
            if INDEX_TYPES.contains(&media) {
                self.nested_index(top, &what)?;
            } else {
                self.manifest(top, &what)?;
            }
            images.push(ShippedImage {
                name: oci_name(desc).map(|n| reference(n, &what)).transpose()?,
                manifest: desc["digest"].as_str().map(str::to_owned),
            });
        }
        Ok(images)
    }

    /// A multi-platform index: at least one platform's manifest there, and each one there whole.
    fn nested_index(&mut self, top: &'a Blob, what: &str) -> Result<(), ArchiveError> {
        if !self.checked.insert(&top.sha256) {
            return Ok(());
        }
        let nested = parse_blob(top, what)?;
        self.parsed += 1;
        let mut present = 0;
        for (j, child) in descriptors(&nested, "manifests", what)?.iter().enumerate() {
            let child_what = format!("{what} manifests[{j}]");
            // Another platform's manifest may be left out; one that is there must be whole.
            let absent = sha256_hex(child["digest"].as_str().unwrap_or(""))
                .is_some_and(|hex| !self.files.contains_key(&format!("blobs/sha256/{hex}")));
            if absent {
                continue;
            }
            let found = blob(self.files, child, &child_what)?;
            self.manifest(found, &child_what)?;
            present += 1;
        }
        if present == 0 {
            return Err(ArchiveError::Corrupt(format!(
                "{what}: none of its platforms' manifests is in the archive"
            )));
        }
        Ok(())
    }

    /// A manifest's config and layers, each there and whole (once per distinct manifest).
    fn manifest(&mut self, found: &'a Blob, what: &str) -> Result<(), ArchiveError> {
        if !self.checked.insert(&found.sha256) {
            return Ok(());
        }
        let m = parse_blob(found, what)?;
        self.parsed += 1;
        blob(self.files, &m["config"], &format!("{what} config"))?;
        for (k, layer) in descriptors(&m, "layers", what)?.iter().enumerate() {
            blob(self.files, layer, &format!("{what} layers[{k}]"))?;
        }
        Ok(())
    }
}

/// The name an OCI descriptor gives its image: containerd's full-name annotation, else the OCI
/// ref name when it is a whole reference (a bare tag such as `v1` names no repository).
fn oci_name(desc: &Value) -> Option<String> {
    let notes = &desc["annotations"];
    let full = notes["io.containerd.image.name"].as_str().or_else(|| {
        notes["org.opencontainers.image.ref.name"]
            .as_str()
            .filter(|n| n.contains('/') || n.contains(':'))
    })?;
    Some(normalize(full))
}

fn docker(files: &BTreeMap<String, Blob>) -> Result<Inspected, ArchiveError> {
    let list = json(files, "manifest.json", "the manifest list")?;
    let entries = list
        .as_array()
        .ok_or_else(|| ArchiveError::Corrupt("manifest.json: not a list".into()))?;
    if entries.len() > MAX_IMAGES {
        return Err(ArchiveError::Corrupt(format!(
            "manifest.json: {} images, at most {MAX_IMAGES}",
            entries.len()
        )));
    }
    let mut images = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        images.extend(docker_image(files, &format!("manifest.json[{i}]"), entry)?);
    }
    Ok(Inspected {
        format: Format::Docker,
        images,
    })
}

/// One entry of a Docker archive's `manifest.json`: its config and layers checked, its tags.
fn docker_image(
    files: &BTreeMap<String, Blob>,
    what: &str,
    entry: &Value,
) -> Result<Vec<ShippedImage>, ArchiveError> {
    let config_path = entry["Config"]
        .as_str()
        .ok_or_else(|| ArchiveError::Corrupt(format!("{what}: no Config")))?;
    let config_blob = files
        .get(config_path)
        .ok_or_else(|| ArchiveError::Corrupt(format!("{what}: config {config_path} is missing")))?;
    // The config's name is its digest (the image ID) in every docker save format.
    let stem = config_path
        .rsplit('/')
        .next()
        .unwrap_or("")
        .trim_end_matches(".json");
    if sha256_hex(&format!("sha256:{stem}")).is_some() && config_blob.sha256 != stem {
        return Err(ArchiveError::Corrupt(format!(
            "{what}: config {config_path} has sha256:{} (altered or damaged)",
            config_blob.sha256
        )));
    }
    let config = parse_blob(config_blob, &format!("{what} config {config_path}"))?;
    let diff_ids = config["rootfs"]["diff_ids"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let layers = entry["Layers"].as_array().cloned().unwrap_or_default();
    if layers.len() != diff_ids.len() {
        return Err(ArchiveError::Corrupt(format!(
            "{what}: {} layers, its config lists {}",
            layers.len(),
            diff_ids.len()
        )));
    }
    for (k, (layer, diff)) in layers.iter().zip(&diff_ids).enumerate() {
        let path = layer.as_str().unwrap_or("");
        let found = files
            .get(path)
            .ok_or_else(|| ArchiveError::Corrupt(format!("{what} layers[{k}]: {path} is missing")))?;
        let want = diff.as_str().and_then(sha256_hex).unwrap_or("");
        if found.sha256 != want {
            return Err(ArchiveError::Corrupt(format!(
                "{what} layers[{k}]: {path} has sha256:{}, the config's diff_id is {} (altered or damaged)",
                found.sha256,
                diff.as_str().unwrap_or("missing")
            )));
        }
    }
    let tags: Vec<&str> = entry["RepoTags"]
        .as_array()
        .map(|t| t.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if tags.is_empty() {
        return Ok(vec![ShippedImage {
            name: None,
            manifest: None,
        }]);
    }
    tags.into_iter()
        .map(|tag| {
            Ok(ShippedImage {
                name: Some(reference(normalize(tag), what)?),
                manifest: None,
            })
        })
        .collect()
}

/// An image name as an archive gives it: what a reference may hold (no space, control or
/// non-ASCII character: it is printed a line per image and handed to engines), at most 512 bytes.
fn reference(name: String, what: &str) -> Result<String, ArchiveError> {
    let ok = name.len() <= 512
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/:@+".contains(&b));
    if ok {
        Ok(name)
    } else {
        let shown: String = name.chars().take(80).collect();
        Err(ArchiveError::Corrupt(format!(
            "{what}: the image name {} is not a reference",
            crate::text::printable(&format!("{shown:?}"))
        )))
    }
}

pub(crate) use crate::types::image::normalize;

#[cfg(test)]
#[path = "archive_tests.rs"]
pub(crate) mod tests;
