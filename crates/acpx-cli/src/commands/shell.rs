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

/// `man`: the manual page (roff) on stdout.
pub fn man(ctx: &Ctx) -> CliResult<()> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .map_err(|e| CliError::runtime(format!("cannot render the manual page: {e}")))?;
    ctx.out.raw(&String::from_utf8_lossy(&page));
    Ok(())
}
