//! Certificate expiry: `notAfter` and the subject's common name of every certificate in the
//! node's TLS trees and kubeconfigs. A small DER walk (tbsCertificate → validity, subject) rather
//! than an X.509 crate: two fields are read, nothing is verified. Key files (`*.key`) are never
//! opened; the kubelet's `kubelet-client-current.pem` holds its key after its certificate, and of
//! it only the CERTIFICATE blocks are decoded. Only the path and the subject's CN leave this
//! module.

use std::path::{Path, PathBuf};

use base64::Engine as _;

/// A certificate expiring within this many days is journaled, and warned of by `nodeward check`.
pub(crate) const EXPIRY_WARNING_DAYS: i64 = 30;

/// One certificate found on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CertInfo {
    /// The file, and which certificate in it when a kubeconfig holds several.
    pub(crate) path: String,
    pub(crate) subject: String,
    /// `notAfter`, Unix seconds.
    pub(crate) not_after: i64,
}

/// Reads one DER TLV at the start of `der`: (tag, content, rest).
fn tlv(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// `notAfter` and the subject CN of one DER certificate.
pub(crate) fn parse_der(der: &[u8]) -> Option<(i64, String)> {
    let (0x30, cert, _) = tlv(der)? else { return None };
    let (0x30, mut tbs, _) = tlv(cert)? else {
        return None;
    };
    // [0] version (optional), serialNumber, signature, issuer, validity, subject.
    let mut fields = Vec::new();
    while let Some((tag, content, rest)) = tlv(tbs) {
        fields.push((tag, content));
        tbs = rest;
        if fields.len() == 7 {
            break;
        }
    }
    let skip = usize::from(fields.first()?.0 == 0xa0);
    let (_, validity) = *fields.get(skip + 3)?;
    let (_, subject) = *fields.get(skip + 4)?;
    let (_, _, after) = tlv(validity)?;
    let (time_tag, not_after, _) = tlv(after)?;
    Some((
        parse_time(time_tag, not_after)?,
        common_name(subject).unwrap_or_default(),
    ))
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn parse_time(tag: u8, text: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 => {
            let yy: i64 = s.get(..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, s.get(2..)?)
        }
        0x18 => (s.get(..4)?.parse().ok()?, s.get(4..)?),
        _ => return None,
    };
    let part = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day, hour, min, sec) = (part(0)?, part(2)?, part(4)?, part(6)?, part(8)?);
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The subject's commonName (OID 2.5.4.3), if it has one.
fn common_name(mut name: &[u8]) -> Option<String> {
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    while let Some((_, set, rest)) = tlv(name) {
        let (_, attr, _) = tlv(set)?;
        let (oid_tag, oid, value) = tlv(attr)?;
        if oid_tag == 0x06 && oid == CN {
            let (_, text, _) = tlv(value)?;
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        name = rest;
    }
    None
}

/// Every certificate in a PEM text.
pub(crate) fn parse_pem(text: &str) -> Vec<(i64, String)> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let body = &rest[start + BEGIN.len()..];
        let Some(end) = body.find(END) else { break };
        let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
        if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64)
            && let Some(c) = parse_der(&der)
        {
            out.push(c);
        }
        rest = &body[end + END.len()..];
    }
    out
}

/// The certificates a kubeconfig carries inline (`certificate-authority-data`,
/// `client-certificate-data`), with the field they came from. A kubeconfig that is not YAML (or
/// JSON) carries none.
pub(crate) fn parse_kubeconfig(text: &str) -> Vec<(&'static str, i64, String)> {
    let mut out = Vec::new();
    let Ok(parsed) = super::kubeconfig::parse(text) else {
        return out;
    };
    for (field, value) in parsed.inline {
        if let Ok(pem) = base64::engine::general_purpose::STANDARD.decode(value.as_bytes()) {
            for (t, s) in parse_pem(&String::from_utf8_lossy(&pem)) {
                out.push((field, t, s));
            }
        }
    }
    out
}

/// What a scan found: each distinct certificate once, and how many directory entries were left
/// unread over the bounds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CertScan {
    pub(crate) certs: Vec<CertInfo>,
    pub(crate) not_scanned: u64,
}

/// Directory entries looked at per directory (in name order): a tree someone fills with thousands
/// of files costs a bounded scan, and the rest is counted, not read.
pub(crate) const MAX_ENTRIES_PER_DIR: usize = 256;
/// Files read in one scan, over every tree.
pub(crate) const MAX_FILES: usize = 2048;

/// The certificates under `trees` (host paths, resolved inside `root`), named by their host paths.
pub(crate) fn on_node(trees: &[crate::types::AbsPath], root: &crate::root::HostRoot) -> CertScan {
    let trees: Vec<PathBuf> = trees.iter().filter_map(|t| root.resolve(t).ok()).collect();
    scan(&trees, &|p| root.display(p))
}

/// Larger files are not certificates or kubeconfigs nodeward knows.
const MAX_BYTES: u64 = 1 << 20;

