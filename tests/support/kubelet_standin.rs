//! A stand-in kubelet that parses its command line and configuration files as the real kubelet
//! does, written apart from nodeward's code (sharing nodeward's parser would hide the very bugs it
//! must catch). std only: the tests build it with `rustc`, the VM packs it (static) into the
//! kubelet image. The rules and where the kubelet's source has them are in docs/kubelet.md.
//!
//! - flags: pflag's rules (`--name=value`, `--name value`, bare booleans, `_` read as `-`); an
//!   unknown flag, a non-flag argument or a bad value exits 1 at once; a removed flag is unknown
//!   from the release that removed it (`KUBELET_STANDIN_VERSION`, else the file `/standin-version`,
//!   else 1.36); every flag that mirrors a KubeletConfiguration field prints pflag's deprecation
//!   warning on stderr;
//! - `--node-labels` merges across repeats; `--register-with-taints` replaces its list at every
//!   repeat and refuses two taints of one key and effect; the rest keep their last value;
//! - `--config` (apiVersion and kind required), then `--config-dir`: files ending `.conf` in
//!   lexical order (the directory walked as `filepath.WalkDir` does), each with apiVersion and kind,
//!   merged as a JSON merge patch; then the flags again over the result (flag precedence);
//! - `--cloud-provider`: from 1.31 only "" or "external";
//! - it prints the node it would register (`kubelet stand-in: node {json}`: name, labels, taints,
//!   providerID), writes it to /var/log/kubelet-standin-node.json, then serves /healthz where the
//!   merged configuration says (port 0: none). `KUBELET_STANDIN_PARSE_ONLY=1` stops after the node;
//!   `KUBELET_STANDIN_ROOT` prefixes every file it reads or writes (tests).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::ExitCode;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Bool,
    Value,
}

/// (flag, kind, KubeletConfiguration field it mirrors: deprecated as a flag).
const FLAGS: &[(&str, Kind, Option<&str>)] = &[
    ("config", Kind::Value, None),
    ("config-dir", Kind::Value, None),
    ("kubeconfig", Kind::Value, None),
    ("bootstrap-kubeconfig", Kind::Value, None),
    ("hostname-override", Kind::Value, None),
    ("node-ip", Kind::Value, None),
    ("cert-dir", Kind::Value, None),
    ("cloud-provider", Kind::Value, None),
    ("root-dir", Kind::Value, None),
    ("seccomp-default", Kind::Bool, None),
    ("node-labels", Kind::Value, None),
    ("lock-file", Kind::Value, None),
    ("exit-on-lock-contention", Kind::Bool, None),
    ("runtime-cgroups", Kind::Value, None),
    ("image-credential-provider-config", Kind::Value, None),
    ("image-credential-provider-bin-dir", Kind::Value, None),
    ("provider-id", Kind::Value, Some("providerID")),
    ("v", Kind::Value, None),
    ("vmodule", Kind::Value, None),
    ("log-flush-frequency", Kind::Value, None),
    ("version", Kind::Bool, None),
    ("help", Kind::Bool, None),
    ("container-runtime-endpoint", Kind::Value, Some("containerRuntimeEndpoint")),
    ("register-with-taints", Kind::Value, Some("registerWithTaints")),
    ("register-node", Kind::Bool, Some("registerNode")),
    ("healthz-port", Kind::Value, Some("healthzPort")),
    ("healthz-bind-address", Kind::Value, Some("healthzBindAddress")),
    ("cgroup-driver", Kind::Value, Some("cgroupDriver")),
    ("cluster-dns", Kind::Value, Some("clusterDNS")),
    ("cluster-domain", Kind::Value, Some("clusterDomain")),
    ("max-pods", Kind::Value, Some("maxPods")),
    ("fail-swap-on", Kind::Bool, Some("failSwapOn")),
    ("anonymous-auth", Kind::Bool, Some("authentication.anonymous.enabled")),
    ("client-ca-file", Kind::Value, Some("authentication.x509.clientCAFile")),
    ("read-only-port", Kind::Value, Some("readOnlyPort")),
    ("rotate-certificates", Kind::Bool, Some("rotateCertificates")),
    ("serialize-image-pulls", Kind::Bool, Some("serializeImagePulls")),
    ("pod-manifest-path", Kind::Value, Some("staticPodPath")),
    ("volume-plugin-dir", Kind::Value, Some("volumePluginDir")),
    ("resolv-conf", Kind::Value, Some("resolvConf")),
    ("feature-gates", Kind::Value, Some("featureGates")),
    ("eviction-hard", Kind::Value, Some("evictionHard")),
    ("kube-reserved", Kind::Value, Some("kubeReserved")),
    ("system-reserved", Kind::Value, Some("systemReserved")),
    ("tls-cert-file", Kind::Value, Some("tlsCertFile")),
    ("tls-private-key-file", Kind::Value, Some("tlsPrivateKeyFile")),
];

