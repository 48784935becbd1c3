//! One CSV cell, the one way every CSV gpudash writes escapes its text (the lab's run export,
//! the usage export).

use std::borrow::Cow;

/// `text` as one CSV cell: with a leading `'` when a spreadsheet would take it for a formula
/// (it starts with `=`, `+`, `-` or `@`), and quoted, quotes doubled, when it holds a comma, a
/// quote or a line break (`\n` or `\r`). Borrowed when nothing needs changing.
pub fn cell(text: &str) -> Cow<'_, str> {
    let guarded: Cow<'_, str> =
        if text.starts_with(['=', '+', '-', '@']) { Cow::Owned(format!("'{text}")) } else { Cow::Borrowed(text) };
    if guarded.contains([',', '"', '\n', '\r']) {
        Cow::Owned(format!("\"{}\"", guarded.replace('"', "\"\"")))
    } else {
        guarded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_quoted_and_guarded() {
        assert_eq!(cell("plain"), "plain");
        assert!(matches!(cell("plain"), Cow::Borrowed(_)));
        assert_eq!(cell("a,b"), "\"a,b\"");
        assert_eq!(cell("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(cell("two\nlines"), "\"two\nlines\"");
        assert_eq!(cell("carriage\rreturn"), "\"carriage\rreturn\"");
        assert_eq!(cell("=cmd,x"), "\"'=cmd,x\"");
        for formula in ["=1+1", "+1", "-1", "@SUM(A1)"] {
            assert_eq!(cell(formula), format!("'{formula}"));
        }
        assert_eq!(cell("a=b"), "a=b", "only a leading sign is a formula");
        assert_eq!(cell(""), "");
    }
}
