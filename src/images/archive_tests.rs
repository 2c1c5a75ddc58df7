use super::*;
use crate::images::tar::build;

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// An OCI layout in memory: (path, body) pairs and the manifest's digest.
pub(crate) struct Oci {
    pub(crate) files: Vec<(String, Vec<u8>)>,
    pub(crate) manifest_digest: String,
}

/// One image, `name` annotated as containerd's export does (full name, and the tag as ref.name).
pub(crate) fn oci_image(name: &str, layer: &[u8]) -> Oci {
    oci_image_stating(name, layer, layer.len())
}

/// [`oci_image`] whose manifest states `layer_size` for its layer.
fn oci_image_stating(name: &str, layer: &[u8], layer_size: usize) -> Oci {
    let config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#.to_vec();
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:{}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:{}","size":{}}}]}}"#,
        sha(&config),
        config.len(),
        sha(layer),
        layer_size
    )
    .into_bytes();
    let tag = name.rsplit(':').next().unwrap_or("latest");
    let index = format!(
        r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{}","size":{},"annotations":{{"io.containerd.image.name":"{name}","org.opencontainers.image.ref.name":"{tag}"}}}}]}}"#,
        sha(&manifest),
        manifest.len()
    )
    .into_bytes();
    let manifest_digest = format!("sha256:{}", sha(&manifest));
    let files = vec![
        (
            "oci-layout".to_owned(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        ("index.json".to_owned(), index),
        (format!("blobs/sha256/{}", sha(&manifest)), manifest),
        (format!("blobs/sha256/{}", sha(&config)), config),
        (format!("blobs/sha256/{}", sha(layer)), layer.to_vec()),
    ];
    Oci {
        files,
        manifest_digest,
    }
}

pub(crate) fn tar_of(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    build::archive(&refs)
}

/// A Docker archive (`docker save` before 25): `HEX.json` config, `ID/layer.tar` layers.
pub(crate) fn docker_image(tag: &str, layer: &[u8]) -> Vec<(String, Vec<u8>)> {
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":["sha256:{}"]}}}}"#,
        sha(layer)
    )
    .into_bytes();
    let config_name = format!("{}.json", sha(&config));
    let manifest =
        format!(r#"[{{"Config":"{config_name}","RepoTags":["{tag}"],"Layers":["l1/layer.tar"]}}]"#)
            .into_bytes();
    vec![
        ("manifest.json".to_owned(), manifest),
        (config_name, config),
        ("l1/layer.tar".to_owned(), layer.to_vec()),
    ]
}

fn check(files: &[(String, Vec<u8>)]) -> Result<Inspected, ArchiveError> {
    inspect(&tar_of(files)[..], 1000)
}

#[test]
fn an_oci_layout_names_its_image_and_manifest_digest() {
    let img = oci_image("registry.k8s.io/pause:3.10.1", b"layer bytes");
    let got = check(&img.files).expect("a test archive as built");
    assert_eq!(got.format, Format::Oci);
    assert_eq!(
        got.images,
        [ShippedImage {
            name: Some("registry.k8s.io/pause:3.10.1".into()),
            manifest: Some(img.manifest_digest),
        }]
    );
}

#[test]
fn an_altered_layer_is_refused_naming_the_blob() {
    let mut img = oci_image("quay.io/poseidon/kubelet:v1.36.1", b"layer bytes");
    let name = img.files.last().expect("a test archive as built").0.clone();
    img.files.last_mut().expect("a test archive as built").1 = b"layer byteZ".to_vec();
    let err = check(&img.files).unwrap_err().to_string();
    assert!(err.contains(&name) && err.contains("altered"), "{err}");
}

#[test]
fn a_missing_or_short_blob_is_refused() {
    let mut img = oci_image("quay.io/x/y:1", b"layer bytes");
    img.files.pop();
    let err = check(&img.files).unwrap_err().to_string();
    assert!(err.contains("layers[0]") && err.contains("missing"), "{err}");
    // A descriptor whose size disagrees with the blob.
    let img = oci_image_stating("quay.io/x/y:1", b"layer bytes", 12);
    let err = check(&img.files).unwrap_err().to_string();
    assert!(err.contains("11 bytes, the descriptor says 12"), "{err}");
}

#[test]
fn an_index_naming_a_manifest_by_another_digest_is_refused() {
    let mut img = oci_image("quay.io/x/y:1", b"layer");
    // The index pins a manifest that is not the blob stored under that name.
    let (path, body) = img.files[2].clone();
    let mut altered = body.clone();
    altered.push(b' ');
    img.files[2] = (path.clone(), altered);
    let err = check(&img.files).unwrap_err().to_string();
    assert!(
        err.contains("manifests[0]") && err.contains(&path) && err.contains("altered"),
        "{err}"
    );
}

#[test]
fn a_multi_platform_index_needs_one_platform_whole() {
    let img = oci_image("quay.io/x/y:1", b"layer");
    let manifest_digest = img.manifest_digest.clone();
    let manifest_len = img.files[2].1.len();
    let absent = "0".repeat(64);
    let nested = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{manifest_digest}","size":{manifest_len}}},{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{absent}","size":5}}]}}"#
    )
    .into_bytes();
    let index = format!(
        r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:{}","size":{},"annotations":{{"io.containerd.image.name":"quay.io/x/y:1"}}}}]}}"#,
        sha(&nested),
        nested.len()
    );
    let mut files = img.files.clone();
    files[1].1 = index.into_bytes();
    files.push((format!("blobs/sha256/{}", sha(&nested)), nested.clone()));
    let got = check(&files).expect("a test archive as built");
    assert_eq!(
        got.images[0].manifest.as_deref(),
        Some(format!("sha256:{}", sha(&nested)).as_str())
    );
    // Without the one platform that was there: refused.
    files.retain(|(n, _)| *n != format!("blobs/sha256/{}", manifest_digest.trim_start_matches("sha256:")));
    let err = check(&files).unwrap_err().to_string();
    assert!(err.contains("none of its platforms"), "{err}");
}

