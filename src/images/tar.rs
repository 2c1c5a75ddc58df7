//! A bounded reader of tar streams: exactly what image archives use (POSIX ustar, with pax and GNU
//! long names), nothing that writes.
//!
//! Each header's checksum is verified, every entry's size is read from the header (octal, or
//! GNU's base-256 for sizes past 8 GiB), and only regular files and directories are entries:
//! a link, a device or a FIFO in an image archive is refused by name (neither `docker save`,
//! `podman save` nor `ctr export` writes one). The caller reads each file's body through the
//! [`Reader::body`] it is handed; what it leaves unread is skipped.

use std::io::{self, Read};

/// A tar block.
const BLOCK: usize = 512;
/// The longest pax or GNU long-name record read (a pax header may carry other records too).
const MAX_NAME_RECORD: u64 = 64 << 10;
/// The longest entry name taken (Linux's PATH_MAX; an image layout's are under 100 bytes).
pub(crate) const MAX_NAME: usize = 4096;

/// Why a tar stream was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TarError {
    #[error("not a tar stream: {0}")]
    Format(String),
    #[error("entry {name:?}: {why}")]
    Entry { name: String, why: String },
    #[error("more than {0} entries")]
    TooManyEntries(usize),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// One entry of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its path, without a leading `./`.
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) is_dir: bool,
}

/// Reads the stream entry by entry.
pub(crate) struct Reader<R> {
    inner: R,
    /// Bytes of the current entry's body (and padding) not yet read.
    left: u64,
    padding: u64,
    entries: usize,
    max_entries: usize,
    done: bool,
}

impl<R: Read> Reader<R> {
    pub(crate) fn new(inner: R, max_entries: usize) -> Reader<R> {
        Reader {
            inner,
            left: 0,
            padding: 0,
            entries: 0,
            max_entries,
            done: false,
        }
    }

    /// The next file or directory; `None` at the end of the archive.
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry>, TarError> {
        self.skip_rest()?;
        let mut long_name: Option<String> = None;
        loop {
            if self.done {
                return Ok(None);
            }
            let mut header = [0u8; BLOCK];
            if !read_block(&mut self.inner, &mut header)? {
                // The end without its zero blocks: tolerated as GNU tar does, but only between
                // entries.
                self.done = true;
                return Ok(None);
            }
            if header.iter().all(|&b| b == 0) {
                self.done = true;
                return Ok(None);
            }
            verify_checksum(&header)?;
            let size = parse_size(&header[124..136])?;
            let typeflag = header[156];
            self.left = size;
            self.padding = (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64;
            match typeflag {
                // pax extended header for the next entry: its `path` record is the name.
                b'x' => {
                    let record = self.small_body(size, "pax header")?;
                    if let Some(path) = pax_path(&record)? {
                        long_name = Some(path);
                    }
                    continue;
                }
                // A global pax header, or GNU's long link name: nothing an image entry needs.
                b'g' | b'K' => {
                    self.skip_rest()?;
                    continue;
                }
                // GNU long name for the next entry.
                b'L' => {
                    let record = self.small_body(size, "long name")?;
                    let end = record.iter().position(|&b| b == 0).unwrap_or(record.len());
                    long_name = Some(utf8(&record[..end], "a long name")?);
                    continue;
                }
                _ => {}
            }
            let name = match long_name.take() {
                Some(n) => n,
                None => header_name(&header)?,
            };
            let name = name.strip_prefix("./").unwrap_or(&name).to_owned();
            check_name(&name)?;
            self.entries += 1;
            if self.entries > self.max_entries {
                return Err(TarError::TooManyEntries(self.max_entries));
            }
            let is_dir = match typeflag {
                b'0' | 0 | b'7' => false,
                b'5' => true,
                other => {
                    return Err(TarError::Entry {
                        name,
                        why: format!("{}: only files and directories are read", kind_name(other)),
                    });
                }
            };
            if is_dir {
                // A directory's size field is meaningless; nothing follows it.
                self.left = 0;
                self.padding = 0;
            }
            return Ok(Some(Entry { name, size, is_dir }));
        }
    }

    /// The current entry's body (what is left of it).
    pub(crate) fn body(&mut self) -> Body<'_, R> {
        Body { reader: self }
    }

