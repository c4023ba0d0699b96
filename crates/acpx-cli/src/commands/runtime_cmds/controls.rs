//! `cancel`, `set-mode` and `set`: controls of the scope's (or a chosen) session.

use acpx_model::SessionRecord;
use acpx_owner::drive::{self, Control};
use serde_json::{json, Value};

use super::{drive_error, driver, report_drive, runtime_options};
use crate::cli::{SessionSelect, SetArgs, SetModeArgs};
use crate::commands::{print, select_in_scope as scope_session};
use crate::context::Ctx;
use crate::error::CliResult;
use acpx_printer::reports::controls as reports;

/// `cancel`: through the session's queue owner when one runs, else through the run file of
/// a one-process prompt.
pub async fn cancel(ctx: &Ctx, a: SessionSelect) -> CliResult<()> {
    let r = scope_session(ctx, a.session.as_deref()).await?;
    let cancelled = drive::cancel(&ctx.store().await?, ctx.authority()?, &r.acpx_record_id)
        .await
        .map_err(|e| drive_error(ctx, e))?;
    print(ctx, reports::cancelled(&r, &cancelled));
    Ok(())
}

/// Runs a control of the scope's (or the named) session, through its queue owner or with
/// `--no-owner` in this process ([`acpx_owner::drive::Driver::control`]); `answer` reads the control's value.
async fn with_session<T>(
    ctx: &Ctx,
    name: Option<&str>,
    control: Control,
    answer: impl FnOnce(Value) -> T,
) -> CliResult<(T, bool, SessionRecord)> {
    let r = scope_session(ctx, name).await?;
    let local = Box::new(|| runtime_options(ctx, None));
    let done = driver(ctx, ctx.store().await?, local)?
        .control(&r.acpx_record_id, control, |event| {
            report_drive(ctx, event, false)
        })
        .await
        .map_err(|e| drive_error(ctx, e))?;
    Ok((answer(done.value), done.resumed, done.record))
}

/// `set-mode`.
pub async fn set_mode(ctx: &Ctx, a: SetModeArgs) -> CliResult<()> {
    let ((), resumed, record) = with_session(
        ctx,
        a.select.session.as_deref(),
        Control::SetMode(a.mode.clone()),
        |_| (),
    )
    .await?;
    print(ctx, reports::mode_set(&record, &a.mode, resumed));
    Ok(())
}

/// `set <key> <value>` ([`Control::set`]): `set model <id>` selects the model (the agent's
/// model config option, else the unstable `session/set_model`) and keeps it as the session's
/// desired model.
pub async fn set_option(ctx: &Ctx, a: SetArgs) -> CliResult<()> {
    let control = Control::set(&a.key, &a.value);
    let name = a.select.session.as_deref();
    let ((options, via_config), resumed, record) =
        with_session(ctx, name, control.clone(), Control::config_options).await?;
    let p = match control {
        Control::SetModel(model) if !via_config => reports::model_set(&record, &model, resumed),
        Control::SetConfigOption(key, value) => {
            reports::config_set(&record, &key, value, resumed, options)
        }
        // Through the agent's model config option: reported as the config change it is.
        _ => reports::config_set(&record, &a.key, json!(a.value), resumed, options),
    };
    print(ctx, p);
    Ok(())
}