#[test]
fn a_docker_archive_names_its_tags_without_a_manifest_digest() {
    let got = check(&docker_image("busybox:1.36", b"a layer")).expect("a test archive as built");
    assert_eq!(got.format, Format::Docker);
    assert_eq!(
        got.images,
        [ShippedImage {
            name: Some("docker.io/library/busybox:1.36".into()),
            manifest: None
        }]
    );
}

#[test]
fn a_docker_archive_with_an_altered_layer_or_config_is_refused() {
    let mut files = docker_image("quay.io/x/y:1", b"a layer");
    files[2].1 = b"a laYer".to_vec();
    let err = check(&files).unwrap_err().to_string();
    assert!(err.contains("l1/layer.tar") && err.contains("diff_id"), "{err}");
    let mut files = docker_image("quay.io/x/y:1", b"a layer");
    files[1].1.push(b' ');
    let err = check(&files).unwrap_err().to_string();
    assert!(err.contains(&files[1].0) && err.contains("altered"), "{err}");
}

#[test]
fn a_tar_that_is_no_image_archive_is_refused() {
    let files = vec![("etc/passwd".to_owned(), b"root:x:0:0".to_vec())];
    assert!(matches!(check(&files), Err(ArchiveError::NotAnImageArchive)));
}

#[test]
fn a_name_twice_is_refused() {
    let mut files = docker_image("quay.io/x/y:1", b"a layer");
    files.push(files[2].clone());
    let err = check(&files).unwrap_err().to_string();
    assert!(err.contains("twice"), "{err}");
}

#[test]
fn bad_json_is_refused_naming_the_file() {
    let mut files = docker_image("quay.io/x/y:1", b"a layer");
    files[0].1 = b"[{".to_vec();
    let err = check(&files).unwrap_err().to_string();
    assert!(err.contains("manifest.json") && err.contains("JSON"), "{err}");
}

#[test]
fn references_are_normalized_as_engines_store_them() {
    assert_eq!(normalize("busybox"), "docker.io/library/busybox:latest");
    assert_eq!(normalize("library/busybox:1"), "docker.io/library/busybox:1");
    assert_eq!(
        normalize("quay.io/poseidon/kubelet:v1.36.1"),
        "quay.io/poseidon/kubelet:v1.36.1"
    );
    assert_eq!(normalize("localhost/x"), "localhost/x:latest");
    assert_eq!(normalize("host:5000/x"), "host:5000/x:latest");
    let pinned = format!("quay.io/a/b@sha256:{}", "1".repeat(64));
    assert_eq!(normalize(&pinned), pinned);
}

/// An index whose `count` descriptors all name one nested index of `count` manifests (each its own
/// blob): the shape that made the check cubic.
fn nested_bomb(count: usize) -> Vec<(String, Vec<u8>)> {
    let img = oci_image("quay.io/x/y:1", b"layer");
    let manifest = img.files[2].1.clone();
    let mut files: Vec<(String, Vec<u8>)> = img.files[..2].to_vec();
    files.extend(img.files[3..].iter().cloned());
    let mut children = Vec::new();
    for i in 0..count {
        // Distinct manifests: the same config and layer, a distinct annotation each.
        let mut m = manifest.clone();
        m.pop();
        m.extend_from_slice(format!(r#","annotations":{{"n":"{i}"}}}}"#).as_bytes());
        children.push(format!(
            r#"{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{}","size":{}}}"#,
            sha(&m),
            m.len()
        ));
        files.push((format!("blobs/sha256/{}", sha(&m)), m));
    }
    let nested = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{}]}}"#,
        children.join(",")
    )
    .into_bytes();
    let top = format!(
        r#"{{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:{}","size":{},"annotations":{{"io.containerd.image.name":"quay.io/x/y:1"}}}}"#,
        sha(&nested),
        nested.len()
    );
    let index = format!(
        r#"{{"schemaVersion":2,"manifests":[{}]}}"#,
        vec![top; count].join(",")
    );
    files[1].1 = index.into_bytes();
    files.push((format!("blobs/sha256/{}", sha(&nested)), nested));
    files
}

