#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::*;

/// Reads an escaped form back: `\xNN`, `\u{N}`, `\r`, `\t`, `\n`, `\\`; any other text is
/// itself. The display form does not escape backslashes, so only a text without them reads
/// back exactly from it.
fn unescape(escaped: &str) -> String {
    let mut out = String::new();
    let mut chars = escaped.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                out.push(char::from(u8::from_str_radix(&hex, 16).unwrap()));
            }
            Some('u') => {
                assert_eq!(chars.next(), Some('{'));
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
            }
            other => panic!("not an escape: \\{other:?} in {escaped:?}"),
        }
    }
    out
}

/// What must never reach a terminal from text dshctl did not write.
fn raw_control(c: char) -> bool {
    matches!(c, '\0'..='\x08' | '\x0b'..='\x1f' | '\x7f' | '\u{80}'..='\u{9f}')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Characters biased towards the ones that matter: C0, DEL and C1, bidi and invisible ones,
/// backslashes, line ends, and any other.
fn a_char() -> impl Strategy<Value = char> {
    prop_oneof![
        proptest::char::range('\0', '\u{20}'),
        proptest::char::range('\u{7f}', '\u{a0}'),
        proptest::char::range('\u{200b}', '\u{206f}'),
        Just('\\'),
        Just('\r'),
        Just('\n'),
        Just('\u{feff}'),
        any::<char>(),
    ]
}

fn a_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(a_char(), 0..48).prop_map(|c| c.into_iter().collect())
}

/// `bytes` written to a [`SafeWriter`] in pieces cut at `cuts`, then dropped.
fn written(bytes: &[u8], cuts: &[usize], escape: bool, control: Option<Control>) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = SafeWriter::new(&mut out, escape);
        let mut at = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        for cut in cuts.into_iter().chain([bytes.len()]) {
            w.write_all(&bytes[at..cut]).unwrap();
            at = cut;
        }
        if let Some(control) = control {
            w.control(control).unwrap();
        }
    }
    out
}

#[test]
fn the_documented_forms() {
    assert_eq!(
        text("\x1b]52;c;cm0K\x07 \x1b[2J"),
        r"\x1b]52;c;cm0K\x07 \x1b[2J"
    );
    assert_eq!(
        text("\u{9b}31m \u{9d}0;t\u{9c}"),
        r"\u{9b}31m \u{9d}0;t\u{9c}"
    );
    assert_eq!(text("ls \u{202e}txt.exe"), r"ls \u{202e}txt.exe");
    assert_eq!(text("del\x7f bs\x08 nul\0"), r"del\x7f bs\x08 nul\x00");
    assert_eq!(text("one\r\ntwo\rover"), "one\ntwo\\rover");
    assert_eq!(bytes(b"ok\xff\xfe\xc3("), r"ok\xff\xfe\xc3(");
    // Text with nothing to escape is the text itself, not a copy; backslashes too.
    let plain = "tab\there\nnewline, \\x1b as typed, ünïcödé, 漢字 and \u{200b}";
    assert!(matches!(text(plain), Cow::Borrowed(t) if t == plain));
}

#[test]
fn the_exact_form_marks_itself_and_doubles_backslashes_only_then() {
    assert_eq!(
        exact("ls -la \\\n  | wc -l"),
        Exact {
            text: "ls -la \\\n  | wc -l".into(),
            escaped: false
        }
    );
    let spoof = exact("touch x #\r\x1b[K\x1b[Als -la");
    assert_eq!(spoof.text, r"touch x #\r\x1b[K\x1b[Als -la");
    assert!(spoof.escaped);
    assert_eq!(exact("a\\b\tc").text, r"a\\b\tc");
    // Invisible characters, which the display form keeps, are escaped here.
    assert_eq!(exact("r\u{200b}m -rf").text, r"r\u{200b}m -rf");
    assert_eq!(exact("x\u{feff}").text, r"x\u{feff}");
}

#[test]
fn json_keeps_its_meaning_and_loses_c1_and_bidi() {
    let value = serde_json::json!({"text": "a\u{9b}2J \u{202e}b \x1b[0m \x7f"});
    let line = value.to_string();
    let safe = json(&line);
    assert!(!safe.chars().any(raw_control), "{safe}");
    assert!(
        safe.contains(r"\u009b2J \u202eb \u001b[0m \u007f"),
        "{safe}"
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
        value
    );
}

#[test]
fn a_writer_escapes_on_a_terminal_and_passes_bytes_through_elsewhere() {
    let raw = b"\x1b[2Jx\r\ny\xe2\x80";
    assert_eq!(
        written(raw, &[1, 5, 9], true, Some(Control::EraseLine)),
        b"\\x1b[2Jx\ny\\xe2\\x80\r\x1b[2K".to_vec(),
        "a cut UTF-8 sequence and a CRLF split between writes, then dshctl's own erase"
    );
    assert_eq!(written(raw, &[3], false, None), raw.to_vec());
    assert_eq!(written("é".as_bytes(), &[1], true, None), "é".as_bytes());
}

proptest! {
    #[test]
    fn the_display_form_holds_no_control_but_newline_and_tab(s in a_text()) {
        let shown = text(&s);
        prop_assert!(!shown.chars().any(raw_control), "{:?} -> {:?}", s, shown);
        prop_assert!(!shown.replace("\r\n", "").contains('\r'));
    }

    #[test]
    fn the_display_form_reads_back_without_backslashes_and_crlf(s in a_text()) {
        let s = s.replace('\\', "/");
        prop_assert_eq!(unescape(&text(&s)), s.replace("\r\n", "\n"));
    }

    #[test]
    fn the_exact_form_reads_back_exactly(s in a_text()) {
        let shown = exact(&s);
        prop_assert!(!shown.text.chars().any(|c| raw_control(c) || c == '\t' || c == '\r'));
        if shown.escaped {
            prop_assert_eq!(unescape(&shown.text), s);
        } else {
            prop_assert_eq!(shown.text, s);
        }
    }

    #[test]
    fn bytes_show_as_utf8_without_controls(b in proptest::collection::vec(any::<u8>(), 0..64)) {
        let shown = bytes(&b);
        prop_assert!(!shown.chars().any(raw_control), "{:?} -> {:?}", b, shown);
        if let Ok(valid) = std::str::from_utf8(&b) {
            prop_assert_eq!(shown, text(valid));
        }
    }

    #[test]
    fn a_writer_shows_the_same_however_the_writes_are_cut(
        b in proptest::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(0xe2), Just(0x80), any::<u8>()], 0..48),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let whole = bytes(&b).into_owned().into_bytes();
        prop_assert_eq!(written(&b, &cuts, true, None), whole);
    }

    #[test]
    fn json_reads_back_as_the_same_text(s in a_text()) {
        let line = serde_json::Value::String(s.clone()).to_string();
        let safe = json(&line);
        prop_assert!(!safe.chars().any(raw_control));
        prop_assert_eq!(serde_json::from_str::<String>(&safe).unwrap(), s);
    }
}
