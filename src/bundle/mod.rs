//! The assets bundle: format, layouts, fetching, and the all-or-nothing install.

pub mod fetch;
pub mod format;
pub mod install;
pub mod layout;

use base64::Engine as _;

/// The CA a kubeconfig carries: the first `certificate-authority-data`, base64-decoded. Workers
/// need it as `/etc/kubernetes/ca.crt` (the kubelet's x509 client CA), which Typhoon's kubelet unit
/// derives with grep and base64 at every start.
pub fn ca_from_kubeconfig(kubeconfig: &[u8]) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(kubeconfig).map_err(|_| "kubeconfig is not UTF-8".to_owned())?;
    let value = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("certificate-authority-data:"))
        .ok_or("kubeconfig has no certificate-authority-data")?;
    let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
    let pem = base64::engine::general_purpose::STANDARD
        .decode(value)
        .map_err(|e| format!("certificate-authority-data is not base64: {e}"))?;
    if !pem.starts_with(b"-----BEGIN CERTIFICATE-----") {
        return Err("certificate-authority-data does not hold a PEM certificate".into());
    }
    Ok(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_is_derived_from_the_kubeconfig() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
        let kc = format!(
            "apiVersion: v1\nclusters:\n- name: c\n  cluster:\n    server: https://x:6443\n    certificate-authority-data: {b64}\n"
        );
        assert_eq!(ca_from_kubeconfig(kc.as_bytes()).expect("ca"), pem.as_bytes());
        let quoted = kc.replace(&b64, &format!("\"{b64}\""));
        assert_eq!(ca_from_kubeconfig(quoted.as_bytes()).expect("ca"), pem.as_bytes());
        assert!(
            ca_from_kubeconfig(b"apiVersion: v1\n")
                .expect_err("none")
                .contains("no certificate-authority-data")
        );
        assert!(
            ca_from_kubeconfig(b"certificate-authority-data: !!!\n")
                .expect_err("bad")
                .contains("not base64")
        );
    }
}
