//! `cancel`, `set-mode` and `set`: controls of the scope's (or a chosen) session.

use acpx_model::SessionRecord;
use acpx_owner::drive::{self, Cancelled, Control};
use serde_json::{json, Value};

use super::{drive_error, driver, report_drive, runtime_options, WAITING_FOR_PROMPT};
use crate::cli::{SessionSelect, SetArgs, SetModeArgs};
use crate::commands::select_in_scope as scope_session;
use crate::context::Ctx;
use crate::error::CliResult;
use acpx_printer::results;

/// `cancel`: through the session's queue owner when one runs, else through the run file of
/// a one-process prompt.
pub async fn cancel(ctx: &Ctx, a: SessionSelect) -> CliResult<()> {
    let r = scope_session(ctx, a.session.as_deref()).await?;
    let cancelled = drive::cancel(&ctx.store().await?, ctx.authority()?, &r.acpx_record_id)
        .await
        .map_err(|e| drive_error(ctx, e))?;
    let sent = match cancelled {
        Cancelled::Run(sent) => sent,
        Cancelled::Owner(answer) => {
            if ctx.out.is_json() {
                let rid = answer.request_id.as_deref();
                let mut result = results::cancel_result(&r, answer.cancelled, rid, None);
                if answer.withdrawn {
                    result["withdrawn"] = json!(true);
                }
                ctx.out.json(&result);
            } else if ctx.out.is_text() {
                ctx.out.line(&match (answer.cancelled, answer.withdrawn) {
                    (true, true) => format!(
                        "withdrew prompt {} before its turn started (its agent was starting); \
                     nothing of it was sent to the agent",
                        answer.request_id.as_deref().unwrap_or("?")
                    ),
                    (true, false) => {
                        "cancel requested (the turn ends with stopReason cancelled)".into()
                    }
                    (false, _) => "nothing to cancel".into(),
                });
            }
            return Ok(());
        }
    };
    if ctx.out.is_json() {
        let rid = sent.as_ref().map(|i| i.request_id.as_str());
        let pid = sent.as_ref().map(|i| i.pid);
        ctx.out
            .json(&results::cancel_result(&r, sent.is_some(), rid, pid));
    } else if ctx.out.is_text() {
        match &sent {
            Some(i) => ctx.out.line(&format!(
                "cancel requested (prompt of pid {}: its turn ends with stopReason cancelled, or, while its agent is still starting, the prompt is withdrawn)",
                i.pid
            )),
            None => ctx.out.line("nothing to cancel"),
        }
    }
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
            report_drive(ctx, event, WAITING_FOR_PROMPT)
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
    if ctx.out.is_json() {
        ctx.out.json(&results::mode_set(&record, &a.mode, resumed));
    } else if ctx.out.is_text() {
        ctx.out.line(&format!("mode set to {}", a.mode));
    }
    Ok(())
}

/// `set <key> <value>`: `true` / `false` are sent as booleans, anything else as a string.
/// `set model <id>` selects the model (the agent's model config option, else the unstable
/// `session/set_model`) and keeps it as the session's desired model.
pub async fn set_option(ctx: &Ctx, a: SetArgs) -> CliResult<()> {
    let value = match a.value.as_str() {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        v => Value::String(v.to_owned()),
    };
    if a.key == "model" {
        return set_model(ctx, a).await;
    }
    let (options, resumed, record) = with_session(
        ctx,
        a.select.session.as_deref(),
        Control::SetConfigOption(a.key.clone(), value.clone()),
        |v| match v {
            Value::Array(a) => a,
            _ => Vec::new(),
        },
    )
    .await?;
    print_config_set(ctx, &a.key, value, resumed, options, &record);
    Ok(())
}

fn print_config_set(
    ctx: &Ctx,
    key: &str,
    value: Value,
    resumed: bool,
    options: Vec<Value>,
    record: &SessionRecord,
) {
    if ctx.out.is_json() {
        ctx.out
            .json(&results::config_set(record, key, value, resumed, options));
    } else if ctx.out.is_text() {
        let shown = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        ctx.out.line(&format!("{key} set to {shown}"));
    }
}

/// `set model <id>`.
async fn set_model(ctx: &Ctx, a: SetArgs) -> CliResult<()> {
    let ((options, via_config), resumed, record) = with_session(
        ctx,
        a.select.session.as_deref(),
        Control::SetModel(a.value.clone()),
        |v| {
            let options = match v.get("configOptions") {
                Some(Value::Array(a)) => a.clone(),
                _ => Vec::new(),
            };
            let via_config = v.get("viaConfigOption").and_then(Value::as_bool) == Some(true);
            (options, via_config)
        },
    )
    .await?;
    if via_config {
        // Through the agent's model config option: reported as the config change it is.
        print_config_set(ctx, &a.key, json!(a.value), resumed, options, &record);
    } else if ctx.out.is_json() {
        ctx.out
            .json(&results::model_set(&record, &a.value, resumed));
    } else if ctx.out.is_text() {
        ctx.out.line(&format!("model set to {}", a.value));
    }
    Ok(())
}
