//! A session's metadata — its title and whether it is archived — derived from its own log, so
//! every backend carries it with the events and a copy (a fork, a backend swap) keeps it.
//!
//! The title is the last `session/title` event's, or else the first line of the first prompt.
//! The archived flag is the last `session/archived` event's; in a fork only the fork's own events
//! count, so forking an archived session gives a session that is listed.

use super::{Event, EventData, MessageSource, SessionHeader};

/// The longest title, in characters: a prompt's first line is cut there (with `…`), and a longer
/// title given to `SetTitle` is refused.
pub const MAX_TITLE_CHARS: usize = 200;

/// A session's title and archived flag.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionMeta {
    /// The title: set by a person, or taken from the first prompt; `None` before any prompt.
    pub title: Option<String>,
    /// Hidden from the default listing.
    pub archived: bool,
}

/// Folds events into a [`SessionMeta`], one at a time (a backend can feed it only the events
/// that matter without holding the whole log).
#[derive(Debug, Clone, Default)]
pub struct MetaBuilder {
    seed_length: u64,
    set_title: Option<String>,
    prompt_title: Option<String>,
    archived: bool,
}

impl MetaBuilder {
    /// A builder for the session whose header is `header`.
    pub fn new(header: &SessionHeader) -> Self {
        Self {
            seed_length: header.seed_length.unwrap_or(0),
            ..Self::default()
        }
    }

    /// Takes one event into account (events must come in seq order).
    pub fn observe(&mut self, event: &Event) {
        match &event.data {
            EventData::SessionTitle { title } => self.set_title = Some(title.clone()),
            EventData::SessionArchived { archived } if event.seq >= self.seed_length => {
                self.archived = *archived;
            }
            EventData::UserMessage { message }
                if self.prompt_title.is_none() && message.source == MessageSource::User =>
            {
                self.prompt_title = title_of_prompt(&message.text);
            }
            _ => {}
        }
    }

    /// The metadata of the events seen.
    pub fn finish(self) -> SessionMeta {
        SessionMeta {
            title: self.set_title.or(self.prompt_title),
            archived: self.archived,
        }
    }
}

impl SessionMeta {
    /// The metadata of a whole log.
    pub fn of(header: &SessionHeader, events: &[Event]) -> Self {
        let mut builder = MetaBuilder::new(header);
        for event in events {
            builder.observe(event);
        }
        builder.finish()
    }
}

/// The title a prompt gives its session: its first non-blank line, trimmed, cut to
/// [`MAX_TITLE_CHARS`]; `None` for a blank prompt.
pub fn title_of_prompt(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    if line.chars().count() <= MAX_TITLE_CHARS {
        return Some(line.to_owned());
    }
    let mut cut: String = line.chars().take(MAX_TITLE_CHARS - 1).collect();
    cut.push('…');
    Some(cut)
}

/// Why a title cannot be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TitleError {
    /// Empty, or only blanks.
    #[error("title is empty")]
    Empty,
    /// More than one line.
    #[error("title has a line break; give one line")]
    Multiline,
    /// Longer than [`MAX_TITLE_CHARS`].
    #[error("title has {0} characters; at most {MAX_TITLE_CHARS} are allowed")]
    TooLong(usize),
}

/// Checks a title a person gives and returns it trimmed.
pub fn check_title(title: &str) -> Result<String, TitleError> {
    let trimmed = title.trim();
    if trimmed.is_empty() {
        return Err(TitleError::Empty);
    }
    if trimmed.contains(['\n', '\r']) {
        return Err(TitleError::Multiline);
    }
    let chars = trimmed.chars().count();
    if chars > MAX_TITLE_CHARS {
        return Err(TitleError::TooLong(chars));
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SessionId, UserMessage};

    fn ev(seq: u64, data: EventData) -> Event {
        Event { seq, time: 0, data }
    }

    fn prompt(text: &str, source: MessageSource) -> EventData {
        EventData::UserMessage {
            message: UserMessage {
                text: text.to_owned(),
                source,
            },
        }
    }

    #[test]
    fn the_title_is_the_first_prompts_first_line_until_one_is_set() {
        let header = SessionHeader::new(SessionId::parse("s").unwrap(), "/w".into(), 0);
        let plugin = MessageSource::Plugin {
            plugin: "hooks".to_owned(),
        };
        let mut events = vec![
            ev(0, prompt("context", plugin)),
            ev(
                1,
                prompt("\n  fix the build  \nthen test", MessageSource::User),
            ),
            ev(2, prompt("second", MessageSource::User)),
        ];
        assert_eq!(
            SessionMeta::of(&header, &events),
            SessionMeta {
                title: Some("fix the build".to_owned()),
                archived: false
            }
        );
        events.push(ev(
            3,
            EventData::SessionTitle {
                title: "Build".to_owned(),
            },
        ));
        events.push(ev(4, EventData::SessionArchived { archived: true }));
        let meta = SessionMeta::of(&header, &events);
        assert_eq!(meta.title.as_deref(), Some("Build"));
        assert!(meta.archived);
        // A fork whose seed holds the archive event is not archived; its title carries.
        let fork = SessionHeader {
            seed_length: Some(5),
            ..header
        };
        let meta = SessionMeta::of(&fork, &events);
        assert_eq!(meta.title.as_deref(), Some("Build"));
        assert!(!meta.archived);
    }

    #[test]
    fn long_first_lines_are_cut_and_bad_titles_refused() {
        let long = "x".repeat(MAX_TITLE_CHARS + 5);
        let title = title_of_prompt(&long).unwrap();
        assert_eq!(title.chars().count(), MAX_TITLE_CHARS);
        assert!(title.ends_with('…'));
        assert_eq!(title_of_prompt(" \n "), None);
        assert_eq!(check_title("  a  "), Ok("a".to_owned()));
        assert_eq!(check_title(" "), Err(TitleError::Empty));
        assert_eq!(check_title("a\nb"), Err(TitleError::Multiline));
        assert_eq!(check_title(&long), Err(TitleError::TooLong(long.len())));
    }
}