    fn small_body(&mut self, size: u64, what: &str) -> Result<Vec<u8>, TarError> {
        if size > MAX_NAME_RECORD {
            return Err(TarError::Format(format!(
                "a {what} record of {size} bytes (at most {MAX_NAME_RECORD})"
            )));
        }
        let mut record = Vec::with_capacity(size as usize);
        self.body().read_to_end(&mut record)?;
        if record.len() as u64 != size {
            return Err(TarError::Format(format!("the stream ends inside a {what}")));
        }
        self.skip_rest()?;
        Ok(record)
    }

    /// Skips what the caller left of the current body, and its padding.
    fn skip_rest(&mut self) -> Result<(), TarError> {
        let n = self.left + self.padding;
        if n > 0 {
            let skipped = io::copy(&mut (&mut self.inner).take(n), &mut io::sink())?;
            if skipped != n {
                return Err(TarError::Format("the stream ends inside an entry".into()));
            }
        }
        self.left = 0;
        self.padding = 0;
        Ok(())
    }
}

/// An entry's name as an image layout may have it: at most [`MAX_NAME`] bytes, relative, and
/// never climbing out (`..`): no engine reads such a name, and a tool that unpacks the archive
/// would write outside its directory.
fn check_name(name: &str) -> Result<(), TarError> {
    let why = if name.len() > MAX_NAME {
        format!("a name of {} bytes (at most {MAX_NAME})", name.len())
    } else if name.starts_with('/') {
        "an absolute name".to_owned()
    } else if name.split('/').any(|part| part == "..") {
        "a name that climbs out with ..".to_owned()
    } else {
        return Ok(());
    };
    let shown: String = name.chars().take(80).collect();
    Err(TarError::Entry {
        name: crate::text::printable(&shown).to_string(),
        why,
    })
}

/// An entry's body; reads end where the entry does.
pub(crate) struct Body<'a, R> {
    reader: &'a mut Reader<R>,
}

impl<R: Read> Read for Body<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = &mut *self.reader;
        if r.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(r.left).unwrap_or(usize::MAX));
        let n = r.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the stream ends inside an entry",
            ));
        }
        r.left -= n as u64;
        Ok(n)
    }
}

/// Fills `block`; false at a clean end of stream, an error at one in the middle of a block.
fn read_block(r: &mut impl Read, block: &mut [u8; BLOCK]) -> Result<bool, TarError> {
    let mut filled = 0;
    while filled < BLOCK {
        match r.read(&mut block[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(TarError::Format("the stream ends inside a header".into())),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// The header's checksum: the sum of its bytes with the checksum field read as spaces.
fn verify_checksum(header: &[u8; BLOCK]) -> Result<(), TarError> {
    let stored = parse_octal(&header[148..156])
        .ok_or_else(|| TarError::Format("a header's checksum field is not a number".into()))?;
    let sum: u64 = header
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                u64::from(b' ')
            } else {
                u64::from(b)
            }
        })
        .sum();
    if sum != stored {
        return Err(TarError::Format(format!(
            "a header's checksum is {stored}, its bytes sum to {sum}"
        )));
    }
    Ok(())
}

/// An octal field: digits, surrounded by spaces or NULs.
fn parse_octal(field: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(field).ok()?;
    let digits = text.trim_matches(|c| c == ' ' || c == '\0');
    if digits.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(digits, 8).ok()
}

/// The size field: octal, or GNU's base-256 (first byte's high bit set) for larger sizes.
fn parse_size(field: &[u8]) -> Result<u64, TarError> {
    if field[0] & 0x80 != 0 {
        if field[0] != 0x80 {
            return Err(TarError::Format("a negative or oversized entry size".into()));
        }
        return field[1..].iter().try_fold(0u64, |acc, &b| {
            acc.checked_mul(256)
                .map(|v| v + u64::from(b))
                .ok_or_else(|| TarError::Format("an entry size past 2^64".into()))
        });
    }
    parse_octal(field).ok_or_else(|| TarError::Format("an entry's size field is not a number".into()))
}

/// The name from the header: ustar's prefix joined to its name.
fn header_name(header: &[u8; BLOCK]) -> Result<String, TarError> {
    let field = |range: std::ops::Range<usize>| {
        let f = &header[range];
        &f[..f.iter().position(|&b| b == 0).unwrap_or(f.len())]
    };
    let name = utf8(field(0..100), "a name")?;
    let ustar = &header[257..262] == b"ustar";
    let prefix = if ustar {
        utf8(field(345..500), "a name prefix")?
    } else {
        String::new()
    };
    Ok(if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    })
}

