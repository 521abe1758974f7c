//! The command lines of `replay-check` and `export-log`, and the `--since` times they take.

use std::path::PathBuf;

use clap::Parser;
use loom_kernel::DataClassification;

use super::BoxError;

/// Checks that recorded executions replay deterministically against today's flow code.
#[derive(Debug, Parser)]
#[command(name = "replay-check")]
pub struct CheckArgs {
    /// An embedded store file (it must not be open in another process).
    #[arg(long, value_name = "PATH", conflicts_with = "logs")]
    pub store: Option<PathBuf>,
    /// A directory of exported logs (`<execution id>.jsonl`, see `export-log`).
    #[arg(long, value_name = "DIR")]
    pub logs: Option<PathBuf>,
    /// Only executions of this flow.
    #[arg(long, value_name = "NAME")]
    pub flow: Option<String>,
    /// Only these executions (repeatable).
    #[arg(long = "execution", value_name = "ID")]
    pub executions: Vec<String>,
    /// Only executions started at or after this time: Unix milliseconds, `YYYY-MM-DD` or
    /// `YYYY-MM-DDTHH:MM:SSZ` (UTC). Executions with no recorded start time are kept.
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<u64>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Executions checked at once; defaults to the number of cores.
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Mask the value at this dot-path in every finding printed (K10-R6); repeatable.
    #[arg(long = "mask", value_name = "PATH")]
    pub masks: Vec<String>,
    /// A file of classified dot-paths, one per line (`#` starts a comment). Default:
    /// `<store file>.masks` beside `--store` when it exists (the file the process running the
    /// flows writes from its classification).
    #[arg(long, value_name = "FILE")]
    pub mask_file: Option<PathBuf>,
}

impl CheckArgs {
    /// The classification findings are masked with: `--mask` paths, plus those of
    /// `--mask-file` (or of the `<store>.masks` file beside `--store`, when there is one).
    pub fn classification(&self) -> Result<DataClassification, BoxError> {
        let beside_store = self
            .store
            .as_ref()
            .map(|store| PathBuf::from(format!("{}.masks", store.display())))
            .filter(|file| file.is_file());
        let mut paths = self.masks.clone();
        if let Some(file) = self.mask_file.clone().or(beside_store) {
            let text = std::fs::read_to_string(&file).map_err(|error| {
                format!("cannot read the mask file {}: {error}", file.display())
            })?;
            paths.extend(loom_kernel::kit::mask_file_paths(&text).map(str::to_owned));
        }
        Ok(DataClassification::mask_paths(paths)?)
    }
}

/// Writes recorded executions as JSON Lines files, one per execution.
#[derive(Debug, Parser)]
#[command(name = "export-log")]
pub struct ExportArgs {
    /// The embedded store file to read.
    #[arg(long, value_name = "PATH")]
    pub store: PathBuf,
    /// The directory to write `<execution id>.jsonl` files into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Only these executions (repeatable).
    #[arg(long = "execution", value_name = "ID")]
    pub executions: Vec<String>,
}

/// Unix milliseconds, `YYYY-MM-DD`, or `YYYY-MM-DDTHH:MM:SSZ` (UTC).
fn parse_since(text: &str) -> Result<u64, String> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let bad = || format!("'{text}' is not Unix milliseconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ");
    let (date, time) = match text.split_once('T') {
        Some((date, time)) => (date, Some(time.strip_suffix('Z').ok_or_else(bad)?)),
        None => (text, None),
    };
    let mut parts = date.splitn(3, '-').map(|part| part.parse::<i64>());
    let (Some(Ok(year)), Some(Ok(month)), Some(Ok(day))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(bad());
    }
    let seconds_of_day = match time {
        None => 0,
        Some(time) => {
            let mut parts = time.splitn(3, ':').map(|part| part.parse::<i64>());
            let (Some(Ok(h)), Some(Ok(m)), Some(Ok(s))) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            if h > 23 || m > 59 || s > 60 {
                return Err(bad());
            }
            h * 3600 + m * 60 + s
        }
    };
    let days = days_from_civil(year, month, day);
    u64::try_from((days * 86_400 + seconds_of_day) * 1000).map_err(|_| bad())
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::parse_since;

    #[test]
    fn since_accepts_millis_dates_and_utc_times() {
        assert_eq!(parse_since("1764490000000"), Ok(1_764_490_000_000));
        assert_eq!(parse_since("1970-01-01"), Ok(0));
        assert_eq!(parse_since("2026-11-30"), Ok(1_795_996_800_000));
        assert_eq!(parse_since("2026-11-30T00:00:10Z"), Ok(1_795_996_810_000));
        assert!(parse_since("30/11/2026").is_err());
        assert!(parse_since("2026-13-01").is_err());
        assert!(parse_since("2026-11-30T10:00").is_err());
    }
}
