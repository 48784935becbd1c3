//! Errors said in words: one line with every cause.

/// An error and its causes on one line, "a: b: c", leaving out a cause the text already says
/// (libloading's and reqwest's errors repeat their source in their own message; tonic's transport
/// errors hide the reason in `source()`).
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error, bool);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            if self.1 { write!(f, "load failed: {}", self.0) } else { write!(f, "transport error") }
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_chain_names_every_cause_once() {
        let repeats = Outer(std::io::Error::other("libnvidia-ml.so.1: cannot open"), true);
        assert_eq!(chain(&repeats), "load failed: libnvidia-ml.so.1: cannot open");
        let hides = Outer(std::io::Error::other("connection refused"), false);
        assert_eq!(chain(&hides), "transport error: connection refused");
    }
}
