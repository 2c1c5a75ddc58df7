//! Fuzzes the bundle parser: it must never panic, every accepted entry path must be safe to join
//! below a directory, and what it accepts must pack back to the same bytes when the input is a
//! join output (parse ∘ pack ∘ parse = parse).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeward::bundle::format::{Bundle, Limits};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_bundle_bytes: 1 << 20, max_entry_bytes: 1 << 20, max_entries: 1000 };
    let Ok(bundle) = Bundle::parse(data, &limits) else { return };
    for e in &bundle.entries {
        let p = e.path.as_str();
        assert!(!p.starts_with('/'), "absolute path accepted: {p:?}");
        assert!(p.split('/').all(|s| !s.is_empty() && s != "." && s != ".."), "unsafe path: {p:?}");
        assert!(!p.chars().any(|c| c.is_control() || c.is_whitespace()), "control char: {p:?}");
    }
    let packed = bundle.pack();
    let again = Bundle::parse(&packed, &limits).expect("a packed bundle parses");
    let paths = |b: &Bundle| b.entries.iter().map(|e| (e.path.clone(), e.content.to_vec())).collect::<Vec<_>>();
    assert_eq!(paths(&bundle), paths(&again), "round trip changed the entries");
    assert_eq!(again.pack(), packed, "pack is not stable");
});
