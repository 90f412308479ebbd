//! How a row of [`super::options`] becomes code: the `options!` macro.
//!
//! A row is one scenario key with the flags that set it, or one flag that has no key. From
//! that one row the expansion gives:
//!
//! - each flag's field of clap's `RunArgs`: its long name, help text (the flag's doc
//!   comment), help heading and any other clap attributes;
//! - the key's field in its section's TOML table (serde, unknown keys rejected) and in the
//!   section's `Raw*` struct, where the value is a `Given` that knows its origin;
//! - the merge: `Section::overlay` lays each flag that was given over the file's value, the
//!   flag named as the value's origin (so errors read `--rate: …`);
//! - the key's line in `docs/scenario.md`'s tables ([`KeyDoc`], rendered by
//!   [`super::key_table`]).
//!
//! What a value means — its checks, default and use — is not here: that is `spec` and the
//! files under it. Nor are the structural parts of a scenario (`[[request]]`, `[[watch]]`),
//! which `raw` and `file` read by hand.

/// One key's line in `docs/scenario.md`'s table of its section.
pub(crate) struct KeyDoc {
    /// The TOML section (`profile`).
    pub section: &'static str,
    /// The key (`rate`).
    pub key: &'static str,
    /// What it takes (`rate`, `duration > 0`).
    pub ty: &'static str,
    /// Its default, as the docs say it.
    pub default: &'static str,
    /// The flags that set it (`--rate`).
    pub flags: &'static [&'static str],
    /// The key's own doc comment; empty when its flag's help says it.
    pub doc: &'static str,
    /// Each flag's help text.
    pub help: &'static [&'static str],
}

