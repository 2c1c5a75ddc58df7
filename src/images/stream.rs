//! An archive file as the tar stream it holds: decompressed by its first bytes (gzip, zstd, or
//! none), never past the cap. (The file's own bytes are not hashed: the blobs inside are, once,
//! and the file is known unchanged by its fingerprint. Hashing it too tripled an import's CPU: a
//! 227 MiB archive took 147 s on the VM's emulated CPU, one pass of it about a third of that.)

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};

/// How the archive file is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// From the file's first bytes (its name may say anything).
    pub(crate) fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// Refuses to yield more than `left` bytes: a small file of zeros must not unpack without bound.
struct Capped<R> {
    inner: R,
    left: u64,
    cap: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One more byte would be over: say so rather than end quietly.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::other(format!(
                    "unpacks to more than {} bytes",
                    self.cap
                ))),
            };
        }
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// The tar stream inside `file` (its compression sniffed), at most `cap` bytes.
pub(crate) fn tar_stream(file: File, cap: u64) -> io::Result<(Box<dyn Read + Send>, Compression)> {
    let mut raw = BufReader::with_capacity(256 << 10, file);
    let compression = Compression::sniff(raw.fill_buf()?);
    let unpacked: Box<dyn Read + Send> = match compression {
        Compression::None => Box::new(raw),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(raw)),
        // One zstd frame: what `zstd` writes (a multi-frame file ends early, inside an entry).
        Compression::Zstd => Box::new(
            ruzstd::decoding::StreamingDecoder::new(raw)
                .map_err(|e| io::Error::other(format!("zstd: {e}")))?,
        ),
    };
    Ok((
        Box::new(Capped {
            inner: unpacked,
            left: cap,
            cap,
        }),
        compression,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().expect("a test file in a temporary directory");
        let path = dir.path().join("a");
        std::fs::write(&path, bytes).expect("a test file in a temporary directory");
        let file = File::open(&path).expect("a test file in a temporary directory");
        (dir, file)
    }

    fn unpack(bytes: &[u8], cap: u64) -> (io::Result<Vec<u8>>, Compression) {
        let (_dir, file) = file_with(bytes);
        let (mut r, c) = tar_stream(file, cap).expect("the file opens as a stream");
        let mut out = Vec::new();
        let res = r.read_to_end(&mut out).map(|_| out);
        (res, c)
    }

    #[test]
    fn plain_gzip_and_zstd_by_their_first_bytes() {
        let data = b"tar bytes ".repeat(1000);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&data).expect("gzip into memory");
        let gz = gz.finish().expect("gzip into memory");
        let zst = std::process::Command::new("zstd")
            .args(["-q", "-c"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                child.stdin.take().expect("zstd takes stdin").write_all(&data)?;
                child.wait_with_output()
            });
        let mut cases = vec![(data.clone(), Compression::None), (gz, Compression::Gzip)];
        if let Ok(out) = zst {
            cases.push((out.stdout, Compression::Zstd));
        }
        for (bytes, want) in cases {
            let (got, c) = unpack(&bytes, 1 << 20);
            assert_eq!(c, want);
            assert_eq!(got.expect("the stream unpacks"), data);
        }
    }

    #[test]
    fn a_stream_past_the_cap_is_an_error_not_a_short_read() {
        let data = vec![0u8; 5000];
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&data).expect("gzip into memory");
        let (got, _) = unpack(&gz.finish().expect("gzip into memory"), 4096);
        assert!(got.unwrap_err().to_string().contains("more than 4096 bytes"));
        // Exactly the cap is fine.
        let (got, _) = unpack(&data[..4096], 4096);
        assert_eq!(got.expect("exactly the cap unpacks").len(), 4096);
    }
}
