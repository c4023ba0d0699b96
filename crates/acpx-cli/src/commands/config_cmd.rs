//! `config show`: the resolved settings, where they came from, and the known agents;
//! `config init`: a commented template of the global config file.

use serde_json::{json, Map};

use acpx_app::config_file::TEMPLATE;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::action;
use crate::output::Style;
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

/// `config init`.
pub fn init(ctx: &Ctx, force: bool) -> CliResult<()> {
    let path = ctx.home.join("config.json");
    if path.exists() && !force {
        return Err(
            CliError::usage(format!("{} already exists", path.display()))
                .with_detail("CONFIG_EXISTS")
                .with_hint("pass --force to replace it, or edit it"),
        );
    }
    // Private (it may come to hold a store URL with its password), and never written through
    // a link planted at its path unless `--force` (a config kept in a dotfiles repository and
    // linked here is the user's own).
    let mut file = acpx_runtime::ops::transfer::create_file_for_user(&path, force)
        .map_err(|e| CliError::runtime(e.to_string()))?;
    std::io::Write::write_all(&mut file, TEMPLATE.as_bytes())
        .map_err(|e| CliError::runtime(format!("cannot write {}: {e}", path.display())))?;
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("path".into(), json!(path.to_string_lossy()));
        ctx.out.json(&action("config_init", m));
    } else {
        ctx.out.line(&format!("wrote {}", path.display()));
    }
    Ok(())
}
