//! The assets bundle: format, layouts, fetching, and the all-or-nothing install.

pub(crate) mod background;
pub(crate) mod digest;
pub mod fetch;
pub(crate) mod format;
pub mod install;
pub(crate) mod layout;
pub mod pipeline;
pub mod settings;
