//! Loading a module file into the running kernel.
//!
//! `finit_module(2)` on the file when the kernel can take it as it is: uncompressed, or compressed
//! in the format the kernel decompresses itself (`/sys/module/compression`, Linux ≥ 5.17, flag
//! `MODULE_INIT_COMPRESSED_FILE`). Otherwise the file is decompressed here and handed over with
//! `init_module(2)`: exactly the case where a containerised modprobe without xz support fails.

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::Path;

use super::index::Compression;

/// `MODULE_INIT_COMPRESSED_FILE` from linux/module.h.
const MODULE_INIT_COMPRESSED_FILE: libc::c_uint = 4;

/// A decompressed module larger than this is refused (a corrupt or hostile file).
const MAX_MODULE_BYTES: u64 = 256 << 20;

/// One decompression budget for the whole process: the modules step loads a batch on several
/// threads, and six modules decompressed at once could hold six times `MAX_MODULE_BYTES`. Held
/// from decompression until the kernel has copied the image, so at most one image is in memory.
static DECOMPRESSING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `work` (a decompression and the load it feeds) alone within the process's budget.
fn within_budget<T>(work: impl FnOnce() -> T) -> T {
    let _turn = DECOMPRESSING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    work()
}

/// How a module file is handed to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// `finit_module` on the uncompressed file.
    Finit,
    /// `finit_module` with `MODULE_INIT_COMPRESSED_FILE`: the kernel decompresses.
    FinitCompressed,
    /// Decompressed here, then `init_module`.
    Userspace,
}

impl Method {
    /// How the load is done, as a plan shows it.
    pub(crate) fn how(self) -> &'static str {
        match self {
            Method::Finit => "finit_module",
            Method::FinitCompressed => "finit_module, kernel decompresses",
            Method::Userspace => "decompressed here, init_module",
        }
    }
}

/// Picks the method from the file's compression and what the kernel decompresses (the contents of
/// `/sys/module/compression`, absent on kernels without in-kernel decompression).
pub fn method_for(file: Compression, kernel_decompresses: Option<&str>) -> Method {
    match (file, file.kernel_name()) {
        (Compression::None, _) => Method::Finit,
        (_, Some(name)) if kernel_decompresses == Some(name) => Method::FinitCompressed,
        _ => Method::Userspace,
    }
}

/// What `/sys/module/compression` says, if it exists.
pub(crate) fn kernel_decompression(sys: &Path) -> Option<String> {
    crate::host::read::read_path_text(&sys.join("module/compression"), crate::host::read::Kind::Kernel)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Why a module did not load.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: cannot read: {source}")]
    Read { file: String, source: io::Error },
    #[error("{file}: cannot decompress ({format:?}): {message}")]
    Decompress {
        file: String,
        format: Compression,
        message: String,
    },
    #[error("{name}: signature rejected by the kernel (module signing enforced?): {source}")]
    Signature { name: String, source: io::Error },
    #[error("{name}: not permitted (CAP_SYS_MODULE missing, or module loading disabled): {source}")]
    NotPermitted { name: String, source: io::Error },
    #[error("{name}: not a valid module for this kernel: {source}")]
    BadFormat { name: String, source: io::Error },
    #[error("{name}: the kernel refused it: {source}")]
    Refused { name: String, source: io::Error },
}

/// Loads `path` as module `name` with `params`. A module that is already loaded (EEXIST) is fine.
pub(crate) fn load(name: &str, path: &Path, params: &str, method: Method) -> Result<(), LoadError> {
    let file = path.display().to_string();
    let params = CString::new(params).map_err(|e| LoadError::Read {
        file: file.clone(),
        source: io::Error::other(e),
    })?;
    let rc = match method {
        Method::Finit | Method::FinitCompressed => {
            let f = crate::host::read::open_path(path, crate::host::read::Kind::Module).map_err(|e| {
                LoadError::Read {
                    file: file.clone(),
                    source: e.into_io(),
                }
            })?;
            let flags = if method == Method::FinitCompressed {
                MODULE_INIT_COMPRESSED_FILE
            } else {
                0
            };
            // SAFETY: a valid fd and NUL-terminated params for the duration of the call.
            unsafe { libc::syscall(libc::SYS_finit_module, f.as_raw_fd(), params.as_ptr(), flags) }
        }
        Method::Userspace => within_budget(|| {
            let image = decompress(path)?;
            // SAFETY: the buffer and params outlive the call; the kernel copies them.
            Ok(unsafe {
                libc::syscall(
                    libc::SYS_init_module,
                    image.as_ptr(),
                    image.len(),
                    params.as_ptr(),
                )
            })
        })?,
    };
    if rc == 0 {
        return Ok(());
    }
    let source = io::Error::last_os_error();
    let name = name.to_owned();
    Err(match source.raw_os_error() {
        Some(libc::EEXIST) => return Ok(()),
        Some(libc::ENOKEY) | Some(libc::EKEYREJECTED) | Some(libc::EBADMSG) => {
            LoadError::Signature { name, source }
        }
        Some(libc::EPERM) | Some(libc::EACCES) => LoadError::NotPermitted { name, source },
        Some(libc::ENOEXEC) => LoadError::BadFormat { name, source },
        _ => LoadError::Refused { name, source },
    })
}

