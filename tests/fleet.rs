//! A fleet on one machine (tests/support/fleet.rs): nodeward daemons in their own network
//! namespaces against one registry and bundle server and one FleetLock server.
//!
//! - 10 nodes, behaviour only (no timed assertion): during an outage the nodes' retries spread
//!   with jitter and march in step without (`NODEWARD_JITTER=off`); a rollout never holds more
//!   FleetLock slots than there are, and every node ends on the new spec.
//! - `fleet_bench` (ignored; `benches/fleet` runs it with `FLEET_NODES` and `FLEET_TIME_SCALE`):
//!   the three figures of docs/fleet.md.

mod common;
#[path = "support/engine.rs"]
mod engine;
#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/oci.rs"]
mod oci;

use std::collections::BTreeMap;
use std::time::Duration;

use fleet::{Fleet, IMAGE_V1, Options, first_success, max_holders, now_ms, peak_second};

fn options(nodes: usize) -> Options {
    Options {
        nodes,
        slots: 2,
        jitter: true,
        max_delay_s: 8,
        startup_grace_s: 2,
        rollback_grace_s: 4,
        start_down: true,
        shipped: false,
    }
}

/// Each node's pull attempts (ms), in order, before `until`.
fn attempts(f: &Fleet, until: u128) -> BTreeMap<usize, Vec<u128>> {
    let mut out: BTreeMap<usize, Vec<u128>> = BTreeMap::new();
    for (ms, kind, node, _) in f.requests() {
        if kind == "pull" && ms < until {
            out.entry(node).or_default().push(ms);
        }
    }
    out
}

/// The spread (max − min, ms) across nodes of the time between a node's first pull attempt and
/// its `k`-th.
fn spread_of_kth_retry(a: &BTreeMap<usize, Vec<u128>>, k: usize) -> Option<u128> {
    let gaps: Vec<u128> = a.values().filter_map(|v| Some(v.get(k)? - v.first()?)).collect();
    (gaps.len() >= 8).then(|| gaps.iter().max().unwrap_or(&0) - gaps.iter().min().unwrap_or(&0))
}

/// Boots a fleet into an outage of `outage`, then ends it; returns the attempts made during it
/// and whether every node then got what it needs.
fn boot_through_outage(jitter: bool, outage: Duration) -> (BTreeMap<usize, Vec<u128>>, bool) {
    let mut f = Fleet::new(&options(10));
    f.start(jitter);
    std::thread::sleep(outage);
    let back = now_ms();
    f.set_down(false);
    let all = f
        .wait_all(Duration::from_secs(90), |n| n.has_what_it_needs())
        .is_some();
    (attempts(&f, back), all)
}

#[test]
fn retries_spread_across_a_fleet_with_jitter_and_march_in_step_without() {
    if !common::require_root() {
        return;
    }
    // Long enough for three retries (at most 2 + 2 + 2 s) even from a node that started late on a
    // busy machine (4 s of margin was not, seen under load).
    let outage = Duration::from_secs(16);
    let (spread, all) = boot_through_outage(true, outage);
    assert!(all, "a node never got its image and bundle after the outage");
    let (lockstep, all_off) = boot_through_outage(false, outage);
    assert!(all_off, "without jitter a node never got its image and bundle");
    // Third retry: each wait between 1 and 2 s. With jitter its time differs per node by
    // seconds; without, every node waits exactly 2 + 2 + 2 s (differences are process start-up).
    let with = spread_of_kth_retry(&spread, 3).expect("enough retries with jitter");
    let without = spread_of_kth_retry(&lockstep, 3).expect("enough retries without jitter");
    assert!(
        with >= 600,
        "retries did not spread: {with} ms across nodes; attempts {spread:?}"
    );
    assert!(without < with, "without jitter {without} ms, with {with} ms");
}

#[test]
fn a_rollout_holds_at_most_the_slots_and_ends_with_every_node_on_the_new_spec() {
    if !common::require_root() {
        return;
    }
    let mut f = Fleet::new(&Options {
        start_down: false,
        ..options(10)
    });
    f.start(true);
    assert!(
        f.wait_all(Duration::from_secs(60), |n| n.has_what_it_needs())
            .is_some(),
        "the fleet did not come up"
    );
    assert!(
        f.lock_log().is_empty(),
        "first starts took slots: {:?}",
        f.lock_log()
    );
    for n in &f.nodes {
        n.push("20-image.toml", "[kubelet]\nimage = 'fleet.example/kubelet:v2'\n");
    }
    let upgraded = fleet::settled_on("fleet.example/kubelet:v2");
    assert!(
        f.wait_all(Duration::from_secs(120), upgraded).is_some(),
        "not every node upgraded: {:?}",
        f.nodes.iter().map(|n| n.kubelet()).collect::<Vec<_>>()
    );
    let log = f.lock_log();
    assert!(max_holders(&log) <= 2, "more holders than slots: {log:?}");
    assert_eq!(
        log.iter().filter(|l| l.1 == "lock" && l.3 == 200).count(),
        10,
        "{log:?}"
    );
    for n in &f.nodes {
        assert_eq!(
            n.images_run().last().map(String::as_str),
            Some("fleet.example/kubelet:v2")
        );
        assert!(n.images_run().iter().any(|i| i == IMAGE_V1));
    }
}

