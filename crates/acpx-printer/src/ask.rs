//! The permission question asked on a terminal under `--approve-reads`, and how its answer
//! reads: `[permission] Allow <title> [<kind>]? (y/N; a = always, v = never: …)`. `a` and `v`
//! answer for the rest of the session (docs/format.md § One decision per action). The front
//! end asks and reads the line; this decides what it says and what the answer means.

use acpx_runtime::text::printable;
use acpx_runtime::{PermissionAnswer, PermissionQuestion};

/// The question for `q`, on a line of its own, the cursor left after it. The agent's words
/// are shown with no control character reaching the terminal (a `\r` or an escape sequence
/// could rewrite the question).
pub fn permission_question(q: &PermissionQuestion) -> String {
    let title = printable(&q.title).into_owned();
    let kind = q
        .kind
        .as_deref()
        .map(|k| format!(" [{}]", printable(k)))
        .unwrap_or_default();
    // What "always" covers: every call of this kind (or with this title) in the session.
    let scope = match q.kind.as_deref() {
        Some(k) => format!("every [{}] call", printable(k)),
        None => "this title".to_owned(),
    };
    format!(
        "\n[permission] Allow {title}{kind}? (y/N; a = always, v = never: {scope} \
         for the rest of this session) "
    )
}

/// What a typed line answers: `y`/`yes` once, `a`/`always` for the session, `v`/`never`
/// refused for the session; anything else refuses once.
pub fn permission_answer(line: &str) -> PermissionAnswer {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => PermissionAnswer::once(true),
        "a" | "always" => PermissionAnswer {
            approved: true,
            always: true,
        },
        "v" | "never" => PermissionAnswer {
            approved: false,
            always: true,
        },
        _ => PermissionAnswer::once(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_case_and_space_blind() {
        assert_eq!(permission_answer(" Y\n"), PermissionAnswer::once(true));
        assert_eq!(
            permission_answer("always"),
            PermissionAnswer {
                approved: true,
                always: true
            }
        );
        assert_eq!(
            permission_answer("V"),
            PermissionAnswer {
                approved: false,
                always: true
            }
        );
        assert_eq!(permission_answer(""), PermissionAnswer::once(false));
        assert_eq!(permission_answer("sure"), PermissionAnswer::once(false));
    }

    #[test]
    fn the_question_names_the_kind_and_escapes_the_title() {
        let q = PermissionQuestion {
            method: "session/request_permission".into(),
            title: "Edit a.rs\u{1b}[2K".into(),
            kind: Some("edit".into()),
            details: serde_json::Value::Null,
        };
        let text = permission_question(&q);
        assert!(text.starts_with("\n[permission] Allow Edit a.rs"));
        assert!(!text.contains('\u{1b}'));
        assert!(text.contains(" [edit]? (y/N; a = always, v = never: every [edit] call"));
    }
}
