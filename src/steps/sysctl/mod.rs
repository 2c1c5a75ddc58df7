//! The `sysctl` step: kernel values per policy, and the sysctl.d drop-in that makes exact values
//! survive reboots and apply to interfaces created later.
//!
//! Each key stands alone, as systemd-sysctl applies them: one that cannot be satisfied (read-only
//! and below its minimum, absent with no module to provide it) is a failed item that says which
//! key, what it is, what was wanted and the likely cause, and every other key is still applied.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::config::cni::advisory_in_container;
use crate::config::modules::provider_of;
use crate::config::sysctl::{SysctlKey, SysctlPolicy, SysctlValue};

use crate::host::HostError;
use crate::host::procsys::{self, Failure};
use crate::plan::Step;
use crate::plan::{Action, Change, Effect, EffectError, FailureKind, KernelWhy, StepPlan};
use crate::steps::context::Context;
use crate::steps::files;

mod decide;

pub(crate) use decide::{Access, Decision, Scope, decide, scope};

/// Sorts after the distros' own files (Fedora and Debian ship 50-*.conf), so ours are the last word
/// when systemd-sysctl re-applies them as interfaces appear.
pub(crate) const DROPIN: &str = "/etc/sysctl.d/90-nodeward.conf";

/// The drop-in's text: exact keys only. Ranges are not persisted, because a fixed value would
/// lower a larger host value at the next boot.
pub(crate) fn render_dropin(sysctls: &[(SysctlKey, SysctlPolicy)]) -> String {
    let mut out = String::from(
        "# Written by nodeward; changes are overwritten. Exact values it manages, so that interfaces\n\
         # created later (systemd-sysctl runs per interface) agree. Raise-only limits are applied at\n\
         # runtime and deliberately not listed here.\n",
    );
    for (key, policy) in sysctls {
        if let SysctlPolicy::Exact(v) = policy {
            out.push_str(&format!("{key} = {v}\n"));
        }
    }
    out
}

/// What the keys came to, for the plan's summary and its failed items.
#[derive(Default)]
struct Findings {
    /// Keys that cannot be satisfied: `(key, why)`.
    problems: Vec<(String, String)>,
    /// Inside a container: keys of its own namespaces, and keys left to the host.
    own: usize,
    hosts: usize,
}

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Sysctl);
    // Inside a container the drop-in lists only its own namespaces' keys: systemd-sysctl applies it
    // at the container's boot, and must not retune the host either.
    let persisted: Vec<(SysctlKey, SysctlPolicy)> = ctx
        .settings
        .sysctls
        .iter()
        .filter(|(k, _)| ctx.container.is_none() || scope(k) == Scope::Namespaced)
        .cloned()
        .collect();
    out.changes
        .extend(files::plan_dropin(ctx, DROPIN, render_dropin(&persisted))?);
    if !ctx.kernel_live {
        out.notes
            .push("kernel values not read or written (--root without --kernel live)".into());
        return Ok(out);
    }
    let proc_sys = ctx.kernel_path("proc/sys");
    let mut found = Findings::default();
    let explicit: BTreeSet<&SysctlKey> = ctx
        .settings
        .sysctls
        .iter()
        .map(|(k, _)| k)
        .filter(|k| !k.is_glob())
        .collect();
    for (key, policy) in &ctx.settings.sysctls {
        if ctx.container.is_some() && !key.is_glob() {
            let writable = procsys::mode_writable(&proc_sys.join(key.relative_path())).unwrap_or(false);
            match access(ctx, key, policy, writable) {
                Access::Host { .. } => found.hosts += 1,
                _ => found.own += 1,
            }
        }
        if !key.is_glob() {
            plan_key(ctx, &proc_sys, key, policy, false, &mut out, &mut found);
            continue;
        }
        // A glob names each existing key it matches that has no entry of its own (sysctl.d(5)).
        let matches =
            procsys::expand_glob(&proc_sys, key.segments()).map_err(HostError::io(&proc_sys, "list"))?;
        for m in matches.into_iter().map(SysctlKey::from_segments) {
            if !explicit.contains(&m) {
                plan_key(ctx, &proc_sys, &m, policy, true, &mut out, &mut found);
            }
        }
    }
    if let Some(container) = &ctx.container {
        out.notes.push(format!(
            "inside this {} container: {} key(s) of its own namespaces set here, {} the host's (never written from inside)",
            container.kind.name(),
            found.own,
            found.hosts
        ));
    } else if let Some(change) = plan_hashsize(ctx)? {
        out.changes.push(change);
    }
    // A key read-only below its minimum, or absent with no module to provide it: the host or the
    // configuration must change. The other keys are applied all the same.
    for (key, why) in found.problems {
        out.fail_item(key, FailureKind::Permanent, why);
    }
    Ok(out)
}

