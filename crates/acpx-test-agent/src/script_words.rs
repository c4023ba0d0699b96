//! The script words the agent answers to, as a person types them (`acpx demo --help` lists
//! them). The crate docs' table says what each does; a test keeps the three in step.

/// Each script: how its prompt starts, and what the agent does, in a few words.
pub const SCRIPT_WORDS: &[(&str, &str)] = &[
    ("echo <text>", "replies <text>"),
    ("think [N]", "a thought, then text"),
    (
        "tools [N] [K] [chained]",
        "a read tool call and a failed search, then text",
    ),
    (
        "write-file <path> <text…>",
        "asks permission (edit), then writes the file",
    ),
    (
        "write-asked <path> <text…>",
        "write-file as qwen-code asks (details in the request only)",
    ),
    (
        "write-direct <path> <text…>",
        "writes the file without asking first",
    ),
    (
        "read-file <path> [line] [limit]",
        "reads the file and replies with it",
    ),
    (
        "terminal [--limit N] … <cmd…>",
        "asks permission (execute), runs sh -c <cmd> in a terminal",
    ),
    (
        "permission <kind> [title…]",
        "asks permission for a tool of that kind",
    ),
    (
        "wait-permission",
        "asks permission and waits for the answer",
    ),
    (
        "elicit [rich]",
        "asks for a form (name, age), replies with the answer",
    ),
    (
        "elicit-url [URL] [complete]",
        "asks for a URL visit (completed a second later), replies with the answer",
    ),
    (
        "dirs",
        "replies dirs=<the session's additional directories>",
    ),
    ("plan", "a plan update"),
    ("mode", "a current-mode update"),
    ("config", "a config-option update"),
    ("commands", "an available-commands update"),
    ("stderr <text>", "a line on its stderr, then <text>"),
    (
        "usage [AMOUNT [CURRENCY]]",
        "a usage update with cost, and token usage",
    ),
    (
        "showcase",
        "a coding agent's turn: thought, plan, read, edit with diff, Markdown",
    ),
    ("hostile", "hostile strings everywhere (viewer tests)"),
    ("title <t>", "sets the session title"),
    (
        "slow N",
        "a tool call, then N chunks 50 ms apart (cancellable)",
    ),
    ("stream N", "N chunks as fast as possible"),
    ("error", "fails the prompt (JSON-RPC -32603)"),
    ("flaky N", "fails the first N flaky prompts, then replies"),
    ("die", "one chunk, then exits mid-turn"),
    ("unknown-update", "an update of an unknown kind, then text"),
    ("late", "answers, then one more chunk after the response"),
    ("state", "replies its mode, model and MCP servers"),
    ("recall", "says what this session remembers"),
    ("anything else", "a short greeting that echoes the prompt"),
];

#[cfg(test)]
mod tests {
    use super::SCRIPT_WORDS;

    /// Every word the agent's script dispatch answers to is listed, and every listed word is
    /// one it answers to.
    #[test]
    fn the_words_are_the_scripts() {
        let scripts = include_str!("scripts.rs");
        for (usage, _) in SCRIPT_WORDS.iter().filter(|(u, _)| *u != "anything else") {
            let word = usage.split_whitespace().next().unwrap();
            assert!(
                scripts.contains(&format!("        \"{word}\" =>")),
                "{word} is not a script"
            );
        }
        for line in scripts.lines() {
            let Some(word) = line
                .strip_prefix("        \"")
                .and_then(|l| l.split_once("\" =>"))
                .map(|(w, _)| w)
            else {
                continue;
            };
            assert!(
                SCRIPT_WORDS
                    .iter()
                    .any(|(u, _)| u.split_whitespace().next() == Some(word)),
                "the script {word} is not listed"
            );
        }
    }
}
