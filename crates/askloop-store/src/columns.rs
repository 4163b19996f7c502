//! The columns askloop reads and writes, as its migrations make them,
//! checked when a store opens.
//!
//! A database says how far it is migrated (SQLite's `user_version`,
//! PostgreSQL's `_sqlx_migrations`), and askloop trusts that for what to
//! apply. Tables changed by hand or by another program can say "current"
//! and still lack a column; every read of a run would then fail with the
//! database's own "no such column", one run at a time, or worse, a list
//! would look empty. Checking the columns once at open turns that into one
//! clear refusal naming the table and the columns, before any run is read.

/// Each table askloop uses and the columns it needs (every migration's
/// columns; a newer askloop only adds, so extra columns are fine).
pub(crate) const TABLES: &[(&str, &[&str])] = &[
    (
        "runs",
        &[
            "run_id",
            "agent_id",
            "thread_id",
            "status",
            "version",
            "created_at",
            "updated_at",
            "pending",
            "step_results",
            "message_count",
            "steps",
            "usage",
            "error",
            "metadata",
            "schema_version",
            "lease_owner",
            "lease_until",
            "failure",
            "resolutions",
            "expires_at",
            "settings",
            "memory_resource_id",
            "memory_thread_id",
            "memory_context",
            "trace_parent",
            "resource_id",
        ],
    ),
    ("messages", &["run_id", "seq", "body"]),
    ("run_resolutions", &["run_id", "version", "n", "body"]),
    (
        "threads",
        &[
            "resource_id",
            "thread_id",
            "agent_id",
            "title",
            "metadata",
            "created_at",
            "updated_at",
            "message_count",
        ],
    ),
    (
        "answer_links",
        &[
            "link_id",
            "run_id",
            "tool_call_id",
            "recipient",
            "made_by",
            "created_at",
            "expires_at",
            "used_at",
            "revoked_at",
        ],
    ),
    (
        "thread_messages",
        &[
            "resource_id",
            "thread_id",
            "seq",
            "run_id",
            "run_seq",
            "body",
            "created_at",
        ],
    ),
];

/// The tables of [`TABLES`], by name: those whose columns a store reads
/// from the database to check them.
pub(crate) fn table_names() -> Vec<&'static str> {
    TABLES.iter().map(|(table, _)| *table).collect()
}

/// The needed columns not among `present` (pairs of table and column), as
/// `table.column`.
pub(crate) fn missing(present: &[(String, String)]) -> Vec<String> {
    TABLES
        .iter()
        .flat_map(|(table, columns)| columns.iter().map(move |column| (*table, *column)))
        .filter(|(table, column)| !present.iter().any(|(t, c)| t == table && c == column))
        .map(|(table, column)| format!("{table}.{column}"))
        .collect()
}

/// Why a database whose tables lack `missing` columns is refused, for
/// people: which columns, why it matters, what to do.
pub(crate) fn refusal(missing: &[String], recorded: &str) -> String {
    let (noun, list) = match missing {
        [one] => ("the column", one.clone()),
        many => ("the columns", many.join(", ")),
    };
    format!(
        "its tables lack {noun} {list}, though {recorded} says they are up to date: they were changed by hand \
         or by another program, and no run can be read from them. Restore {noun} as askloop's migrations make \
         {it} (crates/askloop-store/migrations), or point askloop at a database it created",
        it = if missing.len() == 1 { "it" } else { "them" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_lists_each_absent_column_with_its_table_and_ignores_extra_ones() {
        let mut present: Vec<(String, String)> = TABLES
            .iter()
            .flat_map(|(t, cs)| cs.iter().map(move |c| ((*t).to_owned(), (*c).to_owned())))
            .collect();
        present.push(("runs".into(), "added_by_a_newer_askloop".into()));
        assert!(missing(&present).is_empty());
        let dropped = [("runs", "failure"), ("messages", "body")];
        present.retain(|(t, c)| !dropped.contains(&(t.as_str(), c.as_str())));
        assert_eq!(missing(&present), ["runs.failure", "messages.body"]);
        let text = refusal(&missing(&present), "user_version 3");
        assert!(text.contains("the columns runs.failure, messages.body"), "{text}");
    }
}