/// Plans one concrete key: a change, a note, or a problem (a failed item).
fn plan_key(
    ctx: &Context<'_>,
    proc_sys: &Path,
    key: &SysctlKey,
    policy: &SysctlPolicy,
    from_glob: bool,
    out: &mut StepPlan,
    found: &mut Findings,
) {
    let path = proc_sys.join(key.relative_path());
    let mut problem = |why: String| found.problems.push((key.to_string(), why));
    match observe(&path) {
        Ok((current, writable)) => match decide(key, policy, &current, access(ctx, key, policy, writable)) {
            Decision::Satisfied => {}
            Decision::SatisfiedReadOnly(note) | Decision::LeftToHost(note) => out.notes.push(note),
            Decision::Change { to, why } => out.changes.push(set_value(
                key.to_string(),
                path,
                Some(current.to_string()),
                to,
                why,
            )),
            Decision::Unsatisfiable(msg) => problem(msg),
        },
        // Matched by a glob a moment ago and gone now (an interface removed): nothing to do.
        Err(Failure::Absent) if from_glob => {}
        Err(Failure::Absent) => match provider_of(key) {
            // Inside a container nothing loads it: the host's kernel must have it already.
            Some(m) if ctx.container.is_some() => problem(format!(
                "{key}: not present; module {m} provides it and is not loaded in the host's kernel"
            )),
            // Loaded by the modules step, which runs first: the key will exist then.
            Some(m) if ctx.settings.modules.load.iter().any(|l| l.as_str() == m) => out.changes.push(
                set_value(key.to_string(), path, None, first_value(policy), KernelWhy::Set),
            ),
            Some(m) => problem(format!(
                "{key}: not present; module {m} provides it but is not in modules.load"
            )),
            None => problem(format!("{key}: not present in this kernel")),
        },
        Err(f) => problem(format!("{key}: cannot read {}: {}", path.display(), f.hint())),
    }
}

/// Who writes `key` here. Inside a container, counted for the plan's summary.
fn access<'a>(ctx: &'a Context<'_>, key: &SysctlKey, policy: &SysctlPolicy, writable: bool) -> Access<'a> {
    match &ctx.container {
        Some(c) if !writable || scope(key) == Scope::HostWide => Access::Host {
            container: c.kind.name(),
            advisory: advisory_in_container(&key.to_string(), policy),
        },
        _ if writable => Access::Writable,
        _ => Access::ReadOnly,
    }
}

/// The change that writes `to` into the kernel file `target`.
fn set_value(subject: String, target: PathBuf, from: Option<String>, to: String, why: KernelWhy) -> Change {
    let effect = WriteKernelValue { to: to.clone() };
    Change::new(subject, target, Action::SetKernelValue { from, to, why }, effect)
}

/// Writes a value into `/proc/sys` (or a module parameter) and reads it back.
#[derive(Debug)]
struct WriteKernelValue {
    to: String,
}