#[test]
fn a_nested_index_named_again_and_again_is_checked_once() {
    let files = nested_bomb(300);
    let stored = hash_all(&tar_of(&files)[..], 10_000).expect("read");
    let mut walk = OciWalk {
        files: &stored,
        checked: BTreeSet::new(),
        parsed: 0,
    };
    let images = walk.images().expect("a whole archive");
    assert_eq!(images.len(), 300);
    // index.json, the nested index once, each manifest once: 302 documents. Checked again at
    // every reference it was 1 + 300 × (1 + 300) = 90,301.
    assert_eq!(walk.parsed, 302);
    // Control: a damaged manifest is still found, on its first reference.
    let mut bad = files.clone();
    let last = bad.len() - 2;
    bad[last].1.push(b' ');
    assert!(check_big(&bad).unwrap_err().to_string().contains("altered"));
}

fn check_big(files: &[(String, Vec<u8>)]) -> Result<Inspected, ArchiveError> {
    inspect(&tar_of(files)[..], 10_000)
}

/// A stream of `count` entries, each named by a pax record of `name_len` bytes, made as it is
/// read (the bomb is never held whole); counts what was read.
struct NameBomb {
    count: usize,
    name_len: usize,
    made: usize,
    pending: Vec<u8>,
    read: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Read for NameBomb {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pending.is_empty() && self.made < self.count {
            let name = format!("blobs/sha256/{:0>width$}", self.made, width = self.name_len - 13);
            let record = format!("path={name}\n");
            let record = format!(
                "{} {record}",
                record.len() + 1 + (record.len() + 1).to_string().len()
            );
            crate::images::tar::build::entry(&mut self.pending, "pax", record.as_bytes(), b'x');
            crate::images::tar::build::entry(&mut self.pending, "x", b"", b'0');
            self.made += 1;
        }
        let n = buf.len().min(self.pending.len());
        buf[..n].copy_from_slice(&self.pending[..n]);
        self.pending.drain(..n);
        self.read
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

#[test]
fn a_long_name_bomb_is_refused_once_its_names_pass_their_bound() {
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let bomb = NameBomb {
        count: 20_000,
        name_len: 4000,
        made: 0,
        pending: Vec::new(),
        read: read.clone(),
    };
    let err = inspect(bomb, 100_000).unwrap_err().to_string();
    assert!(err.contains("names total over 4194304 bytes"), "{err}");
    // Refused about 1,050 entries in (4 MiB of names), not after all 20,000 (80 MB of names).
    let entries_read = read.load(std::sync::atomic::Ordering::Relaxed) / 5120;
    assert!(
        entries_read < 1100,
        "{entries_read} entries read before the refusal"
    );
}

#[test]
fn names_that_climb_out_or_are_absolute_or_too_long_are_refused() {
    for (name, why) in [
        ("../etc/passwd", "climbs out"),
        ("blobs/../../x", "climbs out"),
        ("/etc/shadow", "absolute"),
    ] {
        let files = vec![(name.to_owned(), b"x".to_vec())];
        let err = check(&files).unwrap_err().to_string();
        assert!(err.contains(why), "{name}: {err}");
    }
    // A name of 4,097 bytes (by a GNU long-name record); 4,096 is taken.
    for (len, refused) in [(4097, true), (4096, false)] {
        let mut out = Vec::new();
        let name = "a".repeat(len);
        crate::images::tar::build::entry(&mut out, "././@LongLink", name.as_bytes(), b'L');
        crate::images::tar::build::entry(&mut out, "short", b"x", b'0');
        out.extend_from_slice(&[0u8; 1024]);
        let got = inspect(&out[..], 10);
        match (refused, got) {
            (true, Err(e)) => assert!(e.to_string().contains("4097 bytes"), "{e}"),
            (false, Err(ArchiveError::NotAnImageArchive)) => {}
            (r, other) => panic!("{len} ({r}): {other:?}"),
        }
    }
}

#[test]
fn an_image_name_that_is_not_a_reference_is_refused() {
    // JSON's escape: the name holds a real newline once parsed.
    let img = oci_image("quay.io/x/y:1\\nfake line", b"layer");
    let err = check(&img.files).unwrap_err().to_string();
    assert!(err.contains("is not a reference") && !err.contains('\n'), "{err}");
    let err = check(&docker_image("busybox:1 *", b"a layer"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not a reference"), "{err}");
    // Control: a pinned reference with a tag is one.
    let pinned = format!("quay.io/x/y:1@sha256:{}", "a".repeat(64));
    assert!(check(&oci_image(&pinned, b"layer").files).is_ok());
}
