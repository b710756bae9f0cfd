//! Log events for people and for programs: `--log-format text` (the default: warnings and
//! errors on stderr as `error: ...`) or `json` (every event on stderr as one JSON object
//! per line: ts, level, command, msg, fields); `--log-file PATH` appends every event in
//! the same format. A command's results stay on stdout.

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Level {
    Info,
    Warn,
    Error,
}

impl Level {
    fn word(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

struct Logger {
    format: LogFormat,
    command: String,
    file: Option<Mutex<std::fs::File>>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Sets where events go; the log file is opened (created private) for appending.
pub fn init(format: LogFormat, file: Option<&Path>, command: &str) -> Result<()> {
    let file = match file {
        Some(p) => Some(Mutex::new(
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(p)
                .with_context(|| {
                    format!(
                        "cannot open the log file '{}' for appending: create its directory or give another --log-file",
                        p.display()
                    )
                })?,
        )),
        None => None,
    };
    let _ = LOGGER.set(Logger {
        format,
        command: command.to_string(),
        file,
    });
    Ok(())
}

fn line(l: &Logger, level: Level, msg: &str, fields: &Value) -> String {
    let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    match l.format {
        LogFormat::Json => json!({
            "ts": ts,
            "level": level.word(),
            "command": l.command,
            "msg": msg,
            "fields": fields,
        })
        .to_string(),
        LogFormat::Text => {
            let mut s = format!("{ts} {} {}: {msg}", level.word().to_uppercase(), l.command);
            if let Some(m) = fields.as_object() {
                for (k, v) in m {
                    s.push_str(&format!(" {k}={v}"));
                }
            }
            s
        }
    }
}

/// A warning whose text line (PostgreSQL's log shows it) stays as it was: `text` on stderr
/// in text, the event `msg` in JSON, and to the log file.
pub fn warn_as(text: &str, msg: &str) {
    match LOGGER.get().map(|l| l.format) {
        Some(LogFormat::Json) => {}
        _ => eprintln!("{text}"),
    }
    quiet(Level::Warn, msg, json!({}));
}

/// An event not shown on stderr in text (its caller printed it).
fn quiet(level: Level, msg: &str, fields: Value) {
    let Some(l) = LOGGER.get() else { return };
    if l.format == LogFormat::Json {
        eprintln!("{}", line(l, level, msg, &fields));
    }
    if let Some(f) = &l.file {
        let text = line(l, level, msg, &fields);
        if let Ok(mut f) = f.lock() {
            let _ = writeln!(f, "{text}");
        }
    }
}

/// One event: to stderr (text: warnings and errors only, as `error: msg`), and to the log
/// file.
pub fn event(level: Level, msg: &str, fields: Value) {
    let Some(l) = LOGGER.get() else {
        if level > Level::Info {
            eprintln!("{}: {msg}", level.word().replace("warn", "warning"));
        }
        return;
    };
    if l.format == LogFormat::Text && level > Level::Info {
        eprintln!("{}: {msg}", level.word().replace("warn", "warning"));
    }
    quiet(level, msg, fields);
}

pub fn info(msg: &str, fields: Value) {
    event(Level::Info, msg, fields)
}

pub fn warn(msg: &str, fields: Value) {
    event(Level::Warn, msg, fields)
}

pub fn error(msg: &str, fields: Value) {
    event(Level::Error, msg, fields)
}
