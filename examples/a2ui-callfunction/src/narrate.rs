//! Narration: what each process tells about what it does.
//!
//! A process started by the story writes one JSON [`Note`] per line on stdout; the story reads
//! them, writes the wire log and prints them as coloured lines (plain when stdout is not a
//! terminal). A process started by hand prints the same lines itself.

use std::io::{IsTerminal, Write};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Set in the environment of the processes the story starts: they write notes as JSON lines.
pub const CHILD_ENV: &str = "A2UI_CALLFUNCTION_STORY";

/// Which way an A2UI message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// From the server (Loom) to the renderer.
    AgentToRenderer,
    /// From the renderer to the server.
    RendererToAgent,
}

/// One thing a process tells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "note", rename_all = "camelCase")]
pub enum Note {
    /// The server listens at `url`.
    Ready {
        /// The server's WebSocket URL.
        url: String,
        /// A renderer credential for the served execution's surface (`?credential=` on its
        /// renderer link).
        credential: String,
    },
    /// An A2UI message, as it went over a socket (`session` numbers the server's sockets).
    Wire {
        /// Which way it went.
        direction: Direction,
        /// The server's number for the socket.
        session: u64,
        /// The message as sent.
        message: Value,
    },
    /// A durable Loom event.
    Event {
        /// The execution whose log it is in.
        execution: String,
        /// Its place in that log.
        seq: u64,
        /// The event's type (`STEP_COMPLETED`, ...).
        #[serde(rename = "type")]
        kind: String,
        /// What it says, in words (masked).
        detail: String,
    },
    /// A step in doubt, as the operator sees it.
    InDoubt {
        /// The execution it parks.
        execution: String,
        /// The step's id.
        step: String,
        /// The effect the step ran.
        effect: String,
        /// The idempotency key to look for at the receiver.
        key: String,
        /// Why it is in doubt, as recorded.
        reason: Option<String>,
    },
    /// Anything else worth telling.
    Say {
        /// The words.
        text: String,
    },
}

/// Tells `note`: a JSON line under the story, a readable line otherwise.
pub fn emit(note: &Note) {
    let mut out = std::io::stdout().lock();
    let line = if std::env::var_os(CHILD_ENV).is_some() {
        serde_json::to_string(note).unwrap_or_default()
    } else {
        render(None, note, Style::detect())
    };
    // A closed stdout (the story went away) is no reason to stop serving.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Shorthand for a [`Note::Say`].
pub fn say(text: impl Into<String>) {
    emit(&Note::Say { text: text.into() });
}

/// Colour or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// ANSI colours (a terminal).
    Colour,
    /// Plain text.
    Plain,
}

impl Style {
    /// Colour when stdout is a terminal and `NO_COLOR` is not set.
    pub fn detect() -> Self {
        if std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
            Self::Colour
        } else {
            Self::Plain
        }
    }

    /// `text` in the ANSI colour `code`, or as is.
    pub fn paint(self, code: &str, text: &str) -> String {
        match self {
            Self::Colour => format!("\x1b[{code}m{text}\x1b[0m"),
            Self::Plain => text.to_owned(),
        }
    }
}

/// The A2UI message's kind: its one key besides `version`.
pub fn kind_of(message: &Value) -> String {
    message
        .as_object()
        .and_then(|m| m.keys().find(|k| *k != "version").cloned())
        .unwrap_or_else(|| "?".into())
}

/// A readable line for `note`, told by `who`.
pub fn render(who: Option<&str>, note: &Note, style: Style) -> String {
    let who = who.map_or(String::new(), |w| {
        style.paint("1", &format!("{w:<9}")) + " "
    });
    match note {
        Note::Ready { url, .. } => format!("{who}listening on {url}"),
        Note::Wire {
            direction,
            session,
            message,
        } => {
            let (arrow, colour) = match direction {
                Direction::AgentToRenderer => ("loom -> renderer", "36"),
                Direction::RendererToAgent => ("renderer -> loom", "35"),
            };
            let head = style.paint(
                colour,
                &format!("A2UI {arrow} #{session} {}", kind_of(message)),
            );
            format!("{who}{head} {message}")
        }
        Note::Event {
            execution,
            seq,
            kind,
            detail,
        } => {
            let head = style.paint("33", &format!("event {execution}#{seq:<3} {kind}"));
            format!("{who}{head} {detail}").trim_end().to_owned()
        }
        Note::InDoubt {
            execution,
            step,
            effect,
            key,
            reason,
        } => {
            let head = style.paint("31;1", "in doubt");
            let reason = reason.as_deref().unwrap_or("-");
            format!(
                "{who}{head} execution {execution} step {step} ({effect}), call id {key}: {reason}"
            )
        }
        Note::Say { text } => format!("{who}{text}"),
    }
}
