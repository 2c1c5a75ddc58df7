//! Whether a registry would serve an image now, asked the way the distribution API is asked by
//! containerd and the engines: a `HEAD` of the manifest at each endpoint in their order (a
//! registry's mirrors, then the registry), with an anonymous bearer token when the registry asks
//! for one (its `WWW-Authenticate` challenge, as Docker Hub, quay.io and registry.k8s.io answer).
//!
//! Only `nodeward check` asks, on an operator's command: the daemon never does, so a thousand nodes
//! booting in the same second send a registry nothing more than their pulls. Each request has a
//! short deadline and at most [`MAX_ASKED`] endpoints are asked per image.

use std::time::Duration;

use crate::host::http::{Client, Method, Options, Purpose};

/// Endpoints asked for one image at most (its mirrors and the registry).
pub(crate) const MAX_ASKED: usize = 6;
/// One request: connect, answer and a token's body together.
const TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The manifest types containerd asks for (an index first: a multi-platform image).
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.v2+json";

/// An image name as the distribution API addresses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parts {
    /// `registry.k8s.io`, `docker.io`, `host:5000`.
    pub(crate) registry: String,
    /// `pause`, `library/busybox`, `poseidon/kubelet`.
    pub(crate) repository: String,
    /// The tag, or the `sha256:` digest when the name pins one.
    pub(crate) reference: String,
}

/// Splits a name (`pause:3.10`, `quay.io/poseidon/kubelet@sha256:…`) after Docker's
/// normalization; `None` when it has no repository.
pub(crate) fn parts(image: &str) -> Option<Parts> {
    let full = super::archive::normalize(image);
    let (registry, rest) = full.split_once('/')?;
    let (repository, reference) = match rest.split_once('@') {
        Some((name, digest)) => (super::decide::repository(name), digest),
        None => rest.rsplit_once(':')?,
    };
    (!repository.is_empty() && !reference.is_empty()).then(|| Parts {
        registry: registry.to_owned(),
        repository: repository.to_owned(),
        reference: reference.to_owned(),
    })
}

/// One place to ask: a registry's API root (`…/v2`) and how to trust it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) api: String,
    pub(crate) ca_pem: Option<Vec<u8>>,
}

/// The manifest's URL at an endpoint.
pub(crate) fn manifest_url(api: &str, parts: &Parts) -> String {
    format!("{api}/{}/manifests/{}", parts.repository, parts.reference)
}

/// What one endpoint said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Serves,
    /// It answered, without the image (404, or another refusal), or did not answer: why.
    No(String),
    /// It wants credentials an anonymous request does not have (a private repository): whether the
    /// node's engine has them cannot be told from here.
    NeedsCredentials(String),
}

/// The parameters of a `Bearer` challenge (`realm`, `service`, `scope`); `None` for another scheme.
pub(crate) fn bearer_challenge(header: &str) -> Option<Vec<(String, String)>> {
    let rest = header.trim_start();
    let (scheme, params) = rest.split_once(' ').unwrap_or((rest, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut out = Vec::new();
    let mut s = params.trim();
    while !s.is_empty() {
        let (key, after) = s.split_once('=')?;
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        out.push((key.trim().to_ascii_lowercase(), value.to_owned()));
        s = next.trim_start().trim_start_matches(',').trim_start();
    }
    Some(out)
}

/// Why a challenge's realm is not asked: the token it hands out is sent back to the registry as a
/// credential, and `check` must not be turned into a request to any address a registry (or a
/// mirror) names: a realm on a cloud's metadata address, say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RealmRefused {
    NoRealm,
    NotHttp,
    /// An https registry's realm over plain http.
    Downgrade,
    /// Neither the registry's host nor a name in its domain (`auth.docker.io` for
    /// `registry-1.docker.io`).
    OtherHost(String),
}

impl std::fmt::Display for RealmRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RealmRefused::NoRealm => f.write_str("a bearer challenge without a realm"),
            RealmRefused::NotHttp => f.write_str("a token realm that is not an http(s) URL"),
            RealmRefused::Downgrade => f.write_str("a plain-http token realm for an https registry"),
            RealmRefused::OtherHost(h) => write!(
                f,
                "a token realm on {h}, neither the registry's host nor in its domain: not asked"
            ),
        }
    }
}