/// (flag, kind, release that removed it): unknown from then on, accepted (deprecated) before.
const REMOVED: &[(&str, Kind, (u32, u32))] = &[
    ("network-plugin", Kind::Value, (1, 24)),
    ("container-runtime", Kind::Value, (1, 27)),
    ("cloud-config", Kind::Value, (1, 31)),
    ("keep-terminated-pod-volumes", Kind::Bool, (1, 31)),
    ("register-schedulable", Kind::Bool, (1, 34)),
    ("pod-infra-container-image", Kind::Value, (1, 35)),
];

unsafe extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
    fn write(fd: i32, buf: *const u8, count: usize) -> isize;
    fn _exit(code: i32) -> !;
}

/// SIGTERM and SIGINT end the stand-in at once, as the kubelet shuts down on them. It runs as the
/// container's PID 1, for which the kernel drops a signal that has no handler. The line on stderr
/// (write(2) is async-signal-safe) lets a test tell a graceful stop from a SIGKILL, which leaves
/// none.
extern "C" fn on_term(signum: i32) {
    let line: &[u8] = if signum == 15 {
        b"kubelet stand-in: got SIGTERM, shutting down\n"
    } else {
        b"kubelet stand-in: got SIGINT, shutting down\n"
    };
    unsafe {
        write(2, line.as_ptr(), line.len());
        _exit(0)
    }
}

