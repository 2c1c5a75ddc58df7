//! The `hostfiles` step: host files derived from the configuration or from files others deliver.
//!
//! - `/etc/kubernetes/ca.crt`, the kubelet's x509 client CA (`clientCAFile`), derived from
//!   `/etc/kubernetes/kubeconfig` whoever wrote that (Ignition on every Typhoon node, the worker
//!   bundle, an admin), on both roles, and re-derived whenever the kubeconfig changes.
//! - logind's `InhibitDelayMaxSec`, so graceful node shutdown gets the kubelet's whole
//!   `shutdownGracePeriod` (logind's default cuts it to 5 s).
//! - flannel's `50-flannel.link` (`MACAddressPolicy=none`) for the profiles that may run flannel.
//! - containerd's `config.toml`, when `containerd.manage` is set (Typhoon's file).

use crate::types::Invalid;
use base64::Engine as _;

use crate::config::cni;
use crate::host::HostError;
use crate::plan::Step;
use crate::plan::{Action, Change, StepPlan};
use crate::steps::context::Context;
use crate::steps::files;
use crate::types::{AbsPath, Mode};

use crate::containerd;
use crate::host::kubeconfig::ClusterCa;

pub(crate) const KUBECONFIG: &str = "/etc/kubernetes/kubeconfig";
pub(crate) const CA_CRT: &str = "/etc/kubernetes/ca.crt";
pub(crate) const LOGIND_DROPIN: &str = "/etc/systemd/logind.conf.d/nodeward-inhibitors.conf";
const LOGIND_UNIT: &str = "systemd-logind.service";
const CONTAINERD_UNIT: &str = "containerd.service";
pub(crate) const FLANNEL_LINK: &str = "/etc/systemd/network/50-flannel.link";

/// Where a kubeconfig keeps its cluster CA.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KubeconfigCa {
    /// `certificate-authority-data`: the PEM, decoded.
    Data(Vec<u8>),
    /// `certificate-authority: PATH`: a file on the host.
    File(String),
}

/// The CA of the kubeconfig's cluster (the current context's, else the first), read as YAML (JSON
/// included). Typhoon's kubelet unit does the same with grep, awk and base64 at every start.
fn kubeconfig_ca(kubeconfig: &[u8]) -> Result<KubeconfigCa, String> {
    let text = std::str::from_utf8(kubeconfig).map_err(|_| "not UTF-8".to_owned())?;
    let parsed = crate::host::kubeconfig::parse(text).map_err(|e| e.to_string())?;
    match parsed.ca {
        Some(ClusterCa::Data(value)) => {
            let pem = base64::engine::general_purpose::STANDARD
                .decode(value.as_bytes())
                .map_err(|e| format!("certificate-authority-data is not base64: {e}"))?;
            if !pem.starts_with(b"-----BEGIN CERTIFICATE-----") {
                return Err("certificate-authority-data does not hold a PEM certificate".into());
            }
            Ok(KubeconfigCa::Data(pem))
        }
        Some(ClusterCa::File(path)) => Ok(KubeconfigCa::File(path)),
        None => Err("has neither certificate-authority-data nor certificate-authority".into()),
    }
}

/// logind's drop-in: shutdown may be delayed as long as the kubelet's grace period.
pub(crate) fn render_logind(grace_seconds: u64) -> String {
    format!(
        "# Written by nodeward; changes are overwritten. The kubelet delays shutdown by its\n\
         # shutdownGracePeriod (kubelet.stop_timeout_seconds); logind allows only 5 s by default.\n\
         [Login]\nInhibitDelayMaxSec={grace_seconds}s\n"
    )
}

/// flannel's link file: its VXLAN device keeps the MAC flannel gives it.
pub(crate) fn render_flannel_link() -> String {
    "# Written by nodeward; changes are overwritten. flannel sets its VXLAN device's MAC itself;\n\
     # systemd-udev's MACAddressPolicy=persistent would replace it.\n\
     [Match]\nOriginalName=flannel*\n\n[Link]\nMACAddressPolicy=none\n"
        .to_owned()
}

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Hostfiles);
    match plan_ca(ctx)? {
        Ok(change) => out.changes.extend(change),
        Err(note) => out.notes.push(note),
    }
    let grace = ctx.settings.kubelet.tuning.stop_grace.as_secs();
    let write = files::plan_dropin(ctx, LOGIND_DROPIN, render_logind(grace))?;
    reload_unit_after(ctx, write, LOGIND_UNIT, &mut out);
    plan_containerd(ctx, &mut out)?;
    plan_mirrors(ctx, &mut out)?;
    let link = if cni::flannel_link(ctx.settings.cni) {
        files::plan_dropin(ctx, FLANNEL_LINK, render_flannel_link())?
    } else {
        files::plan_remove_ours(ctx, FLANNEL_LINK)?
    };
    out.changes.extend(link);
    Ok(out)
}

