//! The `nm` step: a NetworkManager drop-in that keeps it off the CNI's interfaces, and a reload
//! over D-Bus only when that file changed. (Seen in the field: written after NetworkManager
//! started, the file did nothing until a restart, on first boot only.)

use crate::config::input::NmPolicy;
use crate::config::types::AbsPath;
use crate::host::HostError;
use crate::plan::{Action, Change, StepPlan};
use crate::steps::{Context, Step, files};

pub const CONF: &str = "/etc/NetworkManager/conf.d/nodeward-cni.conf";
/// The name earlier versions used (when only Calico was known); removed when found.
pub const LEGACY_CONF: &str = "/etc/NetworkManager/conf.d/nodeward-calico.conf";

/// The reload change's subject, and the name its owed marker goes by.
const RELOAD_SUBJECT: &str = "NetworkManager";

/// Where NetworkManager's daemon may be installed.
const BINARIES: [&str; 2] = ["/usr/sbin/NetworkManager", "/usr/bin/NetworkManager"];

/// The drop-in's text.
pub fn render(unmanaged: &[String]) -> String {
    format!(
        "# Written by nodeward; changes are overwritten. Keeps NetworkManager off the interfaces\n\
         # the CNI creates and configures itself.\n[keyfile]\nunmanaged-devices={}\n",
        unmanaged.join(";")
    )
}

pub fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Nm);
    let cfg = &ctx.settings.networkmanager;
    if cfg.manage == NmPolicy::Never {
        out.notes
            .push("networkmanager.manage = \"never\": left alone".into());
        return Ok(out);
    }
    let installed = BINARIES.iter().any(|b| {
        b.parse::<AbsPath>()
            .ok()
            .and_then(|p| ctx.root.resolve(&p).ok())
            .is_some_and(|p| p.exists())
    });
    if !installed {
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
    // A reload that failed after the file was written is still owed, though the file is right.
    let owed = crate::plan::owed::is_owed(ctx.root, RELOAD_SUBJECT);
    if write.is_none() && legacy.is_none() && !owed {
        return Ok(out);
    }
    out.changes.extend(legacy);
    out.changes.extend(write);
    if ctx.kernel_live {
        out.changes.push(Change {
            subject: RELOAD_SUBJECT.into(),
            action: Action::ReloadNetworkManager,
            target: ctx.root.dir().to_path_buf(),
            batch: None,
        });
    } else {
        out.notes
            .push("NetworkManager not reloaded (--root without --kernel live)".into());
    }
    Ok(out)
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
