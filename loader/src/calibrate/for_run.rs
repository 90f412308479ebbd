//! The lookup `loader run` does: this machine's certificate (or `--certificate FILE`), the
//! figure to compare a run with, and the one line owed to the user about it.

use std::path::Path;

use super::certificate::{self, Certificate, Certified, Fingerprint, Found};
use super::judge::LimitedBy;

/// What `loader run` compares with, and the one line it owes the user about it.
#[derive(Debug, Clone, Default)]
pub struct ForRun {
    /// The figure to compare with (`None`: no certificate, or one without any figure).
    pub certified: Option<Certified>,
    /// One stderr line: no certificate, a different fingerprint, or a lower bound only.
    /// Printed after the run, so a run that fails on bad input still says exactly one line.
    pub note: Option<String>,
}

/// For `loader run`: the certificate to compare with (`--certificate FILE`, else the newest
/// one of this machine), and a note when there is none, when the fingerprint differs, or when
/// the certificate holds only a lower bound. A lower bound is still compared with (the run
/// reports achieved/certified, marked `lower_bound`), but `cert_ceiling` above it annotates
/// instead of invalidating: the headroom above a lower bound is unproven, not known missing.
pub fn for_run(explicit: Option<&Path>) -> anyhow::Result<ForRun> {
    let here = Fingerprint::of_this_machine();
    let (path, cert, mut note) = match explicit {
        Some(p) => {
            let c = Certificate::load(p)?;
            let d = here.differences(&c.fingerprint);
            let note = (!d.is_empty()).then(|| {
                format!(
                    "loader: warning: certificate {} was measured on a different setup ({} differ): recalibrate with `loader calibrate`",
                    p.display(),
                    d.join(", ")
                )
            });
            (p.to_path_buf(), c, note)
        }
        None => match certificate::find(&here) {
            Found::Matching(p, c) => (p, c, None),
            Found::Foreign(p, _, d) => {
                let note = format!(
                    "loader: warning: no certificate matches this machine (the newest, {}, differs in {}): run `loader calibrate`; achieved/ceiling not reported",
                    p.display(),
                    d.join(", ")
                );
                return Ok(ForRun { certified: None, note: Some(note) });
            }
            Found::None => {
                let note = "loader: warning: no certificate for this machine: run `loader calibrate` (docs/calibration.md); achieved/ceiling not reported";
                return Ok(ForRun { certified: None, note: Some(note.into()) });
            }
        },
    };
    let (cpu_us_per_request, spread_pct) = (cert.at_ceiling.cpu_us_per_request, cert.spread_pct);
    let certified = match (cert.ceiling_rps, cert.lower_bound_rps) {
        (Some(c), _) if c > 0.0 => {
            Some(Certified { ceiling_rps: c, lower_bound: false, cpu_us_per_request, spread_pct })
        }
        (_, Some(l)) if l > 0.0 => {
            Some(Certified { ceiling_rps: l, lower_bound: true, cpu_us_per_request, spread_pct })
        }
        _ => None,
    };
    if certified.as_ref().is_none_or(|c| c.lower_bound) {
        let lower = format!(
            "certificate {}: limited by the {}, {} req/s is a lower bound of this machine's ceiling, not a ceiling: achieved/certified is reported, and cert_ceiling annotates instead of invalidating",
            path.display(),
            match cert.limited_by {
                LimitedBy::Target => "target",
                LimitedBy::MaxRate => "--max-rate",
                LimitedBy::Loader => "loader",
            },
            cert.lower_bound_rps.map_or("no".into(), |r| format!("{r:.0}")),
        );
        // Still one line when the fingerprint differs too.
        note = Some(match note {
            Some(n) => format!("{n}; {lower}"),
            None => format!("loader: {lower}"),
        });
    }
    Ok(ForRun { certified, note })
}
/// Machines like a certificate's needed to offer `rate` req/s with each at most `pct` % of
/// its certified figure (seed 000 §3: go distributed above ~70 % of one machine's ceiling):
/// `ceil(rate / (ceiling × pct / 100))`, at least 1. `None` for a figure or rate that is not
/// a positive number.
pub fn machines_for(rate: f64, ceiling: f64, pct: f64) -> Option<u64> {
    let usable = ceiling * pct / 100.0;
    (rate.is_finite() && rate > 0.0 && usable.is_finite() && usable > 0.0)
        .then(|| ((rate / usable).ceil() as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines_keep_each_under_its_share_of_the_ceiling() {
        // 100,000 req/s on machines certified at 40,000, used to 70 % (28,000 each): 4.
        assert_eq!(machines_for(100_000.0, 40_000.0, 70.0), Some(4));
        // Exactly at 70 % is still one machine; a hair above is two.
        assert_eq!(machines_for(28_000.0, 40_000.0, 70.0), Some(1));
        assert_eq!(machines_for(28_001.0, 40_000.0, 70.0), Some(2));
        assert_eq!(machines_for(10.0, 40_000.0, 70.0), Some(1));
        assert_eq!(machines_for(0.0, 40_000.0, 70.0), None);
        assert_eq!(machines_for(1000.0, 0.0, 70.0), None);
    }
}