/// The file's write (if any) and, after it, the unit's reload through systemd.
fn reload_unit_after(ctx: &Context<'_>, write: Option<Change>, unit: &str, out: &mut StepPlan) {
    let writes = write.into_iter().collect();
    let note = files::with_reload(
        ctx,
        writes,
        unit,
        Action::ReloadUnit,
        files::ReloadUnit,
        &mut out.changes,
    );
    out.notes.extend(note);
}

/// containerd's configuration, when nodeward manages it: written, then containerd restarted (only
/// if it runs; a stopped one reads the file when it starts) before the kubelet step runs.
fn plan_containerd(ctx: &Context<'_>, out: &mut StepPlan) -> Result<(), HostError> {
    let c = &ctx.settings.containerd;
    if !c.manage {
        return Ok(());
    }
    let sandbox_image = c.sandbox_image.to_string();
    let facts = crate::containerd::Facts {
        selinux: crate::host::selinux::kernel_enabled(ctx.root),
        format: crate::kubelet::settings::rules::containerd_format(
            ctx.settings.kubelet.effective_version().0,
        ),
        sandbox_image: &sandbox_image,
    };
    let write = files::plan(
        ctx,
        files::Wanted {
            path: &c.config_file,
            contents: containerd::render(facts),
            mode: Mode::new(0o644),
        },
    )?;
    reload_unit_after(ctx, write, CONTAINERD_UNIT, out);
    Ok(())
}

/// containerd's `hosts.toml` for each mirrored registry (read at every pull: no restart), and
/// nodeward's own for a registry no longer mirrored removed. A `hosts.toml` someone else wrote is
/// left alone and said; so is a containerd configuration whose `config_path` does not name the
/// directory, since containerd then reads none of them.
fn plan_mirrors(ctx: &Context<'_>, out: &mut StepPlan) -> Result<(), HostError> {
    let c = &ctx.settings.containerd;
    let wanted = containerd::mirrors::by_registry(&c.mirrors);
    for (registry, mirrors) in &wanted {
        let path = format!("{}/{registry}/hosts.toml", containerd::CERTS_DIR);
        let abs: AbsPath = parse(&path)?;
        match crate::host::read::read(ctx.root, &abs, crate::host::read::Kind::Config) {
            Ok(text) if !text.starts_with(containerd::mirrors::MARKER.as_bytes()) => {
                out.notes.push(format!(
                    "{path}: not written by nodeward, left as it is: containerd.mirrors for {registry} not applied (remove the file to let nodeward write it)"
                ));
                continue;
            }
            Ok(_) => {}
            Err(e) if e.is_missing() => {}
            // One registry's unreadable file (a FIFO, a directory) leaves the others written.
            Err(e) => {
                out.notes.push(format!(
                    "{path}: {e}: containerd.mirrors for {registry} not applied"
                ));
                continue;
            }
        }
        let write = files::plan(
            ctx,
            files::Wanted {
                path: &abs,
                contents: containerd::mirrors::render_hosts(registry, mirrors),
                mode: Mode::new(0o644),
            },
        )?;
        out.changes.extend(write);
    }
    // nodeward's files for registries no longer mirrored (a bounded look: a node has a few).
    let dir: AbsPath = parse(containerd::CERTS_DIR)?;
    let stale = files::names_in(ctx, &dir, 1024)
        .into_iter()
        .filter(|name| !wanted.contains_key(name.as_str()) && !name.starts_with('.'));
    for name in stale {
        let path = format!("{}/{name}/hosts.toml", containerd::CERTS_DIR);
        if path.parse::<AbsPath>().is_ok() {
            out.changes.extend(files::plan_remove_ours(ctx, &path)?);
        }
    }
    if !wanted.is_empty() && !c.manage {
        let read = crate::host::read::read_text(ctx.root, &c.config_file, crate::host::read::Kind::Config);
        let named = read.ok().and_then(|t| containerd::config_path(&t)).flatten();
        if named.as_deref() != Some(containerd::CERTS_DIR) {
            out.notes.push(format!(
                "{}: config_path is {}, not {}: containerd reads none of the mirrors' hosts.toml (set it, or containerd.manage = true)",
                c.config_file,
                named.map_or("unset".to_owned(), |p| format!("{p:?}")),
                containerd::CERTS_DIR
            ));
        }
    }
    Ok(())
}