fn main() -> ExitCode {
    unsafe {
        signal(15, on_term);
        signal(2, on_term);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = std::env::var("KUBELET_STANDIN_ROOT").unwrap_or_default();
    append(&format!("{root}/var/log/kubelet-standin.log"), &format!("{} {}", now(), args.join(" ")));
    match run(&root, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("E kubelet stand-in: {e}");
            eprintln!("Error: {e}");
            ExitCode::from(1)
        }
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn append(path: &str, line: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

fn version(root: &str) -> (u32, u32) {
    let text = std::env::var("KUBELET_STANDIN_VERSION")
        .ok()
        .or_else(|| std::fs::read_to_string(format!("{root}/standin-version")).ok())
        .unwrap_or_else(|| "1.36".into());
    let t = text.trim().trim_start_matches('v');
    let mut it = t.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(1), it.next().unwrap_or(36))
}

/// The flags as parsed: each name with its values in order.
struct Parsed {
    values: Vec<(String, String)>,
    labels: BTreeMap<String, String>,
    taints: Option<Vec<Taint>>,
}

impl Parsed {
    fn last(&self, name: &str) -> Option<&str> {
        self.values.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

fn lookup(name: &str, ver: (u32, u32)) -> Option<(Kind, Option<&'static str>, bool)> {
    if let Some((_, k, field)) = FLAGS.iter().find(|(n, ..)| *n == name) {
        if name == "config-dir" && ver < (1, 28) {
            return None;
        }
        return Some((*k, *field, field.is_some()));
    }
    REMOVED
        .iter()
        .find(|(n, _, removed)| *n == name && ver < *removed)
        .map(|(_, k, _)| (*k, None, true))
}

/// pflag's parse of the kubelet's flag set (normalised names, `=` or the next argument as value).
fn parse_flags(args: &[String], ver: (u32, u32)) -> Result<Parsed, String> {
    let mut p = Parsed {
        values: Vec::new(),
        labels: BTreeMap::new(),
        taints: None,
    };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        let Some(body) = a.strip_prefix("--") else {
            return Err(if a.starts_with('-') && a.len() > 1 {
                format!("failed to parse kubelet flag: unknown shorthand flag: {a:?}")
            } else {
                format!("unknown command {a}")
            });
        };
        let (raw, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (body, None),
        };
        let name = raw.replace('_', "-");
        let Some((kind, _, deprecated)) = lookup(&name, ver) else {
            return Err(format!("failed to parse kubelet flag: unknown flag: --{name}"));
        };
        let value = match (kind, inline) {
            (_, Some(v)) => v,
            (Kind::Bool, None) => "true".into(),
            (Kind::Value, None) => {
                let v = args
                    .get(i)
                    .ok_or_else(|| format!("failed to parse kubelet flag: flag needs an argument: --{name}"))?;
                i += 1;
                v.clone()
            }
        };
        if kind == Kind::Bool && !matches!(value.as_str(), "true" | "false" | "1" | "0" | "t" | "f" | "TRUE" | "FALSE") {
            return Err(format!(
                "failed to parse kubelet flag: invalid argument {value:?} for \"--{name}\" flag: parse error"
            ));
        }
        if deprecated {
            eprintln!(
                "Flag --{name} has been deprecated, This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information."
            );
        }
        match name.as_str() {
            "node-labels" => {
                for item in value.split(',').filter(|s| !s.is_empty()) {
                    let (k, v) = item.split_once('=').unwrap_or((item, ""));
                    p.labels.insert(k.trim().to_owned(), v.trim().to_owned());
                }
            }
            "register-with-taints" => {
                p.taints = Some(parse_taint_list(&value).map_err(|e| {
                    format!("failed to parse kubelet flag: invalid argument {value:?} for \"--register-with-taints\" flag: {e}")
                })?);
            }
            _ => {}
        }
        p.values.push((name, value));
    }
    Ok(p)
}

#[derive(Clone, PartialEq, Debug)]
struct Taint {
    key: String,
    value: String,
    effect: String,
}

/// `ParseTaints` of `key=value:Effect` items: effect required and known, one per key and effect.
fn parse_taint_list(value: &str) -> Result<Vec<Taint>, String> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let mut out: Vec<Taint> = Vec::new();
    for spec in value.split(',') {
        let parts: Vec<&str> = spec.split(':').collect();
        let (kv, effect) = match parts.as_slice() {
            [kv, effect] => (*kv, *effect),
            _ => return Err(format!("invalid taint spec: {spec}")),
        };
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(format!("invalid taint effect: {effect}, unsupported taint effect"));
        }
        let kvs: Vec<&str> = kv.split('=').collect();
        let (key, val) = match kvs.as_slice() {
            [k] => (*k, ""),
            [k, v] => (*k, *v),
            _ => return Err(format!("invalid taint spec: {spec}")),
        };
        if key.is_empty() || !qualified(key) {
            return Err(format!("invalid taint spec: {spec}"));
        }
        if out.iter().any(|t| t.key == key && t.effect == effect) {
            return Err(format!(
                "duplicated taints with the same key and effect: {{{key} {val} {effect}}}"
            ));
        }
        out.push(Taint {
            key: key.into(),
            value: val.into(),
            effect: effect.into(),
        });
    }
    Ok(out)
}

fn qualified(key: &str) -> bool {
    let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

/// Labels the kubelet may set in the kubernetes.io and k8s.io namespaces (ValidateKubeletFlags).
fn label_allowed(key: &str) -> bool {
    const KNOWN: &[&str] = &[
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    ];
    let Some((ns, _)) = key.rsplit_once('/') else {
        return true;
    };
    let within = |d: &str| ns == d || ns.ends_with(&format!(".{d}"));
    if !(within("kubernetes.io") || within("k8s.io")) {
        return true;
    }
    KNOWN.contains(&key) || within("kubelet.kubernetes.io") || within("node.kubernetes.io")
}

fn run(root: &str, args: &[String]) -> Result<(), String> {
    let ver = version(root);
    let flags = parse_flags(args, ver)?;
    if flags.last("version").is_some_and(|v| v != "false") {
        println!("Kubernetes v{}.{}.0-standin", ver.0, ver.1);
        return Ok(());
    }
    let bad: Vec<&String> = flags.labels.keys().filter(|k| !label_allowed(k)).collect();
    if !bad.is_empty() {
        return Err(format!(
            "failed to validate kubelet flags: unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: {bad:?}"
        ));
    }
    let mut config = Json::Map(Vec::new());
    if let Some(file) = flags.last("config").filter(|f| !f.is_empty()) {
        config = load_config(root, file).map_err(|e| format!("failed to load kubelet config file, path: {file}, error: {e}"))?;
    }
    if let Some(dir) = flags.last("config-dir").filter(|d| !d.is_empty()) {
        if ver < (1, 30) && std::env::var_os("KUBELET_CONFIG_DROPIN_DIR_ALPHA").is_none() {
            return Err(format!(
                "dropin config directory {dir} set but KUBELET_CONFIG_DROPIN_DIR_ALPHA is not set (kubelet {}.{})",
                ver.0, ver.1
            ));
        }
        let mut files = Vec::new();
        walk(&format!("{root}{dir}"), &mut files).map_err(|e| format!("failed to walk through kubelet dropin directory {dir:?}: {e}"))?;
        for path in files {
            let patch = load_config(root, &path[root.len()..]).map_err(|e| {
                format!("failed to merge kubelet configs: failed to load kubelet dropin file, path: {path}, error: {e}")
            })?;
            config = merge_patch(config, patch);
        }
    }
    // Flag precedence: the flags again over the merged files.
    for (name, field) in FLAGS.iter().filter_map(|(n, _, f)| f.map(|f| (*n, f))) {
        if let Some(v) = flags.last(name) {
            let value = match name {
                "register-with-taints" => Json::List(
                    flags
                        .taints
                        .clone()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|t| {
                            Json::Map(vec![
                                ("key".into(), Json::Str(t.key)),
                                ("value".into(), Json::Str(t.value)),
                                ("effect".into(), Json::Str(t.effect)),
                            ])
                        })
                        .collect(),
                ),
                _ => Json::Str(v.to_owned()),
            };
            config = merge_patch(config, Json::Map(vec![(field.to_owned(), value)]));
        }
    }
    if let Some(cloud) = flags.last("cloud-provider") {
        if ver >= (1, 31) && !cloud.is_empty() && cloud != "external" {
            return Err(format!("failed to run Kubelet: cloud provider {cloud:?} was not found (only \"external\" since 1.31)"));
        }
    }
    let node = registered_node(root, &flags, &config)?;
    println!("kubelet stand-in: node {node}");
    let _ = std::fs::write(format!("{root}/var/log/kubelet-standin-node.json"), format!("{node}\n"));
    if std::env::var_os("KUBELET_STANDIN_PARSE_ONLY").is_some() {
        return Ok(());
    }
    serve_healthz(&config)
}

/// The Node object the kubelet would register: its name, labels, taints and provider id.
fn registered_node(root: &str, flags: &Parsed, config: &Json) -> Result<String, String> {
    let name = match flags.last("hostname-override") {
        Some(h) if !h.trim().is_empty() => h.trim().to_lowercase(),
        _ => std::fs::read_to_string(format!("{root}/proc/sys/kernel/hostname"))
            .unwrap_or_default()
            .trim()
            .to_lowercase(),
    };
    let mut labels = flags.labels.clone();
    labels.insert("kubernetes.io/hostname".into(), name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("kubernetes.io/arch".into(), "amd64".into());
    let mut taints = Vec::new();
    if let Some(Json::List(items)) = config.get("registerWithTaints") {
        for t in items {
            let field = |k: &str| t.get(k).and_then(Json::as_str).unwrap_or("").to_owned();
            taints.push(Taint {
                key: field("key"),
                value: field("value"),
                effect: field("effect"),
            });
        }
    }
    let register = !matches!(config.get("registerNode"), Some(Json::Bool(false)))
        && config.get("registerNode").and_then(Json::as_str) != Some("false");
    let provider = config.get("providerID").and_then(Json::as_str).unwrap_or("").to_owned();
    let node_ip = node_ips(flags.last("node-ip").unwrap_or(""), flags.last("cloud-provider").unwrap_or(""))?;
    let labels_json: Vec<String> = labels.iter().map(|(k, v)| format!("{}:{}", quote(k), quote(v))).collect();
    let taints_json: Vec<String> = taints
        .iter()
        .map(|t| format!("{{\"key\":{},\"value\":{},\"effect\":{}}}", quote(&t.key), quote(&t.value), quote(&t.effect)))
        .collect();
    Ok(format!(
        "{{\"register\":{register},\"name\":{},\"labels\":{{{}}},\"taints\":[{}],\"providerID\":{},\"nodeIP\":{}}}",
        quote(&name),
        labels_json.join(","),
        taints_json.join(","),
        quote(&provider),
        quote(&node_ip)
    ))
}

/// `--node-ip` as the kubelet reads it (cmd/kubelet/app/server.go, component-helpers
/// node/util/ips.go `ParseNodeIPArgument`): each comma-separated part trimmed; a part that is not
/// an address is ignored with an info line (the kubelet then registers the default route's
/// address); more than two, or two of one family, or a pair with an unspecified one, is an error;
/// a pair only with no cloud provider or `external`.
fn node_ips(value: &str, cloud: &str) -> Result<String, String> {
    if value.is_empty() {
        return Ok(String::new());
    }
    let mut ips = Vec::new();
    for part in value.split(',') {
        match part.trim().parse::<std::net::IpAddr>() {
            Ok(ip) => ips.push(ip),
            Err(_) => println!("I Could not parse some node IP(s), ignoring them IPs=[{}]", part.trim()),
        }
    }
    let pair_ok = cloud.is_empty() || cloud == "external";
    let bad = match ips.as_slice() {
        [a, b] if a.is_ipv6() == b.is_ipv6() => Some("must contain either a single IP or a dual-stack pair of IPs"),
        [_, _] if !pair_ok => Some("dual-stack not supported in this configuration"),
        [a, b] if a.is_unspecified() || b.is_unspecified() => Some("dual-stack node IP cannot include '0.0.0.0' or '::'"),
        l if l.len() > 2 => Some("must contain either a single IP or a dual-stack pair of IPs"),
        _ => None,
    };
    if let Some(why) = bad {
        return Err(format!("bad --node-ip {value:?}: {why}"));
    }
    Ok(ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(","))
}

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// /healthz where the configuration says: `healthzBindAddress:healthzPort` (127.0.0.1:10248 by
/// default; port 0: none, the process just runs).
fn serve_healthz(config: &Json) -> Result<(), String> {
    let port = match config.get("healthzPort") {
        Some(Json::Num(n)) | Some(Json::Str(n)) => n.parse::<u16>().map_err(|_| format!("healthzPort {n:?}"))?,
        None | Some(Json::Null) => 10248,
        Some(other) => return Err(format!("healthzPort: {other:?}")),
    };
    let host = config
        .get("healthzBindAddress")
        .and_then(Json::as_str)
        .unwrap_or("127.0.0.1")
        .to_owned();
    if port == 0 {
        println!("kubelet stand-in: started; /healthz off (healthzPort 0)");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    let listener = std::net::TcpListener::bind((host.as_str(), port)).map_err(|e| format!("listen {host}:{port}: {e}"))?;
    println!("kubelet stand-in: started; serving /healthz on {host}:{port}");
    for conn in listener.incoming().flatten() {
        let mut conn = conn;
        let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(2)));
        let mut buf = [0u8; 1024];
        let _ = conn.read(&mut buf);
        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    }
    Ok(())
}

/// `filepath.WalkDir`: lexical order, into subdirectories, files ending `.conf` kept.
fn walk(dir: &str, out: &mut Vec<String>) -> Result<(), String> {
    let mut entries: Vec<(String, bool)> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.file_type().is_ok_and(|t| t.is_dir())))
        .collect();
    entries.sort();
    for (name, is_dir) in entries {
        let path = format!("{dir}/{name}");
        if is_dir {
            walk(&path, out)?;
        } else if name.ends_with(".conf") && name.len() > ".conf".len() {
            out.push(path);
        }
    }
    Ok(())
}

