//! Fuzzes the parser and the layout together, with the properties an install relies on after the
//! commit point: whatever is accepted and placed can be staged and renamed into place.
//! - no destination is an ancestor directory of another, whatever sorts between them (`x`,
//!   `x.yaml`, `x/y`: `x` and `x/y` would fail a rename late);
//! - no stage name (`.NAME.nodeward-stage` beside each file) is a destination or another stage;
//! - no name is nodeward's own (`.NAME.nodeward-stage`, `.NAME.nodeward-tmp`);
//! - every file name's stage name fits in 255 bytes;
//! - names are ASCII (no bidi, zero-width or NFC/NFD look-alikes);
//! - destinations stay below their rule's directory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeward::bundle::format::{Bundle, Limits, RESERVED_SUFFIXES};
use nodeward::bundle::layout::{self, Unmatched};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_bundle_bytes: 1 << 20, max_entry_bytes: 1 << 20, max_entries: 1000 };
    let Ok(bundle) = Bundle::parse(data, &limits) else { return };
    // Typhoon's controller layout, and a catch-all custom rule that keeps the whole entry path.
    let mut catch_all = layout::worker();
    catch_all.extend(layout::controller("etcd", "65534"));
    if let Some(last) = layout::controller("etcd", "65534").into_iter().last() {
        let mut any = last;
        any.pattern = "*".into();
        any.dest = "/srv/any".parse().expect("dest");
        catch_all.push(any);
    }
    for rules in [layout::controller("etcd", "65534"), catch_all] {
        let Ok(placed) = layout::place(&bundle, &rules, Unmatched::Ignore) else { continue };
        let dests: std::collections::HashSet<&str> = placed.iter().map(|p| p.dest.as_str()).collect();
        let mut stages = std::collections::HashSet::new();
        for p in &placed {
            let dest = p.dest.as_str();
            for (i, _) in dest.match_indices('/').filter(|(i, _)| *i > 0) {
                assert!(!dests.contains(&dest[..i]), "{} is an ancestor of {dest}", &dest[..i]);
            }
            let (dir, name) = dest.rsplit_once('/').unwrap_or(("", dest));
            let stage = format!("{dir}/.{name}.nodeward-stage");
            assert!(!dests.contains(stage.as_str()), "{stage} is a destination");
            assert!(stages.insert(stage.clone()), "{stage} is staged twice");
        }
        for p in &placed {
            let dest = p.dest.as_str();
            assert!(dest.is_ascii(), "non-ASCII destination {dest:?}");
            assert!(p.dest.is_within(&rules[p.rule].dest), "{dest} escapes {}", rules[p.rule].dest);
            let name = dest.rsplit('/').next().unwrap_or_default();
            assert!(!RESERVED_SUFFIXES.iter().any(|r| name.ends_with(r)), "reserved name {name:?}");
            let stage = format!(".{name}.nodeward-stage");
            assert!(stage.len() <= 255, "stage name of {name:?} is {} bytes", stage.len());
        }
    }
});