impl Effect for WriteKernelValue {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        let failed = |source: std::io::Error| HostError::KernelValue {
            key: change.subject.clone(),
            hint: Failure::classify(&source).hint(),
            source,
        };
        procsys::write(&change.target, &self.to).map_err(failed)?;
        // Some keys clamp or ignore writes: make sure the kernel kept what was written.
        let now = procsys::read(&change.target).map_err(failed)?;
        if SysctlValue::new(&now) != SysctlValue::new(&self.to) {
            return Err(Box::new(HostError::KernelKept {
                key: change.subject.clone(),
                wrote: self.to.clone(),
                kept: now,
            }));
        }
        Ok(())
    }
}

/// The value a policy sets on a key that does not exist yet.
fn first_value(policy: &SysctlPolicy) -> String {
    match policy {
        SysctlPolicy::Exact(v) => v.to_string(),
        SysctlPolicy::Range { min: Some(lo), .. } => lo.to_string(),
        SysctlPolicy::Range { max: Some(hi), .. } => hi.to_string(),
        SysctlPolicy::Range { .. } => String::new(),
    }
}

fn observe(path: &Path) -> Result<(SysctlValue, bool), Failure> {
    let value = procsys::read(path).map_err(|e| Failure::classify(&e))?;
    let writable = procsys::mode_writable(path).map_err(|e| Failure::classify(&e))?;
    Ok((SysctlValue::new(&value), writable))
}

const HASHSIZE: &str = "sys/module/nf_conntrack/parameters/hashsize";

/// The conntrack hash table follows the table size as kube-proxy sizes it (max / 4), but only
/// upwards and only from the initial network namespace: elsewhere the kernel refuses the write
/// (EOPNOTSUPP). A read-only `nf_conntrack_max` is how a non-initial namespace shows itself.
fn plan_hashsize(ctx: &Context<'_>) -> Result<Option<Change>, HostError> {
    const CONNTRACK_MAX: &str = "net.netfilter.nf_conntrack_max";
    let conntrack: SysctlKey = CONNTRACK_MAX
        .parse()
        .map_err(HostError::invalid(CONNTRACK_MAX, "parse key"))?;
    let Some(min) = ctx.settings.sysctls.iter().find_map(|(k, p)| match p {
        SysctlPolicy::Range { min: Some(lo), .. } if *k == conntrack => Some(*lo),
        _ => None,
    }) else {
        return Ok(None);
    };
    let max_path = ctx.kernel_path("proc/sys").join(conntrack.relative_path());
    if !procsys::mode_writable(&max_path).unwrap_or(false) {
        return Ok(None);
    }
    let path = ctx.kernel_path(HASHSIZE);
    let Ok(current) = procsys::read(&path).map(|v| SysctlValue::new(&v)) else {
        return Ok(None);
    };
    let wanted = min / 4;
    match current.as_u64() {
        Some(now) if now < wanted => Ok(Some(set_value(
            "nf_conntrack hashsize".into(),
            path,
            Some(current.to_string()),
            wanted.to_string(),
            KernelWhy::Raise,
        ))),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::decide::tests::{key, min, v};
    use super::*;

    #[test]
    fn dropin_lists_exact_keys_only() {
        let text = render_dropin(&[
            (
                key("net.ipv4.conf.eth0/100.rp_filter"),
                SysctlPolicy::Exact(v("1")),
            ),
            (key("net.netfilter.nf_conntrack_max"), min(131072)),
            (
                key("net.ipv4.ip_local_port_range"),
                SysctlPolicy::Exact(v("1024 65000")),
            ),
        ]);
        let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            [
                "net.ipv4.conf.eth0/100.rp_filter = 1",
                "net.ipv4.ip_local_port_range = 1024 65000"
            ]
        );
    }
}

/// The kernel rules on fixture trees: absent keys, read-only keys, the conntrack hash size.
#[cfg(test)]
mod kernel_tree {
    use super::*;
    use crate::config::sysctl::{SysctlKey, SysctlPolicy, SysctlValue};
    use crate::plan::Action;
    use crate::steps::context::fixture::Fixture;

    fn key(s: &str) -> SysctlKey {
        s.parse().expect("key")
    }