#[test]
fn nodes_that_ship_their_kubelet_image_come_up_through_an_outage_without_the_registry() {
    if !common::require_root() {
        return;
    }
    // The registry stays down throughout: nodes that ship the image run their kubelets without
    // asking it; the control, the same fleet without the archives, runs none.
    let outage = Duration::from_secs(30);
    let mut shipped = Fleet::new(&Options {
        shipped: true,
        ..options(5)
    });
    shipped.start(true);
    let up = shipped.wait_all(outage, fleet::kubelet_healthy);
    let pulls = shipped.requests().iter().filter(|r| r.1 == "pull").count();
    assert!(
        up.is_some(),
        "with the image shipped, {} of 5 kubelets ran during the outage",
        shipped.count(fleet::kubelet_healthy)
    );
    assert_eq!(pulls, 0, "a node asked the registry for its shipped image");
    for n in &shipped.nodes {
        assert_eq!(
            engine::log(&n.bin, "loads.log").len(),
            1,
            "node {}: one load",
            n.index
        );
    }
    drop(shipped);
    let mut control = Fleet::new(&options(5));
    control.start(true);
    assert!(
        control
            .wait_all(Duration::from_secs(10), fleet::kubelet_healthy)
            .is_none()
    );
    assert_eq!(
        control.count(fleet::kubelet_healthy),
        0,
        "control: a kubelet ran without its image"
    );
    assert!(
        control.requests().iter().any(|r| r.1 == "pull"),
        "control: no node asked the registry"
    );
}

