//! A KubeletConfiguration file checked as the kubelet's loader checks it before it starts: its
//! `apiVersion` and `kind`, and every scalar field's value against the Go type the kubelet's source
//! gives it (`docs/reference/kubeletconfig-fields.tsv`, compiled in). The kubelet decodes YAML by
//! turning it into JSON (sigs.k8s.io/yaml, YAML 1.1 scalars), then encoding/json refuses a value
//! of another type: `healthzPort: abc`, `healthzPort: "10248"`, `clusterDomain: 42`,
//! `shutdownGracePeriod: 45`. `integration/kubelet-parity` holds the same rules against the real
//! kubelet. Unknown fields pass, as the kubelet lets them pass (a warning, then lenient decoding).

use yaml_rust2::{Yaml, YamlLoader};

/// Field (dotted JSON path) → Go type, as the kubelet's source declares it.
const FIELDS: &str = include_str!("../../docs/reference/kubeletconfig-fields.tsv");

/// Why the kubelet would refuse a KubeletConfiguration file: its own words where it has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct KubeletWouldRefuse(String);

/// Why the kubelet would refuse the file, in the kubelet's words where it has them.
pub(crate) fn check(text: &str) -> Result<(), KubeletWouldRefuse> {
    refusal(text).map_err(KubeletWouldRefuse)
}

fn refusal(text: &str) -> Result<(), String> {
    let docs = YamlLoader::load_from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let Some(doc) = docs.into_iter().next() else {
        return Err("Object 'Kind' is missing or 'apiVersion' is missing".into());
    };
    let field = |k: &str| match &doc {
        Yaml::Hash(h) => h
            .get(&Yaml::String(k.into()))
            .and_then(Yaml::as_str)
            .map(str::to_owned),
        _ => None,
    };
    match (field("apiVersion"), field("kind")) {
        (Some(a), Some(k)) if a == "kubelet.config.k8s.io/v1beta1" && k == "KubeletConfiguration" => {}
        (Some(a), Some(k)) => return Err(format!("no kind {k:?} is registered for version {a:?}")),
        _ => return Err("Object 'Kind' is missing or 'apiVersion' is missing".into()),
    }
    check_types(&doc, "")
}

fn go_type(path: &str) -> Option<&'static str> {
    FIELDS
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let mut cols = l.split('\t');
            (cols.next()? == path).then(|| cols.next())?
        })
        .map(|t| t.trim_start_matches('*'))
}

fn check_types(v: &Yaml, prefix: &str) -> Result<(), String> {
    let Yaml::Hash(h) = v else { return Ok(()) };
    for (k, value) in h {
        let Some(k) = k.as_str() else { continue };
        let path = if prefix.is_empty() {
            k.to_owned()
        } else {
            format!("{prefix}.{k}")
        };
        if let Some(ty) = go_type(&path) {
            if !fits(value, ty) {
                return Err(format!(
                    "json: cannot unmarshal {} into Go struct field KubeletConfiguration.{path} of type {ty}",
                    kind(value)
                ));
            }
        }
        check_types(value, &path)?;
    }
    Ok(())
}

fn kind(v: &Yaml) -> &'static str {
    match v {
        Yaml::Null => "null",
        Yaml::Boolean(_) => "bool",
        Yaml::Integer(_) | Yaml::Real(_) => "number",
        Yaml::String(s) if yaml11_bool(s).is_some() => "bool",
        Yaml::String(_) => "string",
        Yaml::Array(_) => "array",
        Yaml::Hash(_) => "object",
        _ => "value",
    }
}

/// YAML 1.1's booleans (go-yaml v2, which sigs.k8s.io/yaml uses), which YAML 1.2 reads as strings.
fn yaml11_bool(s: &str) -> Option<bool> {
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some(true),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

fn fits(v: &Yaml, ty: &str) -> bool {
    match (v, ty) {
        (Yaml::Null, _) => true,
        (Yaml::Integer(n), "int32") => i32::try_from(*n).is_ok(),
        (Yaml::Integer(_), "int64" | "float64") | (Yaml::Real(_), "float64") => true,
        (Yaml::Boolean(_), "bool") => true,
        (Yaml::String(s), "bool") => yaml11_bool(s).is_some(),
        (Yaml::String(s), "string") => yaml11_bool(s).is_none(),
        (Yaml::String(s), "metav1.Duration") => go_duration(s),
        (Yaml::Array(a), "[]string") => a.iter().all(|x| matches!(x, Yaml::String(_))),
        (Yaml::Hash(m), "map[string]string") => m.values().all(|x| matches!(x, Yaml::String(_))),
        // Structures, enums by name and lists of structures: not checked here.
        (_, t) => !matches!(
            t,
            "int32"
                | "int64"
                | "float64"
                | "bool"
                | "string"
                | "metav1.Duration"
                | "[]string"
                | "map[string]string"
        ),
    }
}

/// time.ParseDuration's grammar: "0", or an optional sign and one or more number+unit.
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
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
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

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    /// The cases `integration/kubelet-parity` saw the real kubelet v1.36.1 refuse and accept.
    #[test]
    fn refuses_what_the_real_kubelet_refuses() {
        for (body, why) in [
            (
                "healthzPort: abc\n",
                "KubeletConfiguration.healthzPort of type int32",
            ),
            ("healthzPort: \"10248\"\n", "cannot unmarshal string"),
            ("clusterDomain: 42\n", "of type string"),
            ("rotateCertificates: sure\n", "of type bool"),
            ("shutdownGracePeriod: 45\n", "of type metav1.Duration"),
            ("imageMinimumGCAge: 0\n", "cannot unmarshal number"),
            ("shutdownGracePeriod: \"45 seconds\"\n", "of type metav1.Duration"),
            (
                "authentication:\n  anonymous:\n    enabled: nope\n",
                "authentication.anonymous.enabled",
            ),
        ] {
            let e = check(&format!("{HEAD}{body}")).expect_err(body);
            assert!(e.to_string().contains(why), "{body}: {e}");
        }
        assert!(
            check("kind: KubeletConfiguration\n")
                .expect_err("no apiVersion")
                .to_string()
                .contains("missing")
        );
        assert!(
            check("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n")
                .expect_err("kind")
                .to_string()
                .contains("no kind")
        );
        assert!(check("{ not: [ yaml").is_err());
    }

    #[test]
    fn accepts_what_the_real_kubelet_accepts() {
        for body in [
            "healthzBindAddress: 127.0.0.1\nhealthzPort: 10248\n",
            "shutdownGracePeriod: 1h2m3.5s\nsyncFrequency: 1m\nimageMinimumGCAge: \"0\"\n",
            "noSuchField: 1\n",
            // YAML 1.1's booleans, as go-yaml v2 (under sigs.k8s.io/yaml) reads them: never refused.
            "rotateCertificates: yes\nclusterDNS:\n  - 10.3.0.10\n",
            "authentication:\n  anonymous:\n    enabled: false\n",
            "",
        ] {
            assert_eq!(check(&format!("{HEAD}{body}")), Ok(()), "{body}");
        }
    }
}