/// A KubeletConfiguration file (YAML or JSON): apiVersion and kind are required and must be the
/// kubelet's.
fn load_config(root: &str, file: &str) -> Result<Json, String> {
    let text = std::fs::read_to_string(format!("{root}{file}")).map_err(|e| format!("failed to read {file}: {e}"))?;
    let value = if text.trim_start().starts_with('{') {
        json::parse(&text)?
    } else {
        yaml::parse(&text)?
    };
    match (value.get("apiVersion").and_then(Json::as_str), value.get("kind").and_then(Json::as_str)) {
        (Some("kubelet.config.k8s.io/v1beta1"), Some("KubeletConfiguration")) => {
            check_types(&value, "").map_err(|e| format!("{file}: failed to decode: {e}"))?;
            Ok(value)
        }
        (None, _) | (_, None) => Err(format!("{file}: Object 'Kind' is missing or 'apiVersion' is missing")),
        (Some(a), Some(k)) => Err(format!("{file}: no kind {k:?} is registered for version {a:?}")),
    }
}

/// The KubeletConfiguration fields whose values Go's JSON decoder checks by type, with their Go
/// types (docs/reference/kubeletconfig-fields.tsv, kept equal by tests/kubelet_registration.rs).
/// A value of another JSON type is refused as encoding/json refuses it; null is every type's zero.
const FIELD_TYPES: &[(&str, &str)] = &[
    ("apiVersion", "string"),
    ("kind", "string"),
    ("enableServer", "*bool"),
    ("staticPodPath", "string"),
    ("podLogsDir", "string"),
    ("syncFrequency", "metav1.Duration"),
    ("fileCheckFrequency", "metav1.Duration"),
    ("httpCheckFrequency", "metav1.Duration"),
    ("staticPodURL", "string"),
    ("address", "string"),
    ("port", "int32"),
    ("readOnlyPort", "int32"),
    ("tlsCertFile", "string"),
    ("tlsPrivateKeyFile", "string"),
    ("tlsCipherSuites", "[]string"),
    ("tlsMinVersion", "string"),
    ("rotateCertificates", "bool"),
    ("serverTLSBootstrap", "bool"),
    ("authentication.x509.clientCAFile", "string"),
    ("authentication.webhook.enabled", "*bool"),
    ("authentication.webhook.cacheTTL", "metav1.Duration"),
    ("authentication.anonymous.enabled", "*bool"),
    ("authorization.webhook.cacheAuthorizedTTL", "metav1.Duration"),
    ("authorization.webhook.cacheUnauthorizedTTL", "metav1.Duration"),
    ("registryPullQPS", "*int32"),
    ("registryBurst", "int32"),
    ("preloadedImagesVerificationAllowlist", "[]string"),
    ("eventRecordQPS", "*int32"),
    ("eventBurst", "int32"),
    ("enableDebuggingHandlers", "*bool"),
    ("enableContentionProfiling", "bool"),
    ("healthzPort", "*int32"),
    ("healthzBindAddress", "string"),
    ("oomScoreAdj", "*int32"),
    ("clusterDomain", "string"),
    ("clusterDNS", "[]string"),
    ("streamingConnectionIdleTimeout", "metav1.Duration"),
    ("nodeStatusUpdateFrequency", "metav1.Duration"),
    ("nodeStatusReportFrequency", "metav1.Duration"),
    ("nodeLeaseDurationSeconds", "int32"),
    ("imageMinimumGCAge", "metav1.Duration"),
    ("imageMaximumGCAge", "metav1.Duration"),
    ("imageGCHighThresholdPercent", "*int32"),
    ("imageGCLowThresholdPercent", "*int32"),
    ("volumeStatsAggPeriod", "metav1.Duration"),
    ("kubeletCgroups", "string"),
    ("systemCgroups", "string"),
    ("cgroupRoot", "string"),
    ("cgroupsPerQOS", "*bool"),
    ("cgroupDriver", "string"),
    ("cpuManagerPolicy", "string"),
    ("singleProcessOOMKill", "*bool"),
    ("cpuManagerPolicyOptions", "map[string]string"),
    ("cpuManagerReconcilePeriod", "metav1.Duration"),
    ("memoryManagerPolicy", "string"),
    ("topologyManagerPolicy", "string"),
    ("topologyManagerScope", "string"),
    ("topologyManagerPolicyOptions", "map[string]string"),
    ("qosReserved", "map[string]string"),
    ("runtimeRequestTimeout", "metav1.Duration"),
    ("hairpinMode", "string"),
    ("maxPods", "int32"),
    ("podCIDR", "string"),
    ("podPidsLimit", "*int64"),
    ("resolvConf", "*string"),
    ("runOnce", "bool"),
    ("cpuCFSQuota", "*bool"),
    ("cpuCFSQuotaPeriod", "*metav1.Duration"),
    ("nodeStatusMaxImages", "*int32"),
    ("maxOpenFiles", "int64"),
    ("contentType", "string"),
    ("kubeAPIQPS", "*int32"),
    ("kubeAPIBurst", "int32"),
    ("serializeImagePulls", "*bool"),
    ("maxParallelImagePulls", "*int32"),
    ("evictionHard", "map[string]string"),
    ("evictionSoft", "map[string]string"),
    ("evictionSoftGracePeriod", "map[string]string"),
    ("evictionPressureTransitionPeriod", "metav1.Duration"),
    ("evictionMaxPodGracePeriod", "int32"),
    ("evictionMinimumReclaim", "map[string]string"),
    ("mergeDefaultEvictionSettings", "*bool"),
    ("podsPerCore", "int32"),
    ("enableControllerAttachDetach", "*bool"),
    ("protectKernelDefaults", "bool"),
    ("makeIPTablesUtilChains", "*bool"),
    ("iptablesMasqueradeBit", "*int32"),
    ("iptablesDropBit", "*int32"),
    ("failSwapOn", "*bool"),
    ("memorySwap.swapBehavior", "string"),
    ("containerLogMaxSize", "string"),
    ("containerLogMaxFiles", "*int32"),
    ("containerLogMaxWorkers", "*int32"),
    ("containerLogMonitorInterval", "*metav1.Duration"),
    ("systemReserved", "map[string]string"),
    ("kubeReserved", "map[string]string"),
    ("reservedSystemCPUs", "string"),
    ("showHiddenMetricsForVersion", "string"),
    ("systemReservedCgroup", "string"),
    ("kubeReservedCgroup", "string"),
    ("enforceNodeAllocatable", "[]string"),
    ("allowedUnsafeSysctls", "[]string"),
    ("volumePluginDir", "string"),
    ("providerID", "string"),
    ("kernelMemcgNotification", "bool"),
    ("enableSystemLogHandler", "*bool"),
    ("enableSystemLogQuery", "*bool"),
    ("shutdownGracePeriod", "metav1.Duration"),
    ("shutdownGracePeriodCriticalPods", "metav1.Duration"),
    ("shutdownGracePeriodByPodPriority.priority", "int32"),
    ("shutdownGracePeriodByPodPriority.shutdownGracePeriodSeconds", "int64"),
    ("crashLoopBackOff.maxContainerRestartPeriod", "*metav1.Duration"),
    ("reservedMemory.numaNode", "int32"),
    ("enableProfilingHandler", "*bool"),
    ("enableDebugFlagsHandler", "*bool"),
    ("seccompDefault", "*bool"),
    ("memoryThrottlingFactor", "*float64"),
    ("registerNode", "*bool"),
    ("localStorageCapacityIsolation", "*bool"),
    ("containerRuntimeEndpoint", "string"),
    ("imageServiceEndpoint", "string"),
    ("failCgroupV1", "*bool"),
    ("userNamespaces.idsPerPod", "*int64"),
    ("defaultPodSysctls", "map[string]string"),
];