/// The three fleet figures (docs/fleet.md). `FLEET_NODES` (default 100), `FLEET_TIME_SCALE`
/// (default 1: a 120 s outage and a 60 s retry cap; 4 makes them 30 s and 15 s), `FLEET_SLOTS`
/// (default 5).
#[test]
#[ignore = "a benchmark: benches/fleet"]
fn fleet_bench() {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (n, scale, slots) = (
        env("FLEET_NODES", 100) as usize,
        env("FLEET_TIME_SCALE", 1).max(1),
        env("FLEET_SLOTS", 5) as usize,
    );
    let outage = Duration::from_secs(120 / scale);
    let o = Options {
        nodes: n,
        slots,
        jitter: true,
        max_delay_s: (60 / scale).max(1),
        startup_grace_s: 5,
        rollback_grace_s: 15,
        start_down: true,
        shipped: false,
    };
    println!(
        "fleet: {n} nodes, outage {outage:?}, retry cap {} s, {slots} FleetLock slots",
        o.max_delay_s
    );
    if env("FLEET_FIGURE", 0) == 5 {
        shipped_boot(&o, outage, None);
        return;
    }
    let mut unshipped_up = None;
    for jitter in [false, true] {
        let mut f = Fleet::new(&Options { jitter, ..o.clone() });
        let t0 = now_ms();
        f.start(jitter);
        std::thread::sleep(outage);
        let back = now_ms();
        f.set_down(false);
        // Every kubelet running, then every node served (image and bundle), each from its start.
        let kubelets_up = f
            .wait_all(Duration::from_secs(900), fleet::kubelet_healthy)
            .map(|_| (now_ms() - t0) as f64 / 1000.0);
        let all = f
            .wait_all(Duration::from_secs(900), |n| n.has_what_it_needs())
            .map(|_| Duration::from_millis((now_ms() - back) as u64));
        if jitter {
            unshipped_up = kubelets_up;
        }
        let reqs = f.requests();
        let only = |kind: &str| reqs.iter().filter(|r| r.1 == kind).cloned().collect::<Vec<_>>();
        let (peak_registry, _) = peak_second(&only("pull"), back);
        let (peak_bundle, _) = peak_second(&only("bundle"), back);
        let (peak, at) = peak_second(&reqs, back);
        // During the outage, requests (not nodes) per second at each server: the boot burst.
        let down = |kind: &str| {
            let during: Vec<_> = reqs
                .iter()
                .filter(|r| r.0 < back && r.1 == kind)
                .cloned()
                .collect();
            fleet::peak_requests(&during, t0)
        };
        let ((down_registry, down_registry_at), (down_bundle, down_bundle_at)) =
            (down("pull"), down("bundle"));
        // Where a server's busiest second has more requests than nodes: the nodes that asked it
        // twice within a second, and the closest two requests of one node.
        for kind in ["pull", "bundle"] {
            let mut per: BTreeMap<usize, Vec<u128>> = BTreeMap::new();
            for r in reqs.iter().filter(|r| r.0 < back && r.1 == kind) {
                per.entry(r.2).or_default().push(r.0);
            }
            let gaps: Vec<(usize, u128, usize)> = per
                .iter()
                .filter_map(|(node, t)| {
                    t.windows(2)
                        .enumerate()
                        .map(|(i, w)| (w[1] - w[0], i))
                        .min()
                        .map(|(g, i)| (*node, g, i))
                })
                .collect();
            let close = gaps.iter().filter(|g| g.1 < 1000).count();
            let closest = gaps.iter().min_by_key(|g| g.1);
            println!(
                "   {kind} during the outage: {close} of {} nodes asked twice within a second; closest two requests of one node {:?} (node, ms apart, after its request no.)",
                per.len(),
                closest
            );
            if let Some((node, _, _)) = closest {
                let t = &per[node];
                let rel: Vec<u128> = t.iter().map(|ms| ms - t0).collect();
                println!("   node {node}'s {kind} requests (ms after the start): {rel:?}");
            }
        }
        let last = |kind: &str| {
            first_success(&reqs, kind, back)
                .values()
                .max()
                .map(|ms| (ms - back) as f64 / 1000.0)
        };
        println!(
            "1. outage, jitter {}: every kubelet running {kubelets_up:?} s after the boot; peak one-second share after the return: registry {peak_registry}/{n}, bundle server {peak_bundle}/{n}, both {peak}/{n} = {:.1} % (second {at}); during the outage, requests in the busiest second: registry {down_registry} = {:.0} % of the fleet (second {down_registry_at}), bundle server {down_bundle} = {:.0} % (second {down_bundle_at}); every node served {} s after the return (last image {:?} s, last bundle {:?} s); requests {}",
            if jitter { "on " } else { "off" },
            100.0 * peak as f64 / n as f64,
            100.0 * down_registry as f64 / n as f64,
            100.0 * down_bundle as f64 / n as f64,
            all.map_or("never".into(), |d| format!("{:.1}", d.as_secs_f64())),
            last("pull"),
            last("bundle"),
            reqs.len()
        );
        if !jitter {
            continue;
        }
        // 3. A good image rolled to all.
        let push = std::time::Instant::now();
        for node in &f.nodes {
            node.push("20-image.toml", "[kubelet]\nimage = 'fleet.example/kubelet:v2'\n");
        }
        let upgraded = fleet::settled_on("fleet.example/kubelet:v2");
        let done = f.wait_all(Duration::from_secs(1800), upgraded);
        let log = f.lock_log();
        let lock_peak = {
            let mut per: BTreeMap<u128, usize> = BTreeMap::new();
            for l in &log {
                *per.entry(l.0 / 1000).or_default() += 1;
            }
            per.values().max().copied().unwrap_or(0)
        };
        let mut took: Vec<u128> = Vec::new();
        let mut granted: BTreeMap<String, u128> = BTreeMap::new();
        for (ms, op, id, status, _) in &log {
            match (op.as_str(), status) {
                ("lock", 200) => {
                    granted.insert(id.clone(), *ms);
                }
                ("unlock", 200) => {
                    if let Some(g) = granted.remove(id) {
                        took.push(ms - g);
                    }
                }
                _ => {}
            }
        }
        took.sort_unstable();
        let median = took.get(took.len() / 2).copied().unwrap_or(0) as f64 / 1000.0;
        let floor = n.div_ceil(slots) as f64 * median;
        println!(
            "3. good image rolled to all: {} of {n} upgraded in {}; most slots held at once {} of {slots}; lock requests in the busiest second {lock_peak}; one replacement (slot taken → given back, median) {median:.1} s; floor {} rounds × {median:.1} s = {floor:.1} s; ratio {}",
            f.count(upgraded),
            done.map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64())),
            max_holders(&log),
            n.div_ceil(slots),
            done.map_or("-".into(), |d| format!(
                "{:.2}",
                d.as_secs_f64() / floor.max(0.001)
            ))
        );
        let _ = push;
        // 2. A bad image rolled to all.
        for node in &f.nodes {
            node.knob("crash_images", "fleet.example/kubelet:v3-bad\n");
            node.push(
                "30-image.toml",
                "[kubelet]\nimage = 'fleet.example/kubelet:v3-bad'\n",
            );
        }
        let halted = |x: &fleet::Node| x.kubelet()["fleet_lock"]["halted"] == true;
        let t = std::time::Instant::now();
        while f.count(halted) < slots && t.elapsed() < Duration::from_secs(600) {
            std::thread::sleep(Duration::from_millis(500));
        }
        // Give the rest time to (not) take a slot.
        std::thread::sleep(Duration::from_secs(30 / scale));
        let ran_bad = f.count(|x| x.images_run().iter().any(|i| i.ends_with("v3-bad")));
        let healthy_v2 = f.count(|x| {
            let k = x.kubelet();
            k["health"] == "healthy" && k["image"] == "fleet.example/kubelet:v2"
        });
        println!(
            "2. bad image rolled to all: {ran_bad} of {n} nodes ever ran it (slots {slots}); {} halted holding their slot, {} waiting for one; {healthy_v2} of {n} healthy on the previous image; rolled back {}",
            f.count(halted),
            f.count(|x| !x.kubelet()["fleet_lock"]["waiting"].is_null()),
            f.count(|x| !x.kubelet()["rolled_back"].is_null())
        );
        // 4. The fix pushed after the halt: the halted nodes run it on their kept slots and give
        // them back once healthy, so the rollout goes on with no `kubelet release` anywhere.
        let releases_before = f.lock_log().iter().filter(|l| l.1 == "unlock").count();
        let fixed_at = now_ms();
        for node in &f.nodes {
            node.push("40-image.toml", "[kubelet]\nimage = 'fleet.example/kubelet:v4'\n");
        }
        let on_v4 = fleet::settled_on("fleet.example/kubelet:v4");
        let fixed = |x: &fleet::Node| on_v4(x) && x.kubelet()["fleet_lock"]["halted"] != true;
        let done = f.wait_all(Duration::from_secs(1800), fixed);
        let after: Vec<_> = f.lock_log().into_iter().filter(|l| l.0 >= fixed_at).collect();
        println!(
            "4. a good image pushed after the halt: {} of {n} upgraded in {}, no `kubelet release` run (the test runs none); most slots held at once {} of {slots}; unlocks before the push {releases_before}, after {}; {} still halted",
            f.count(fixed),
            done.map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64())),
            max_holders(&after),
            after.iter().filter(|l| l.1 == "unlock").count(),
            f.count(halted)
        );
    }
    shipped_boot(&o, outage, unshipped_up);
}