/// The file to read for a directory entry, or `None` to pass it by. Symlinks are not followed,
/// except the kubelet's `kubelet-client-current.pem` / `kubelet-server-current.pem`, which name the
/// certificate in use among the rotated ones beside it (`kubelet-client-2026-…pem`, kept after
/// rotation and expired in time: passed by, or they would raise false alarms). The link is read
/// by its file name only, in its own directory, so it cannot lead out of the tree (or the root).
fn certificate_file(path: &Path, name: &str, meta: &std::fs::Metadata) -> Option<PathBuf> {
    let rotating = |n: &str| n.starts_with("kubelet-client-") || n.starts_with("kubelet-server-");
    let file = if meta.file_type().is_symlink() && name.ends_with("-current.pem") && rotating(name) {
        let target = std::fs::read_link(path).ok()?;
        path.parent()?.join(target.file_name()?)
    } else if meta.is_file() && !rotating(name) {
        path.to_path_buf()
    } else {
        return None;
    };
    let meta = file.symlink_metadata().ok()?;
    (meta.is_file() && meta.len() <= MAX_BYTES).then_some(file)
}

/// The certificates under `trees` (each resolved by the caller inside the root): `*.crt`/`*.pem`
/// files, and kubeconfigs (`kubeconfig`, `*.conf`, `*.kubeconfig`). `display` maps a resolved path
/// back to the host's name for it.
pub(crate) fn scan(trees: &[PathBuf], display: &dyn Fn(&Path) -> String) -> CertScan {
    let mut out = Vec::new();
    let mut not_scanned: u64 = 0;
    let mut files = 0usize;
    let mut stack: Vec<(PathBuf, u8)> = trees.iter().map(|t| (t.clone(), 0)).collect();
    while let Some((path, depth)) = stack.pop() {
        let Ok(meta) = path.symlink_metadata() else {
            continue;
        };
        if meta.is_dir() && depth < 4 {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&path)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect();
            entries.sort();
            if entries.len() > MAX_ENTRIES_PER_DIR {
                not_scanned += (entries.len() - MAX_ENTRIES_PER_DIR) as u64;
                entries.truncate(MAX_ENTRIES_PER_DIR);
            }
            // Popped in name order.
            stack.extend(entries.into_iter().rev().map(|p| (p, depth + 1)));
            continue;
        }
        if files >= MAX_FILES {
            not_scanned += 1;
            continue;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(file) = certificate_file(&path, &name, &meta) else {
            continue;
        };
        let is_pem = name.ends_with(".crt") || name.ends_with(".pem");
        let is_kubeconfig = name == "kubeconfig" || name.ends_with(".conf") || name.ends_with(".kubeconfig");
        if !is_pem && !is_kubeconfig {
            continue;
        }
        // Through the one door: a file swapped for a FIFO between the look above and this open
        // is refused on the descriptor, never waited on.
        files += 1;
        let Ok(text) = super::read::read_path_text(&file, super::read::Kind::Certificate) else {
            continue;
        };
        let shown = display(&path);
        if is_pem {
            out.extend(parse_pem(&text).into_iter().map(|(t, s)| CertInfo {
                path: shown.clone(),
                subject: s,
                not_after: t,
            }));
        } else {
            out.extend(parse_kubeconfig(&text).into_iter().map(|(field, t, s)| CertInfo {
                path: format!("{shown}#{field}"),
                subject: s,
                not_after: t,
            }));
        }
    }
    out.sort_by(|a, b| (&a.path, &a.subject).cmp(&(&b.path, &b.subject)));
    // One series per distinct certificate: the same one copied into many files (or planted there)
    // is named by its first path.
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| seen.insert((c.subject.clone(), c.not_after)));
    for c in &mut out {
        // Subjects are whatever the certificate says: escaped before a terminal, a label or the
        // journal.
        c.subject = crate::text::printable(&c.subject).into_owned();
        c.path = crate::text::printable(&c.path).into_owned();
    }
    CertScan {
        certs: out,
        not_scanned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str, not_after: (i32, u8, u8)) -> String {
        let mut params = rcgen::CertificateParams::new(vec!["node.example".into()]).expect("params");
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").pem()
    }

    #[test]
    fn dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(parse_time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(parse_time(0x18, b"20380119031408Z"), Some(2_147_483_648));
        assert_eq!(
            parse_time(0x17, b"500101000000Z"),
            Some(-631_152_000),
            "UTCTime 50 is 1950"
        );
        assert_eq!(parse_time(0x17, b"garbage"), None);
    }

    #[test]
    fn generated_certificates_read_back() {
        let pem = cert("system:node:worker-0", (2031, 5, 17)) + &cert("kubernetes-ca", (2052, 1, 2));
        let found = parse_pem(&pem);
        assert_eq!(
            found,
            vec![
                (
                    days_from_civil(2031, 5, 17) * 86_400,
                    "system:node:worker-0".to_owned()
                ),
                (days_from_civil(2052, 1, 2) * 86_400, "kubernetes-ca".to_owned()),
            ]
        );
    }

    #[test]
    fn kubeconfig_fields_and_a_tree_scan_never_read_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let kubeconfig = format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://x:6443\n\
             users:\n- name: kubelet\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&cert("kubernetes-ca", (2040, 1, 1))),
            b64(&cert("system:node:worker-0", (2027, 3, 4))),
            b64("-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----\n"),
        );
        std::fs::create_dir_all(dir.path().join("pki")).expect("mkdir");
        std::fs::write(dir.path().join("kubeconfig"), kubeconfig).expect("write");
        std::fs::write(
            dir.path().join("pki/apiserver.crt"),
            cert("kube-apiserver", (2030, 6, 7)),
        )
        .expect("write");
        std::fs::write(
            dir.path().join("pki/apiserver.key"),
            "-----BEGIN PRIVATE KEY-----\n",
        )
        .expect("write");
        let base = dir.path().to_path_buf();
        let found = scan(std::slice::from_ref(&base), &|p| {
            format!("/etc/kubernetes/{}", p.strip_prefix(&base).unwrap_or(p).display())
        })
        .certs;
        let shown: Vec<(String, String)> = found
            .iter()
            .map(|c| (c.path.clone(), c.subject.clone()))
            .collect();
        assert_eq!(
            shown,
            vec![
                (
                    "/etc/kubernetes/kubeconfig#certificate-authority-data".to_owned(),
                    "kubernetes-ca".to_owned()
                ),
                (
                    "/etc/kubernetes/kubeconfig#client-certificate-data".to_owned(),
                    "system:node:worker-0".to_owned()
                ),
                (
                    "/etc/kubernetes/pki/apiserver.crt".to_owned(),
                    "kube-apiserver".to_owned()
                ),
            ]
        );
        assert_eq!(found[1].not_after, days_from_civil(2027, 3, 4) * 86_400);
    }

    /// The kubelet's pki as the kubelet leaves it: the client certificate in use behind
    /// `kubelet-client-current.pem` (certificate then key, one file), an older rotated one beside
    /// it, and the self-signed serving pair `kubelet.crt`/`kubelet.key`.
    #[test]
    fn the_kubelets_own_certificates_the_one_in_use_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = dir.path().join("var/lib/kubelet/pki");
        std::fs::create_dir_all(&pki).expect("mkdir");
        let key = "-----BEGIN EC PRIVATE KEY-----\nc2VjcmV0\n-----END EC PRIVATE KEY-----\n";
        let current = "kubelet-client-2026-11-20-10-00-00.pem";
        std::fs::write(
            pki.join(current),
            cert("system:node:worker-0", (2027, 11, 20)) + key,
        )
        .expect("write");
        std::fs::write(
            pki.join("kubelet-client-2025-11-20-10-00-00.pem"),
            cert("system:node:worker-0", (2026, 11, 20)) + key,
        )
        .expect("write");
        // Absolute, as the kubelet writes it: a host path, read here by its file name only.
        std::os::unix::fs::symlink(
            format!("/var/lib/kubelet/pki/{current}"),
            pki.join("kubelet-client-current.pem"),
        )
        .expect("symlink");
        std::fs::write(
            pki.join("kubelet.crt"),
            cert("worker-0@1763632800", (2027, 11, 20)),
        )
        .expect("write");
        std::fs::write(pki.join("kubelet.key"), key).expect("write");
        // A link elsewhere is not followed.
        std::os::unix::fs::symlink("/etc/kubernetes/pki/ca.crt", pki.join("elsewhere.crt")).expect("symlink");
        let base = dir.path().to_path_buf();
        let found = scan(std::slice::from_ref(&pki), &|p| {
            format!("/{}", p.strip_prefix(&base).unwrap_or(p).display())
        })
        .certs;
        let shown: Vec<(&str, &str, i64)> = found
            .iter()
            .map(|c| (c.path.as_str(), c.subject.as_str(), c.not_after))
            .collect();
        assert_eq!(
            shown,
            vec![
                (
                    "/var/lib/kubelet/pki/kubelet-client-current.pem",
                    "system:node:worker-0",
                    days_from_civil(2027, 11, 20) * 86_400
                ),
                (
                    "/var/lib/kubelet/pki/kubelet.crt",
                    "worker-0@1763632800",
                    days_from_civil(2027, 11, 20) * 86_400
                ),
            ]
        );
    }

    #[test]
    fn a_planted_tree_costs_a_bounded_scan_and_one_series_per_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let one = cert("etcd-\u{1b}[31mserver\u{202e}", (2030, 1, 1));
        // 1,000 copies of one certificate: one series. And a CN with ESC and a bidi override,
        // escaped.
        for i in 0..1000 {
            std::fs::write(dir.path().join(format!("c{i:04}.crt")), &one).expect("write");
        }
        let base = dir.path().to_path_buf();
        let found = scan(std::slice::from_ref(&base), &|p| p.display().to_string());
        assert_eq!(found.certs.len(), 1, "{:?}", found.certs);
        assert_eq!(found.not_scanned, (1000 - MAX_ENTRIES_PER_DIR) as u64);
        let subject = &found.certs[0].subject;
        assert!(
            !subject.contains('\u{1b}') && !subject.contains('\u{202e}'),
            "{subject:?}"
        );
        assert!(found.certs[0].path.ends_with("c0000.crt"), "the first by name");
    }
}
