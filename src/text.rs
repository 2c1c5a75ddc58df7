//! Untrusted text made safe to show: what comes from the host, the kernel, an engine or a bundle
//! (file names, container ids, error messages) may hold control characters that move a terminal's
//! cursor or colour it, and Unicode format characters that make it read as something else (a
//! right-to-left override shows `exe.txt` for `txt.exe`; a zero-width space hides in a name).
//! [`printable`] escapes both before text reaches a terminal, STATUS= or the journal.

use std::borrow::Cow;

/// Unicode format characters that change how the text around them reads: bidi embeddings,
/// overrides and isolates, the Arabic letter mark, zero-width characters, the byte order mark.
fn is_deceptive(c: char) -> bool {
    matches!(c,
        '\u{061c}'
        | '\u{200b}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{2069}'
        | '\u{feff}')
}

/// `text` with control characters (newlines and tabs kept) and deceptive format characters
/// escaped as `\u{…}`; borrowed when there is nothing to escape.
pub fn printable(text: &str) -> Cow<'_, str> {
    let needs = |c: char| (c.is_control() && c != '\n' && c != '\t') || is_deceptive(c);
    if !text.chars().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if needs(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A duration for a person: `5s`, `1m12s`, `2h03m`.
pub fn duration_words(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_overrides_are_escaped() {
        assert_eq!(printable("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(printable("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(printable("a\u{200b}b\u{feff}"), "a\\u{200b}b\\u{feff}");
        assert_eq!(printable("x\ry"), "x\\u{d}y");
    }

    #[test]
    fn ordinary_text_is_borrowed_as_it_is() {
        for ok in ["plain", "two\nlines\tand a tab", "caf\u{e9} — ✓"] {
            assert!(matches!(printable(ok), Cow::Borrowed(_)), "{ok}");
        }
    }
}
