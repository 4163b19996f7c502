#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| askloop_fuzz::server_body(data));
