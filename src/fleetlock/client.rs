//! The two FleetLock requests (coreos/zincati `docs/development/fleetlock/protocol.md`):
//! `POST {base}/v1/pre-reboot` takes a slot, `POST {base}/v1/steady-state` gives it back. Each
//! carries the header `fleet-lock-protocol: true` and the body
//! `{"client_params": {"id": …, "group": …}}`; 200 is success, anything else a failure with an
//! optional `{"kind", "value"}` JSON body. Blocking: the supervisor calls it off its loop.

use std::time::Duration;

use super::Settings;

/// Why a request did not take or give back a slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LockError {
    /// The server answered, and not 200.
    #[error("{url}: {status}{}", describe(.kind, .value))]
    Refused {
        url: String,
        status: u16,
        kind: Option<String>,
        value: Option<String>,
    },
    /// No answer: refused connection, timeout, TLS, DNS.
    #[error("{url}: unreachable: {message}")]
    Unreachable { url: String, message: String },
}

fn describe(kind: &Option<String>, value: &Option<String>) -> String {
    match (kind, value) {
        (Some(k), Some(v)) => format!(" {k}: {}", crate::text::printable(v)),
        (Some(k), None) => format!(" {k}"),
        _ => String::new(),
    }
}

impl LockError {
    /// The server's error kind (`failed_lock_semaphore_full`, …), a bounded label for metrics.
    pub(crate) fn kind(&self) -> &str {
        match self {
            LockError::Refused { kind: Some(k), .. } => k,
            LockError::Refused { .. } => "refused",
            LockError::Unreachable { .. } => "unreachable",
        }
    }

    /// A release answered "this slot is not yours" (423 Locked, or an ownership error kind):
    /// the slot this node's record names is not held by it.
    pub(crate) fn not_ours(&self) -> bool {
        matches!(self, LockError::Refused { status: 423, .. })
            || matches!(self, LockError::Refused { kind: Some(k), .. } if k.contains("owner"))
    }
}

/// The operation asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Lock,
    Unlock,
}

impl Op {
    fn endpoint(self) -> &'static str {
        match self {
            Op::Lock => "v1/pre-reboot",
            Op::Unlock => "v1/steady-state",
        }
    }
}

/// The request body, exactly as Zincati sends it.
pub(crate) fn body(id: &str, group: &str) -> String {
    serde_json::json!({ "client_params": { "id": id, "group": group } }).to_string()
}

/// Sends one request; `Ok` only on a 200.
pub(crate) fn request(s: &Settings, id: &str, op: Op) -> Result<(), LockError> {
    let url = format!("{}/{}", s.base_url.trim_end_matches('/'), op.endpoint());
    let unreachable = |e: &dyn std::error::Error| LockError::Unreachable {
        url: url.clone(),
        message: chain(e),
    };
    // reqwest is built without a bundled crypto provider: use ring, once per process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::blocking::Client::builder()
        .timeout(s.timeout)
        .connect_timeout(s.timeout.min(Duration::from_secs(5)))
        .https_only(!s.allow_http)
        // The header exists so that a redirected request is never taken for a lock request.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("nodeward/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| unreachable(&e))?;
    let answer = client
        .post(&url)
        .header("fleet-lock-protocol", "true")
        .header("content-type", "application/json")
        .body(body(id, &s.group))
        .send()
        .map_err(|e| unreachable(&e))?;
    let status = answer.status().as_u16();
    if status == 200 {
        return Ok(());
    }
    // The error body is the server's: bounded, and only its two fields kept.
    let text = answer.text().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(text.get(..4096).unwrap_or(&text)).unwrap_or_default();
    let field = |name: &str| {
        v.get(name)
            .and_then(|x| x.as_str())
            .filter(|x| !x.is_empty())
            .map(|x| x.chars().take(200).collect::<String>())
    };
    Err(LockError::Refused {
        url,
        status,
        kind: field("kind").filter(|k| k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')),
        value: field("value"),
    })
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let next = c.to_string();
        if !s.ends_with(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_zincatis() {
        let v: serde_json::Value = serde_json::from_str(&body("abc", "workers")).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"client_params": {"id": "abc", "group": "workers"}})
        );
    }

    #[test]
    fn refusals_name_the_servers_kind_and_tell_not_ours() {
        let full = LockError::Refused {
            url: "http://l/v1/pre-reboot".into(),
            status: 409,
            kind: Some("failed_lock_semaphore_full".into()),
            value: Some("semaphore currently full\x1b[2J".into()),
        };
        assert_eq!(full.kind(), "failed_lock_semaphore_full");
        assert!(!full.to_string().contains('\x1b'), "{full}");
        assert!(!full.not_ours());
        let locked = LockError::Refused {
            url: "u".into(),
            status: 423,
            kind: None,
            value: None,
        };
        assert!(locked.not_ours());
        assert_eq!(locked.kind(), "refused");
    }
}
