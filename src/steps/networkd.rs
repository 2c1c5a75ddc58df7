//! The `networkd` step: a `.network` file that keeps systemd-networkd off the CNI's interfaces
//! (Flatcar's catch-all `zz-default.network` matches every link, CNI devices included), and a
//! reload over D-Bus only when that file changed. The same interfaces as the `nm` step's.

use crate::config::input::NmPolicy;
use crate::host::HostError;
use crate::host::dbus;
use crate::plan::Step;
use crate::plan::{Action, Change, Effect, EffectError, FailureKind, StepPlan};
use crate::steps::context::Context;
use crate::steps::files;
use crate::steps::uplink;

/// networkd takes the first `.network` file, by name across its directories, that matches a link:
/// `05-` comes before the distributions' catch-alls (`zz-default.network`) and most admins' files.
pub(crate) const NETWORK: &str = "/etc/systemd/network/05-nodeward-cni.network";

/// The reload change's subject, and the name its owed marker goes by.
const RELOAD_SUBJECT: &str = "systemd-networkd";

/// Where systemd-networkd may be installed.
const BINARIES: [&str; 2] = [
    "/usr/lib/systemd/systemd-networkd",
    "/lib/systemd/systemd-networkd",
];

/// The `.network` file's text.
pub(crate) fn render(names: &[String]) -> String {
    format!(
        "# Written by nodeward; changes are overwritten. Keeps systemd-networkd off the interfaces\n\
         # the CNI creates and configures itself.\n[Match]\nName={}\n\n[Link]\nUnmanaged=yes\n",
        names.join(" ")
    )
}

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Networkd);
    let cfg = &ctx.settings.networkd;
    if cfg.manage == NmPolicy::Never {
        out.notes.push("networkd.manage = \"never\": left alone".into());
        return Ok(out);
    }
    if !files::any_exists(ctx, &BINARIES) {
        out.notes
            .push("systemd-networkd is not installed: skipped".into());
        return Ok(out);
    }
    let write = if cfg.unmanaged.is_empty() {
        out.notes
            .push("no interfaces to keep unmanaged (networkd.unmanaged is empty)".into());
        files::plan_remove_ours(ctx, NETWORK)?
    } else {
        files::plan_dropin(ctx, NETWORK, render(&cfg.unmanaged))?
    };
    // A list that would take the uplink is not written; one already in place (baked into the
    // image) is reported, and left as it is: nothing new is done to the node.
    if write.is_some() && !ctx.kernel_live {
        // An image has no live links: the list is checked on the node, at every run.
        out.notes.push(
            "networkd.unmanaged: not checked against the default route's link here (no live network under --root); the node checks it at every run".into(),
        );
    }
    // Checked on the node whether or not the file changes: a list baked into the image is in
    // place before the first run.
    if !cfg.unmanaged.is_empty() && ctx.kernel_live {
        let links = uplink::default_route_links(&ctx.kernel_path("proc"));
        if let Some((pattern, link)) =
            uplink::takes_the_uplink(cfg.unmanaged.iter().map(String::as_str), &links)
        {
            out.fail(
                FailureKind::Permanent,
                format!(
                    "networkd.unmanaged: {pattern:?} matches {link}, the link of the default route: \
                     systemd-networkd would drop it and the node would go off the network; {}",
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
    out.notes.extend(files::with_reload(
        ctx,
        write.into_iter().collect(),
        RELOAD_SUBJECT,
        Action::ReloadNetworkd,
        ReloadNetworkd,
        &mut out.changes,
    ));
    Ok(out)
}

/// Asks systemd-networkd to reload (nothing when it is not running: it reads the file at start).
#[derive(Debug)]
struct ReloadNetworkd;

/// systemd-networkd runs but did not reload.
#[derive(Debug, thiserror::Error)]
#[error("D-Bus: systemd-networkd reload: {0}")]
pub(crate) struct ReloadFailed(#[from] zbus::Error);

impl Effect for ReloadNetworkd {
    fn apply(&self, _: &Change) -> Result<(), EffectError> {
        match dbus::reload_networkd() {
            Ok(dbus::Reloaded::NotRunning) => {
                tracing::info!("systemd-networkd is not running; it reads the file when it starts");
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(Box::new(ReloadFailed(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cni::{Cni, interface_names};

    #[test]
    fn golden_network_file() {
        assert_eq!(
            render(&interface_names(Cni::Any)),
            "# Written by nodeward; changes are overwritten. Keeps systemd-networkd off the interfaces\n\
             # the CNI creates and configures itself.\n[Match]\n\
             Name=cali* tunl* vxlan.calico vxlan-v6.calico wireguard.cali wg-v6.cali cilium_* lxc* \
             flannel* cni0 veth*\n\n[Link]\nUnmanaged=yes\n"
        );
        assert_eq!(
            render(&interface_names(Cni::Cilium)),
            "# Written by nodeward; changes are overwritten. Keeps systemd-networkd off the interfaces\n\
             # the CNI creates and configures itself.\n[Match]\nName=cilium_* lxc*\n\n[Link]\nUnmanaged=yes\n"
        );
    }

    #[test]
    fn a_list_that_matches_the_default_routes_link_is_refused_and_nothing_written() {
        let mut f = crate::steps::context::fixture::Fixture::new();
        let bin = f.host.path().join("usr/lib/systemd/systemd-networkd");
        std::fs::create_dir_all(bin.parent().expect("parent")).expect("mkdir");
        std::fs::write(&bin, "").expect("write");
        f.kernel_file(
            "proc/net/route",
            "Iface\tDestination\tGateway\nens3\t00000000\t0202000A\n",
            0o444,
        );
        f.settings.networkd.unmanaged = vec!["cali*".into(), "en*".into()];
        let plan = plan(&f.context()).expect("plan");
        assert!(plan.changes.is_empty(), "{:?}", plan.changes);
        let err = plan.error.expect("refused");
        assert!(
            err.contains("\"en*\" matches ens3, the link of the default route"),
            "{err}"
        );
        // Control: a list that spares the uplink is written.
        f.settings.networkd.unmanaged = vec!["cali*".into(), "veth*".into()];
        let plan = super::plan(&f.context()).expect("plan");
        assert_eq!(plan.error, None);
        assert!(!plan.changes.is_empty());
    }

    #[test]
    fn planned_where_networkd_is_installed_and_only_once() {
        let f = crate::steps::context::fixture::Fixture::new();
        let ctx = f.context();
        let before = plan(&ctx).expect("plan");
        assert!(before.changes.is_empty());
        assert_eq!(
            before.notes,
            vec!["systemd-networkd is not installed: skipped".to_owned()]
        );
        let bin = f.host.path().join("usr/lib/systemd/systemd-networkd");
        std::fs::create_dir_all(bin.parent().expect("parent")).expect("mkdir");
        std::fs::write(&bin, "").expect("write");
        let after = plan(&ctx).expect("plan");
        let subjects: Vec<&str> = after.changes.iter().map(|c| c.subject.as_str()).collect();
        assert_eq!(subjects, vec![NETWORK, RELOAD_SUBJECT]);
    }
}