fn check_types(v: &Json, prefix: &str) -> Result<(), String> {
    let Json::Map(m) = v else { return Ok(()) };
    for (k, value) in m {
        let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        if let Some((_, ty)) = FIELD_TYPES.iter().find(|(f, _)| *f == path) {
            if !fits(value, ty.trim_start_matches('*')) {
                return Err(format!(
                    "json: cannot unmarshal {} into Go struct field KubeletConfiguration.{path} of type {}",
                    json_kind(value),
                    ty.trim_start_matches('*')
                ));
            }
        }
        check_types(value, &path)?;
    }
    Ok(())
}

fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "bool",
        Json::Num(_) => "number",
        Json::Str(_) => "string",
        Json::List(_) => "array",
        Json::Map(_) => "object",
    }
}

fn fits(v: &Json, ty: &str) -> bool {
    match (v, ty) {
        (Json::Null, _) => true,
        (Json::Num(n), "int32") => n.parse::<i32>().is_ok(),
        (Json::Num(n), "int64") => n.parse::<i64>().is_ok(),
        (Json::Num(_), "float64") => true,
        (Json::Bool(_), "bool") => true,
        (Json::Str(_), "string") => true,
        (Json::Str(d), "metav1.Duration") => go_duration(d),
        (Json::List(l), "[]string") => l.iter().all(|x| matches!(x, Json::Str(_))),
        (Json::Map(m), "map[string]string") => m.iter().all(|(_, x)| matches!(x, Json::Str(_))),
        _ => false,
    }
}

