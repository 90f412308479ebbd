//! One value as written, before validation, and where it came from.
//!
//! Each value is a [`Given`], which remembers its [`Origin`] — a flag's name, or the file's
//! `path:line:column` and dotted key — so that validation ([`super::spec`]) can say exactly
//! where a bad value was written. Here too are the forms a value takes on its way in: the
//! TOML text forms a scenario key is read as ([`DurationText`], [`SizeText`], [`Fraction`],
//! [`PathText`], [`PathList`]) with what each becomes ([`Written`]), and what a clap field
//! gives when its flag was on the command line ([`FlagValue`]). The whole run as written is
//! [`super::raw::Raw`]. This module checks nothing.

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::error::InputError;

/// Where a value was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A command-line flag (`--hold`).
    Flag(&'static str),
    /// A key of the scenario file: `at` is `path:line:column`, `key` the dotted key
    /// (`profile.hold`, `request[2].weight`).
    File {
        /// `path:line:column`.
        at: String,
        /// Dotted key.
        key: String,
    },
}

impl Origin {
    /// The label an error starts with: `--hold` or `scenario.toml:7:8: profile.hold`.
    pub(crate) fn label(&self) -> String {
        match self {
            Origin::Flag(flag) => (*flag).to_string(),
            Origin::File { at, key } => format!("{at}: {key}"),
        }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Given<T> {
    /// The value as written (typed only as far as TOML or clap typed it).
    pub value: T,
    /// Where.
    pub origin: Origin,
}

impl<T> Given<T> {
    /// A value from flag `flag`.
    pub(crate) fn flag(flag: &'static str, value: T) -> Self {
        Given { value, origin: Origin::Flag(flag) }
    }

    /// An error about this value.
    pub(crate) fn err(&self, problem: impl Into<String>) -> InputError {
        InputError::new(self.origin.label(), problem)
    }

    /// It came from a flag.
    pub(crate) fn is_flag(&self) -> bool {
        matches!(self.origin, Origin::Flag(_))
    }
}

/// A value that is optional; `set` keeps the first and lets a later source override.
pub(crate) type Opt<T> = Option<Given<T>>;

/// A fraction as written: a number (`0.01`) or a percent string (`"1%"`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FractionText {
    /// `0.01`.
    Number(f64),
    /// `"1%"` (or a number in a string, from a flag).
    Text(String),
}

/// A duration, written as a string with a unit (`"20s"`); parsed later, against its key.
pub(crate) struct DurationText(String);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string with a unit, like \"20s\" or \"250ms\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationText, E> {
                Ok(DurationText(v.to_string()))
            }
        }
        d.deserialize_str(V)
    }
}

/// A size in bytes: a whole number (`65536`) or a string with a unit (`"64KiB"`).
pub(crate) struct SizeText(String);

impl<'de> Deserialize<'de> for SizeText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SizeText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size in bytes, like 65536 or \"64KiB\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A fraction: a number (`0.01`) or a percent string (`"1%"`).
pub(crate) struct Fraction(FractionText);

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Fraction;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a fraction like 0.01 or a percentage like \"1%\"")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Fraction, E> {
                Ok(Fraction(FractionText::Number(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Fraction, E> {
                Ok(Fraction(FractionText::Number(v as f64)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Fraction, E> {
                Ok(Fraction(FractionText::Number(v as f64)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Fraction, E> {
                Ok(Fraction(FractionText::Text(v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

/// A path, written as a string.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct PathText(String);

/// A list of paths, written as a list of strings (one origin for the whole list).
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct PathList(Vec<String>);

/// What a scenario key's TOML form becomes in [`super::raw::Raw`]: the same value, or the
/// text a later check parses against its key.
pub(crate) trait Written {
    /// The value kept.
    type Value;
    /// Unwrap it.
    fn value(self) -> Self::Value;
}

macro_rules! written_as_is {
    ($($t:ty),*) => {$(
        impl Written for $t {
            type Value = $t;
            fn value(self) -> $t {
                self
            }
        }
    )*};
}
written_as_is!(bool, i64, f64, String, Vec<f64>);

impl Written for DurationText {
    type Value = String;
    fn value(self) -> String {
        self.0
    }
}

impl Written for SizeText {
    type Value = String;
    fn value(self) -> String {
        self.0
    }
}

impl Written for Fraction {
    type Value = FractionText;
    fn value(self) -> FractionText {
        self.0
    }
}

impl Written for PathText {
    type Value = PathBuf;
    fn value(self) -> PathBuf {
        self.0.into()
    }
}

impl Written for PathList {
    type Value = Vec<PathBuf>;
    fn value(self) -> Vec<PathBuf> {
        self.0.into_iter().map(PathBuf::from).collect()
    }
}

/// What a clap field holds when its flag was given: an option's value, a repeatable flag's
/// values (at least one), a switch's `true`.
pub(crate) trait FlagValue {
    /// The value given.
    type Out;
    /// `None` when the flag was not on the command line.
    fn given(&self) -> Option<Self::Out>;
}

impl<T: Clone> FlagValue for Option<T> {
    type Out = T;
    fn given(&self) -> Option<T> {
        self.clone()
    }
}

impl<T: Clone> FlagValue for Vec<T> {
    type Out = Vec<T>;
    fn given(&self) -> Option<Vec<T>> {
        (!self.is_empty()).then(|| self.clone())
    }
}

impl FlagValue for bool {
    type Out = bool;
    fn given(&self) -> Option<bool> {
        self.then_some(true)
    }
}

/// The long name clap is given for a flag written `--name` (clap adds the dashes back).
pub(crate) fn long_name(flag: &'static str) -> &'static str {
    flag.trim_start_matches('-')
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_label_errors() {
        let g = Given { value: 1, origin: Origin::File { at: "s.toml:3:8".into(), key: "profile.hold".into() } };
        assert_eq!(g.err("bad").to_string(), "s.toml:3:8: profile.hold: bad");
        assert_eq!(Given::flag("--hold", 1).err("bad").to_string(), "--hold: bad");
    }
}
