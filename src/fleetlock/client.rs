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

/// Sends one request; `Ok` only on a 200. Through the one HTTP client
/// ([`crate::host::http::Purpose::FLEET_LOCK`]: no redirects, an error body read to 4 KiB at most,
/// the whole request within `fleet_lock.timeout_seconds`).
pub(crate) fn request(s: &Settings, id: &str, op: Op) -> Result<(), LockError> {
    use crate::host::http::{Client, Options, Purpose};
    let url = format!("{}/{}", s.base_url.trim_end_matches('/'), op.endpoint());
    let unreachable = |message: String| LockError::Unreachable {
        url: url.clone(),
        message,
    };
    let options = Options {
        timeout: s.timeout,
        connect_timeout: s.timeout.min(Duration::from_secs(5)),
        https_only: !s.allow_http,
        ca_pem: None,
    };
    let client = Client::new(Purpose::FLEET_LOCK, &options).map_err(|e| unreachable(e.to_string()))?;
    // The header exists so that a redirected request is never taken for a lock request.
    let answer = client
        .post_json(&url, &[("fleet-lock-protocol", "true")], body(id, &s.group))
        .map_err(|e| unreachable(e.to_string()))?;
    let status = answer.status();
    if status == 200 {
        return Ok(());
    }
    Err(refusal(url, status, &answer.body_prefix()))
}

/// A refusal from its status and (capped) body: only the body's two fields are kept, each cut to
/// 200 characters; a `kind` that is not a plain identifier is dropped (it becomes a metric label).
fn refusal(url: String, status: u16, body: &[u8]) -> LockError {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let field = |name: &str| {
        v.get(name)
            .and_then(|x| x.as_str())
            .filter(|x| !x.is_empty())
            .map(|x| x.chars().take(200).collect::<String>())
    };
    LockError::Refused {
        url,
        status,
        kind: field("kind").filter(|k| k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')),
        value: field("value"),
    }
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

    #[test]
    fn a_refusal_keeps_two_short_fields() {
        let long = "v".repeat(5000);
        let body = format!(r#"{{"kind":"failed_lock_semaphore_full","value":"{long}"}}"#);
        let e = refusal("u".into(), 409, body.as_bytes());
        assert_eq!(e.kind(), "failed_lock_semaphore_full");
        assert!(matches!(&e, LockError::Refused { value: Some(v), .. } if v.len() == 200));
        // A body cut by the cap is not JSON: the status alone is kept.
        let cut = refusal("u".into(), 409, &body.as_bytes()[..100]);
        assert_eq!(cut.kind(), "refused");
        let odd = refusal("u".into(), 500, br#"{"kind":"a b\n","value":""}"#);
        assert_eq!(odd.kind(), "refused", "a kind that is no identifier is dropped");
    }
}
