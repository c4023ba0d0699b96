//! `config show`: the resolved settings, where they came from, and the known agents;
//! `config init`: a commented template of the global config file.

use serde_json::{json, Map};

use crate::context::Ctx;
use crate::error::CliResult;
use crate::output::Style;
use crate::render::action;
use acpx_printer::settings::settings_report;

/// `config show`: the settings with their sources ([`acpx_app::settings::sources`]) as a
/// table ([`acpx_printer::settings`]), or their JSON object.
pub fn show(ctx: &Ctx) -> CliResult<()> {
    if ctx.out.is_json() {
        ctx.out.json(&action("config", ctx.settings.to_json()));
        return Ok(());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rows = ctx
        .rows_with_sources(&args)
        .into_iter()
        .map(|r| [r.name.to_owned(), r.value, r.source]);
    let lines = settings_report(
        rows,
        &ctx.config_file_names(),
        ctx.registry.entries(),
        acpx_printer::table::stdout_width(),
        |c| ctx.out.paint_out(Style::Bold, c),
    );
    for line in lines {
        ctx.out.line(&line);
    }
    Ok(())
}

/// `config init`: the template written ([`acpx_app::settings::init_config_file`]).
pub fn init(ctx: &Ctx, force: bool) -> CliResult<()> {
    let path = acpx_app::settings::init_config_file(&ctx.home, force)?;
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("path".into(), json!(path.to_string_lossy()));
        ctx.out.json(&action("config_init", m));
    } else {
        ctx.out.line(&format!("wrote {}", path.display()));
    }
    Ok(())
}
