//! Help for people: a command's `--help` shows its own options and one line pointing at the
//! options accepted anywhere, which `acpx help global` prints (clap would repeat the ~60
//! lines of global options under every command).

use clap::{Args, CommandFactory};

use crate::cli::{Cli, GlobalArgs};

/// The line under a command's help that stands for the global options.
const POINTER: &str = "Global options (--format, --store, --home, --agent, …): \
                       `acpx help global`.";

/// The help to print instead of clap's for these arguments, if they ask for a command's help
/// (`acpx sessions list --help`, `acpx help sessions list`) or for `acpx help global`; `None`
/// for the top-level help, which clap prints (there the global options are the command's own).
pub fn for_args(args: &[std::ffi::OsString]) -> Option<String> {
    let words: Vec<&str> = args
        .iter()
        .skip(1)
        .map(|a| a.to_str().unwrap_or(""))
        .take_while(|a| *a != "--")
        .collect();
    let long = words.contains(&"--help");
    let mut cmd = Cli::command();
    let mut path: Vec<String> = Vec::new();
    let mut help_word = false;
    for w in words.iter().filter(|w| !w.starts_with('-')) {
        if path.is_empty() && !help_word && *w == "help" {
            help_word = true;
            continue;
        }
        if help_word && path.is_empty() && *w == "global" {
            return Some(global_help());
        }
        let Some(sub) = cmd.find_subcommand(w).filter(|s| !s.is_hide_set()).cloned() else {
            continue;
        };
        path.push(sub.get_name().to_owned());
        cmd = sub;
    }
    if path.is_empty() {
        return None;
    }
    let after = match cmd.get_after_help().map(|h| h.to_string()) {
        Some(h) => format!("{h}\n\n{POINTER}"),
        None => POINTER.to_owned(),
    };
    let mut cmd = cmd
        .bin_name(format!("acpx {}", path.join(" ")))
        .after_help(after.clone())
        .after_long_help(after);
    Some(match long || help_word {
        true => cmd.render_long_help().to_string(),
        false => cmd.render_help().to_string(),
    })
}

/// `acpx help global`: the options accepted anywhere on the command line.
pub fn global_help() -> String {
    let cmd = clap::Command::new("acpx")
        .bin_name("acpx")
        .about("Options accepted anywhere on the command line, before or after the command")
        .override_usage("acpx [GLOBAL OPTIONS] <command> …")
        .disable_help_flag(true)
        .disable_version_flag(true);
    GlobalArgs::augment_args(cmd).render_long_help().to_string()
}

/// `acpx demo --help`: what the built-in demo agent answers to (the first word of a prompt).
pub fn demo_help() -> String {
    let mut t = acpx_printer::table::Table::new(&["PROMPT", "WHAT THE DEMO AGENT DOES"]);
    for (usage, what) in acpx_test_agent::SCRIPT_WORDS {
        t.row(vec![(*usage).to_owned(), (*what).to_owned()]);
    }
    let mut out = String::from(
        "The built-in `demo` agent: a scripted ACP agent in this executable (no API key).\n\
         The first word of a prompt picks its script:\n\n",
    );
    for line in t.render(None, |_, _, c| c.to_owned()) {
        out.push_str("  ");
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("\nFor example: acpx demo sessions new; acpx demo 'write-file /tmp/x.txt hi'\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn help(args: &str) -> Option<String> {
        let args: Vec<std::ffi::OsString> = std::iter::once("acpx")
            .chain(args.split_whitespace())
            .map(Into::into)
            .collect();
        for_args(&args)
    }

    #[test]
    fn a_commands_help_has_its_own_options_and_points_at_the_global_ones() {
        let h = help("--format json sessions list --help").unwrap();
        assert!(h.contains("Usage: acpx sessions list"), "{h}");
        assert!(h.contains("--filter-cwd"), "{h}");
        assert!(!h.contains("--approve-reads"), "{h}");
        assert!(h.contains("acpx help global"), "{h}");
        assert!(h.lines().count() < 40, "{h}");
        assert_eq!(help("help sessions list"), Some(h));
        assert_eq!(help("--help"), None);
        assert!(demo_help().contains("write-file <path> <text…>"));
        let g = help("help global").unwrap();
        assert!(
            g.contains("--approve-reads") && g.contains("--format"),
            "{g}"
        );
    }
}