/// The `path` record of a pax header (`LEN path=VALUE\n` records), if it has one.
fn pax_path(record: &[u8]) -> Result<Option<String>, TarError> {
    let mut rest = record;
    let mut path = None;
    while !rest.is_empty() {
        let bad = || TarError::Format("a malformed pax record".into());
        let space = rest.iter().position(|&b| b == b' ').ok_or_else(bad)?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err(bad());
        }
        let kv = &rest[space + 1..len - 1];
        if let Some(value) = kv.strip_prefix(b"path=") {
            path = Some(utf8(value, "a pax path")?);
        }
        rest = &rest[len..];
    }
    Ok(path)
}

fn utf8(bytes: &[u8], what: &str) -> Result<String, TarError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| TarError::Format(format!("{what} is not UTF-8")))
}

fn kind_name(typeflag: u8) -> &'static str {
    match typeflag {
        b'1' => "a hard link",
        b'2' => "a symbolic link",
        b'3' => "a character device",
        b'4' => "a block device",
        b'6' => "a FIFO",
        _ => "an entry of an unknown type",
    }
}

/// Builds tar streams for tests (here and in the archive tests).
#[cfg(test)]
pub(crate) mod build {
    use super::BLOCK;

    /// One ustar header for `name` (≤ 100 bytes) of `size` bytes and type `typeflag`.
    pub(crate) fn header(name: &str, size: u64, typeflag: u8) -> [u8; BLOCK] {
        let mut h = [0u8; BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[108..115].copy_from_slice(b"0000000");
        h[116..123].copy_from_slice(b"0000000");
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = typeflag;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h
    }

    /// A whole archive of regular files, with its two closing zero blocks.
    pub(crate) fn archive(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, body) in files {
            entry(&mut out, name, body, b'0');
        }
        out.extend_from_slice(&[0u8; 2 * BLOCK]);
        out
    }