/// Whether `realm_host` may hand out tokens for `registry_host`: the same host, or two DNS names
/// sharing their last two labels (`auth.docker.io` and `registry-1.docker.io`); never an address.
fn realm_host_allowed(realm_host: &str, registry_host: &str) -> bool {
    if realm_host.eq_ignore_ascii_case(registry_host) {
        return true;
    }
    let is_name = |h: &str| h.parse::<std::net::IpAddr>().is_err() && !h.starts_with('[');
    let domain = |h: &str| {
        let labels: Vec<&str> = h.rsplitn(3, '.').collect();
        (labels.len() == 3).then(|| format!("{}.{}", labels[1], labels[0]).to_ascii_lowercase())
    };
    is_name(realm_host)
        && is_name(registry_host)
        && domain(realm_host).is_some_and(|d| domain(registry_host) == Some(d))
}

/// The host of an `http(s)://HOST[:PORT]/…` URL.
fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split_once(']').map(|(h, _)| h);
    }
    Some(authority.split(':').next().unwrap_or(authority))
}

/// Where to ask for an anonymous pull token, from a challenge the registry at `api` gave.
pub(crate) fn token_url(
    challenge: &[(String, String)],
    parts: &Parts,
    api: &str,
) -> Result<String, RealmRefused> {
    let get = |k: &str| {
        challenge
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let realm = get("realm").ok_or(RealmRefused::NoRealm)?;
    if !(realm.starts_with("https://") || realm.starts_with("http://")) {
        return Err(RealmRefused::NotHttp);
    }
    if api.starts_with("https://") && !realm.starts_with("https://") {
        return Err(RealmRefused::Downgrade);
    }
    let realm_host = host_of(realm).ok_or(RealmRefused::NotHttp)?;
    if !host_of(api).is_some_and(|h| realm_host_allowed(realm_host, h)) {
        return Err(RealmRefused::OtherHost(
            crate::text::printable(realm_host).to_string(),
        ));
    }
    let default_scope = format!("repository:{}:pull", parts.repository);
    let scope = get("scope").unwrap_or(&default_scope);
    let mut url = format!(
        "{realm}{}scope={}",
        if realm.contains('?') { '&' } else { '?' },
        encode(scope)
    );
    if let Some(service) = get("service") {
        url.push_str("&service=");
        url.push_str(&encode(service));
    }
    Ok(url)
}

/// Percent-encodes what a query value may not hold as it is.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The token of a token endpoint's answer (`token`, or OAuth's `access_token`).
pub(crate) fn token_from(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    ["token", "access_token"]
        .iter()
        .find_map(|k| v.get(k)?.as_str().filter(|t| !t.is_empty()).map(str::to_owned))
}

/// Asks one endpoint for one image.
pub(crate) fn ask(endpoint: &Endpoint, parts: &Parts) -> Answer {
    // An https registry is never followed to plain http (nor is its token service).
    let opts = Options {
        timeout: TIMEOUT,
        connect_timeout: CONNECT_TIMEOUT,
        https_only: endpoint.api.starts_with("https://"),
        ca_pem: endpoint.ca_pem.clone(),
    };
    let client = match Client::new(Purpose::REGISTRY, &opts) {
        Ok(c) => c,
        Err(e) => return Answer::No(e.to_string()),
    };
    let url = manifest_url(&endpoint.api, parts);
    let head = |auth: Option<&str>| {
        let bearer = auth.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("accept", ACCEPT)];
        if let Some(b) = &bearer {
            headers.push(("authorization", b.as_str()));
        }
        client.request(Method::Head, &url, &headers)
    };
    let first = match head(None) {
        Ok(r) => r,
        Err(e) => return Answer::No(e.to_string()),
    };
    if first.status() != 401 {
        return status_answer(&url, first.status());
    }
    let Some(challenge) = first
        .header("www-authenticate")
        .and_then(|h| bearer_challenge(&h))
    else {
        return Answer::NeedsCredentials(format!("{url}: 401 without a bearer challenge"));
    };
    let token_url = match token_url(&challenge, parts, &endpoint.api) {
        Ok(u) => u,
        Err(why) => return Answer::NeedsCredentials(format!("{url}: 401 with {why}")),
    };
    let tokens = match Client::new(Purpose::REGISTRY_TOKEN, &opts) {
        Ok(c) => c,
        Err(e) => return Answer::No(e.to_string()),
    };
    let token = match tokens.request(Method::Get, &token_url, &[]) {
        Ok(r) if r.status() == 200 => r.body(|_| {}).ok().and_then(|b| token_from(&b)),
        Ok(r) => {
            return Answer::NeedsCredentials(format!(
                "{url}: no anonymous token ({} from the token service)",
                r.status()
            ));
        }
        Err(e) => return Answer::No(e.to_string()),
    };
    let Some(token) = token else {
        return Answer::No(format!("{token_url}: no token in the answer"));
    };
    match head(Some(&token)) {
        Ok(r) if r.status() == 401 || r.status() == 403 => {
            Answer::NeedsCredentials(format!("{url}: {} with an anonymous token", r.status()))
        }
        Ok(r) => status_answer(&url, r.status()),
        Err(e) => Answer::No(e.to_string()),
    }
}