/// Reads a module file, decompressing it according to its name.
pub fn decompress(path: &Path) -> Result<Vec<u8>, LoadError> {
    decompress_capped(path, MAX_MODULE_BYTES)
}

/// [`decompress`] refusing more than `max` bytes, whatever the format: memory never grows past it.
fn decompress_capped(path: &Path, max: u64) -> Result<Vec<u8>, LoadError> {
    let file = path.display().to_string();
    let format = Compression::of(&file);
    let raw =
        crate::host::read::open_path(path, crate::host::read::Kind::Module).map_err(|e| LoadError::Read {
            file: file.clone(),
            source: e.into_io(),
        })?;
    let mut reader = io::BufReader::new(raw.take(max));
    let mut out = Vec::new();
    let err = |message: String| LoadError::Decompress {
        file: file.clone(),
        format,
        message,
    };
    match format {
        Compression::None => reader
            .read_to_end(&mut out)
            .map(|_| ())
            .map_err(|e| err(e.to_string()))?,
        Compression::Xz => {
            // The output is capped as it is written: xz has no size in its header that could be
            // trusted, and a small file of zeros expands without bound.
            let mut capped = Capped {
                out: &mut out,
                cap: max as usize,
            };
            match lzma_rs::xz_decompress(&mut reader, &mut capped) {
                Ok(()) => {}
                Err(_) if out.len() >= max as usize => {}
                Err(e) => return Err(err(format!("{e:?}"))),
            }
        }
        Compression::Zstd => {
            let decoder =
                ruzstd::decoding::StreamingDecoder::new(&mut reader).map_err(|e| err(e.to_string()))?;
            decoder
                .take(max)
                .read_to_end(&mut out)
                .map(|_| ())
                .map_err(|e| err(e.to_string()))?
        }
        Compression::Gzip => flate2::read::GzDecoder::new(reader)
            .take(max)
            .read_to_end(&mut out)
            .map(|_| ())
            .map_err(|e| err(e.to_string()))?,
    }
    if out.len() as u64 >= max {
        return Err(err(format!(
            "larger than {max} bytes (decoding stopped at {} bytes)",
            out.len()
        )));
    }
    // Every module is an ELF object; anything else would only get a vaguer error from the kernel.
    if !out.starts_with(b"\x7fELF") {
        return Err(err("not an ELF module after decompression".into()));
    }
    Ok(out)
}

/// A writer that takes up to `cap` bytes and then refuses, so a decoder stops there.
struct Capped<'a> {
    out: &'a mut Vec<u8>,
    cap: usize,
}

impl io::Write for Capped<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.cap.saturating_sub(self.out.len());
        if room == 0 {
            return Err(io::Error::other("decompressed size limit reached"));
        }
        let n = buf.len().min(room);
        self.out.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Modules in the running kernel, from `/proc/modules`.
pub(crate) fn loaded_modules(proc_dir: &Path) -> io::Result<std::collections::BTreeSet<String>> {
    let text = crate::host::read::read_path_text(&proc_dir.join("modules"), crate::host::read::Kind::Kernel)
        .map_err(crate::host::read::ReadError::into_io)?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_choice() {
        assert_eq!(method_for(Compression::None, Some("xz")), Method::Finit);
        assert_eq!(method_for(Compression::Xz, Some("xz")), Method::FinitCompressed);
        assert_eq!(method_for(Compression::Zstd, Some("xz")), Method::Userspace);
        assert_eq!(method_for(Compression::Xz, None), Method::Userspace);
        assert_eq!(
            method_for(Compression::Gzip, Some("gzip")),
            Method::FinitCompressed
        );
    }

    /// Loads on several threads decompress one at a time: memory is one image, not one per thread.
    #[test]
    fn decompressions_share_one_budget() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (active, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..6 {
                s.spawn(|| {
                    within_budget(|| {
                        let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        active.fetch_sub(1, Ordering::SeqCst);
                    })
                });
            }
        });
        assert_eq!(peak.load(Ordering::SeqCst), 1);
    }

    /// A small compressed file of zeros that expands past the cap is refused in every format,
    /// with memory bounded by the cap (xz used to grow until the whole stream was decoded).
    #[test]
    fn decompression_stops_at_the_cap_in_every_format() {
        let t = tempfile::tempdir().expect("tempdir");
        let zeros = vec![0u8; 8 << 20];
        for (ext, tool) in [("xz", "xz"), ("zst", "zstd"), ("gz", "gzip")] {
            let path = t.path().join(format!("bomb.ko.{ext}"));
            let mut child = std::process::Command::new(tool)
                .args(["-c", "-q"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::fs::File::create(&path).expect("create"))
                .spawn()
                .unwrap_or_else(|e| panic!("{tool}: {e}"));
            std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), &zeros).expect("feed");
            drop(child.stdin.take());
            assert!(child.wait().expect("wait").success(), "{tool}");
            let small = std::fs::metadata(&path).expect("stat").len();
            assert!(small < 64 << 10, "{ext}: {small} bytes is not a bomb");
            let err = decompress_capped(&path, 1 << 20).expect_err("over the cap");
            // Stopped at the cap, not after expanding the whole stream.
            assert!(
                err.to_string()
                    .contains("larger than 1048576 bytes (decoding stopped at 1048576 bytes)"),
                "{ext}: {err}"
            );
        }
    }
}