/// Figure 5: the same boot into the same outage, each node shipping its kubelet image
/// (`FLEET_FIGURE=5` runs it alone: a minute, where the whole bench takes fifteen).
fn shipped_boot(o: &Options, outage: Duration, unshipped_up: Option<f64>) {
    let n = o.nodes;
    let mut f = Fleet::new(&Options {
        shipped: true,
        ..o.clone()
    });
    let t0 = now_ms();
    f.start(true);
    // When each node's kubelet was first seen running, from the boot.
    let mut seen: Vec<Option<f64>> = vec![None; n];
    let since = |t0: u128| (now_ms() - t0) as f64 / 1000.0;
    while seen.iter().any(Option::is_none) && since(t0) < outage.as_secs_f64() {
        for (i, node) in f.nodes.iter().enumerate() {
            if seen[i].is_none() && fleet::kubelet_healthy(node) {
                seen[i] = Some(since(t0));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let up = seen.iter().all(Option::is_some).then(|| since(t0));
    let mut times: Vec<f64> = seen.iter().flatten().copied().collect();
    times.sort_by(f64::total_cmp);
    let at = |q: f64| {
        times
            .get(((times.len() as f64 - 1.0) * q).round() as usize)
            .copied()
    };
    println!(
        "5. each node's kubelet first seen running (s after the boot): first {:?}, median {:?}, 90th {:?}, last {:?}",
        at(0.0),
        at(0.5),
        at(0.9),
        at(1.0)
    );
    // The slowest node's own account of its start, for where the time went.
    if let Some((slowest, t)) = seen
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.map(|t| (i, t)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
    {
        let log = f.nodes[slowest].root.parent().map(|b| b.join("daemon.log"));
        let text = log
            .and_then(|l| std::fs::read_to_string(l).ok())
            .unwrap_or_default();
        println!("5. the slowest node, {slowest} ({t:.1} s): its journal up to its kubelet's start");
        for line in text.lines().take(40) {
            println!("   {}", line.chars().take(260).collect::<String>());
        }
    }
    let pulls: Vec<_> = f.requests().into_iter().filter(|r| r.1 == "pull").collect();
    let askers: std::collections::BTreeSet<usize> = pulls.iter().map(|r| r.2).collect();
    println!(
        "5. the same boot into the outage with the kubelet image shipped: every kubelet running {up:?} s after the boot (the registry still down; {} of {n} running at its end); nodes that asked the registry for the image {} of {n} ({} requests); without the archives (run 1, jitter on) {unshipped_up:?} s",
        f.count(fleet::kubelet_healthy),
        askers.len(),
        pulls.len()
    );
}
