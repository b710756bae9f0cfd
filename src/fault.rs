//! The kind of a failure a program calling pagevault acts on: a transient one (a store
//! or server that did not answer, a timeout) may succeed when run again later; anything
//! else is fatal until someone fixes it. The kind is attached where the error is born,
//! as the error `Transient` (or a context of that type), and main maps it to exit
//! status 3 (docs/PROGRAMS.md).

/// An error that a later run may not meet; its text is the message.
#[derive(Debug)]
pub struct Transient(pub String);

/// `msg` as a transient error.
pub fn transient(msg: String) -> anyhow::Error {
    anyhow::Error::new(Transient(msg))
}

impl std::fmt::Display for Transient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Transient {}

/// Whether any context of `e` says it is transient.
pub fn is_transient(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Transient>().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn found_under_later_contexts() {
        let e = Err::<(), _>(anyhow::anyhow!("connection refused"))
            .context(Transient("the store did not answer".into()))
            .context("cannot write s3://b/k")
            .unwrap_err();
        assert!(is_transient(&e));
        assert!(format!("{e:#}").contains("did not answer: connection refused"));
        let e = Err::<(), _>(transient("unreachable".into()))
            .context("cannot open the repository")
            .unwrap_err();
        assert!(is_transient(&e));
        assert!(!is_transient(&anyhow::anyhow!("damaged")));
    }
}
