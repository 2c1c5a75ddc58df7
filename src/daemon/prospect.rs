//! Whether systemd will run the daemon's unit: what `nodeward wait --unit` asks while no live
//! daemon has written its state. A node where nodeward is masked, stopped or failed is then told
//! so at once, not at the end of the wait (`nodeward-converged.service` waits 15 minutes, and
//! every unit ordered after it with it). `Requisite=` does not cover it: systemd ran the unit's
//! wait with `nodeward.service` masked (the VM's `lxc` scenario, whose host runs no nodeward:
//! 240 s of its boot).

use crate::host::dbus::{self, UnitStatus};

/// What systemd says the unit's future is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prospect {
    /// Running, starting, restarting, or a job queued that starts it: worth waiting for.
    Coming,
    /// Nothing will run it: why, in systemd's words.
    Never(String),
    /// systemd cannot be asked (no system bus, no answer): the wait goes on as without `--unit`.
    Unknown(String),
}

/// Asks systemd about `unit` and judges the answer.
pub fn ask(unit: &str) -> Prospect {
    match dbus::unit_status(unit) {
        Ok(Some(status)) => judge(unit, &status),
        Ok(None) => Prospect::Unknown("no system bus".into()),
        Err(e) => Prospect::Unknown(e.to_string()),
    }
}

/// The judgment, from systemd's states alone (`systemctl show` reads the same properties).
fn judge(unit: &str, s: &UnitStatus) -> Prospect {
    match s.load.as_str() {
        "masked" => return Prospect::Never(format!("{unit} is masked")),
        "not-found" => return Prospect::Never(format!("{unit} is not installed (not-found)")),
        "loaded" => {}
        // error, bad-setting: systemd refuses to start it until its file is fixed.
        other => return Prospect::Never(format!("{unit} cannot be loaded ({other})")),
    }
    // A queued job (start, restart) is coming whatever the state says now.
    if s.job {
        return Prospect::Coming;
    }
    match s.active.as_str() {
        // `activating` includes `auto-restart`: Restart= brings it back.
        "active" | "activating" | "reloading" | "refreshing" => Prospect::Coming,
        // inactive, failed, deactivating (a stop with no restart queued), maintenance.
        other => Prospect::Never(format!(
            "{unit} is {other} ({}) and no job is queued to start it",
            s.sub
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(load: &str, active: &str, sub: &str, job: bool) -> UnitStatus {
        UnitStatus {
            load: load.into(),
            active: active.into(),
            sub: sub.into(),
            job,
        }
    }

    const U: &str = "nodeward.service";

    #[test]
    fn a_unit_that_runs_starts_or_restarts_is_coming() {
        for (active, sub) in [
            ("active", "running"),
            ("activating", "start"),
            ("activating", "auto-restart"),
            ("reloading", "reload"),
        ] {
            assert_eq!(
                judge(U, &status("loaded", active, sub, false)),
                Prospect::Coming,
                "{active}/{sub}"
            );
        }
        // A stopped or failed unit with a start or restart queued.
        for active in ["inactive", "failed", "deactivating"] {
            assert_eq!(
                judge(U, &status("loaded", active, "dead", true)),
                Prospect::Coming,
                "{active}"
            );
        }
    }

    #[test]
    fn a_unit_nothing_will_run_is_said_so_in_systemds_words() {
        let cases = [
            (
                status("masked", "inactive", "dead", false),
                "nodeward.service is masked",
            ),
            (
                status("masked", "inactive", "dead", true),
                "nodeward.service is masked",
            ),
            (
                status("not-found", "inactive", "dead", false),
                "nodeward.service is not installed (not-found)",
            ),
            (
                status("bad-setting", "inactive", "dead", false),
                "nodeward.service cannot be loaded (bad-setting)",
            ),
            (
                status("loaded", "failed", "failed", false),
                "nodeward.service is failed (failed) and no job is queued to start it",
            ),
            (
                status("loaded", "inactive", "dead", false),
                "nodeward.service is inactive (dead) and no job is queued to start it",
            ),
            (
                status("loaded", "deactivating", "stop-sigterm", false),
                "nodeward.service is deactivating (stop-sigterm) and no job is queued to start it",
            ),
        ];
        for (s, said) in cases {
            assert_eq!(judge(U, &s), Prospect::Never(said.into()), "{s:?}");
        }
    }
}
