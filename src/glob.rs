//! Shell-style globs (fnmatch(3) without flags): `*`, `?` and `[...]` classes. Used by
//! modules.alias, the bundle layout's rules and sysctl keys, so it lives below all of them.

/// Whether `text` matches `pattern`. A `*` tries each split point, which is fine for the short
/// patterns met here (interface names, module aliases, bundle entry names).
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    fn go(p: &[u8], t: &[u8]) -> bool {
        match p.first() {
            None => t.is_empty(),
            Some(b'*') => (0..=t.len()).any(|i| go(&p[1..], &t[i..])),
            Some(b'?') => !t.is_empty() && go(&p[1..], &t[1..]),
            Some(b'[') => {
                let Some(end) = p.iter().position(|&c| c == b']') else {
                    return false;
                };
                let Some(&c) = t.first() else { return false };
                let class = &p[1..end];
                let (negate, class) = match class.first() {
                    Some(b'!') | Some(b'^') => (true, &class[1..]),
                    _ => (false, class),
                };
                let mut hit = false;
                let mut i = 0;
                while i < class.len() {
                    if i + 2 < class.len() && class[i + 1] == b'-' {
                        hit |= class[i] <= c && c <= class[i + 2];
                        i += 3;
                    } else {
                        hit |= class[i] == c;
                        i += 1;
                    }
                }
                hit != negate && go(&p[end + 1..], &t[1..])
            }
            Some(&c) => t.first() == Some(&c) && go(&p[1..], &t[1..]),
        }
    }
    go(pattern.as_bytes(), text.as_bytes())
}

/// Whether a pattern has any glob character (a literal needs no matching).
pub(crate) fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("pci:v00008086d*sv*", "pci:v00008086d00001234sv00"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("x[0-9]", "x7"));
        assert!(!glob_match("x[!0-9]", "x7"));
        assert!(!glob_match("abc", "abcd"));
    }
}
