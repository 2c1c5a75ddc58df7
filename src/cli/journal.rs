//! The journal, spoken natively (`sd_journal_send`'s datagram protocol), with every field escaped
//! on the way: whatever a log line quotes (a certificate's subject, a file name, an engine's error)
//! reaches the journal as printable text, at every call site, not a selection. Field names are the
//! event's, upper-cased (`message_id` → `MESSAGE_ID`, so `journalctl MESSAGE_ID=…` and the
//! catalog's `@STEP@` work); the message is `MESSAGE`, the level `PRIORITY`.

use std::fmt::Write as _;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Where journald listens for native messages.
pub const SOCKET: &str = "/run/systemd/journal/socket";

/// Sends each event to the journal as one datagram.
pub struct Journal {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Journal {
    /// A layer sending to `path` (journald's socket, or a test's).
    pub fn to(path: impl Into<PathBuf>) -> std::io::Result<Journal> {
        let path = path.into();
        let socket = UnixDatagram::unbound()?;
        // Probe once: no journal, no layer (the caller falls back to stderr).
        socket.connect(&path)?;
        Ok(Journal { socket, path })
    }
}

/// Collects an event's fields as (JOURNAL_NAME, escaped value).
#[derive(Default)]
struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.push(field, format!("{value:?}"));
    }
}

impl Fields {
    fn push(&mut self, field: &Field, value: String) {
        let name = if field.name() == "message" {
            "MESSAGE".to_owned()
        } else {
            journal_name(field.name())
        };
        self.0
            .push((name, nodeward::text::printable(&value).into_owned()));
    }
}

/// A field name as journald takes it: `A-Z`, `0-9` and `_`, not starting with `_` or a digit.
fn journal_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' => c.to_ascii_uppercase(),
            'A'..='Z' | '0'..='9' => c,
            _ => '_',
        })
        .collect();
    while out.starts_with(['_', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']) {
        out.remove(0);
    }
    if out.is_empty() { "FIELD".to_owned() } else { out }
}

fn priority(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "3",
        Level::WARN => "4",
        Level::INFO => "6",
        Level::DEBUG | Level::TRACE => "7",
    }
}

/// One datagram of the native protocol: `NAME=value\n` per field (values are escaped, so none
/// holds a newline but the ones it is allowed to keep, sent in the length-prefixed form).
pub(crate) fn datagram(fields: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        if value.contains('\n') {
            out.extend_from_slice(name.as_bytes());
            out.push(b'\n');
            out.extend_from_slice(&(value.len() as u64).to_le_bytes());
            out.extend_from_slice(value.as_bytes());
            out.push(b'\n');
        } else {
            let mut line = String::with_capacity(name.len() + value.len() + 2);
            let _ = writeln!(line, "{name}={value}");
            out.extend_from_slice(line.as_bytes());
        }
    }
    out
}

impl<S: Subscriber> Layer<S> for Journal {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        fields.0.push(("PRIORITY".into(), priority(meta.level()).into()));
        fields.0.push(("SYSLOG_IDENTIFIER".into(), "nodeward".into()));
        fields.0.push(("TARGET".into(), meta.target().into()));
        // Oversized (a huge error text): cut, never lost.
        const MAX: usize = 48 << 10;
        for (_, v) in fields.0.iter_mut() {
            if v.len() > MAX {
                let mut end = MAX;
                while !v.is_char_boundary(end) {
                    end -= 1;
                }
                v.truncate(end);
                v.push_str("…(cut)");
            }
        }
        let _ = self.socket.send_to(&datagram(&fields.0), &self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn every_field_is_escaped_and_named_as_journald_wants() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("socket");
        let listener = UnixDatagram::bind(&path).expect("bind");
        let subscriber = tracing_subscriber::registry().with(Journal::to(&path).expect("journal"));
        tracing::subscriber::with_default(subscriber, || {
            let subject = "etcd\u{1b}[31m\u{202e}";
            tracing::warn!(message_id = "abc", path = %"/etc/x\r", subject = %subject, "cert {subject} expires");
        });
        let mut buf = vec![0u8; 65536];
        let n = listener.recv(&mut buf).expect("recv");
        let text = String::from_utf8(buf[..n].to_vec()).expect("utf8");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{202e}') && !text.contains('\r'),
            "{text:?}"
        );
        for want in [
            "MESSAGE=cert etcd\\u{1b}[31m\\u{202e} expires\n",
            "MESSAGE_ID=abc\n",
            "SUBJECT=etcd\\u{1b}[31m\\u{202e}\n",
            "PATH=/etc/x\\u{d}\n",
            "PRIORITY=4\n",
        ] {
            assert!(text.contains(want), "{want:?} in {text:?}");
        }
        assert_eq!(journal_name("9x-y.z"), "X_Y_Z");
    }

    #[test]
    fn a_value_with_a_newline_goes_length_prefixed() {
        let d = datagram(&[("MESSAGE".into(), "a\nb".into())]);
        assert_eq!(d, b"MESSAGE\n\x03\0\0\0\0\0\0\0a\nb\n".to_vec());
    }
}
