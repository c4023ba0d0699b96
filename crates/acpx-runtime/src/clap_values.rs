//! With the `clap` feature: the runtime's choices as `clap` value enums, so that a command
//! line parses straight into them (no mirror types in the program). Each value is its CLI
//! spelling (`as_str`), listed in declaration order, without help text of its own (the
//! flag's help describes them).

use clap::builder::PossibleValue;
use clap::ValueEnum;

use crate::session::{AuthPolicy, NonInteractivePermissions, ResumePolicy};
use crate::PermissionMode;

/// `impl ValueEnum` for a `Copy` enum with an `as_str` spelling and the listed variants.
macro_rules! value_enum {
    ($ty:ty, [$($variant:expr),+ $(,)?]) => {
        impl ValueEnum for $ty {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($variant),+]
            }

            fn to_possible_value(&self) -> Option<PossibleValue> {
                Some(PossibleValue::new(self.as_str()))
            }
        }
    };
}

value_enum!(
    PermissionMode,
    [
        PermissionMode::ApproveAll,
        PermissionMode::ApproveReads,
        PermissionMode::DenyAll,
    ]
);
value_enum!(
    NonInteractivePermissions,
    [
        NonInteractivePermissions::Deny,
        NonInteractivePermissions::Fail
    ]
);
value_enum!(
    ResumePolicy,
    [ResumePolicy::AllowNew, ResumePolicy::SameSessionOnly]
);
value_enum!(AuthPolicy, [AuthPolicy::Skip, AuthPolicy::Fail]);
