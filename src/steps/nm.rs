//! The `nm` step: a NetworkManager drop-in that keeps it off the CNI's interfaces, and a reload
//! over D-Bus only when that file changed. (Seen in the field: written after NetworkManager
//! started, the file did nothing until a restart, on first boot only.)

use crate::config::input::NmPolicy;
use crate::host::HostError;
use crate::host::dbus;
use crate::plan::Step;
use crate::plan::{Action, Change, Effect, EffectError, FailureKind, StepPlan};
use crate::steps::context::Context;
use crate::steps::files;
use crate::steps::uplink;

pub(crate) const CONF: &str = "/etc/NetworkManager/conf.d/nodeward-cni.conf";
/// The name earlier versions used (when only Calico was known); removed when found.
pub(crate) const LEGACY_CONF: &str = "/etc/NetworkManager/conf.d/nodeward-calico.conf";

/// The reload change's subject, and the name its owed marker goes by.
const RELOAD_SUBJECT: &str = "NetworkManager";

/// Where NetworkManager's daemon may be installed.
const BINARIES: [&str; 2] = ["/usr/sbin/NetworkManager", "/usr/bin/NetworkManager"];

/// The drop-in's text.
pub(crate) fn render(unmanaged: &[String]) -> String {
    format!(
        "# Written by nodeward; changes are overwritten. Keeps NetworkManager off the interfaces\n\
         # the CNI creates and configures itself.\n[keyfile]\nunmanaged-devices={}\n",
        unmanaged.join(";")
    )
}

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Nm);
    let cfg = &ctx.settings.networkmanager;
    if cfg.manage == NmPolicy::Never {
        out.notes
            .push("networkmanager.manage = \"never\": left alone".into());
        return Ok(out);
    }
    if !files::any_exists(ctx, &BINARIES) {
        out.notes.push("NetworkManager is not installed: skipped".into());
        return Ok(out);
    }
    let legacy = files::plan_remove(ctx, LEGACY_CONF)?;
    let write = if cfg.unmanaged.is_empty() {
        out.notes
            .push("no interfaces to keep unmanaged (networkmanager.unmanaged is empty)".into());
        files::plan_remove(ctx, CONF)?
    } else {
        files::plan_dropin(ctx, CONF, render(&cfg.unmanaged))?
    };
    // A list that would take the uplink is not written; one already in place (baked into the
    // image) is reported, and left as it is: nothing new is done to the node.
    if write.is_some() && !ctx.kernel_live {
        // An image has no live links: the list is checked on the node, at every run.
        out.notes.push(
            "networkmanager.unmanaged: not checked against the default route's link here (no live network under --root); the node checks it at every run".into(),
        );
    }
    // Checked on the node whether or not the file changes: a list baked into the image is in
    // place before the first run.
    if !cfg.unmanaged.is_empty() && ctx.kernel_live {
        let links = uplink::default_route_links(&ctx.kernel_path("proc"));
        let globs = cfg.unmanaged.iter().filter_map(|s| uplink::nm_name_glob(s));
        if let Some((pattern, link)) = uplink::takes_the_uplink(globs, &links) {
            out.fail(
                FailureKind::Permanent,
                format!(
                    "networkmanager.unmanaged: {pattern:?} matches {link}, the link of the default route: \
                     NetworkManager would drop it and the node would go off the network; {}",
                    if write.is_some() {
                        "not written"
                    } else {
                        "the file in place has it: remove the pattern"
                    }
                ),
            );
            return Ok(out);
        }
    }
    // Removing the old file is a change too: NetworkManager must reread its configuration.
    let writes: Vec<Change> = legacy.into_iter().chain(write).collect();
    out.notes.extend(files::with_reload(
        ctx,
        writes,
        RELOAD_SUBJECT,
        Action::ReloadNetworkManager,
        ReloadNetworkManager,
        &mut out.changes,
    ));
    Ok(out)
}

/// Asks NetworkManager to reload its configuration over D-Bus (restarted through systemd when the
/// reload fails; nothing when it is not running: it reads the drop-in when it starts).
#[derive(Debug)]
struct ReloadNetworkManager;

/// NetworkManager could be neither reloaded nor restarted.
#[derive(Debug, thiserror::Error)]
#[error("D-Bus: {0}")]
pub(crate) struct ReloadFailed(#[from] dbus::ReloadError);

impl Effect for ReloadNetworkManager {
    fn apply(&self, _: &Change) -> Result<(), EffectError> {
        match dbus::reload_network_manager() {
            Ok(dbus::Reloaded::Reload) => Ok(()),
            Ok(dbus::Reloaded::Restarted { reason }) => {
                tracing::warn!(%reason, "NetworkManager Reload failed; restarted it through systemd instead");
                Ok(())
            }
            Ok(dbus::Reloaded::NotRunning) => {
                tracing::info!("NetworkManager is not running; it reads the drop-in when it starts");
                Ok(())
            }
            Err(e) => Err(Box::new(ReloadFailed(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_drop_in() {
        let specs = crate::config::cni::unmanaged(crate::config::cni::Cni::Calico);
        assert_eq!(
            render(&specs),
            "# Written by nodeward; changes are overwritten. Keeps NetworkManager off the interfaces\n\
             # the CNI creates and configures itself.\n[keyfile]\n\
             unmanaged-devices=interface-name:cali*;interface-name:tunl*;interface-name:vxlan.calico;\
             interface-name:vxlan-v6.calico;interface-name:wireguard.cali;interface-name:wg-v6.cali\n"
        );
    }
}
