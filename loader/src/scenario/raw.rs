//! [`Raw`]: the run as written, before validation — the scenario file with the flags laid
//! over it, every value with where it came from.
//!
//! The file is read first ([`super::file`]), then [`Raw::overlay_flags`] lays the flags
//! over it, so a flag always wins. The sections' keys and flags are the rows of
//! [`super::options`] (their merge is generated); this module holds what the rows cannot
//! say: the repeatable entries (`[[request]]`, `[[watch]]`), and the few merges that are
//! more than "the flag replaces the key" (`--profile` setting the file's other keys aside,
//! the step flags replacing the file's whole sequence, `--shard` from a Kubernetes job).
//! This module checks nothing.

use std::path::PathBuf;

use super::input::{Given, Opt, Origin};
use super::options::{
    RawCapacity, RawData, RawFlags, RawGrpc, RawOutput, RawProfile, RawSlo, RawTarget, RawVerdict, RunArgs, Section,
};
use crate::error::InputError;

/// One `[[request]]` entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawRequest {
    /// Where the entry starts (for errors about the entry as a whole).
    pub at: Option<Origin>,
    pub name: Opt<String>,
    pub method: Opt<String>,
    pub path: Opt<String>,
    /// `(name, value)` pairs; the origin is that of the `headers` key.
    pub headers: Opt<Vec<(String, String)>>,
    pub body: Opt<String>,
    pub weight: Opt<i64>,
}

/// One `[[watch]]` entry, or one `--watch` (whose whole text is in `source`).
#[derive(Debug, Clone)]
pub(crate) struct RawWatch {
    /// Where the entry starts (for errors about the entry as a whole).
    pub at: Origin,
    pub name: Opt<String>,
    pub source: Opt<String>,
    pub metric: Opt<String>,
    pub rate: Opt<bool>,
    pub limit: Opt<f64>,
    pub idle: Opt<bool>,
    pub scrape_self: Opt<f64>,
    pub strict: Opt<bool>,
}

/// Everything the user wrote, file and flags merged (flags win).
#[derive(Debug, Clone, Default)]
pub(crate) struct Raw {
    /// The scenario file's path, when there is one.
    pub file: Option<PathBuf>,
    /// Where each section of the file starts (`path:line:column`), for "required" errors;
    /// a section that is absent points at the file's start.
    pub sections: Vec<(&'static str, String)>,
    pub target: RawTarget,
    pub profile: RawProfile,
    pub slo: RawSlo,
    pub verdict: RawVerdict,
    pub capacity: RawCapacity,
    pub output: RawOutput,
    pub data: RawData,
    pub grpc: RawGrpc,
    /// `--method`, `--header`, `--body` (applied to every request), `--shard`, `--start-at`.
    pub flags: RawFlags,
    pub requests: Vec<RawRequest>,
    /// `--profile` replaced the file's `profile.kind`: the file's keys of other kinds are
    /// then ignored instead of rejected.
    pub kind_overridden: bool,
    /// `[[watch]]` and `--watch`: the target's resources to sample each second.
    pub watch: Vec<RawWatch>,
}

impl Raw {
    /// An error for a required value that is missing: at the file's section when there is
    /// a file, else naming `flag`.
    pub(crate) fn missing(&self, section: &str, key: &str, flag: &'static str, problem: &str) -> InputError {
        match &self.file {
            None => InputError::new(flag, problem),
            Some(path) => {
                let at = self
                    .sections
                    .iter()
                    .find(|(s, _)| *s == section)
                    .map(|(_, at)| at.clone())
                    .unwrap_or_else(|| format!("{}:1:1", path.display()));
                InputError::new(format!("{at}: {section}.{key}"), format!("{problem} (or give {flag})"))
            }
        }
    }

