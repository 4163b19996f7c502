//! The store conformance suite (`askloop_store::conformance`), run against
//! every store: in memory, a real SQLite file, and a real PostgreSQL server
//! (one schema per test; see `ASKLOOP_TEST_DATABASE_URL`).

mod memory {
    askloop_store::store_conformance_tests!(askloop_store::conformance::memory_subject());
    askloop_store::delivery_store_conformance_tests!(askloop_store::conformance::memory_subject());
}

mod sqlite {
    askloop_store::store_conformance_tests!(askloop_store::conformance::sqlite_subject());
    askloop_store::delivery_store_conformance_tests!(askloop_store::conformance::sqlite_subject());
    askloop_store::raw_row_conformance_tests!(askloop_store::conformance::sqlite_subject());
}

mod postgres {
    askloop_store::store_conformance_tests!(askloop_store::conformance::postgres_subject());
    askloop_store::delivery_store_conformance_tests!(askloop_store::conformance::postgres_subject());
    askloop_store::raw_row_conformance_tests!(askloop_store::conformance::postgres_subject());
}
