//! The text of a prompt as a command is given it: a file (`-f <path>`), stdin (`-f -`, or
//! when no words are given), or the words on the command line, never two of them; an empty
//! prompt is refused. The caller reads stdin (and says it does on a terminal).

/// Why there is no prompt text.
#[derive(Debug, thiserror::Error)]
pub enum PromptInputError {
    /// Both words and a file were given.
    #[error("give the prompt as text or with --file, not both")]
    Both,
    /// Stdin could not be read.
    #[error("cannot read the prompt from stdin: {0}")]
    Stdin(std::io::Error),
    /// The file could not be read.
    #[error("cannot read the prompt file {path}: {error}")]
    File {
        /// The file, as given.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// The prompt has nothing but whitespace.
    #[error("the prompt is empty")]
    Empty,
}

/// The prompt text from `file` (`-` is stdin), else the `words` joined by spaces, else stdin
/// (`stdin` reads it whole).
pub fn prompt_text(
    file: Option<&str>,
    words: &[String],
    stdin: impl FnOnce() -> std::io::Result<String>,
) -> Result<String, PromptInputError> {
    let text = match (file, words.is_empty()) {
        (Some(_), false) => return Err(PromptInputError::Both),
        (Some("-"), true) | (None, true) => stdin().map_err(PromptInputError::Stdin)?,
        (Some(path), true) => {
            std::fs::read_to_string(path).map_err(|error| PromptInputError::File {
                path: path.to_owned(),
                error,
            })?
        }
        (None, false) => words.join(" "),
    };
    if text.trim().is_empty() {
        return Err(PromptInputError::Empty);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_stdin() -> std::io::Result<String> {
        panic!("stdin read")
    }

    #[test]
    fn words_file_or_stdin_never_two() {
        let words = vec!["hello".to_owned(), "there".to_owned()];
        assert_eq!(prompt_text(None, &words, no_stdin).unwrap(), "hello there");
        assert!(matches!(
            prompt_text(Some("f"), &words, no_stdin),
            Err(PromptInputError::Both)
        ));
        assert_eq!(
            prompt_text(Some("-"), &[], || Ok("hi".into())).unwrap(),
            "hi"
        );
        assert!(matches!(
            prompt_text(None, &[], || Ok(" \n".into())),
            Err(PromptInputError::Empty)
        ));
        let missing = prompt_text(Some("/nonexistent/prompt"), &[], no_stdin).unwrap_err();
        assert!(missing
            .to_string()
            .starts_with("cannot read the prompt file /nonexistent/prompt: "));
    }
}