/// time.ParseDuration's grammar: "0", or [-+]? then one or more number+unit.
fn go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
            .iter()
            .filter(|u| rest.starts_with(**u))
            .max_by_key(|u| u.len());
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

/// RFC 7386: maps merge key by key, null deletes, anything else replaces.
fn merge_patch(target: Json, patch: Json) -> Json {
    match (target, patch) {
        (Json::Map(mut t), Json::Map(p)) => {
            for (k, v) in p {
                let old = t.iter().position(|(tk, _)| *tk == k).map(|i| t.remove(i).1);
                if v == Json::Null {
                    continue;
                }
                t.push((k, merge_patch(old.unwrap_or(Json::Null), v)));
            }
            Json::Map(t)
        }
        (_, Json::Map(p)) => merge_patch(Json::Map(Vec::new()), Json::Map(p)),
        (_, p) => p,
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    List(Vec<Json>),
    Map(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) | Json::Num(s) => Some(s),
            _ => None,
        }
    }
}

/// Plain scalars as YAML 1.1 (and sigs.k8s.io/yaml) reads them.
fn scalar(raw: &str) -> Result<Json, String> {
    let t = raw.trim();
    if let Some(body) = t.strip_prefix('"') {
        let end = body.rfind('"').ok_or_else(|| format!("unterminated string {t}"))?;
        return Ok(Json::Str(body[..end].replace("\\\"", "\"").replace("\\\\", "\\")));
    }
    if let Some(body) = t.strip_prefix('\'') {
        let end = body.rfind('\'').ok_or_else(|| format!("unterminated string {t}"))?;
        return Ok(Json::Str(body[..end].replace("''", "'")));
    }
    let t = match t.find(" #") {
        Some(i) => t[..i].trim_end(),
        None => t,
    };
    Ok(match t {
        "" | "~" | "null" | "Null" | "NULL" => Json::Null,
        "true" | "True" | "TRUE" => Json::Bool(true),
        "false" | "False" | "FALSE" => Json::Bool(false),
        "[]" => Json::List(Vec::new()),
        "{}" => Json::Map(Vec::new()),
        _ if t.starts_with('[') && t.ends_with(']') => Json::List(
            t[1..t.len() - 1]
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(scalar)
                .collect::<Result<_, _>>()?,
        ),
        _ if t.parse::<f64>().is_ok() => Json::Num(t.to_owned()),
        _ => Json::Str(t.to_owned()),
    })
}

