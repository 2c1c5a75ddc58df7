//! The parse error every validated value type shares.

/// A value that does not parse, saying why in the operator's terms (`"07x" is not an octal mode`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// For parsers built from other parsers (a bundle source holds a path).
impl From<Invalid> for String {
    fn from(e: Invalid) -> String {
        e.0
    }
}