    /// Lay the flags over what the file gave.
    pub(crate) fn overlay_flags(&mut self, a: &RunArgs) {
        let p = &mut self.profile;
        if let (Some(kind), Some(file)) = (&a.profile, &p.kind)
            && !file.value.eq_ignore_ascii_case(kind)
        {
            self.kind_overridden = true;
        }
        if (a.vus.is_some() || a.vus_steps.is_some()) && a.profile.is_none() {
            // Virtual users on the command line make the run closed whatever the file's kind
            // (`profile::from_raw`), and either flag gives all of them.
            if p.kind.as_ref().is_some_and(|k| !k.value.eq_ignore_ascii_case("closed")) {
                self.kind_overridden = true;
            }
            (p.vus, p.vus_steps) = (None, None);
        }
        if a.steps.is_some() || a.step_start.is_some() || a.step_increment.is_some() || a.step_count.is_some() {
            // The flags give the whole sequence: the file's form of it no longer counts.
            (p.steps, p.start, p.increment, p.count) = (None, None, None, None);
        }
        let sections: [&mut dyn Section; 9] = [
            &mut self.target,
            &mut self.profile,
            &mut self.slo,
            &mut self.verdict,
            &mut self.capacity,
            &mut self.output,
            &mut self.data,
            &mut self.grpc,
            &mut self.flags,
        ];
        for section in sections {
            section.overlay(a);
        }
        if self.flags.shard.is_none()
            && let (Ok(index), Ok(count)) = (std::env::var("JOB_COMPLETION_INDEX"), std::env::var("JOB_COMPLETIONS"))
        {
            self.flags.shard = Some(Given::flag("JOB_COMPLETION_INDEX/JOB_COMPLETIONS", format!("{index}/{count}")));
        }
        for w in &a.watch {
            self.watch.push(RawWatch {
                at: Origin::Flag("--watch"),
                name: None,
                source: Some(Given::flag("--watch", w.clone())),
                metric: None,
                rate: None,
                limit: None,
                idle: None,
                scrape_self: None,
                strict: None,
            });
        }
        // `--watch-strict`: every source, the file's too, refuses the run when unreachable.
        if a.watch_strict {
            for w in &mut self.watch {
                w.strict = Some(Given::flag("--watch-strict", true));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{Args, Command};

    use super::*;
    use crate::scenario::options::KEYS;

    /// `loader run ARGV…` as clap parses it.
    fn parse(argv: &[&str]) -> RunArgs {
        let cmd = RunArgs::augment_args(Command::new("run"));
        let matches = cmd.try_get_matches_from(std::iter::once("run").chain(argv.iter().copied())).unwrap();
        <RunArgs as clap::FromArgMatches>::from_arg_matches(&matches).unwrap()
    }

    #[test]
    fn every_flag_of_a_key_sets_it_under_the_flags_own_name() {
        let cmd = RunArgs::augment_args(Command::new("run"));
        for key in KEYS {
            for flag in key.flags {
                let arg = cmd.get_arguments().find(|a| a.get_long() == Some(&flag[2..])).expect(flag);
                let argv: Vec<&str> = if arg.get_action().takes_values() { vec![flag, "1"] } else { vec![flag] };
                let mut raw = Raw::default();
                raw.overlay_flags(&parse(&argv));
                let sections: [&dyn Section; 8] = [
                    &raw.target,
                    &raw.profile,
                    &raw.slo,
                    &raw.verdict,
                    &raw.capacity,
                    &raw.output,
                    &raw.data,
                    &raw.grpc,
                ];
                let set: Vec<_> = sections.iter().flat_map(|s| s.present()).collect();
                assert_eq!(set, [(key.key, &Origin::Flag(flag))], "{flag} sets {}.{}", key.section, key.key);
            }
        }
    }

    #[test]
    fn the_file_comes_first_and_a_flag_wins() {
        let mut raw = crate::scenario::file::parse("s.toml", "[target]\ntimeout = \"2s\"\nthreads = 3\n").unwrap();
        raw.overlay_flags(&parse(&["--timeout", "1s", "--no-keepalive"]));
        let t = &raw.target;
        assert_eq!(t.timeout.as_ref().map(|g| (g.value.as_str(), g.origin.label())), Some(("1s", "--timeout".into())));
        assert_eq!(
            t.threads.as_ref().map(|g| (g.value, g.origin.label())),
            Some((3, "s.toml:3:11: target.threads".into()))
        );
        assert_eq!(t.keepalive.as_ref().map(|g| g.value), Some(false), "--no-keepalive writes keepalive = false");
    }
}
