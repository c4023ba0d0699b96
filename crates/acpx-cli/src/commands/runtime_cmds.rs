//! Runtime commands (in progress).
use crate::cli::*;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};

fn todo_() -> CliResult<()> {
    Err(CliError::runtime("not built yet"))
}
pub async fn prompt(_c: &Ctx, _a: PromptArgs) -> CliResult<()> {
    todo_()
}
pub async fn exec(_c: &Ctx, _a: ExecArgs) -> CliResult<()> {
    todo_()
}
pub async fn cancel(_c: &Ctx, _a: SessionSelect) -> CliResult<()> {
    todo_()
}
pub async fn set_mode(_c: &Ctx, _a: SetModeArgs) -> CliResult<()> {
    todo_()
}
pub async fn set_option(_c: &Ctx, _a: SetArgs) -> CliResult<()> {
    todo_()
}
pub async fn status(_c: &Ctx, _a: SessionSelect) -> CliResult<()> {
    todo_()
}
pub async fn new_session(_c: &Ctx, _a: NewArgs) -> CliResult<()> {
    todo_()
}
pub async fn ensure(_c: &Ctx, _a: EnsureArgs) -> CliResult<()> {
    todo_()
}
pub async fn fork(_c: &Ctx, _a: ForkArgs) -> CliResult<()> {
    todo_()
}
