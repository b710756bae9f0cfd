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

/// Whether an io::Error carries a transient error (a device's, through the pipeline's
/// io::Write and io::Read).
pub fn io_is_transient(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<Transient>())
}

/// `msg`, an error about `e`, of `e`'s kind.
pub fn like_io(e: &std::io::Error, msg: String) -> anyhow::Error {
    if io_is_transient(e) {
        transient(msg)
    } else {
        anyhow::anyhow!(msg)
    }
}

/// `e` as an io::Error (its whole message), keeping its kind.
pub fn to_io(e: anyhow::Error) -> std::io::Error {
    if is_transient(&e) {
        std::io::Error::other(Transient(format!("{e:#}")))
    } else {
        std::io::Error::other(format!("{e:#}"))
    }
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