    fn with(f: &mut Fixture, keys: &[(&str, SysctlPolicy)], modules: &[&str]) {
        f.settings.sysctls = keys.iter().map(|(k, p)| (key(k), p.clone())).collect();
        f.settings.modules.load = modules.iter().map(|m| m.parse().expect("module")).collect();
    }

    fn min(n: u64) -> SysctlPolicy {
        SysctlPolicy::Range {
            min: Some(n),
            max: None,
        }
    }

    fn kernel_changes(plan: &StepPlan) -> Vec<(String, Option<String>, String)> {
        plan.changes
            .iter()
            .filter_map(|c| match &c.action {
                Action::SetKernelValue { from, to, .. } => {
                    Some((c.subject.clone(), from.clone(), to.clone()))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_absent_key_waits_for_the_module_that_provides_it() {
        let mut f = Fixture::new();
        with(
            &mut f,
            &[(
                "net.bridge.bridge-nf-call-iptables",
                SysctlPolicy::Exact(SysctlValue::new("1")),
            )],
            &["br_netfilter"],
        );
        let plan = plan(&f.context()).expect("plan");
        assert_eq!(plan.error, None);
        assert_eq!(
            kernel_changes(&plan),
            [("net.bridge.bridge-nf-call-iptables".into(), None, "1".into())]
        );
    }

    #[test]
    fn an_absent_key_whose_module_is_not_loaded_fails_alone() {
        let mut f = Fixture::new();
        f.kernel_file("proc/sys/net/ipv4/ip_forward", "0", 0o644);
        with(
            &mut f,
            &[
                ("net.ipv4.ip_forward", SysctlPolicy::Exact(SysctlValue::new("1"))),
                (
                    "net.bridge.bridge-nf-call-iptables",
                    SysctlPolicy::Exact(SysctlValue::new("1")),
                ),
                ("net.core.nonexistent", SysctlPolicy::Exact(SysctlValue::new("1"))),
            ],
            &[],
        );
        let plan = plan(&f.context()).expect("plan");
        assert_eq!(plan.error, None, "the step as a whole is planned");
        let failed: Vec<&str> = plan.failed.iter().map(|f| f.subject.as_str()).collect();
        assert_eq!(
            failed,
            ["net.bridge.bridge-nf-call-iptables", "net.core.nonexistent"]
        );
        let (err, kind) = plan.problem().expect("the step fails");
        assert_eq!(kind, FailureKind::Permanent);
        assert!(err.contains("net.bridge.bridge-nf-call-iptables: not present; module br_netfilter provides it but is not in modules.load"), "{err}");
        assert!(
            err.contains("net.core.nonexistent: not present in this kernel"),
            "{err}"
        );
        // Each key stands alone: ip_forward, satisfiable, is still changed.
        assert_eq!(
            kernel_changes(&plan),
            [("net.ipv4.ip_forward".into(), Some("0".into()), "1".into())]
        );
    }

    #[test]
    fn a_read_only_key_is_fine_when_it_already_meets_the_policy_and_an_error_when_not() {
        let mut f = Fixture::new();
        f.kernel_file("proc/sys/net/ipv4/ip_forward", "1", 0o444);
        f.kernel_file("proc/sys/net/netfilter/nf_conntrack_max", "65536", 0o444);
        with(
            &mut f,
            &[("net.ipv4.ip_forward", SysctlPolicy::Exact(SysctlValue::new("1")))],
            &[],
        );
        let ok = plan(&f.context()).expect("plan");
        assert_eq!(ok.error, None);
        assert!(
            ok.notes
                .iter()
                .any(|n| n.contains("net.ipv4.ip_forward: read-only")),
            "{:?}",
            ok.notes
        );
        with(&mut f, &[("net.netfilter.nf_conntrack_max", min(131_072))], &[]);
        let bad = plan(&f.context()).expect("plan");
        assert!(
            bad.problem()
                .is_some_and(|(e, _)| e.contains("nf_conntrack_max is read-only here")),
            "{:?}",
            bad.failed
        );
    }

    #[test]
    fn conntrack_hashsize_follows_the_table_upwards_only_in_the_initial_namespace() {
        let mut f = Fixture::new();
        f.kernel_file("proc/sys/net/netfilter/nf_conntrack_max", "262144", 0o644);
        f.kernel_file(HASHSIZE, "16384", 0o644);
        with(&mut f, &[("net.netfilter.nf_conntrack_max", min(262_144))], &[]);
        let plan_now = plan(&f.context()).expect("plan");
        assert_eq!(
            kernel_changes(&plan_now),
            [(
                "nf_conntrack hashsize".into(),
                Some("16384".into()),
                "65536".into()
            )]
        );
        // Already larger: never lowered.
        f.kernel_file(HASHSIZE, "131072", 0o644);
        assert!(kernel_changes(&plan(&f.context()).expect("plan")).is_empty());
        // A read-only table size is how a non-initial network namespace shows itself: no write.
        f.kernel_file(HASHSIZE, "16384", 0o644);
        f.kernel_file("proc/sys/net/netfilter/nf_conntrack_max", "262144", 0o444);
        assert!(kernel_changes(&plan(&f.context()).expect("plan")).is_empty());
    }

    #[test]
    fn a_glob_expands_against_the_tree_and_an_explicit_key_wins() {
        let mut f = Fixture::new();
        f.kernel_file("proc/sys/net/ipv4/conf/eth0/rp_filter", "1", 0o644);
        f.kernel_file("proc/sys/net/ipv4/conf/lxc0/rp_filter", "1", 0o644);
        with(
            &mut f,
            &[
                (
                    "net.ipv4.conf.*.rp_filter",
                    SysctlPolicy::Exact(SysctlValue::new("0")),
                ),
                (
                    "net.ipv4.conf.eth0.rp_filter",
                    SysctlPolicy::Exact(SysctlValue::new("1")),
                ),
            ],
            &[],
        );
        let plan = plan(&f.context()).expect("plan");
        assert_eq!(
            kernel_changes(&plan),
            [(
                "net.ipv4.conf.lxc0.rp_filter".into(),
                Some("1".into()),
                "0".into()
            )]
        );
    }

    /// A privileged LXC container: `/run/systemd/container` says so, the keys are the kernel's.
    fn in_lxc(f: &Fixture) {
        let marker = f.host.path().join("run/systemd/container");
        std::fs::create_dir_all(marker.parent().expect("parent")).expect("mkdir");
        std::fs::write(marker, "lxc\n").expect("write");
        f.kernel_file("proc/self/uid_map", "0 0 4294967295", 0o444);
    }

    fn exact(v: &str) -> SysctlPolicy {
        SysctlPolicy::Exact(SysctlValue::new(v))
    }

    fn dropin_text(f: &Fixture) -> String {
        std::fs::read_to_string(f.host.path().join(DROPIN.trim_start_matches('/'))).unwrap_or_default()
    }

    #[test]
    fn in_a_container_its_own_keys_are_set_and_the_hosts_never_written() {
        let mut f = Fixture::new();
        in_lxc(&f);
        f.kernel_file("proc/sys/net/ipv4/ip_forward", "0", 0o644);
        f.kernel_file("proc/sys/net/netfilter/nf_conntrack_max", "524288", 0o444);
        f.kernel_file(HASHSIZE, "16384", 0o644);
        // Writable from a privileged container, and still the host's: left alone.
        f.kernel_file("proc/sys/kernel/panic", "0", 0o644);
        f.kernel_file("proc/sys/vm/overcommit_memory", "1", 0o644);
        with(
            &mut f,
            &[
                ("kernel.panic", exact("10")),
                ("net.ipv4.ip_forward", exact("1")),
                ("net.netfilter.nf_conntrack_max", min(131_072)),
                ("vm.overcommit_memory", exact("1")),
            ],
            &[],
        );
        let plan = plan(&f.context()).expect("plan");
        assert_eq!(plan.error, None);
        assert_eq!(
            kernel_changes(&plan),
            [("net.ipv4.ip_forward".into(), Some("0".into()), "1".into())],
            "no kernel.panic, no conntrack hashsize"
        );
        let notes = plan.notes.join("\n");
        for want in [
            "kernel.panic: the host's, current 0, recommended = 10 (the node runs without it); \
             on the host: `sysctl -w kernel.panic=10`, and persist it in the host's /etc/sysctl.d/",
            "net.netfilter.nf_conntrack_max: the host's, 524288 ≥ 131072",
            "vm.overcommit_memory: the host's, 1 = 1",
            "inside this lxc container: 1 key(s) of its own namespaces set here, 3 the host's (never written from inside)",
        ] {
            assert!(notes.contains(want), "missing {want:?} in:\n{notes}");
        }
        for c in &plan.changes {
            c.apply().expect("apply");
        }
        let dropin = dropin_text(&f);
        assert!(dropin.contains("net.ipv4.ip_forward = 1"), "{dropin}");
        assert!(
            !dropin.contains("kernel.panic") && !dropin.contains("vm.overcommit_memory"),
            "systemd-sysctl in the container must not retune the host: {dropin}"
        );
        assert_eq!(
            std::fs::read_to_string(f.kernel.path().join("proc/sys/kernel/panic")).expect("read"),
            "0\n"
        );
    }

    #[test]
    fn in_a_container_an_unmet_host_key_fails_the_step_with_the_hosts_fix() {
        let mut f = Fixture::new();
        in_lxc(&f);
        f.kernel_file("proc/sys/net/ipv4/ip_forward", "0", 0o644);
        f.kernel_file("proc/sys/net/netfilter/nf_conntrack_max", "65536", 0o444);
        f.kernel_file("proc/sys/kernel/pid_max", "32768", 0o644);
        with(
            &mut f,
            &[
                ("kernel.pid_max", min(4_194_304)),
                ("net.ipv4.ip_forward", exact("1")),
                ("net.netfilter.nf_conntrack_max", min(131_072)),
            ],
            &[],
        );
        let plan = plan(&f.context()).expect("plan");
        let (err, _) = plan.problem().expect("an error");
        assert!(
            err.contains(
                "net.netfilter.nf_conntrack_max is the host's and this lxc container cannot set it: \
                 current 65536, wanted ≥ 131072; on the host: `sysctl -w net.netfilter.nf_conntrack_max=131072`, \
                 and persist it in the host's /etc/sysctl.d/"
            ),
            "{err}"
        );
        // Configured (not built-in tuning), writable from here, and still not written.
        assert!(
            err.contains("kernel.pid_max is the host's and this lxc container cannot set it"),
            "{err}"
        );
        // ip_forward is the container's own: still set, each key standing alone.
        assert_eq!(
            kernel_changes(&plan),
            [("net.ipv4.ip_forward".into(), Some("0".into()), "1".into())]
        );
    }

    #[test]
    fn the_same_keys_outside_a_container_are_written() {
        let mut f = Fixture::new();
        f.kernel_file("proc/sys/kernel/panic", "0", 0o644);
        with(&mut f, &[("kernel.panic", exact("10"))], &[]);
        let plan = plan(&f.context()).expect("plan");
        assert_eq!(
            kernel_changes(&plan),
            [("kernel.panic".into(), Some("0".into()), "10".into())]
        );
    }

    #[test]
    fn scopes() {
        for k in [
            "net.ipv4.ip_forward",
            "net.netfilter.nf_conntrack_max",
            "kernel.shmmax",
            "kernel.hostname",
            "fs.mqueue.msg_max",
            "user.max_user_namespaces",
        ] {
            assert_eq!(scope(&key(k)), Scope::Namespaced, "{k}");
        }
        for k in [
            "kernel.panic",
            "kernel.keys.root_maxkeys",
            "vm.overcommit_memory",
            "fs.inotify.max_user_watches",
        ] {
            assert_eq!(scope(&key(k)), Scope::HostWide, "{k}");
        }
    }
}
