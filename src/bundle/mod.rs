//! The assets bundle: format, layouts, fetching, and the all-or-nothing install.

pub mod background;
pub mod fetch;
pub mod format;
pub mod install;
pub mod layout;
pub mod pipeline;
pub mod settings;
