//! Forward the core's `tracing` events to Python's `logging`, under the
//! `daisy` logger, so warnings such as a lost block or a dead worker reach
//! the user through whatever handlers they configured.
//!
//! A minimal `tracing::Subscriber`: the core emits events only (no spans),
//! and only INFO and above are forwarded, so no debug event ever takes the
//! GIL.

use pyo3::prelude::*;
use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

struct MessageVisitor(String);

impl Visit for MessageVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

/// Sends events to `logging.getLogger("daisy")`.
pub struct PythonLogging;

fn python_level(level: &Level) -> i32 {
    match *level {
        Level::ERROR => 40,
        Level::WARN => 30,
        Level::INFO => 20,
        Level::DEBUG => 10,
        Level::TRACE => 5,
    }
}

impl Subscriber for PythonLogging {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::INFO
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut visitor = MessageVisitor(String::new());
        event.record(&mut visitor);
        let level = python_level(event.metadata().level());
        let forwarded = crate::interpreter::attach(|py| {
            let logged = py
                .import("logging")
                .and_then(|logging| logging.call_method1("getLogger", ("daisy",)))
                .and_then(|logger| logger.call_method1("log", (level, visitor.0.as_str())));
            if let Err(e) = logged {
                e.print(py);
            }
        });
        if forwarded.is_none() {
            // the interpreter is exiting: the line still reaches someone
            eprintln!("daisy: {}", visitor.0);
        }
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// Install the forwarding subscriber once per process.
pub fn install() {
    let _ = tracing::subscriber::set_global_default(PythonLogging);
}
