//! Progress of long work (profiling, training, measuring), reported to an observer the caller
//! hands in: the CLI draws progress bars from it, tests and services pass [`Silent`]. Library
//! structs hold no UI types; they call these methods and the caller decides what to show.
//!
//! Work is split into named stages (`"train"`, `"epochs"`, `"measure"`): a stage begins with its
//! size, advances, says what it is on, and ends. Notes are lines for the user (warnings, hints)
//! that the library would otherwise have no way to print.
//!
//! ```
//! use perfcast_core::progress::{Observer, Silent};
//!
//! fn work(observer: &dyn Observer) {
//!     observer.begin("work", 3);
//!     for i in 0..3 {
//!         observer.message("work", &format!("item {i}"));
//!         observer.advance("work", 1);
//!     }
//!     observer.end("work");
//! }
//! work(&Silent);
//! ```

/// Receives the progress of long work; every method does nothing unless overridden.
pub trait Observer: Send + Sync {
    /// A stage begins with `total` units of work (0: not known yet).
    fn begin(&self, _stage: &str, _total: u64) {}
    /// What the stage works on now (replaces the previous message).
    fn message(&self, _stage: &str, _text: &str) {}
    /// `n` more units of the stage are done.
    fn advance(&self, _stage: &str, _n: u64) {}
    /// The stage is over.
    fn end(&self, _stage: &str) {}
    /// A line for the user, such as a warning or a note (without a trailing newline).
    fn note(&self, _text: &str) {}
}

/// An observer that shows nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl Observer for Silent {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records every call, to check that the defaults are no-ops and overrides are called.
    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl Observer for Log {
        fn begin(&self, stage: &str, total: u64) {
            self.0
                .lock()
                .expect("log lock")
                .push(format!("begin {stage} {total}"));
        }
        fn note(&self, text: &str) {
            self.0
                .lock()
                .expect("log lock")
                .push(format!("note {text}"));
        }
    }

    #[test]
    fn overridden_methods_are_called_and_the_rest_do_nothing() {
        let log = Log::default();
        let observer: &dyn Observer = &log;
        observer.begin("train", 4);
        observer.advance("train", 1);
        observer.message("train", "conv2d");
        observer.note("careful");
        observer.end("train");
        assert_eq!(
            *log.0.lock().expect("log lock"),
            ["begin train 4", "note careful"]
        );
        // Silent accepts everything.
        Silent.begin("x", 1);
        Silent.note("y");
    }
}
