//! Store files as builds before layout 5 wrote them, made from a closed layout 5 file: for the
//! tests of the upgrade (`tests/kernel/store/rows.rs`) and its benchmark (`benches/upgrade.rs`, which
//! includes this file by path). The kernel's own dependencies only.

use std::path::Path;

use redb::ReadableTable;

/// The bits of a layout 5 `heads` value that hold the head; above them, its check.
pub const HEAD_BITS: u64 = (1 << 48) - 1;

/// The first byte of a `tails` value framed with its check (layout 5).
pub const TAIL_MARKER: u8 = 0xC5;

/// Rewrites every `heads` value and every `meta` value but the format without its check, and
/// every `tails` value without its frame, as builds before layout 5 wrote them, and takes away
/// the meta key that says they have them.
pub fn strip_checks(txn: &redb::WriteTransaction) {
    {
        let mut tails = txn
            .open_table(redb::TableDefinition::<&str, &[u8]>::new("tails"))
            .unwrap();
        let framed: Vec<(String, Vec<u8>)> = tails
            .iter()
            .unwrap()
            .map(|row| {
                let (id, value) = row.unwrap();
                (id.value().to_owned(), value.value().to_vec())
            })
            .collect();
        for (id, value) in framed {
            assert_eq!(value[0], TAIL_MARKER, "{id}'s tail framed");
            tails.insert(id.as_str(), &value[5..]).unwrap();
        }
    }
    for (table, kept) in [("heads", ""), ("meta", "format")] {
        let mut values = txn
            .open_table(redb::TableDefinition::<&str, u64>::new(table))
            .unwrap();
        values.remove("values_checked").unwrap();
        let stored: Vec<(String, u64)> = values
            .iter()
            .unwrap()
            .map(|row| {
                let (key, value) = row.unwrap();
                (key.value().to_owned(), value.value())
            })
            .collect();
        for (key, value) in stored {
            if key != kept {
                assert_ne!(value & !HEAD_BITS, 0, "{table} {key} checked");
                values.insert(key.as_str(), value & HEAD_BITS).unwrap();
            }
        }
    }
}

/// Rewrites a closed store as a layout 4 build wrote it: its `heads`, `meta` and `tails` values
/// without their checks ([`strip_checks`]), the format 4.
pub fn as_layout_4(path: &Path) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    strip_checks(&txn);
    txn.open_table(redb::TableDefinition::<&str, u64>::new("meta"))
        .unwrap()
        .insert("format", 4)
        .unwrap();
    txn.commit().unwrap();
}