mod yaml {
    //! Block YAML: mappings, sequences (of scalars or mappings), scalars, comments.
    use super::{Json, scalar};

    struct Line {
        indent: usize,
        text: String,
    }

    pub fn parse(text: &str) -> Result<Json, String> {
        let lines: Vec<Line> = text
            .lines()
            .filter(|l| {
                let t = l.trim();
                !t.is_empty() && !t.starts_with('#') && t != "---"
            })
            .map(|l| Line {
                indent: l.len() - l.trim_start().len(),
                text: l.trim().to_owned(),
            })
            .collect();
        if lines.iter().any(|l| l.text.contains('\t')) {
            return Err("tabs are not allowed in YAML indentation".into());
        }
        let mut pos = 0;
        let v = block(&lines, &mut pos, 0)?;
        if pos != lines.len() {
            return Err(format!("yaml: line {}: did not find expected key", pos + 1));
        }
        Ok(v)
    }

    fn block(lines: &[Line], pos: &mut usize, indent: usize) -> Result<Json, String> {
        match lines.get(*pos) {
            Some(l) if l.text.starts_with("- ") || l.text == "-" => seq(lines, pos, l.indent),
            Some(l) if l.indent >= indent => map(lines, pos, l.indent),
            _ => Ok(Json::Null),
        }
    }

    fn map(lines: &[Line], pos: &mut usize, indent: usize) -> Result<Json, String> {
        let mut out: Vec<(String, Json)> = Vec::new();
        while let Some(l) = lines.get(*pos) {
            if l.indent < indent || l.text.starts_with("- ") {
                break;
            }
            if l.indent > indent {
                return Err(format!("yaml: mapping values are not allowed here: {:?}", l.text));
            }
            let (k, rest) = split_key(&l.text)?;
            *pos += 1;
            let value = if rest.is_empty() {
                match lines.get(*pos) {
                    Some(n) if n.indent > indent => block(lines, pos, n.indent)?,
                    Some(n) if n.indent == indent && n.text.starts_with("- ") => seq(lines, pos, indent)?,
                    _ => Json::Null,
                }
            } else {
                scalar(rest)?
            };
            if out.iter().any(|(o, _)| *o == k) {
                return Err(format!("yaml: duplicate key {k:?}"));
            }
            out.push((k, value));
        }
        Ok(Json::Map(out))
    }