    /// Appends one entry.
    pub(crate) fn entry(out: &mut Vec<u8>, name: &str, body: &[u8], typeflag: u8) {
        out.extend_from_slice(&header(name, body.len() as u64, typeflag));
        out.extend_from_slice(body);
        out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, TarError> {
        let mut r = Reader::new(bytes, 100);
        let mut out = Vec::new();
        while let Some(e) = r.next_entry()? {
            let mut body = Vec::new();
            r.body().read_to_end(&mut body)?;
            assert_eq!(body.len() as u64, if e.is_dir { 0 } else { e.size });
            out.push((e.name, body));
        }
        Ok(out)
    }

    #[test]
    fn reads_files_in_order_with_their_bodies() {
        let tar = build::archive(&[("./oci-layout", b"{}"), ("index.json", &[7u8; 1000])]);
        let got = entries(&tar).expect("the test archive reads");
        assert_eq!(got[0], ("oci-layout".to_owned(), b"{}".to_vec()));
        assert_eq!(got[1].0, "index.json");
        assert_eq!(got[1].1, vec![7u8; 1000]);
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn an_unread_body_is_skipped() {
        let tar = build::archive(&[("a", &[1u8; 700]), ("b", b"second")]);
        let mut r = Reader::new(&tar[..], 10);
        assert_eq!(
            r.next_entry()
                .expect("the test archive reads")
                .expect("the test archive reads")
                .name,
            "a"
        );
        let b = r
            .next_entry()
            .expect("the test archive reads")
            .expect("the test archive reads");
        assert_eq!(b.name, "b");
        let mut body = String::new();
        r.body()
            .read_to_string(&mut body)
            .expect("the test archive reads");
        assert_eq!(body, "second");
        assert!(r.next_entry().expect("the test archive reads").is_none());
    }

    #[test]
    fn directories_are_entries_without_bodies() {
        let mut tar = Vec::new();
        build::entry(&mut tar, "blobs/", b"", b'5');
        build::entry(&mut tar, "blobs/x", b"x", b'0');
        let got = entries(&tar).expect("the test archive reads");
        assert_eq!(
            got.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            ["blobs/", "blobs/x"]
        );
    }

    #[test]
    fn a_link_or_a_device_is_refused_by_name() {
        for (flag, what) in [
            (b'2', "symbolic link"),
            (b'1', "hard link"),
            (b'3', "character device"),
            (b'6', "FIFO"),
        ] {
            let mut tar = Vec::new();
            build::entry(&mut tar, "blobs/sha256/abc", b"", flag);
            let err = entries(&tar).unwrap_err().to_string();
            assert!(err.contains("blobs/sha256/abc") && err.contains(what), "{err}");
        }
    }

    #[test]
    fn a_bad_checksum_is_refused() {
        let mut tar = build::archive(&[("a", b"x")]);
        tar[0] = b'b';
        let err = entries(&tar).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
    }

    #[test]
    fn a_stream_cut_inside_an_entry_or_a_header_is_an_error() {
        let tar = build::archive(&[("a", &[1u8; 600])]);
        assert!(entries(&tar[..700]).is_err());
        assert!(entries(&tar[..300]).is_err());
        // Cut between entries (no closing blocks): the end, as GNU tar takes it.
        assert_eq!(entries(&tar[..1536]).expect("the test archive reads").len(), 1);
    }

    #[test]
    fn pax_and_gnu_long_names_name_the_next_entry() {
        let long = format!("blobs/sha256/{}", "a".repeat(120));
        let record = format!("path={long}\n");
        let len = record.len() + 4; // "NNN " with a three-digit length
        let pax = format!("{len} {record}");
        assert_eq!(pax.len(), len);
        let mut tar = Vec::new();
        build::entry(&mut tar, "PaxHeaders/x", pax.as_bytes(), b'x');
        build::entry(&mut tar, "short-name", b"body", b'0');
        build::entry(
            &mut tar,
            "././@LongLink",
            format!("{long}-gnu\0").as_bytes(),
            b'L',
        );
        build::entry(&mut tar, "other", b"", b'0');
        build::entry(&mut tar, "plain", b"", b'0');
        let names: Vec<String> = entries(&tar)
            .expect("the test archive reads")
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(names, [long.clone(), format!("{long}-gnu"), "plain".to_owned()]);
    }

    #[test]
    fn a_malformed_pax_record_is_refused() {
        let mut tar = Vec::new();
        build::entry(&mut tar, "PaxHeaders/x", b"99 path=x\n", b'x');
        build::entry(&mut tar, "a", b"", b'0');
        assert!(entries(&tar).unwrap_err().to_string().contains("pax"));
    }

    #[test]
    fn entries_are_counted_against_the_cap() {
        let tar = build::archive(&[("a", b""), ("b", b""), ("c", b"")]);
        let mut r = Reader::new(&tar[..], 2);
        assert!(r.next_entry().expect("the test archive reads").is_some());
        assert!(r.next_entry().expect("the test archive reads").is_some());
        assert!(matches!(r.next_entry(), Err(TarError::TooManyEntries(2))));
    }

    #[test]
    fn sizes_in_octal_and_base_256() {
        assert_eq!(
            parse_size(b"00000001750\0").expect("the test archive reads"),
            1000
        );
        let mut big = [0u8; 12];
        big[0] = 0x80;
        big[7] = 0x02; // 2 << 32
        assert_eq!(parse_size(&big).expect("the test archive reads"), 2 << 32);
        assert!(parse_size(b"0000000175x\0").is_err());
        let mut negative = [0u8; 12];
        negative[0] = 0xff;
        assert!(parse_size(&negative).is_err());
    }
}