/// Expands the rows of `super::options` (see the module doc). Four groups, in this order:
/// `[section] RawStruct TableStruct { key rows }` for each TOML section, `flags Struct {
/// flag rows }` for flags without a key that validation reads with their origin, `clap {
/// flag rows }` for flags read as they are, and `hand { fields }` for clap fields written
/// out by hand.
macro_rules! options {
    (@conv $v:ident) => { $v };
    (@conv $v:ident, $conv:expr) => { ($conv)($v) };
    (
        $(
            [$section:ident] $Raw:ident $Table:ident {
                $(
                    $(#[doc = $kdoc:tt])*
                    $key:ident : $toml:ty, $ty_doc:tt, $default_doc:tt {
                        $(
                            $(#[doc = $fdoc:tt])*
                            flag $field:ident : $fty:ty = $long:tt, $heading:tt
                                $(, [$($attr:tt)*])? $(, via $conv:expr)?;
                        )*
                    }
                )*
            }
        )*
        flags $Flags:ident {
            $(
                $(#[doc = $gdoc:tt])*
                flag $gfield:ident : $gty:ty = $glong:tt, $gheading:tt $(, [$($gattr:tt)*])?;
            )*
        }
        clap {
            $(
                $(#[doc = $cdoc:tt])*
                flag $cfield:ident : $cty:ty = $clong:tt, $cheading:tt $(, [$($cattr:tt)*])?;
            )*
        }
        hand { $($hand:tt)* }
    ) => {
        /// Flags of `loader run`, as clap parses them: one field per flag of
        /// `scenario/options.rs`, in its order (which is `--help`'s), then the positional
        /// scenario file.
        #[derive(Debug, Clone, Default, clap::Args)]
        pub struct RunArgs {
            $($($(
                $(#[doc = $fdoc])*
                #[arg(long = $crate::scenario::input::long_name($long), help_heading = $heading $(, $($attr)*)?)]
                pub $field: $fty,
            )*)*)*
            $(
                $(#[doc = $gdoc])*
                #[arg(long = $crate::scenario::input::long_name($glong), help_heading = $gheading $(, $($gattr)*)?)]
                pub $gfield: $gty,
            )*
            $(
                $(#[doc = $cdoc])*
                #[arg(long = $crate::scenario::input::long_name($clong), help_heading = $cheading $(, $($cattr)*)?)]
                pub $cfield: $cty,
            )*
            $($hand)*
        }

        /// A part of the run as written that the flags are laid over.
        pub(crate) trait Section {
            /// Lay the flags that were given over what the file gave: a flag wins.
            fn overlay(&mut self, a: &RunArgs);
            /// The keys that are set, by their file name, with their origin.
            fn present(&self) -> Vec<(&'static str, &$crate::scenario::input::Origin)>;
        }

        $(
            #[doc = concat!("`[", stringify!($section), "]` as written: each key with where it came from.")]
            #[derive(Debug, Clone, Default)]
            pub(crate) struct $Raw {
                $(
                    $(#[doc = $kdoc])*
                    pub $key: $crate::scenario::input::Opt<<$toml as $crate::scenario::input::Written>::Value>,
                )*
            }

            #[doc = concat!("`[", stringify!($section), "]` as TOML gives it (an unknown key is an error).")]
            #[derive(serde::Deserialize)]
            #[serde(deny_unknown_fields)]
            pub(crate) struct $Table {
                $( $key: Option<toml::Spanned<$toml>>, )*
            }

            impl $Table {
                /// Each value with its origin; `at` turns a byte offset into `path:line:column`.
                pub(crate) fn into_raw(self, at: &dyn Fn(usize) -> String) -> $Raw {
                    $Raw {
                        $(
                            $key: self.$key.map(|v| $crate::scenario::input::Given {
                                origin: $crate::scenario::input::Origin::File {
                                    at: at(v.span().start),
                                    key: concat!(stringify!($section), ".", stringify!($key)).to_string(),
                                },
                                value: $crate::scenario::input::Written::value(v.into_inner()),
                            }),
                        )*
                    }
                }
            }

            impl Section for $Raw {
                fn overlay(&mut self, _a: &RunArgs) {
                    $($(
                        if let Some(v) = $crate::scenario::input::FlagValue::given(&_a.$field) {
                            let value = options!(@conv v $(, $conv)?);
                            self.$key = Some($crate::scenario::input::Given::flag($long, value));
                        }
                    )*)*
                }

                fn present(&self) -> Vec<(&'static str, &$crate::scenario::input::Origin)> {
                    let mut out = Vec::new();
                    $(
                        if let Some(g) = &self.$key {
                            out.push((stringify!($key), &g.origin));
                        }
                    )*
                    out
                }
            }
        )*

        /// The flags without a scenario key that validation reads, each with its origin.
        #[derive(Debug, Clone, Default)]
        pub(crate) struct $Flags {
            $(
                $(#[doc = $gdoc])*
                pub $gfield: $crate::scenario::input::Opt<<$gty as $crate::scenario::input::FlagValue>::Out>,
            )*
        }

        impl Section for $Flags {
            fn overlay(&mut self, a: &RunArgs) {
                $(
                    if let Some(v) = $crate::scenario::input::FlagValue::given(&a.$gfield) {
                        self.$gfield = Some($crate::scenario::input::Given::flag($glong, v));
                    }
                )*
            }

            fn present(&self) -> Vec<(&'static str, &$crate::scenario::input::Origin)> {
                let mut out = Vec::new();
                $(
                    if let Some(g) = &self.$gfield {
                        out.push(($glong, &g.origin));
                    }
                )*
                out
            }
        }

        /// Every scenario key, in the order of the rows, for the docs' tables.
        pub(crate) const KEYS: &[$crate::scenario::declare::KeyDoc] = &[
            $($(
                $crate::scenario::declare::KeyDoc {
                    section: stringify!($section),
                    key: stringify!($key),
                    ty: $ty_doc,
                    default: $default_doc,
                    flags: &[$($long),*],
                    doc: concat!($($kdoc, "\n",)*),
                    help: &[$(concat!($($fdoc, "\n",)*)),*],
                },
            )*)*
        ];
    };
}

pub(crate) use options;
