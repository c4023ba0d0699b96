//! `completions` and `man`: generated from the same clap grammar as `--help`, so they never
//! drift from it.

use clap::CommandFactory;

use crate::cli::Cli;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};

/// `completions <shell>`: the shell's completion script on stdout.
pub fn completions(ctx: &Ctx, shell: clap_complete::Shell) -> CliResult<()> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "acpx", &mut script);
    ctx.out.raw(&String::from_utf8_lossy(&script));
    Ok(())
}

/// `man [COMMAND…]`: the manual page (roff) of acpx, or of one of its commands, on stdout. A
/// page names its commands' pages as `acpx-<command>(1)` (`acpx-sessions-list(1)`), and each
/// of those is `acpx man <command…>`, so no reference dangles. Options accepted anywhere are on
/// acpx(1) only. The notes and examples after the options keep their lines (no reflowing).
pub fn man(ctx: &Ctx, path: &[String]) -> CliResult<()> {
    let mut cmd = Cli::command();
    let mut name = "acpx".to_owned();
    for word in path {
        let subs: Vec<String> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_owned())
            .collect();
        let Some(sub) = cmd.find_subcommand(word).filter(|s| !s.is_hide_set()) else {
            let e = CliError::usage(format!(
                "`{}` has no command {word:?}",
                name.replace('-', " ")
            ));
            return Err(match subs.is_empty() {
                true => e.with_hint(format!("`acpx man {}` is the last page", path.join(" "))),
                false => e.with_hint(format!("its commands: {}", subs.join(", "))),
            });
        };
        let sub = sub.clone();
        name = format!("{name}-{}", sub.get_name());
        cmd = sub;
    }
    if !path.is_empty() {
        let pointer =
            "Options accepted anywhere (--format, --store, --home, …) are in acpx(1) and \
                       `acpx help global`.";
        let about = cmd
            .get_long_about()
            .or(cmd.get_about())
            .map(|a| a.to_string());
        let about = about.map_or(pointer.to_owned(), |a| format!("{a}\n\n{pointer}"));
        cmd = cmd.long_about(about);
    }
    let extra = cmd
        .get_after_long_help()
        .or(cmd.get_after_help())
        .map(|h| h.to_string());
    let cmd = cmd
        .display_name(&name)
        .bin_name(name.replace('-', " "))
        // `acpx help` is `--help` by another name, not a page of its own.
        .disable_help_subcommand(true);
    let top = path.is_empty();
    let has_args = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subs = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let man = clap_mangen::Man::new(cmd).title(name.clone());
    let mut page = Vec::new();
    let rendered = (|| {
        man.render_title(&mut page)?;
        man.render_name_section(&mut page)?;
        man.render_synopsis_section(&mut page)?;
        man.render_description_section(&mut page)?;
        if has_args {
            man.render_options_section(&mut page)?;
        }
        if has_subs {
            man.render_subcommands_section(&mut page)?;
        }
        if let Some(extra) = &extra {
            page.extend_from_slice(verbatim_section("NOTES", extra).as_bytes());
        }
        match top {
            true => man.render_version_section(&mut page),
            false => Ok(()),
        }
    })();
    rendered.map_err(|e| CliError::runtime(format!("cannot render the manual page: {e}")))?;
    ctx.out.raw(&String::from_utf8_lossy(&page));
    Ok(())
}

/// A roff section whose lines are kept as written (`.nf`): examples and tables stay aligned.
fn verbatim_section(title: &str, text: &str) -> String {
    let mut out = format!(".SH {title}\n.nf\n");
    for line in text.lines() {
        let line = line.replace('\\', "\\e");
        if line.starts_with('.') || line.starts_with('\'') {
            out.push_str("\\&");
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(".fi\n");
    out
}
