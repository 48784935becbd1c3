//! Text that people and processes write and the page shows (reservation notes, silence reasons,
//! process names and command lines): which characters do not show as themselves, the one rule
//! every such text is cleaned with.
//!
//! Hidden are the controls (Unicode general category Cc: newline, tab, escape…) and the format
//! characters (Cf): bidi overrides and isolates such as U+202E that make "gpt.exe" read as
//! "exe.tpg", zero-width spaces and joiners, the soft hyphen, the byte-order mark, tags. A name
//! with them can look like another name, so they are taken out.

/// Unicode general category Cf, by hand from the Unicode 16 tables (checked against Python's
/// `unicodedata`; U+13439–1343F joined Cf in Unicode 15). A careful list rather than a crate: the
/// page is wasm, and this table changes about once a decade.
const FORMAT: [(char, char); 21] = [
    ('\u{AD}', '\u{AD}'),
    ('\u{600}', '\u{605}'),
    ('\u{61C}', '\u{61C}'),
    ('\u{6DD}', '\u{6DD}'),
    ('\u{70F}', '\u{70F}'),
    ('\u{890}', '\u{891}'),
    ('\u{8E2}', '\u{8E2}'),
    ('\u{180E}', '\u{180E}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFF9}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0001}', '\u{E0001}'),
    ('\u{E0020}', '\u{E007F}'),
];

/// True for a format character (general category Cf): U+202E, U+200B, U+FEFF and the like.
pub fn is_format(c: char) -> bool {
    FORMAT.iter().any(|&(first, last)| (first..=last).contains(&c))
}

/// True for a character that does not show as itself: a control (Cc) or a format character (Cf).
pub fn is_hidden(c: char) -> bool {
    c.is_control() || is_format(c)
}

/// `text` without its hidden characters ([`is_hidden`]): how a name read from the system or sent
/// by a client (a process name, a command line, a workload's name) is kept and shown.
pub fn shown(text: &str) -> String {
    text.chars().filter(|&c| !is_hidden(c)).collect()
}

/// A control character in text a person typed: it is refused, not dropped, since a newline or a
/// tab there is more likely a paste gone wrong than meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HasControl;

/// One line a person typed (a note, a reason), as it is kept: format characters dropped, ends
/// trimmed; `Err` when it holds a control character.
pub fn typed_line(text: &str) -> Result<String, HasControl> {
    if text.chars().any(char::is_control) {
        return Err(HasControl);
    }
    Ok(shown(text).trim().to_owned())
}

/// `text` as one URL query value: every byte outside RFC 3986's unreserved set percent-encoded.
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidi_overrides_zero_width_and_controls_are_hidden_and_letters_are_not() {
        for c in ['\u{202E}', '\u{202A}', '\u{2066}', '\u{2069}', '\u{200B}', '\u{200D}', '\u{FEFF}', '\u{AD}'] {
            assert!(is_format(c) && is_hidden(c), "U+{:04X}", u32::from(c));
        }
        for c in ['\n', '\t', '\u{7}', '\u{1B}', '\u{85}'] {
            assert!(is_hidden(c) && !is_format(c), "U+{:04X} is a control", u32::from(c));
        }
        for c in ['a', 'é', 'ß', '日', 'ا', ' ', '\u{A0}', '-', '😀', '\u{2065}', '\u{FFFC}'] {
            assert!(!is_hidden(c), "U+{:04X} shows", u32::from(c));
        }
        assert!(FORMAT.iter().all(|(first, last)| first <= last));
        assert!(FORMAT.windows(2).all(|w| w[0].1 < w[1].0), "sorted, apart");
    }

    #[test]
    fn names_lose_what_does_not_show() {
        assert_eq!(shown("gpt\u{202E}exe.sh"), "gptexe.sh");
        assert_eq!(shown("py\u{200B}thon\u{FEFF}3\n"), "python3");
        assert_eq!(shown("train.py --lr 3e-4"), "train.py --lr 3e-4");
    }

    #[test]
    fn typed_lines_drop_format_characters_and_refuse_controls() {
        assert_eq!(typed_line(" \u{200B}fine\u{202E}-tuning\u{2066} "), Ok("fine-tuning".to_owned()));
        assert_eq!(typed_line("a\nb"), Err(HasControl));
        assert_eq!(typed_line("a\u{7}b"), Err(HasControl));
        assert_eq!(typed_line("\u{200B}\u{200B}"), Ok(String::new()));
    }
}
