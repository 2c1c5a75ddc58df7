//! A kubeconfig read as the kubelet and kubectl read it: YAML, which includes JSON (yaml-rust2, a
//! maintained YAML 1.2 parser). Only what nodeward needs: the cluster CA and the inline
//! certificates.

use yaml_rust2::{Yaml, YamlLoader};

/// Where a kubeconfig keeps its cluster CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClusterCa {
    /// `certificate-authority-data`: base64 of the PEM, as written.
    Data(String),
    /// `certificate-authority`: a file on the host.
    File(String),
}

/// The parts of a kubeconfig nodeward reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Kubeconfig {
    /// The CA of the cluster the current context names (else the first cluster's), if any.
    pub(crate) ca: Option<ClusterCa>,
    /// Every inline certificate: (`certificate-authority-data` or `client-certificate-data`,
    /// base64 text).
    pub(crate) inline: Vec<(&'static str, String)>,
}

/// Why a kubeconfig could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KubeconfigError {
    #[error("not YAML or JSON: {0}")]
    Syntax(String),
    #[error("not a kubeconfig (no mapping at the top)")]
    NotAMapping,
}

/// Parses a kubeconfig (YAML or JSON).
pub(crate) fn parse(text: &str) -> Result<Kubeconfig, KubeconfigError> {
    let docs = YamlLoader::load_from_str(text).map_err(|e| KubeconfigError::Syntax(e.to_string()))?;
    let doc = docs.into_iter().next().ok_or(KubeconfigError::NotAMapping)?;
    if doc.as_hash().is_none() {
        return Err(KubeconfigError::NotAMapping);
    }
    let str_of = |y: &Yaml| y.as_str().map(str::to_owned);
    let clusters = doc["clusters"].as_vec().cloned().unwrap_or_default();
    // The current context's cluster, as the kubelet's client picks it; else the first.
    let current = doc["current-context"].as_str().and_then(|ctx| {
        doc["contexts"]
            .as_vec()?
            .iter()
            .find(|c| c["name"].as_str() == Some(ctx))
            .and_then(|c| str_of(&c["context"]["cluster"]))
    });
    let chosen = current
        .and_then(|name| clusters.iter().find(|c| c["name"].as_str() == Some(&name)))
        .or_else(|| clusters.first());
    let ca = chosen.and_then(|c| {
        let cluster = &c["cluster"];
        match (
            str_of(&cluster["certificate-authority-data"]),
            str_of(&cluster["certificate-authority"]),
        ) {
            (Some(data), _) if !data.trim().is_empty() => Some(ClusterCa::Data(data.trim().to_owned())),
            (_, Some(file)) if !file.trim().is_empty() => Some(ClusterCa::File(file.trim().to_owned())),
            _ => None,
        }
    });
    let mut inline = Vec::new();
    for c in &clusters {
        if let Some(d) = str_of(&c["cluster"]["certificate-authority-data"]) {
            inline.push(("certificate-authority-data", d.trim().to_owned()));
        }
    }
    for u in doc["users"].as_vec().into_iter().flatten() {
        if let Some(d) = str_of(&u["user"]["client-certificate-data"]) {
            inline.push(("client-certificate-data", d.trim().to_owned()));
        }
    }
    Ok(Kubeconfig { ca, inline })
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster:\n    server: https://x\n    \
                        certificate-authority: /etc/other.crt\n- name: local\n  cluster:\n    server: https://api:6443\n    \
                        certificate-authority-data: \"QUJD\"\ncontexts:\n- name: kubelet\n  context:\n    cluster: local\n    \
                        user: kubelet\ncurrent-context: kubelet\nusers:\n- name: kubelet\n  user:\n    client-certificate-data: REVG\n";

    #[test]
    fn yaml_follows_the_current_context() {
        let k = parse(YAML).expect("parse");
        assert_eq!(k.ca, Some(ClusterCa::Data("QUJD".into())));
        assert_eq!(
            k.inline,
            [
                ("certificate-authority-data", "QUJD".to_owned()),
                ("client-certificate-data", "REVG".to_owned())
            ]
        );
    }

    #[test]
    fn json_is_a_kubeconfig_too() {
        let json = r#"{"apiVersion":"v1","kind":"Config","clusters":[{"name":"local","cluster":{"server":"https://api:6443","certificate-authority-data":"QUJD"}}],"users":[]}"#;
        assert_eq!(
            parse(json).expect("json").ca,
            Some(ClusterCa::Data("QUJD".into()))
        );
        let file =
            r#"{"clusters":[{"name":"c","cluster":{"certificate-authority":"/etc/kubernetes/ca.crt"}}]}"#;
        assert_eq!(
            parse(file).expect("json").ca,
            Some(ClusterCa::File("/etc/kubernetes/ca.crt".into()))
        );
    }

    #[test]
    fn broken_and_empty_documents_are_errors_or_empty() {
        assert!(matches!(parse("clusters: [\n"), Err(KubeconfigError::Syntax(_))));
        assert_eq!(parse("- a\n"), Err(KubeconfigError::NotAMapping));
        assert_eq!(parse("kind: Config\n").expect("no clusters").ca, None);
    }
}
