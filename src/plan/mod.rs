//! The resource model: a plan is a list of changes per step, each change a piece of data saying what
//! is there and what will be, and the effect that makes it so. Deciding (building a plan) and doing
//! (applying it) are separate, so `plan` can show exactly what `apply` would do, and a converged
//! node yields an empty plan.
//!
//! This module is a facade: its files use each other, never it, so no import runs in a circle.

pub(crate) mod apply;
pub(crate) mod change;
pub(crate) mod owed;
pub mod render;
pub(crate) mod step;

pub use apply::apply_step;
pub use change::{
    Action, BundleFile, Change, Effect, EffectError, FailureKind, FileOp, ItemFailure, KernelWhy, KubeletOp,
    Pending, Plan, Report, StepPlan, StepReport,
};
pub use step::Step;