fn status_answer(url: &str, status: u16) -> Answer {
    match status {
        200 => Answer::Serves,
        404 => Answer::No(format!("{url}: no such manifest (404)")),
        403 => Answer::NeedsCredentials(format!("{url}: 403")),
        s => Answer::No(format!("{url}: answered {s}")),
    }
}

/// Where an image can be pulled from, asking `endpoints` in order until one serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pullable {
    /// This endpoint serves it.
    From(String),
    /// None does: each one's reason.
    No(String),
    /// None serves it to an anonymous request, and one asked for credentials.
    Unknown(String),
}

/// Asks the endpoints (at most [`MAX_ASKED`]) in order; `ask` is [`ask`] outside tests.
pub(crate) fn first_serving(
    endpoints: &[Endpoint],
    parts: &Parts,
    ask: &dyn Fn(&Endpoint, &Parts) -> Answer,
) -> Pullable {
    let mut why = Vec::new();
    let mut credentials = false;
    for e in endpoints.iter().take(MAX_ASKED) {
        match ask(e, parts) {
            Answer::Serves => return Pullable::From(e.api.clone()),
            Answer::No(w) => why.push(w),
            Answer::NeedsCredentials(w) => {
                credentials = true;
                why.push(w);
            }
        }
    }
    if endpoints.is_empty() {
        why.push("nowhere to ask".to_owned());
    }
    let why = why.join("; ");
    if credentials {
        Pullable::Unknown(why)
    } else {
        Pullable::No(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_as_the_distribution_api_addresses_them() {
        let p = parts("pause:3.10").expect("parts");
        assert_eq!(
            (p.registry.as_str(), p.repository.as_str(), p.reference.as_str()),
            ("docker.io", "library/pause", "3.10")
        );
        let p = parts("quay.io/poseidon/kubelet:v1.36.1@sha256:ab").expect("parts");
        assert_eq!(
            (p.registry.as_str(), p.repository.as_str(), p.reference.as_str()),
            ("quay.io", "poseidon/kubelet", "sha256:ab")
        );
        let p = parts("127.0.0.1:5000/pause").expect("parts");
        assert_eq!(
            (p.registry.as_str(), p.reference.as_str()),
            ("127.0.0.1:5000", "latest")
        );
        assert_eq!(
            manifest_url(
                "https://registry.k8s.io/v2",
                &parts("registry.k8s.io/pause:3.10.1").expect("parts")
            ),
            "https://registry.k8s.io/v2/pause/manifests/3.10.1"
        );
    }

    #[test]
    fn a_bearer_challenge_becomes_a_token_request() {
        let c = bearer_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/pause:pull""#,
        )
        .expect("bearer");
        let p = parts("pause:3.10").expect("parts");
        let hub = "https://registry-1.docker.io/v2";
        assert_eq!(
            token_url(&c, &p, hub).as_deref(),
            Ok("https://auth.docker.io/token?scope=repository:library/pause:pull&service=registry.docker.io")
        );
        // quay.io's shape: no scope in the challenge; the pull scope is asked for.
        let c = bearer_challenge(r#"Bearer realm="https://quay.io/v2/auth?x=1",service="quay.io""#)
            .expect("bearer");
        let p = parts("quay.io/poseidon/kubelet:v1").expect("parts");
        assert_eq!(
            token_url(&c, &p, "https://quay.io/v2").as_deref(),
            Ok("https://quay.io/v2/auth?x=1&scope=repository:poseidon/kubelet:pull&service=quay.io")
        );
        assert_eq!(bearer_challenge(r#"Basic realm="x""#), None);
        let no_realm = bearer_challenge(r#"Bearer service="x""#).expect("bearer");
        assert_eq!(
            token_url(&no_realm, &p, hub),
            Err(RealmRefused::NoRealm),
            "nowhere to ask"
        );
        let odd = bearer_challenge(r#"Bearer realm="file:///etc/shadow""#).expect("bearer");
        assert_eq!(token_url(&odd, &p, hub), Err(RealmRefused::NotHttp));
    }

    #[test]
    fn a_realm_elsewhere_or_downgraded_is_not_asked() {
        let p = parts("quay.io/poseidon/kubelet:v1").expect("parts");
        let realm = |r: &str| bearer_challenge(&format!(r#"Bearer realm="{r}""#)).expect("bearer");
        for (r, api) in [
            (
                "http://169.254.169.254/latest/meta-data",
                "http://mirror.example.com/v2",
            ),
            ("https://169.254.169.254/token", "http://127.0.0.1:5000/v2"),
            ("https://evil.example.net/token", "https://mirror.example.com/v2"),
            (
                "https://user@169.254.169.254:80/t",
                "https://mirror.example.com/v2",
            ),
            ("https://127.0.0.2/t", "https://127.0.0.1/v2"),
        ] {
            assert!(
                matches!(token_url(&realm(r), &p, api), Err(RealmRefused::OtherHost(_))),
                "{r} for {api}"
            );
        }
        assert_eq!(
            token_url(
                &realm("http://mirror.example.com/token"),
                &p,
                "https://mirror.example.com/v2"
            ),
            Err(RealmRefused::Downgrade)
        );
        // Controls: the registry's own host (any port, http for a plain-http mirror), its domain.
        for (r, api) in [
            ("http://127.0.0.1:5001/token", "http://127.0.0.1:5000/v2"),
            (
                "https://mirror.example.com/token",
                "https://mirror.example.com:8443/v2",
            ),
            ("https://auth.example.com/token", "https://mirror.example.com/v2"),
        ] {
            assert!(token_url(&realm(r), &p, api).is_ok(), "{r} for {api}");
        }
        assert_eq!(encode("a b&c=d"), "a%20b%26c%3Dd");
    }

    #[test]
    fn tokens_are_read_from_either_field() {
        assert_eq!(token_from(br#"{"token":"t1"}"#).as_deref(), Some("t1"));
        assert_eq!(token_from(br#"{"access_token":"t2"}"#).as_deref(), Some("t2"));
        assert_eq!(token_from(br#"{"token":""}"#), None);
        assert_eq!(token_from(b"<html>"), None);
    }

    #[test]
    fn the_first_endpoint_that_serves_wins_and_refusals_are_told_apart() {
        let e = |api: &str| Endpoint {
            api: api.into(),
            ca_pem: None,
        };
        let p = parts("registry.k8s.io/pause:3.10.1").expect("parts");
        let list = [e("http://mirror/v2"), e("https://registry.k8s.io/v2")];
        let answers = |m: Answer, r: Answer| {
            move |x: &Endpoint, _: &Parts| {
                if x.api.contains("mirror") {
                    m.clone()
                } else {
                    r.clone()
                }
            }
        };
        let no = |w: &str| Answer::No(w.into());
        assert_eq!(
            first_serving(&list, &p, &answers(no("down"), Answer::Serves)),
            Pullable::From("https://registry.k8s.io/v2".into())
        );
        assert_eq!(
            first_serving(&list, &p, &answers(Answer::Serves, no("down"))),
            Pullable::From("http://mirror/v2".into())
        );
        assert_eq!(
            first_serving(&list, &p, &answers(no("down"), no("404"))),
            Pullable::No("down; 404".into())
        );
        assert!(matches!(
            first_serving(
                &list,
                &p,
                &answers(no("down"), Answer::NeedsCredentials("401".into()))
            ),
            Pullable::Unknown(_)
        ));
        assert_eq!(
            first_serving(&[], &p, &answers(no(""), no(""))),
            Pullable::No("nowhere to ask".into())
        );
        let many: Vec<Endpoint> = (0..MAX_ASKED + 3)
            .map(|i| e(&format!("http://m{i}/v2")))
            .collect();
        let asked = std::cell::Cell::new(0);
        let count = |_: &Endpoint, _: &Parts| {
            asked.set(asked.get() + 1);
            no("down")
        };
        let _ = first_serving(&many, &p, &count);
        assert_eq!(asked.get(), MAX_ASKED, "at most MAX_ASKED endpoints asked");
    }

    /// A registry on loopback that wants a bearer token, as Docker Hub and quay.io do: the
    /// manifest's HEAD answers 401 with a challenge until it carries the token its realm hands out.
    fn token_registry() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (seen, realm) = (log.clone(), format!("{base}/token"));
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                // The whole request head before answering: closing with unread bytes resets the
                // connection, and the client may lose the answer.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16384 {
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
                let line = head.lines().next().unwrap_or("").to_owned();
                seen.lock().expect("log").push(line.clone());
                let reply = if line
                    .starts_with("get /token?scope=repository:library/pause:pull&service=test ")
                {
                    "200 OK\r\ncontent-type: application/json\r\ncontent-length: 14\r\n\r\n{\"token\":\"t1\"}"
                        .to_owned()
                } else if !line.starts_with("head /v2/library/pause/manifests/") {
                    "404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned()
                } else if !head.contains("authorization: bearer t1") {
                    format!(
                        "401 Unauthorized\r\nwww-authenticate: Bearer realm=\"{realm}\",service=\"test\"\r\ncontent-length: 0\r\n\r\n"
                    )
                } else if line.contains("/manifests/3.10 ") {
                    "200 OK\r\ncontent-length: 0\r\n\r\n".to_owned()
                } else {
                    "404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned()
                };
                let reply = reply.replacen("\r\n", "\r\nconnection: close\r\n", 1);
                let _ = write!(stream, "HTTP/1.1 {reply}");
            }
        });
        (base, log)
    }

    #[test]
    fn a_registry_that_wants_a_token_is_asked_with_an_anonymous_one() {
        let (base, log) = token_registry();
        let at = Endpoint {
            api: format!("{base}/v2"),
            ca_pem: None,
        };
        let p = parts("pause:3.10").expect("parts");
        assert_eq!(ask(&at, &p), Answer::Serves, "{:?}", log.lock().expect("log"));
        let asked = log.lock().expect("log").clone();
        assert_eq!(asked.len(), 3, "HEAD, token, HEAD with it: {asked:?}");
        // The control: the same registry without the tag says 404, after the same token dance.
        let other = parts("pause:0.1").expect("parts");
        assert!(
            matches!(ask(&at, &other), Answer::No(ref w) if w.contains("404")),
            "{:?}",
            log.lock().expect("log")
        );
        // Nothing listening: an answer naming the URL, within the deadline.
        let closed = Endpoint {
            api: "http://127.0.0.1:9/v2".into(),
            ca_pem: None,
        };
        assert!(matches!(ask(&closed, &p), Answer::No(ref w) if w.contains("127.0.0.1:9")));
    }
}