    fn seq(lines: &[Line], pos: &mut usize, indent: usize) -> Result<Json, String> {
        let mut out = Vec::new();
        while let Some(l) = lines.get(*pos) {
            if l.indent != indent || !(l.text.starts_with("- ") || l.text == "-") {
                break;
            }
            let item = l.text[1..].trim_start().to_owned();
            let item_indent = indent + (l.text.len() - item.len());
            if item.is_empty() {
                *pos += 1;
                out.push(block(lines, pos, indent + 1)?);
            } else if split_key(&item).is_ok() && !item.starts_with(['"', '\'']) {
                // A mapping item: its first key on the dash's line, the rest below it.
                let mut sub: Vec<Line> = vec![Line {
                    indent: item_indent,
                    text: item,
                }];
                *pos += 1;
                while let Some(n) = lines.get(*pos) {
                    if n.indent < item_indent {
                        break;
                    }
                    sub.push(Line {
                        indent: n.indent,
                        text: n.text.clone(),
                    });
                    *pos += 1;
                }
                let mut p = 0;
                out.push(map(&sub, &mut p, item_indent)?);
            } else {
                *pos += 1;
                out.push(scalar(&item)?);
            }
        }
        Ok(Json::List(out))
    }

    fn split_key(text: &str) -> Result<(String, &str), String> {
        let (k, rest) = if let Some(body) = text.strip_prefix('"') {
            let end = body.find('"').ok_or("unterminated key")?;
            (body[..end].to_owned(), body[end + 1..].strip_prefix(':').ok_or("expected ':'")?)
        } else {
            let i = text
                .find(": ")
                .or_else(|| text.ends_with(':').then(|| text.len() - 1))
                .ok_or_else(|| format!("yaml: could not find expected ':' in {text:?}"))?;
            (text[..i].trim().to_owned(), &text[i + 1..])
        };
        Ok((k, rest.trim()))
    }
}

mod json {
    //! RFC 8259, enough for configuration files.
    use super::Json;

    pub fn parse(text: &str) -> Result<Json, String> {
        let b = text.as_bytes();
        let mut i = 0;
        let v = value(b, &mut i)?;
        ws(b, &mut i);
        if i != b.len() {
            return Err(format!("invalid character after top-level value at offset {i}"));
        }
        Ok(v)
    }

    fn ws(b: &[u8], i: &mut usize) {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    }

    fn value(b: &[u8], i: &mut usize) -> Result<Json, String> {
        ws(b, i);
        match b.get(*i) {
            Some(b'{') => {
                *i += 1;
                let mut m: Vec<(String, Json)> = Vec::new();
                loop {
                    ws(b, i);
                    if b.get(*i) == Some(&b'}') {
                        *i += 1;
                        return Ok(Json::Map(m));
                    }
                    let Json::Str(k) = string(b, i)? else { unreachable!() };
                    ws(b, i);
                    if b.get(*i) != Some(&b':') {
                        return Err(format!("expected ':' at offset {i}"));
                    }
                    *i += 1;
                    let v = value(b, i)?;
                    m.retain(|(o, _)| *o != k);
                    m.push((k, v));
                    ws(b, i);
                    match b.get(*i) {
                        Some(b',') => *i += 1,
                        Some(b'}') => {}
                        _ => return Err(format!("expected ',' or '}}' at offset {i}")),
                    }
                }
            }
            Some(b'[') => {
                *i += 1;
                let mut l = Vec::new();
                loop {
                    ws(b, i);
                    if b.get(*i) == Some(&b']') {
                        *i += 1;
                        return Ok(Json::List(l));
                    }
                    l.push(value(b, i)?);
                    ws(b, i);
                    match b.get(*i) {
                        Some(b',') => *i += 1,
                        Some(b']') => {}
                        _ => return Err(format!("expected ',' or ']' at offset {i}")),
                    }
                }
            }
            Some(b'"') => string(b, i),
            Some(_) => {
                let start = *i;
                while *i < b.len() && !b",}] \t\r\n".contains(&b[*i]) {
                    *i += 1;
                }
                let word = std::str::from_utf8(&b[start..*i]).map_err(|e| e.to_string())?;
                match word {
                    "null" => Ok(Json::Null),
                    "true" => Ok(Json::Bool(true)),
                    "false" => Ok(Json::Bool(false)),
                    n if n.parse::<f64>().is_ok() => Ok(Json::Num(n.to_owned())),
                    other => Err(format!("invalid value {other:?}")),
                }
            }
            None => Err("unexpected end of JSON input".into()),
        }
    }

    fn string(b: &[u8], i: &mut usize) -> Result<Json, String> {
        if b.get(*i) != Some(&b'"') {
            return Err(format!("expected a string at offset {i}"));
        }
        *i += 1;
        let mut out = Vec::new();
        while let Some(&c) = b.get(*i) {
            *i += 1;
            match c {
                b'"' => return String::from_utf8(out).map(Json::Str).map_err(|e| e.to_string()),
                b'\\' => {
                    let e = b.get(*i).copied().ok_or("bad escape")?;
                    *i += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        other => other,
                    });
                }
                c => out.push(c),
            }
        }
        Err("unterminated string".into())
    }
}
