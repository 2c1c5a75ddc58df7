//! Kernel modules: the module tree's index and loading into the running kernel, natively (no
//! modprobe, no kmod library).

pub mod index;
pub mod load;
pub(crate) mod softdep;
