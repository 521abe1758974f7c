//! An error and its causes, for the people who read it.

/// An error and its causes as one sentence (`opening x: cannot read y: permission denied`),
/// like `{:#}` of an `anyhow::Error`, leaving out a cause whose text the message before it
/// already includes (Loom's errors name their cause in their own message). For the command
/// lines of binaries built on Loom: `loom_kernel::error_sentence(&*anyhow_error)`.
pub fn error_sentence(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut last = text.clone();
    let mut cause = error.source();
    while let Some(error) = cause {
        let message = error.to_string();
        if !last.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        last = message;
        cause = error.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::error_sentence;

    #[test]
    fn an_error_prints_as_one_sentence_with_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot open {0}: {1}")]
        struct Repeats(&'static str, #[source] std::io::Error);
        #[derive(Debug, thiserror::Error)]
        #[error("opening the store")]
        struct Context(#[source] Repeats);
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = Context(Repeats("x.redb", io));
        assert_eq!(
            error_sentence(&error),
            "opening the store: cannot open x.redb: no such file"
        );
    }
}
