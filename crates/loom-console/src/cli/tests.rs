//! The binary's unit tests: times and durations as printed, the command line's consistency,
//! shell words.

use loom_console::{shell_word, utc};

use super::args::Cli;
use super::output::{duration, duration_precise};

#[test]
fn times_read_as_people_write_them() {
    assert_eq!(utc(0), "1970-01-01 00:00:00");
    assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
    assert_eq!(utc(1_796_083_200_000 + 3_723_000), "2026-12-01 01:02:03");
    assert_eq!(duration(59_999), "59s");
    assert_eq!(duration(192_000), "3m12s");
    assert_eq!(duration(7_500_000), "2h05m");
    assert_eq!(duration(356_400_000), "4d03h");
    assert_eq!(duration_precise(12), "12ms");
    assert_eq!(duration_precise(1250), "1.250s");
    assert_eq!(duration_precise(192_000), "3m12s");
}

#[test]
fn the_command_line_is_consistent() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn shell_words_are_quoted_when_needed() {
    assert_eq!(shell_word("charge#1"), "'charge#1'");
    assert_eq!(shell_word("order-1"), "order-1");
    assert_eq!(shell_word("it's"), r"'it'\''s'");
}