/// The change that makes `ca.crt` the kubeconfig's CA; `Err(note)` when there is nothing to derive.
fn plan_ca(ctx: &Context<'_>) -> Result<Result<Option<Change>, String>, HostError> {
    let kubeconfig: AbsPath = parse(KUBECONFIG)?;
    let source = ctx.root.lexical(&kubeconfig);
    let bytes = match crate::host::read::read(ctx.root, &kubeconfig, crate::host::read::Kind::Kubeconfig) {
        Ok(b) => b,
        Err(e) if e.is_missing() => {
            return Ok(Err(format!(
                "{CA_CRT}: not derived, {KUBECONFIG} does not exist (yet)"
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let invalid = |message: String| HostError::Io {
        path: source.clone(),
        op: "derive ca.crt from",
        source: std::io::Error::other(message),
    };
    let pem = match kubeconfig_ca(&bytes).map_err(invalid)? {
        KubeconfigCa::Data(pem) => pem,
        KubeconfigCa::File(path) if path == CA_CRT => {
            return Ok(Err(format!(
                "{CA_CRT}: the kubeconfig refers to it by path; left as provided"
            )));
        }
        KubeconfigCa::File(path) => {
            let abs: AbsPath = path
                .parse()
                .map_err(|e: Invalid| invalid(format!("certificate-authority: {e}")))?;
            crate::host::read::read(ctx.root, &abs, crate::host::read::Kind::Certificate)
                .map_err(|e| invalid(format!("certificate-authority: {e}")))?
        }
    };
    let contents = String::from_utf8(pem).map_err(|_| invalid("the CA is not UTF-8 PEM".into()))?;
    let target: AbsPath = parse(CA_CRT)?;
    files::plan(
        ctx,
        files::Wanted {
            path: &target,
            contents,
            mode: Mode::new(0o644),
        },
    )
    .map(Ok)
}

fn parse(path: &str) -> Result<AbsPath, HostError> {
    path.parse().map_err(HostError::invalid(path, "parse path"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_from_data_and_from_a_path() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
        let kc = format!(
            "apiVersion: v1\nclusters:\n- name: c\n  cluster:\n    server: https://x:6443\n    certificate-authority-data: {b64}\n"
        );
        assert_eq!(kubeconfig_ca(kc.as_bytes()), Ok(KubeconfigCa::Data(pem.into())));
        let quoted = kc.replace(&b64, &format!("\"{b64}\""));
        assert_eq!(
            kubeconfig_ca(quoted.as_bytes()),
            Ok(KubeconfigCa::Data(pem.into()))
        );
        // JSON is YAML: kubectl and the kubelet read it, and so does nodeward.
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"Config","clusters":[{{"name":"c","cluster":{{"server":"https://api:6443","certificate-authority-data":"{b64}"}}}}]}}"#
        );
        assert_eq!(kubeconfig_ca(json.as_bytes()), Ok(KubeconfigCa::Data(pem.into())));
        assert_eq!(
            kubeconfig_ca(b"clusters:\n- cluster:\n    certificate-authority: /etc/pki/ca.pem\n"),
            Ok(KubeconfigCa::File("/etc/pki/ca.pem".into()))
        );
        assert!(
            kubeconfig_ca(b"apiVersion: v1\n")
                .unwrap_err()
                .contains("neither")
        );
        assert!(
            kubeconfig_ca(b"clusters:\n- cluster:\n    certificate-authority-data: \"!!!\"\n")
                .unwrap_err()
                .contains("not base64")
        );
        let not_pem = base64::engine::general_purpose::STANDARD.encode("hello");
        assert!(
            kubeconfig_ca(
                format!("clusters:\n- cluster:\n    certificate-authority-data: {not_pem}\n").as_bytes()
            )
            .unwrap_err()
            .contains("PEM")
        );
    }
}
