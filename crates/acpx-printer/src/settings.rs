//! `config show` for people: every setting with its value and where it came from, as an
//! aligned table ([`crate::table`]), then the config files read and the known agents. The
//! settings and their sources are `acpx_app::settings`'s; the JSON form is theirs too.

use crate::table::Table;

/// The report's lines. `rows`: (setting, value, source) in the order shown; `files`: the
/// config files read; `agents`: (name, command line); `width`: the terminal's, if any;
/// `bold` styles the header's cells without changing their width.
pub fn settings_report<'a>(
    rows: impl IntoIterator<Item = [String; 3]>,
    files: &[String],
    agents: impl IntoIterator<Item = (&'a str, &'a str)>,
    width: Option<usize>,
    bold: impl Fn(&str) -> String,
) -> Vec<String> {
    let mut t = Table::new(&["SETTING", "VALUE", "SOURCE"]).shrink(1);
    for row in rows {
        t.row(row.into());
    }
    let mut lines = t.render(width, |r, _, c| match r {
        None => bold(c),
        Some(_) => c.to_owned(),
    });
    lines.push(String::new());
    let files = if files.is_empty() {
        "none".to_owned()
    } else {
        files.join(", ")
    };
    lines.push(format!("config files: {files}"));
    lines.push("agents:".to_owned());
    let mut table = Table::new(&["NAME", "COMMAND"]);
    for (name, command) in agents {
        table.row(vec![name.to_owned(), command.to_owned()]);
    }
    let rendered = table.render(None, |_, _, c| c.to_owned());
    lines.extend(rendered.iter().skip(1).map(|line| format!("  {line}")));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_then_files_then_agents_without_their_header() {
        let rows = [["ttl".to_owned(), "5 min".to_owned(), "default".to_owned()]];
        let lines = settings_report(rows, &[], [("demo", "acpx __test-agent")], None, |c| {
            c.to_owned()
        });
        assert_eq!(
            lines,
            [
                "SETTING  VALUE  SOURCE",
                "ttl      5 min  default",
                "",
                "config files: none",
                "agents:",
                "  demo  acpx __test-agent",
            ]
        );
    }
}
